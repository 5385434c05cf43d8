"""Message format v0/v1 ↔ v2 conversion (log/message_format_conversion.py)."""
from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kafkatier.log.message_format_conversion import (CorruptMessageError, down_convert, fetch_magic, magic_of,
                                                     up_convert)
from kafkatier.protocol.errors import Errors

TS = 1_700_000_000_000


def legacy(magic: int, compression: int = 0, n: int = 3) -> bytes:
    b = LegacyRecordBatchBuilder(magic, compression, 1 << 20)
    for i in range(n):
        b.append(i, TS + i, b"k%d" % i, b"v%d" % i)
    return bytes(b.build())


def records(data: bytes) -> list:
    return [r for batch in MemoryRecords(data) for r in batch]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("compression", [0, 1])
def test_up_convert_makes_one_v2_batch_with_timestamps_per_magic(magic, compression):
    out = up_convert(legacy(magic, compression))
    assert magic_of(out) == 2
    batches = list(MemoryRecords(out))
    # the wrapper's codec (kafka-python's builder keeps a batch uncompressed when compressing does not pay)
    assert len(batches) == 1 and batches[0].compression_type in {0, compression}
    got = records(out)
    assert [(r.offset, r.key, r.value) for r in got] == [(i, b"k%d" % i, b"v%d" % i) for i in range(3)]
    assert [r.timestamp for r in got] == ([TS, TS + 1, TS + 2] if magic == 1 else [-1, -1, -1])


def test_up_convert_checks_the_crc():
    data = bytearray(legacy(1))
    data[-1] ^= 0xFF  # a value byte of the last message
    with pytest.raises(CorruptMessageError) as e:
        up_convert(data)
    assert e.value.error == Errors.CORRUPT_MESSAGE


def test_up_convert_refuses_v2_and_empty_sets():
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    b.append(0, TS, b"k", b"v", [])
    with pytest.raises(CorruptMessageError):
        up_convert(bytes(b.build()))
    with pytest.raises(CorruptMessageError):
        up_convert(b"")


@pytest.mark.parametrize("fetch_version,magic", [(0, 0), (1, 0), (2, 1), (3, 1)])
def test_down_convert_keeps_offsets_and_drops_a_partial_tail(fetch_version, magic):
    assert fetch_magic(fetch_version) == magic
    b = DefaultRecordBatchBuilder(2, 1, False, -1, -1, -1, 1 << 20)
    for i in range(3):
        b.append(i, TS + i, b"k%d" % i, b"v%d" % i, [("h", b"x")])
    batch = bytearray(b.build())
    batch[0:8] = (40).to_bytes(8, "big")  # base offset 40, as stored
    out = down_convert(bytes(batch) + bytes(batch[:20]), magic)
    assert magic_of(out) == magic
    got = records(out)
    assert [(r.offset, r.key, r.value) for r in got] == [(40 + i, b"k%d" % i, b"v%d" % i) for i in range(3)]
    if magic == 1:
        assert [r.timestamp for r in got] == [TS, TS + 1, TS + 2]
    assert fetch_magic(4) == 2


def test_down_convert_starts_at_the_fetch_offset():
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i in range(4):
        b.append(i, TS + i, None, b"v%d" % i, [])
    assert [r.offset for r in records(down_convert(bytes(b.build()), 1, first_offset=2))] == [2, 3]


def test_down_convert_of_nothing():
    assert down_convert(b"", 1) == b""
    assert down_convert(None, 0) is None
