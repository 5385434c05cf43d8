"""The records of ``__consumer_offsets``: Kafka's key and value schemas, byte for byte.

Kafka keeps these in ``GroupMetadataManager``'s companion object (``offsetCommitKey``, ``groupMetadataValue``,
``readMessageKey``, ...) generated from ``group-coordinator``'s message JSONs.  Every key and value starts with
an int16 schema version; strings are int16-length UTF-8 (-1 = null), bytes are int32-length, arrays int32-count.

Keys
    OffsetCommitKey (versions 0-1, same layout): group, topic, partition int32
    GroupMetadataKey (version 2): group
Values (``None`` = tombstone: the offset or the group was deleted)
    OffsetCommitValue v1: offset, metadata, commit timestamp, expire timestamp; v3: offset, leader epoch,
    metadata, commit timestamp (v0 lacks the expire timestamp, v2 = v0 layout).  We write v3, as Kafka 3.x
    does unless a client sets an explicit retention (OffsetCommit v1-v4), in which case v1.
    GroupMetadataValue v3: protocol type, generation, protocol?, leader?, current state timestamp, members
    [member id, group instance id?, client id, client host, rebalance timeout, session timeout,
    subscription bytes, assignment bytes].  Versions 0-2 are read too.
Difference from Kafka: the flexible v4 values (KIP-915) are not read; a record we cannot read raises
:class:`MalformedRecordError`, which the loader logs and skips.
"""
from __future__ import annotations

import struct

import attrs

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3


class MalformedRecordError(ValueError):
    """A ``__consumer_offsets`` key or value we cannot decode."""


@attrs.frozen
class OffsetKey:
    group: str
    topic: str
    partition: int


@attrs.frozen
class GroupMetadataKey:
    group: str


@attrs.frozen
class OffsetAndMetadata:
    """A committed offset (Kafka's ``OffsetAndMetadata``)."""
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int | None = None


@attrs.frozen
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@attrs.frozen
class GroupRecord:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberRecord, ...] = ()


# --- writing ------------------------------------------------------------------------------------------------

class _Writer:
    def __init__(self) -> None:
        self.buf = bytearray()

    def int16(self, v: int) -> "_Writer":
        self.buf += struct.pack(">h", v)
        return self

    def int32(self, v: int) -> "_Writer":
        self.buf += struct.pack(">i", v)
        return self

    def int64(self, v: int) -> "_Writer":
        self.buf += struct.pack(">q", v)
        return self

    def string(self, v: str | None) -> "_Writer":
        if v is None:
            return self.int16(-1)
        data = v.encode("utf-8")
        self.int16(len(data))
        self.buf += data
        return self

    def bytes_(self, v: bytes | None) -> "_Writer":
        if v is None:
            return self.int32(-1)
        self.int32(len(v))
        self.buf += v
        return self

    def done(self) -> bytes:
        return bytes(self.buf)


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return _Writer().int16(OFFSET_COMMIT_KEY_VERSION).string(group).string(topic).int32(partition).done()


def group_metadata_key(group: str) -> bytes:
    return _Writer().int16(GROUP_METADATA_KEY_VERSION).string(group).done()


def offset_commit_value(o: OffsetAndMetadata) -> bytes:
    w = _Writer()
    if o.expire_timestamp is not None:
        return w.int16(1).int64(o.offset).string(o.metadata).int64(o.commit_timestamp).int64(o.expire_timestamp).done()
    return w.int16(3).int64(o.offset).int32(o.leader_epoch).string(o.metadata).int64(o.commit_timestamp).done()


def group_metadata_value(g: GroupRecord) -> bytes:
    w = _Writer().int16(GROUP_METADATA_VALUE_VERSION)
    w.string(g.protocol_type).int32(g.generation).string(g.protocol).string(g.leader).int64(g.current_state_timestamp)
    w.int32(len(g.members))
    for m in g.members:
        w.string(m.member_id).string(m.group_instance_id).string(m.client_id).string(m.client_host)
        w.int32(m.rebalance_timeout_ms).int32(m.session_timeout_ms).bytes_(m.subscription).bytes_(m.assignment)
    return w.done()


# --- reading ------------------------------------------------------------------------------------------------

class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data = memoryview(data)
        self.pos = 0
        self.what = what

    def _take(self, fmt: str, size: int):
        if self.pos + size > len(self.data):
            raise MalformedRecordError(f"{self.what}: truncated at byte {self.pos}")
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return v

    def int16(self) -> int:
        return self._take(">h", 2)

    def int32(self) -> int:
        return self._take(">i", 4)

    def int64(self) -> int:
        return self._take(">q", 8)

    def string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise MalformedRecordError(f"{self.what}: truncated string at byte {self.pos}")
        try:
            s = bytes(self.data[self.pos:self.pos + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedRecordError(f"{self.what}: string is not UTF-8") from None
        self.pos += n
        return s

    def required_string(self) -> str:
        s = self.string()
        if s is None:
            raise MalformedRecordError(f"{self.what}: null where a string is required")
        return s

    def bytes_(self) -> bytes:
        n = self.int32()
        if n < 0:
            return b""
        if self.pos + n > len(self.data):
            raise MalformedRecordError(f"{self.what}: truncated bytes at byte {self.pos}")
        b = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return b


def read_key(data: bytes) -> OffsetKey | GroupMetadataKey:
    r = _Reader(data, "__consumer_offsets key")
    version = r.int16()
    if version in (0, 1):
        return OffsetKey(r.required_string(), r.required_string(), r.int32())
    if version == 2:
        return GroupMetadataKey(r.required_string())
    raise MalformedRecordError(f"unknown key version {version}")


def _value_reader(data: bytes | None, what: str, max_version: int) -> tuple[_Reader, int] | None:
    """A reader of value record ``what`` after its version, and the version; None for a tombstone (a null
    value).  A version outside 0..``max_version`` raises MalformedRecordError."""
    if data is None:
        return None
    r = _Reader(data, what)
    version = r.int16()
    if not 0 <= version <= max_version:
        raise MalformedRecordError(f"unknown {what} version {version}")
    return r, version


def read_offset_value(data: bytes | None) -> OffsetAndMetadata | None:
    if (read := _value_reader(data, "OffsetCommitValue", 3)) is None:
        return None
    r, version = read
    if version in (0, 2):
        return OffsetAndMetadata(offset=r.int64(), metadata=r.required_string(), commit_timestamp=r.int64())
    if version == 1:
        off, meta, ts, exp = r.int64(), r.required_string(), r.int64(), r.int64()
        return OffsetAndMetadata(offset=off, metadata=meta, commit_timestamp=ts,
                                 expire_timestamp=exp if exp >= 0 else None)
    return OffsetAndMetadata(offset=r.int64(), leader_epoch=r.int32(), metadata=r.required_string(),
                             commit_timestamp=r.int64())


def read_group_value(data: bytes | None) -> GroupRecord | None:
    if (read := _value_reader(data, "GroupMetadataValue", 3)) is None:
        return None
    r, version = read
    protocol_type, generation, protocol, leader = r.required_string(), r.int32(), r.string(), r.string()
    ts = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.int32()):
        member_id = r.required_string()
        instance = r.string() if version >= 3 else None
        client_id, host = r.required_string(), r.required_string()
        rebalance = r.int32() if version >= 1 else -1
        session = r.int32()
        if rebalance < 0:
            rebalance = session
        members.append(MemberRecord(member_id, instance, client_id, host, rebalance, session, r.bytes_(), r.bytes_()))
    return GroupRecord(protocol_type, generation, protocol, leader, ts, tuple(members))


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group: Kafka's ``Utils.abs(groupId.hashCode) % n``: ``Math.abs``,
    except that Integer.MIN_VALUE maps to 0 (not ``n & 0x7fffffff``, which differs for every negative hash)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
