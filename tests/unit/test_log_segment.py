"""LogSegment: appends, whole-batch reads, index entries, recovery of a torn tail, truncation."""
from __future__ import annotations

import os
import socket

from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from kafkatier.common.file_records import FileRecords
from kafkatier.log.record_batch import BatchHeader, validate_and_assign_offsets
from kafkatier.log.segment import FILE_RECORDS_MIN_BYTES, LogSegment


def records(first_offset: int, n: int, *, ts: int = 1_000, value_size: int = 100, epoch: int = 0):
    b = MemoryRecordsBuilder(2, 0, 1 << 22)
    for i in range(n):
        b.append(ts + i, None, b"x" * value_size)
    b.close()
    return validate_and_assign_offsets(bytes(b.buffer()), first_offset, epoch, now_ms=0)


def append(seg: LogSegment, first_offset: int, n: int, **kw):
    info = records(first_offset, n, **kw)
    seg.append(info.last_offset, info.max_timestamp, info.offset_of_max_timestamp, info.records)
    return info


def offsets(data: bytes) -> list[int]:
    out, recs = [], MemoryRecords(data)
    while recs.has_next():
        out += [r.offset for r in recs.next_batch()]
    return out


def test_file_names_and_sparse_index(tmp_path):
    seg = LogSegment(str(tmp_path), 42, index_interval_bytes=500)
    assert sorted(os.listdir(tmp_path)) == ["00000000000000000042.log"]  # index files come with their first entry
    nxt = 42
    for _ in range(10):
        info = append(seg, nxt, 3, value_size=100)  # ~390 bytes a batch
        nxt = info.last_offset + 1
    assert seg.next_offset() == 72
    # One entry per index.interval.bytes of appended data, never for the first append.
    assert 3 <= seg.offset_index.entries <= 6
    first = seg.offset_index.entry(0)
    with open(seg.log_path, "rb") as f:
        f.seek(first.position)
        hdr = BatchHeader.parse(f.read(61))
    assert hdr.last_offset == first.offset
    seg.on_become_inactive()  # a rolled-away segment has both index files, as Kafka leaves them
    assert sorted(os.listdir(tmp_path)) == ["00000000000000000042.index", "00000000000000000042.log",
                                            "00000000000000000042.timeindex"]


def test_read_returns_whole_batches_containing_start_offset(tmp_path):
    seg = LogSegment(str(tmp_path), 0)
    for first in (0, 5, 10):
        append(seg, first, 5)
    got = seg.read(7, 10_000)
    assert offsets(got.records) == list(range(5, 15))  # batch [5..9] included: it contains 7
    assert got.fetch_offset_metadata.relative_position_in_segment > 0
    one_batch = len(records(0, 5).records)
    small = seg.read(7, one_batch + 10)
    assert offsets(small.records) == list(range(5, 10))  # never a partial batch
    assert seg.read(7, 10).records == b""  # first batch larger than max bytes...
    assert offsets(seg.read(7, 10, min_one_message=True).records) == list(range(5, 10))  # ...unless KIP-74
    assert seg.read(15, 10_000) is None
    bounded = seg.read(0, 10_000, max_position=2 * one_batch)
    assert offsets(bounded.records) == list(range(0, 10))


def test_a_large_read_as_file_records_is_the_copying_read_without_the_copy(tmp_path):
    """``file_records``: a read of at least FILE_RECORDS_MIN_BYTES is a range of the segment file holding the same
    whole batches the copying read returns, with the last batch's last offset; a small read, or one over many
    small batches, is copied as before."""
    seg = LogSegment(str(tmp_path), 0)
    first = 0
    for _ in range(6):   # six batches of 20 records of 1 KiB (~20 KiB each)
        first = append(seg, first, 20, value_size=1024).last_offset + 1
    for start, max_size, max_position in [(0, 1 << 20, None), (25, 70_000, None), (0, 1 << 20, 100_000),
                                          (119, 10, None)]:
        copied = seg.read(start, max_size, max_position, min_one_message=True)
        ranged = seg.read(start, max_size, max_position, min_one_message=True, file_records=True)
        assert type(copied.records) is bytes
        if max_size >= FILE_RECORDS_MIN_BYTES:
            assert type(ranged.records) is FileRecords
            assert ranged.records.read() == copied.records
            assert ranged.last_offset == offsets(copied.records)[-1]
        else:
            assert ranged.records == copied.records and ranged.last_offset == -1
        assert ranged.fetch_offset_metadata == copied.fetch_offset_metadata
    os.makedirs(tmp_path / "tiny")
    tiny = LogSegment(str(tmp_path / "tiny"), 0)
    for i in range(200):   # 200 batches of one 1 KiB record: more headers than a range is worth reading
        append(tiny, i, 1, value_size=1024)
    got = tiny.read(0, 1 << 20, file_records=True)
    assert type(got.records) is bytes and offsets(got.records) == list(range(200))


def test_file_records_outlive_the_segment_file_they_were_read_from(tmp_path):
    seg = LogSegment(str(tmp_path), 0)
    append(seg, 0, 100, value_size=1024)
    expected = seg.read(0, 1 << 20).records
    ranged = seg.read(0, 1 << 20, file_records=True).records
    seg.close()
    os.unlink(seg.log_path)
    assert ranged.read() == expected
    assert ranged[1000:].read() == expected[1000:] and len(ranged[1000:]) == len(expected) - 1000
    a, b = socket.socketpair()
    with a, b:
        sent = ranged[10:].send_to(a.fileno())
        assert b.recv(sent, socket.MSG_WAITALL) == expected[10:10 + sent]


def test_reopen_keeps_next_offset_and_max_timestamp(tmp_path):
    seg = LogSegment(str(tmp_path), 0, index_interval_bytes=100)
    append(seg, 0, 3, ts=5_000)
    append(seg, 3, 3, ts=9_000)
    seg.close()
    again = LogSegment(str(tmp_path), 0, index_interval_bytes=100)
    again.sanity_check()
    assert again.next_offset() == 6
    assert again.max_timestamp_so_far == 9_002 and again.largest_timestamp == 9_002


def test_recover_truncates_torn_tail_and_rebuilds_index(tmp_path):
    seg = LogSegment(str(tmp_path), 0, index_interval_bytes=100)
    for first in range(0, 30, 3):
        append(seg, first, 3)
    good_size = seg.size
    seg.close()
    with open(tmp_path / "00000000000000000000.log", "ab") as f:
        f.write(records(30, 3).records[:-20])  # torn last batch
    (tmp_path / "00000000000000000000.index").write_bytes(b"\x01\x02\x03")  # torn index too
    seg = LogSegment(str(tmp_path), 0, index_interval_bytes=100)
    truncated = seg.recover()
    assert truncated > 0 and seg.size == good_size
    assert os.path.getsize(seg.log_path) == good_size
    assert seg.next_offset() == 30
    seg.sanity_check()
    assert seg.offset_index.entries > 0
    assert offsets(seg.read(0, 1 << 20).records) == list(range(30))


def test_recover_stops_at_corrupt_batch(tmp_path):
    seg = LogSegment(str(tmp_path), 0)
    a = append(seg, 0, 3)
    append(seg, 3, 3)
    append(seg, 6, 3)
    seg.close()
    path = tmp_path / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    data[len(a.records) + 70] ^= 0xFF  # inside the second batch
    path.write_bytes(bytes(data))
    seg = LogSegment(str(tmp_path), 0)
    assert seg.recover() == len(data) - len(a.records)
    assert seg.next_offset() == 3


def test_truncate_to_drops_batch_containing_offset(tmp_path):
    seg = LogSegment(str(tmp_path), 0, index_interval_bytes=1)
    for first in (0, 5, 10):
        append(seg, first, 5)
    seg.truncate_to(7)
    assert seg.next_offset() == 5
    assert offsets(seg.read(0, 1 << 20).records) == list(range(5))
    assert all(seg.offset_index.entry(i).offset < 7 for i in range(seg.offset_index.entries))


def test_find_offset_by_timestamp_inside_batch(tmp_path):
    seg = LogSegment(str(tmp_path), 0, index_interval_bytes=1)
    append(seg, 0, 10, ts=100)    # 100..109
    append(seg, 10, 10, ts=200)   # 200..209
    found = seg.find_offset_by_timestamp(105, 0)
    assert (found.timestamp, found.offset) == (105, 5)
    found = seg.find_offset_by_timestamp(150, 0)
    assert (found.timestamp, found.offset) == (200, 10)
    assert seg.find_offset_by_timestamp(105, 7).offset == 7
    assert seg.find_offset_by_timestamp(1_000, 0) is None


def test_a_read_without_a_descriptor_to_spare_is_copied(tmp_path, monkeypatch):
    """``FileRecords`` holds a duplicate descriptor: when the process has none left (EMFILE) the read is the
    copying one, not a storage error."""
    import errno

    from kafkatier.common import file_records
    seg = LogSegment(str(tmp_path), 0)
    append(seg, 0, 100, value_size=1024)

    def no_fd(fd):
        raise OSError(errno.EMFILE, "Too many open files")
    monkeypatch.setattr(file_records.os, "dup", no_fd)
    got = seg.read(0, 1 << 20, file_records=True)
    assert type(got.records) is bytes and offsets(got.records) == list(range(100))
