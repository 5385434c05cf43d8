"""The Produce response encoded straight to bytes, without kafka-python's message objects (the hot path of every
acks=1 / acks=all produce: building and encoding the generic objects cost ~80 us per response, this ~3 us), and
the Produce request v3-v12 decoded with its records left in the received frame.

:func:`request_decoder` builds the objects kafka-python's generated decoder builds (same classes, fields and
version marks; ``tests/unit/test_produce_codec.py`` compares them), except that each partition's ``records`` is
a ``memoryview`` of the frame instead of a ``bytes`` copy: the compiled leader append copies the batch once, to
write its offsets, and that copy is what the log writes (a 1 MiB batch was copied twice before it). A request
with tagged fields, or anything it cannot read, is decoded by kafka-python's decoder, whose errors stay the
ones the network layer reports.

:func:`encode_produce_response` writes ProduceResponse v3-v12 bodies (the versions that name topics; v13 names
topic ids and goes through the generic path) exactly as kafka-python's generated encoder writes them
(``tests/unit/test_produce_codec.py`` compares them byte for byte): the tagged ``CurrentLeader`` and
``NodeEndpoints`` fields are never set by the broker, so nothing tagged is written.
:class:`~kafkatier.protocol.codec.EncodedResponse` carries the body to the network layer.
"""
from __future__ import annotations

import struct
from typing import Callable, Iterable, Sequence

from kafkatier.common.byte_utils import read_unsigned_varint

MIN_VERSION, MAX_VERSION = 3, 12
FLEXIBLE_FROM = 9

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PART_V5 = struct.Struct(">ihqqq")   # index, error, base offset, log append time, log start offset
_PART_V3 = struct.Struct(">ihqq")    # index, error, base offset, log append time
_ACKS_TIMEOUT = struct.Struct(">hi")
_unpack_i32 = struct.Struct(">i").unpack_from
_unpack_i16 = struct.Struct(">h").unpack_from
_unpack_acks_timeout = _ACKS_TIMEOUT.unpack_from
_object_new = object.__new__


def supports(version: int) -> bool:
    return MIN_VERSION <= version <= MAX_VERSION


def _uvarint(n: int, out: bytearray) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _string(s: str | None, out: bytearray, flexible: bool) -> None:
    if s is None:
        if flexible:
            out.append(0)
        else:
            out += b"\xff\xff"
        return
    data = s.encode("utf-8")
    if flexible:
        _uvarint(len(data) + 1, out)
    else:
        out += _I16.pack(len(data))
    out += data


def _count(n: int, out: bytearray, flexible: bool) -> None:
    if flexible:
        _uvarint(n + 1, out)
    else:
        out += _I32.pack(n)


#: One partition's answer: (index, error code, base offset, log append time, log start offset,
#: record errors as (batch index, message) pairs, error message).
PartitionAnswer = tuple[int, int, int, int, int, Sequence[tuple[int, "str | None"]], "str | None"]


def encode_produce_response(version: int, topics: Iterable[tuple[str, Sequence[PartitionAnswer]]],
                            throttle_time_ms: int = 0) -> bytes:
    """The ProduceResponse body at ``version`` (3-12) for ``topics``: (name, partition answers) pairs."""
    if not supports(version):
        raise ValueError(f"ProduceResponse v{version} is not encoded here")
    flexible = version >= FLEXIBLE_FROM
    topics = list(topics)
    out = bytearray()
    _count(len(topics), out, flexible)
    part = _PART_V5 if version >= 5 else _PART_V3
    for name, partitions in topics:
        _string(name, out, flexible)
        _count(len(partitions), out, flexible)
        for index, error, base_offset, append_time, start_offset, record_errors, message in partitions:
            if version >= 5:
                out += part.pack(index, error, base_offset, append_time, start_offset)
            else:
                out += part.pack(index, error, base_offset, append_time)
            if version >= 8:
                _count(len(record_errors), out, flexible)
                for batch_index, batch_message in record_errors:
                    out += _I32.pack(batch_index)
                    _string(batch_message, out, flexible)
                    if flexible:
                        out.append(0)
                _string(message, out, flexible)
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    out += _I32.pack(throttle_time_ms)
    if flexible:
        out.append(0)
    return bytes(out)



# --- request ------------------------------------------------------------------------------------------------

class _Fallback(Exception):
    """Raised inside the purpose-built decoder for what it leaves to kafka-python's (tagged fields)."""


def _classic_string(data, pos: int):
    n = _unpack_i16(data, pos)[0]
    pos += 2
    return (None, pos) if n < 0 else (str(data[pos:pos + n], "utf-8"), pos + n)


def _compact_string(data, pos: int):
    n, pos = read_unsigned_varint(data, pos)
    n -= 1
    return (None, pos) if n < 0 else (str(data[pos:pos + n], "utf-8"), pos + n)


def _classic_count(data, pos: int):
    return _unpack_i32(data, pos)[0], pos + 4


def _compact_count(data, pos: int):
    n, pos = read_unsigned_varint(data, pos)
    return n - 1, pos


def _no_tagged_fields(data, pos: int) -> int:
    return pos


def _empty_tagged_fields(data, pos: int) -> int:
    if data[pos] != 0:
        raise _Fallback
    return pos + 1


def request_decoder(version: int, request_cls: type, generic: Callable) -> Callable:
    """A ``decode(data, pos) -> (request, end)`` for ProduceRequest ``version`` (3-12), building ``request_cls``
    objects as kafka-python's ``generic`` decoder of that version does, records as views of ``data``; anything
    with tagged fields goes to ``generic``."""
    if not supports(version):
        raise ValueError(f"ProduceRequest v{version} is not decoded here")
    topic_cls = request_cls.TopicProduceData
    part_cls = topic_cls.PartitionProduceData
    flexible = version >= FLEXIBLE_FROM

    def make(cls):
        obj = _object_new(cls)
        obj._version = version
        obj.tags = None
        obj.unknown_tags = None
        return obj

    string, count, tags = (_compact_string, _compact_count, _empty_tagged_fields) if flexible else \
        (_classic_string, _classic_count, _no_tagged_fields)

    def specific(data, pos):
        obj = make(request_cls)
        obj.transactional_id, pos = string(data, pos)
        obj.acks, obj.timeout_ms = _unpack_acks_timeout(data, pos)
        pos += 6
        n_topics, pos = count(data, pos)
        if n_topics < 0:
            obj.topic_data = None
            return obj, tags(data, pos)
        topics = obj.topic_data = []
        for _ in range(n_topics):
            t = make(topic_cls)
            t.name, pos = string(data, pos)
            n_parts, pos = count(data, pos)
            if n_parts < 0:
                t.partition_data = None
            else:
                parts = t.partition_data = []
                for _ in range(n_parts):
                    p = make(part_cls)
                    p.index = _unpack_i32(data, pos)[0]
                    n, pos = count(data, pos + 4)   # the records' length: INT32, or compact as a count is
                    if n < 0:
                        p.records = None
                    else:
                        p.records = data[pos:pos + n]
                        pos += n
                    parts.append(p)
                    pos = tags(data, pos)
            topics.append(t)
            pos = tags(data, pos)
        return obj, tags(data, pos)


    def decode(data, pos):
        if not isinstance(data, memoryview):   # the records are views: of an immutable copy, if not a view already
            data = memoryview(bytes(data))
        try:
            return specific(data, pos)
        except Exception:   # noqa: BLE001 - tagged fields, or a frame kafka-python's decoder reports on
            return generic(data, pos)
    return decode


