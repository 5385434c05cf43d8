"""The records of ``__transaction_state`` (Kafka's ``TransactionLog``, ``TransactionLogKey.json`` and
``TransactionLogValue.json``), and the partition of a transactional id.

Key: int16 version (0), then the transactional id (int16-length string).  Value, version 0 (what Kafka 3.9 writes
while the ``transaction.version`` feature is 0, always the case in ZooKeeper mode): int16 version, int64 producer
id, int16 producer epoch, int32 transaction timeout, int8 state id, the partitions (int32 count, -1 for null,
each a topic string and an int32 array of partition ids; null when the state is Empty), int64 last update time,
int64 start time (-1 when no transaction started).  A null value is a tombstone (the id expired).

Reading also accepts value version 1 (flexible: compact strings and arrays, tagged fields), as Kafka does.
``lastProducerId`` / ``lastProducerEpoch`` are not stored, as in Kafka 3.9: they are -1 after a load.
"""
from __future__ import annotations

import struct

import attrs

from kafkatier.coordinator.group.records import java_string_hash

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0


class MalformedTransactionRecordError(ValueError):
    """A ``__transaction_state`` record that cannot be read (skipped with an error while loading)."""


@attrs.frozen
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state_id: int
    topic_partitions: frozenset            # of (topic, partition)
    txn_last_update_timestamp: int
    txn_start_timestamp: int


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % n``: ``Math.abs``, except that Integer.MIN_VALUE maps to 0
    (not ``n & 0x7fffffff``, the partitioner's ``toPositive``: the two differ for every negative hash)."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack(">h", len(b)) + b


def key_bytes(transactional_id: str) -> bytes:
    return struct.pack(">h", KEY_VERSION) + _string(transactional_id)


def value_bytes(v: TransactionLogValue) -> bytes:
    out = [struct.pack(">hqhib", VALUE_VERSION, v.producer_id, v.producer_epoch, v.txn_timeout_ms, v.state_id)]
    if v.state_id == 0:   # Empty: the partitions are written as null
        out.append(struct.pack(">i", -1))
    else:
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(v.topic_partitions):
            by_topic.setdefault(t, []).append(p)
        out.append(struct.pack(">i", len(by_topic)))
        for t, ps in by_topic.items():
            out.append(_string(t))
            out.append(struct.pack(">i", len(ps)) + b"".join(struct.pack(">i", p) for p in ps))
    out.append(struct.pack(">qq", v.txn_last_update_timestamp, v.txn_start_timestamp))
    return b"".join(out)


class _Reader:
    def __init__(self, data: bytes, flexible: bool = False):
        self.data, self.pos, self.flexible = data, 0, flexible

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise MalformedTransactionRecordError(f"record truncated at byte {self.pos}")
        v = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return v[0] if len(v) == 1 else v

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.data):
                raise MalformedTransactionRecordError(f"record truncated at byte {self.pos}")
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def array_length(self) -> int:
        return self.uvarint() - 1 if self.flexible else self.take(">i")

    def string(self) -> str:
        n = self.uvarint() - 1 if self.flexible else self.take(">h")
        if n < 0 or self.pos + n > len(self.data):
            raise MalformedTransactionRecordError(f"bad string length {n} at byte {self.pos}")
        s = self.data[self.pos:self.pos + n]
        self.pos += n
        try:
            return s.decode("utf-8")
        except UnicodeDecodeError as e:
            raise MalformedTransactionRecordError(f"string is not UTF-8: {e}") from e

    def skip_tags(self) -> None:
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()
            n = self.uvarint()
            self.pos += n


def read_key(data: bytes) -> str:
    """The transactional id of a key; raises MalformedTransactionRecordError (also for an unknown version)."""
    r = _Reader(bytes(data))
    version = r.take(">h")
    if version != KEY_VERSION:
        raise MalformedTransactionRecordError(f"unknown transaction log key version {version}")
    return r.string()


def read_value(data: bytes | None) -> TransactionLogValue | None:
    """The value of a record; None for a tombstone."""
    if data is None:
        return None
    data = bytes(data)
    version = _Reader(data).take(">h")
    if version not in (0, 1):
        raise MalformedTransactionRecordError(f"unknown transaction log value version {version}")
    r = _Reader(data, flexible=version >= 1)
    r.pos = 2
    pid, epoch, timeout, state = r.take(">qhib")
    parts: set = set()
    n = r.array_length()
    for _ in range(max(n, 0)):
        topic = r.string()
        for _ in range(r.array_length()):
            parts.add((topic, r.take(">i")))
        r.skip_tags()
    last_update, start = r.take(">qq")
    r.skip_tags()
    return TransactionLogValue(pid, epoch, timeout, state, frozenset(parts), last_update, start)
