"""Kafka's ``ByteUtils``: the variable-length integers of the record format and of flexible protocol versions."""
from __future__ import annotations


def read_unsigned_varint(buf, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` of ``buf`` (7 bits a byte, low bits first: compact lengths and counts of
    flexible protocol versions): (value, next position).  IndexError past the end of ``buf``."""
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def read_varint(buf, pos: int) -> tuple[int, int]:
    """The zigzag-encoded varint or varlong at ``pos`` of ``buf`` (a record's length, deltas, key and value sizes):
    (value, next position).  IndexError past the end of ``buf``."""
    raw, pos = read_unsigned_varint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def write_unsigned_varint(n: int) -> bytes:
    """``n`` (not negative) as an unsigned varint: 7 bits a byte, low bits first (compact lengths, tagged
    fields)."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def write_varint(v: int) -> bytes:
    """``v`` (a signed 64-bit value) zigzag-encoded as a varint (a record's length, deltas, key and value
    sizes)."""
    return write_unsigned_varint((v << 1) ^ (v >> 63))
