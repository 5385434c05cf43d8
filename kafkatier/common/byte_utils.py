"""Kafka's ``ByteUtils`` readers for the record format's variable-length integers."""
from __future__ import annotations


def read_varint(buf, pos: int) -> tuple[int, int]:
    """The zigzag-encoded varint at ``pos`` of ``buf`` (a record's length, deltas, key and value sizes): (value,
    next position).  IndexError past the end of ``buf``."""
    shift = raw = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
