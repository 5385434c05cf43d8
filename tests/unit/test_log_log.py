"""Log: produce/fetch round trips through kafka-python's batch format, roll, retention, recovery, truncation,
log start offset, ListOffsets and follower appends."""
from __future__ import annotations

import os

import pytest
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from kafkatier.log.errors import (
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    UnexpectedAppendOffsetError,
)
from kafkatier.log.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Log
from kafkatier.log.log_config import LogConfig
from kafkatier.log.record_batch import validate_and_assign_offsets

from tests.unit.fakes import ManualClock


def produce_blob(n: int, *, ts: int = 1_000, value_size: int = 100, prefix: str = "v") -> bytes:
    b = MemoryRecordsBuilder(2, 0, 1 << 22)
    for i in range(n):
        b.append(ts + i, f"k{i}".encode(), f"{prefix}{i}".encode().ljust(value_size, b"."))
    b.close()
    return bytes(b.buffer())


def consume(data: bytes) -> list[tuple[int, bytes, bool]]:
    out, recs = [], MemoryRecords(data)
    while recs.has_next():
        batch = recs.next_batch()
        ok = batch.validate_crc()
        out += [(r.offset, r.value, ok) for r in batch]
    return out


def read_all(lg: Log, start: int | None = None, max_offset: int | None = None) -> list[int]:
    """Offsets a consumer sees fetching from ``start`` to the end, like a real fetch loop."""
    offset = lg.log_start_offset if start is None else start
    seen: list[int] = []
    while True:
        info = lg.read(offset, 1 << 20, max_offset=max_offset)
        got = [o for o, _, ok in consume(info.records) if o >= offset and ok]
        if not got:
            return seen
        seen += got
        offset = got[-1] + 1


def make_log(tmp_path, clock=None, **props) -> Log:
    cfg = LogConfig.from_props({k.replace("_", "."): str(v) for k, v in props.items()})
    return Log(str(tmp_path / "orders-0"), cfg, clock=clock or ManualClock(1_000_000))


def segment_files(lg: Log) -> list[str]:
    return sorted(f for f in os.listdir(lg.dir) if f.endswith(".log"))


def test_round_trip_offsets_crc_and_payload(tmp_path):
    lg = make_log(tmp_path)
    infos = [lg.append_as_leader(produce_blob(4, prefix=f"b{j}-"), leader_epoch=3) for j in range(5)]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 3), (4, 7), (8, 11), (12, 15), (16, 19)]
    assert lg.log_end_offset == 20 and lg.topic_partition == ("orders", 0)
    got = consume(lg.read(0, 1 << 20).records)
    assert [o for o, _, _ in got] == list(range(20))
    assert all(ok for _, _, ok in got)
    assert got[5][1].startswith(b"b1-1")
    assert lg.leader_epoch_cache.latest_epoch == 3 and lg.end_offset_for_epoch(3) == (3, 20)


def test_read_bounds_and_out_of_range(tmp_path):
    lg = make_log(tmp_path)
    for _ in range(4):
        lg.append_as_leader(produce_blob(5), 0)
    lg.high_watermark = 10
    assert read_all(lg, 0, max_offset=lg.high_watermark) == list(range(10))
    assert lg.read(10, 1 << 20, max_offset=10).records == b""
    assert lg.read(20, 1 << 20).records == b""  # at the log end: empty, not an error
    with pytest.raises(OffsetOutOfRangeError, match="only have log segments upto 20"):
        lg.read(21, 100)
    assert lg.update_high_watermark(99) == 20  # clamped to the log end offset


def test_roll_by_segment_bytes(tmp_path):
    one = len(produce_blob(5))
    lg = make_log(tmp_path, segment_bytes=3 * one)
    for _ in range(10):
        lg.append_as_leader(produce_blob(5), 0)
    assert segment_files(lg) == ["00000000000000000000.log", "00000000000000000015.log",
                                 "00000000000000000030.log", "00000000000000000045.log"]
    assert all(s.size <= 3 * one for s in lg.log_segments())
    assert read_all(lg) == list(range(50))
    with pytest.raises(RecordBatchTooLargeError):
        lg.append_as_leader(produce_blob(30), 0)


def test_roll_by_segment_ms_uses_record_time(tmp_path):
    clock = ManualClock(1_000_000)
    lg = make_log(tmp_path, clock, segment_ms=1000)
    lg.append_as_leader(produce_blob(1, ts=10_000), 0)
    lg.append_as_leader(produce_blob(1, ts=10_500), 0)
    assert lg.num_segments == 1
    lg.append_as_leader(produce_blob(1, ts=11_001), 0)  # 1001 ms after the segment's first batch
    assert lg.num_segments == 2 and lg.active_segment.base_offset == 2


def test_roll_when_index_full(tmp_path):
    lg = make_log(tmp_path, index_interval_bytes=1, segment_index_bytes=24)  # 3 offset index entries
    for _ in range(12):
        lg.append_as_leader(produce_blob(1), 0)
    assert lg.num_segments > 1
    assert all(s.offset_index.entries <= 3 for s in lg.log_segments())


def test_retention_by_bytes_deletes_oldest_whole_segments(tmp_path):
    one = len(produce_blob(5))
    lg = make_log(tmp_path, segment_bytes=2 * one, retention_bytes=3 * one)
    for _ in range(8):  # 4 segments of 2 batches
        lg.append_as_leader(produce_blob(5), 0)
    assert lg.delete_old_segments() == 0  # nothing is below the high watermark yet
    lg.high_watermark = lg.log_end_offset
    assert lg.delete_old_segments() == 2  # 8 batches -> keep 3 batches worth, whole segments only
    assert lg.log_start_offset == 20 and segment_files(lg)[0] == "00000000000000000020.log"
    assert read_all(lg) == list(range(20, 40))
    with pytest.raises(OffsetOutOfRangeError, match="starting from offset: 20"):
        lg.read(5, 100)


def test_retention_by_time_rolls_and_never_leaves_log_empty(tmp_path):
    clock = ManualClock(1_000_000)
    one = len(produce_blob(5))
    lg = make_log(tmp_path, clock, segment_bytes=2 * one, retention_ms=60_000)
    for i in range(3):
        lg.append_as_leader(produce_blob(5, ts=100_000 * (i + 1)), 0)
    lg.high_watermark = lg.log_end_offset
    clock.now = 100_004 + 60_001  # only the first segment (ts ~100_000..200_004) is partly expired
    assert lg.delete_old_segments() == 0  # segment max ts 200_004 is still within retention
    clock.now = 200_004 + 60_001
    assert lg.delete_old_segments() == 1
    assert lg.log_start_offset == 10
    clock.now = 10_000_000  # everything expired: the active segment is rolled, then deleted
    assert lg.delete_old_segments() == 1
    assert lg.num_segments == 1 and lg.active_segment.size == 0
    assert lg.log_start_offset == lg.log_end_offset == 15
    assert lg.read(15, 100).records == b""


def test_log_start_offset_move_deletes_whole_segments_below(tmp_path):
    one = len(produce_blob(5))
    lg = make_log(tmp_path, segment_bytes=2 * one)
    for _ in range(6):
        lg.append_as_leader(produce_blob(5), 0)  # segments at 0, 10, 20
    with pytest.raises(OffsetOutOfRangeError, match="larger than the high watermark 0"):
        lg.maybe_increment_log_start_offset(12)
    lg.high_watermark = 30
    assert lg.maybe_increment_log_start_offset(12)
    assert not lg.maybe_increment_log_start_offset(7)  # lower: no-op
    with pytest.raises(OffsetOutOfRangeError, match="starting from offset: 12"):
        lg.read(11, 100)
    assert read_all(lg)[:3] == [12, 13, 14]  # batch [10..14] is served, below-start records skipped
    assert lg.delete_old_segments() == 1  # segment 0 (next segment base 10 <= 12); segment 10 stays
    assert segment_files(lg)[0] == "00000000000000000010.log"
    assert lg.log_start_offset == 12
    assert lg.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP).offset == 12


def test_torn_tail_recovered_on_reopen(tmp_path):
    lg = make_log(tmp_path)
    for _ in range(5):
        lg.append_as_leader(produce_blob(5), 2)
    lg.close()
    path = tmp_path / "orders-0" / "00000000000000000000.log"
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size - 30)  # crash mid-way through the last batch
    lg = make_log(tmp_path)  # no clean shutdown: recovery from the recovery point (0)
    assert lg.log_end_offset == 20
    assert read_all(lg) == list(range(20))
    assert path.stat().st_size < size - 30
    info = lg.append_as_leader(produce_blob(2), 2)
    assert info.first_offset == 20 and read_all(lg) == list(range(22))


def test_clean_reopen_skips_recovery(tmp_path):
    lg = make_log(tmp_path, segment_bytes=2 * len(produce_blob(5)))
    for _ in range(5):
        lg.append_as_leader(produce_blob(5), 1)
    lg.close()
    again = Log(str(tmp_path / "orders-0"), lg.config, had_clean_shutdown=True, recovery_point=0)
    assert again.log_end_offset == 25 and again.recovery_point == 25
    assert read_all(again) == list(range(25))


def test_truncate_to_and_fully(tmp_path):
    one = len(produce_blob(5))
    lg = make_log(tmp_path, segment_bytes=2 * one)
    for epoch in (1, 1, 2, 2, 3):
        lg.append_as_leader(produce_blob(5), epoch)
    lg.high_watermark = 25
    assert lg.truncate_to(15)
    assert lg.log_end_offset == 15 and lg.high_watermark == 15
    assert segment_files(lg) == ["00000000000000000000.log", "00000000000000000010.log"]
    assert [e.epoch for e in lg.leader_epoch_cache.epoch_entries()] == [1, 2]
    assert not lg.truncate_to(100)
    lg.truncate_fully_and_start_at(50)
    assert (lg.log_start_offset, lg.log_end_offset) == (50, 50)
    assert segment_files(lg) == ["00000000000000000050.log"]
    assert lg.append_as_leader(produce_blob(1), 4).first_offset == 50


def test_truncate_at_the_end_drops_an_epoch_begun_without_records(tmp_path):
    """Kafka's UnifiedLog.truncateTo: this replica led epoch 2 without writing; the follower's truncation to the
    log end offset removes nothing but the epoch entry (else it would ask the new leader about epoch 2 forever)."""
    lg = make_log(tmp_path)
    lg.append_as_leader(produce_blob(5), 1)
    lg.assign_epoch_start_offset(2, 5)
    assert not lg.truncate_to(5)
    assert lg.log_end_offset == 5 and [e.epoch for e in lg.leader_epoch_cache.epoch_entries()] == [1]
    lg.close()
    assert [e.epoch for e in make_log(tmp_path).leader_epoch_cache.epoch_entries()] == [1]


def test_fetch_offset_by_timestamp(tmp_path):
    lg = make_log(tmp_path, segment_bytes=2 * len(produce_blob(5)))
    for i in range(4):
        lg.append_as_leader(produce_blob(5, ts=1000 * (i + 1)), 7)  # ts 1000..1004, 2000..2004, ...
    assert lg.fetch_offset_by_timestamp(2002).offset == 7
    assert lg.fetch_offset_by_timestamp(2500).offset == 10
    assert lg.fetch_offset_by_timestamp(0).offset == 0
    assert lg.fetch_offset_by_timestamp(9999) is None
    latest = lg.fetch_offset_by_timestamp(LATEST_TIMESTAMP)
    assert (latest.timestamp, latest.offset, latest.leader_epoch) == (-1, 20, 7)
    earliest = lg.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP)
    assert (earliest.offset, earliest.leader_epoch) == (0, 7)
    assert lg.fetch_offset_by_timestamp(MAX_TIMESTAMP).offset == 19


def test_follower_append_keeps_leader_offsets(tmp_path):
    leader = make_log(tmp_path)
    follower = Log(str(tmp_path / "f" / "orders-0"), LogConfig())
    leader.append_as_leader(produce_blob(3), 4)
    leader.append_as_leader(produce_blob(3), 5)
    data = leader.read(0, 1 << 20).records
    info = follower.append_as_follower(data)
    assert (info.first_offset, info.last_offset) == (0, 5)
    assert follower.read(0, 1 << 20).records == data
    assert [(e.epoch, e.start_offset) for e in follower.leader_epoch_cache.epoch_entries()] == [(4, 0), (5, 3)]
    with pytest.raises(UnexpectedAppendOffsetError, match="less than the next offset 6"):
        follower.append_as_follower(data)


def test_follower_empty_log_accepts_batch_containing_start(tmp_path):
    leader = make_log(tmp_path)
    leader.append_as_leader(produce_blob(10), 1)
    follower = Log(str(tmp_path / "f" / "orders-0"), LogConfig())
    follower.truncate_fully_and_start_at(4)  # leader's log start offset 4 sits inside batch [0..9]
    follower.append_as_follower(leader.read(0, 1 << 20).records)
    assert (follower.log_start_offset, follower.log_end_offset) == (0, 10)


def test_log_append_time_topic(tmp_path):
    clock = ManualClock(123_456)
    lg = make_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    info = lg.append_as_leader(produce_blob(2, ts=5), 0)
    assert info.log_append_time == 123_456
    recs = MemoryRecords(lg.read(0, 1 << 20).records).next_batch()
    assert recs.validate_crc() and [r.timestamp for r in recs] == [123_456, 123_456]


def test_concurrent_appends_get_distinct_offsets(tmp_path):
    import threading

    lg = make_log(tmp_path, segment_bytes=20_000)
    blob = produce_blob(2)
    firsts: list[int] = []
    lock = threading.Lock()

    def worker():
        for _ in range(50):
            f = lg.append_as_leader(blob, 0).first_offset
            with lock:
                firsts.append(f)
    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(firsts) == list(range(0, 400, 2))
    assert read_all(lg) == list(range(400))


def test_follower_records_validated_like_leader(tmp_path):
    data = bytearray(validate_and_assign_offsets(produce_blob(3), 0, 0, now_ms=0).records)
    data[-1] ^= 1
    lg = make_log(tmp_path)
    from kafkatier.log.errors import CorruptRecordError
    with pytest.raises(CorruptRecordError):
        lg.append_as_follower(bytes(data))
    assert lg.log_end_offset == 0


def test_delete_everything_up_to_high_watermark(tmp_path):
    lg = make_log(tmp_path)
    lg.append_as_leader(produce_blob(10), 2)
    lg.high_watermark = 10
    assert lg.maybe_increment_log_start_offset(lg.high_watermark)
    earliest = lg.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP)
    assert (earliest.offset, earliest.leader_epoch) == (10, 2)
    assert lg.fetch_offset_by_timestamp(0) is None  # no record left to find
    assert lg.read(10, 1 << 20).records == b""
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 1 << 20)
    assert lg.delete_old_segments() == 0  # the active segment is never removed for the log start offset
    assert lg.append_as_leader(produce_blob(1), 2).first_offset == 10
    assert read_all(lg) == [10]
