"""Record batch v2 validation and offset assignment, checked against kafka-python's own reader."""
from __future__ import annotations

import struct

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from kafkatier.log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetsOutOfOrderError,
    RecordTooLargeError,
)
from kafkatier.log.record_batch import (
    BatchHeader,
    is_valid_batch,
    iter_batches,
    rewrite_base_offset,
    validate_and_assign_offsets,
    validate_follower_records,
)
from kafkatier.protocol.errors import Errors


def build_batch(n: int, *, ts: int = 1_000, value_size: int = 10, compression: int = 0,
                key_prefix: bytes = b"k") -> bytes:
    b = MemoryRecordsBuilder(2, compression, 1 << 22)
    for i in range(n):
        b.append(ts + i, key_prefix + str(i).encode(), bytes([i % 256]) * value_size,
                 headers=[("h", b"x")])
    b.close()
    return bytes(b.buffer())


def read_back(data: bytes) -> list[tuple[int, int, bytes, bytes, int, bool]]:
    """(offset, timestamp, key, value, leader epoch, crc ok) for every record, via kafka-python."""
    out = []
    recs = MemoryRecords(data)
    while recs.has_next():
        batch = recs.next_batch()
        ok = batch.validate_crc()
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value, batch.leader_epoch, ok))
    return out


def test_offsets_assigned_crc_valid_payload_unchanged():
    blob = build_batch(3) + build_batch(2, key_prefix=b"second")
    info = validate_and_assign_offsets(blob, 100, 7, now_ms=5_000)
    assert (info.first_offset, info.last_offset, info.num_batches, info.num_records) == (100, 104, 2, 5)
    assert info.valid_bytes == len(blob) == len(info.records)
    got = read_back(info.records)
    assert [g[0] for g in got] == [100, 101, 102, 103, 104]
    assert all(g[5] for g in got), "CRC must still be valid after offset/epoch rewrite"
    assert {g[4] for g in got} == {7}
    assert [g[2] for g in got] == [b"k0", b"k1", b"k2", b"second0", b"second1"]
    # Only baseOffset (8 bytes) and partitionLeaderEpoch (4 bytes) of each batch changed.
    first_len = BatchHeader.parse(blob).size_in_bytes
    for start in (0, first_len):
        assert info.records[start + 8:start + 12] == blob[start + 8:start + 12]
        assert info.records[start + 16:start + BatchHeader.parse(blob, start).size_in_bytes] == \
            blob[start + 16:start + BatchHeader.parse(blob, start).size_in_bytes]
    assert info.max_timestamp == 1_002 and info.offset_of_max_timestamp == 102


def test_memoryview_input_and_gzip_batch_kept_compressed():
    blob = build_batch(50, value_size=200, compression=1)
    assert BatchHeader.parse(blob).compression_type == 1
    info = validate_and_assign_offsets(memoryview(blob), 0, 0, now_ms=0)
    assert info.records[61:] == blob[61:]
    got = read_back(info.records)
    assert [g[0] for g in got] == list(range(50)) and got[49][3] == bytes([49]) * 200


def test_log_append_time_rewrites_max_timestamp_and_crc():
    blob = build_batch(3, ts=10)
    info = validate_and_assign_offsets(blob, 0, 1, now_ms=99_999, timestamp_type="LogAppendTime")
    header = BatchHeader.parse(info.records)
    assert header.timestamp_type == "LogAppendTime" and header.max_timestamp == 99_999
    assert is_valid_batch(info.records)
    assert [g[1] for g in read_back(info.records)] == [99_999] * 3
    assert info.log_append_time == 99_999 and info.max_timestamp == 99_999


def test_bad_crc_is_corrupt_message():
    blob = bytearray(build_batch(2))
    blob[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="Record is corrupt") as e:
        validate_and_assign_offsets(bytes(blob), 0, 0, now_ms=0, topic_partition="t-0")
    assert e.value.error == Errors.CORRUPT_MESSAGE


def test_legacy_magic_rejected():
    b = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    b.append(0, timestamp=1, key=b"k", value=b"v")
    with pytest.raises(CorruptRecordError, match="magic 1"):
        validate_and_assign_offsets(bytes(b.build()), 0, 0, now_ms=0)


def test_batch_size_below_overhead_is_corrupt():
    blob = bytearray(build_batch(1))
    struct.pack_into(">i", blob, 8, 10)
    with pytest.raises(CorruptRecordError, match="minimum record batch overhead"):
        validate_and_assign_offsets(bytes(blob), 0, 0, now_ms=0)


def test_too_large_batch():
    blob = build_batch(5, value_size=1000)
    with pytest.raises(RecordTooLargeError, match="exceeds the maximum configured value of 1000") as e:
        validate_and_assign_offsets(blob, 0, 0, now_ms=0, max_message_bytes=1000, topic_partition="t-0")
    assert e.value.error == Errors.MESSAGE_TOO_LARGE


def test_client_batch_with_nonzero_base_offset_is_invalid_record():
    blob = bytearray(build_batch(2))
    rewrite_base_offset(blob, 0, 5)
    with pytest.raises(InvalidRecordError, match="should be 0, but it is 5"):
        validate_and_assign_offsets(bytes(blob), 0, 0, now_ms=0)


def test_trailing_partial_batch_is_dropped():
    whole = build_batch(2)
    info = validate_and_assign_offsets(whole + build_batch(3)[:40], 0, 0, now_ms=0)
    assert info.num_batches == 1 and info.valid_bytes == len(whole) and len(info.records) == len(whole)


def test_empty_input():
    info = validate_and_assign_offsets(b"", 10, 0, now_ms=0)
    assert (info.num_batches, info.first_offset, info.last_offset, info.records) == (0, -1, -1, b"")


def test_iter_batches_headers_only():
    info = validate_and_assign_offsets(build_batch(2) + build_batch(4), 0, 3, now_ms=0)
    found = [(pos, h.base_offset, h.last_offset, h.partition_leader_epoch, h.records_count)
             for pos, h in iter_batches(info.records)]
    assert [f[1:] for f in found] == [(0, 1, 3, 2), (2, 5, 3, 4)]
    assert found[0][0] == 0 and found[1][0] == BatchHeader.parse(info.records).size_in_bytes


def test_follower_records_keep_offsets_and_report_epochs():
    a = validate_and_assign_offsets(build_batch(2), 10, 4, now_ms=0).records
    b = validate_and_assign_offsets(build_batch(3), 20, 5, now_ms=0).records  # gap allowed (compaction)
    info = validate_follower_records(a + b)
    assert (info.first_offset, info.last_offset, info.num_batches) == (10, 22, 2)
    assert info.records == a + b
    assert info.epoch_starts == ((4, 10), (5, 20))


def test_follower_records_out_of_order():
    a = validate_and_assign_offsets(build_batch(2), 10, 4, now_ms=0).records
    b = validate_and_assign_offsets(build_batch(2), 11, 4, now_ms=0).records
    with pytest.raises(OffsetsOutOfOrderError, match="Out of order offsets"):
        validate_follower_records(a + b)
