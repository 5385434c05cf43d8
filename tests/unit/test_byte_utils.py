"""Kafka's ``ByteUtils`` varints (``common/byte_utils.py``): what is written reads back, with Kafka's bytes."""
from __future__ import annotations

import pytest

from kafkatier.common.byte_utils import read_varint, write_unsigned_varint, write_varint


@pytest.mark.parametrize("value", [0, 1, -1, 63, -64, 64, -65, 300, -300, 2**31 - 1, -2**31, 2**63 - 1, -2**63])
def test_a_written_varint_reads_back(value):
    data = write_varint(value)
    assert read_varint(data + b"\xff", 0) == (value, len(data))


def test_kafkas_encodings():
    assert write_varint(0) == b"\x00"
    assert write_varint(-1) == b"\x01"
    assert write_varint(1) == b"\x02"
    assert write_varint(-64) == b"\x7f"
    assert write_varint(64) == b"\x80\x01"
    assert write_unsigned_varint(0) == b"\x00"
    assert write_unsigned_varint(127) == b"\x7f"
    assert write_unsigned_varint(300) == b"\xac\x02"
    assert len(write_varint(-2**63)) == 10
