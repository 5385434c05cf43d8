"""The Produce response encoded straight to bytes, without kafka-python's message objects (the hot path of every
acks=1 / acks=all produce: building and encoding the generic objects cost ~80 us per response, this ~3 us).

:func:`encode_produce_response` writes ProduceResponse v3-v12 bodies (the versions that name topics; v13 names
topic ids and goes through the generic path) exactly as kafka-python's generated encoder writes them
(``tests/unit/test_produce_codec.py`` compares them byte for byte): the tagged ``CurrentLeader`` and
``NodeEndpoints`` fields are never set by the broker, so nothing tagged is written.
:class:`~kafkatier.protocol.codec.EncodedResponse` carries the body to the network layer.
"""
from __future__ import annotations

import struct
from typing import Iterable, Sequence

MIN_VERSION, MAX_VERSION = 3, 12
FLEXIBLE_FROM = 9

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PART_V5 = struct.Struct(">ihqqq")   # index, error, base offset, log append time, log start offset
_PART_V3 = struct.Struct(">ihqq")    # index, error, base offset, log append time


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


# --- requests -----------------------------------------------------------------------------------------------

_REQ_HEAD = struct.Struct(">hi")   # acks, timeout


def _request_classes():
    from kafka.protocol.producer import ProduceRequest
    topic_cls = ProduceRequest.TopicProduceData
    return ProduceRequest, topic_cls, topic_cls.PartitionProduceData


_new = object.__new__


def _read_uvarint(buf, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ValueError("varint too long")


def decode_produce_request(body: memoryview, version: int):
    """A ProduceRequest (kafka-python's class, same field values as its generated decoder gives) read from
    ``body`` at ``version`` (3-12), or None when anything is unusual (a truncated or malformed body, tagged
    fields present): the generic decoder then reads it and reports the error."""
    if not supports(version):
        return None
    try:
        return _decode(body, version, version >= FLEXIBLE_FROM)
    except (IndexError, ValueError, UnicodeDecodeError, struct.error):
        return None


def _decode(body: memoryview, version: int, flexible: bool):
    request_cls, topic_cls, partition_cls = _REQUEST_CLASSES
    end = len(body)
    pos = 0
    # transactional id: nullable string
    if flexible:
        n, pos = _read_uvarint(body, pos)
        n -= 1
    else:
        n = _I16.unpack_from(body, pos)[0]
        pos += 2
    if n < -1 or pos + n > end:
        return None
    txn_id = None if n == -1 else str(body[pos:pos + n], "utf-8")
    pos += max(n, 0)
    acks, timeout_ms = _REQ_HEAD.unpack_from(body, pos)
    pos += 6
    if flexible:
        ntopics, pos = _read_uvarint(body, pos)
        ntopics -= 1
    else:
        ntopics = _I32.unpack_from(body, pos)[0]
        pos += 4
    if ntopics < 0:
        return None  # a null array: the generic decoder decides
    topics = []
    for _ in range(ntopics):
        if flexible:
            n, pos = _read_uvarint(body, pos)
            n -= 1
        else:
            n = _I16.unpack_from(body, pos)[0]
            pos += 2
        if n < 0 or pos + n > end:
            return None
        name = str(body[pos:pos + n], "utf-8")
        pos += n
        if flexible:
            nparts, pos = _read_uvarint(body, pos)
            nparts -= 1
        else:
            nparts = _I32.unpack_from(body, pos)[0]
            pos += 4
        if nparts < 0:
            return None
        parts = []
        for _ in range(nparts):
            index = _I32.unpack_from(body, pos)[0]
            pos += 4
            if flexible:
                n, pos = _read_uvarint(body, pos)
                n -= 1
            else:
                n = _I32.unpack_from(body, pos)[0]
                pos += 4
            if n < -1 or pos + n > end:
                return None
            records = None if n == -1 else bytes(body[pos:pos + n])
            pos += max(n, 0)
            if flexible:
                if body[pos] != 0:
                    return None  # tagged fields: the generic decoder keeps them
                pos += 1
            p = _new(partition_cls)
            p._version = version
            p.tags = None
            p.unknown_tags = None
            p.index = index
            p.records = records
            parts.append(p)
        if flexible:
            if body[pos] != 0:
                return None
            pos += 1
        t = _new(topic_cls)
        t._version = version
        t.tags = None
        t.unknown_tags = None
        t.name = name
        t.partition_data = parts
        topics.append(t)
    if flexible:
        if body[pos] != 0:
            return None
        pos += 1
    r = _new(request_cls)
    r._version = version
    r.tags = None
    r.unknown_tags = None
    r.transactional_id = txn_id
    r.acks = acks
    r.timeout_ms = timeout_ms
    r.topic_data = topics
    r._header = None
    return r


_REQUEST_CLASSES = _request_classes()
