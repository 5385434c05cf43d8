"""Offset and time indexes: file format, lookups, truncation, reload and corruption detection."""
from __future__ import annotations

import struct

import pytest

from kafkatier.log.errors import CorruptIndexError, InvalidOffsetError
from kafkatier.log.offset_index import OffsetIndex, OffsetPosition
from kafkatier.log.time_index import TimeIndex, TimestampOffset


def test_offset_index_file_format_and_lookup(tmp_path):
    path = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex(str(path), 100, max_index_size=80)
    idx.append(110, 4200)
    idx.append(125, 9000)
    assert not path.exists()  # created lazily: entries are buffered until a flush
    idx.flush()
    assert path.read_bytes() == struct.pack(">ii", 10, 4200) + struct.pack(">ii", 25, 9000)
    assert idx.lookup(99) == OffsetPosition(100, 0)
    assert idx.lookup(109) == OffsetPosition(100, 0)
    assert idx.lookup(110) == OffsetPosition(110, 4200)
    assert idx.lookup(124) == OffsetPosition(110, 4200)
    assert idx.lookup(10**9) == OffsetPosition(125, 9000)
    with pytest.raises(InvalidOffsetError):
        idx.append(125, 9999)
    idx.close()
    again = OffsetIndex(str(path), 100, max_index_size=80)
    again.sanity_check(log_size=10_000)
    assert again.entries == 2 and again.lookup(130) == OffsetPosition(125, 9000)
    again.truncate_to(125)
    assert again.entries == 1 and path.stat().st_size == 8
    assert not again.is_full and again.max_entries == 10


def test_offset_index_full(tmp_path):
    idx = OffsetIndex(str(tmp_path / "0.index"), 0, max_index_size=16)
    idx.append(1, 10)
    idx.append(2, 20)
    assert idx.is_full
    with pytest.raises(InvalidOffsetError, match="full index"):
        idx.append(3, 30)


def test_offset_index_corruption_detected(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(struct.pack(">ii", 5, 100) + struct.pack(">ii", 3, 200))
    with pytest.raises(CorruptIndexError):
        OffsetIndex(str(path), 0).sanity_check()
    path.write_bytes(struct.pack(">ii", 5, 100) + b"\x00\x01")  # torn trailing entry
    with pytest.raises(CorruptIndexError, match="multiple of 8"):
        OffsetIndex(str(path), 0).sanity_check()
    path.write_bytes(struct.pack(">ii", 5, 100))
    with pytest.raises(CorruptIndexError, match="beyond the end of the log"):
        OffsetIndex(str(path), 0).sanity_check(log_size=50)


def test_time_index_format_lookup_and_truncate(tmp_path):
    path = tmp_path / "00000000000000000010.timeindex"
    idx = TimeIndex(str(path), 10, max_index_size=120)
    idx.maybe_append(1000, 12)
    idx.maybe_append(1000, 14)  # same timestamp: no entry
    idx.maybe_append(2000, 20)
    idx.flush()
    assert path.read_bytes() == struct.pack(">qi", 1000, 2) + struct.pack(">qi", 2000, 10)
    assert idx.lookup(999) == TimestampOffset(-1, 10)
    assert idx.lookup(1500) == TimestampOffset(1000, 12)
    assert idx.lookup(5000) == TimestampOffset(2000, 20)
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(3000, 15)
    idx.truncate_to(20)
    assert idx.last_entry == TimestampOffset(1000, 12)
    idx.close()
    again = TimeIndex(str(path), 10)
    again.sanity_check()
    assert again.entries == 1 and again.last_entry == TimestampOffset(1000, 12)
