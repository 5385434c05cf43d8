"""The Produce response encoded straight to bytes, without kafka-python's message objects (the hot path of every
acks=1 / acks=all produce: building and encoding the generic objects cost ~80 us per response, this ~3 us).

Requests are read by kafka-python's generated decoders: measured against a purpose-built Produce (and Fetch)
request decoder that built the same objects, they were as fast (2.5-5 us for a 16 KiB Produce v9 body), so
there is none here.

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

