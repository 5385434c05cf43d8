"""RemoteLogManager against real logs, the file-based storage manager and the in-memory metadata store: copy up
to the high watermark, reads from the remote tier, retention, failed and fenced copies, failover, followers."""
from __future__ import annotations

import os

import attrs
import pytest
from kafka.record.memory_records import MemoryRecords

from kafkatier.log.log import Log
from kafkatier.log.remote.config import RemoteLogManagerConfig
from kafkatier.log.remote.remote_log_manager import (CopyTask, ExpirationTask, FollowerTask, RemoteLogManager,
                                                     RemoteLogTaskFencedError, StopPartition)
from kafkatier.log.remote.remote_log_metadata_manager import InMemoryRemoteLogMetadataManager
from kafkatier.log.remote.remote_log_segment_metadata import RemoteLogSegmentState, TopicIdPartition
from kafkatier.log.remote.remote_storage_manager import IndexType, LocalTieredStorage, RemoteStorageError
from kafkatier.protocol.errors import OffsetOutOfRangeError
from fakes import NOW, TOPIC_ID, FakePartition, ManualClock, record_batch, tiered_log

S = RemoteLogSegmentState
TIP = TopicIdPartition(TOPIC_ID, "orders", 0)
blob = record_batch


def offsets(data: bytes) -> list[int]:
    out, recs = [], MemoryRecords(data)
    while recs.has_next():
        batch = recs.next_batch()
        assert batch.validate_crc()
        out += [r.offset for r in batch]
    return out


def make_log(tmp_path, name="orders-0", clock=None, **props) -> Log:
    return tiered_log(tmp_path, name, clock or ManualClock(NOW), **props)


def fill(lg: Log, batches: int, per_batch: int = 2, epoch: int = 0, ts: int = NOW) -> None:
    for i in range(batches):
        lg.append_as_leader(blob(per_batch, ts=ts), epoch)
    lg.update_high_watermark(lg.log_end_offset)


def offloaded(tmp_path, stores, batches: int):
    """A leader's log of ``batches`` batches (of 2 records) after one pass of its copy task.
    Returns ``(log, partition, remote log manager)``."""
    lg = make_log(tmp_path)
    fill(lg, batches)
    p = FakePartition(lg)
    rlm = make_rlm(stores)
    CopyTask(rlm, p, TIP).run()
    return lg, p, rlm


@pytest.fixture
def stores(tmp_path):
    return InMemoryRemoteLogMetadataManager(), LocalTieredStorage(str(tmp_path / "remote"), broker_id=1)


def make_rlm(stores, broker_id=1, clock=None, **kw) -> RemoteLogManager:
    rlmm, rsm = stores
    cfg = RemoteLogManagerConfig.from_props({"remote.log.storage.system.enable": "true",
                                             "remote.log.manager.thread.pool.size": "1"})
    return RemoteLogManager(cfg, broker_id, rsm, rlmm, clock=clock or ManualClock(NOW), **kw)


def finished(rlmm) -> list[tuple[int, int]]:
    return [(m.start_offset, m.end_offset) for m in rlmm.list_remote_log_segments(TIP)
            if m.state == S.COPY_SEGMENT_FINISHED]


def records_from(lg: Log, start: int) -> bytes:
    """Every batch from ``start`` to the end, concatenated (what a follower may get in one fetch)."""
    out, offset = b"", start
    while offset < lg.log_end_offset:
        data = lg.read(offset, 1 << 20).records
        out += data
        offset = offsets(data)[-1] + 1
    return out


def bases(lg: Log) -> list[int]:
    return [s.base_offset for s in lg.log_segments()]


# --------------------------------------------------------------------------------------------------- copy

def test_copies_rolled_segments_up_to_the_high_watermark_never_the_active_one(tmp_path, stores):
    lg = make_log(tmp_path)
    fill(lg, 5)                                   # 2 batches of 2 records per segment
    assert bases(lg) == [0, 4, 8]
    lg.update_high_watermark(5)
    p = FakePartition(lg)
    rlm = make_rlm(stores)
    task = CopyTask(rlm, p, TIP)
    task.run()
    assert finished(stores[0]) == [(0, 3)]      # [4, 8) is not below the high watermark yet
    lg.update_high_watermark(10)
    task.run()
    assert finished(stores[0]) == [(0, 3), (4, 7)]  # [8, 10) is the active segment
    assert lg.highest_offset_in_remote_storage == 7
    md = stores[0].list_remote_log_segments(TIP)[0]
    assert md.tiered_epoch == 0 and md.leader_epochs == {0: 0} and md.broker_id == 1
    assert md.segment_size_in_bytes == os.path.getsize(stores[1].path_of(md, ".log"))
    assert stores[1].fetch_index(md, IndexType.LEADER_EPOCH) == b"0\n1\n0 0\n"


def test_local_retention_deletes_only_uploaded_segments_and_reads_fall_back_to_remote(tmp_path, stores):
    lg = make_log(tmp_path)
    fill(lg, 6)
    p = FakePartition(lg)
    rlm = make_rlm(stores)
    lg.delete_old_segments()
    assert bases(lg) == [0, 4, 8]                # nothing uploaded yet: nothing deleted
    CopyTask(rlm, p, TIP).run()
    lg.delete_old_segments()
    assert bases(lg) == [8] and lg.local_log_start_offset == 8 and lg.log_start_offset == 0
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(5, 1 << 20)
    assert offsets(rlm.read(p, 0, 1 << 20, lg.high_watermark)) == [0, 1, 2, 3]
    assert offsets(rlm.read(p, 5, 1 << 20, lg.high_watermark)) == [4, 5, 6, 7]
    first_batch_only = rlm.read(p, 5, 10, lg.high_watermark)  # KIP-74: one whole batch even if too big
    assert offsets(first_batch_only) == [4, 5]
    assert offsets(rlm.read(p, 7, 1 << 20, lg.high_watermark)) == [6, 7]
    with pytest.raises(OffsetOutOfRangeError, match="which does not exist in remote tier"):
        rlm.read(p, 8, 1 << 20, lg.high_watermark)


def test_list_offsets_by_timestamp_searches_remote_segments(tmp_path, stores):
    lg = make_log(tmp_path)
    for i in range(6):
        lg.append_as_leader(blob(2, ts=NOW + 100 * i), 0)
    lg.update_high_watermark(lg.log_end_offset)
    p = FakePartition(lg)
    rlm = make_rlm(stores)
    CopyTask(rlm, p, TIP).run()
    lg.delete_old_segments()
    found = rlm.find_offset_by_timestamp(p, NOW + 250)
    assert (found.offset, found.timestamp) == (6, NOW + 300)
    assert rlm.find_offset_by_timestamp(p, NOW + 10_000) is None


# ---------------------------------------------------------------------------------------------- expiration

def test_retention_bytes_deletes_oldest_remote_segments_and_moves_the_log_start_offset(tmp_path, stores):
    lg = make_log(tmp_path)
    fill(lg, 8)                                   # segments [0,4) [4,8) [8,12) [12,16)
    p = FakePartition(lg)
    rlm = make_rlm(stores)
    CopyTask(rlm, p, TIP).run()
    seg_size = stores[0].list_remote_log_segments(TIP)[0].segment_size_in_bytes
    lg.update_config(lg.config.with_overrides({"retention.bytes": str(2 * seg_size)}))
    lg.delete_old_segments()
    assert rlm.expire(p, TIP) == 2
    assert finished(stores[0]) == [(8, 11)]
    assert lg.log_start_offset == 8
    assert len(stores[1].segment_stems(TIP)) == 1


def test_retention_ms_deletes_expired_remote_segments(tmp_path, stores):
    clock = ManualClock(NOW + 3_600_000)
    lg = make_log(tmp_path, clock=clock, retention_ms=600_000)
    fill(lg, 4, ts=NOW)                           # an hour old
    fill(lg, 4, ts=clock.now)                     # fresh
    p = FakePartition(lg)
    rlm = make_rlm(stores, clock=clock)
    CopyTask(rlm, p, TIP).run()
    assert finished(stores[0]) == [(0, 3), (4, 7), (8, 11)]
    assert rlm.expire(p, TIP) == 2
    assert finished(stores[0]) == [(8, 11)] and lg.log_start_offset == 8


def test_segments_below_the_log_start_offset_are_deleted(tmp_path, stores):
    lg, p, rlm = offloaded(tmp_path, stores, 6)
    lg.maybe_increment_log_start_offset(5)        # DeleteRecords
    assert rlm.expire(p, TIP) == 1
    assert finished(stores[0]) == [(4, 7)]


# ------------------------------------------------------------------------------------- failures and fencing

class FailingStorage(LocalTieredStorage):
    fail = True

    def copy_log_segment_data(self, metadata, data):
        if self.fail:
            data = attrs.evolve(data, time_index=data.time_index + ".missing")
        return super().copy_log_segment_data(metadata, data)


def test_failed_copy_removes_its_data_and_the_dangling_metadata_is_cleaned(tmp_path):
    rlmm, rsm = InMemoryRemoteLogMetadataManager(), FailingStorage(str(tmp_path / "remote"), broker_id=1)
    lg = make_log(tmp_path)
    fill(lg, 4)
    p = FakePartition(lg)
    rlm = make_rlm((rlmm, rsm))
    task = CopyTask(rlm, p, TIP)
    with pytest.raises(RemoteStorageError):
        task.run()
    assert [m.state for m in rlmm.list_remote_log_segments(TIP)] == [S.COPY_SEGMENT_STARTED]
    assert rsm.segment_stems(TIP) == [] and task.copied_offset == -1
    rsm.fail = False
    task.run()
    assert rlm.expire(p, TIP) == 1                # the dangling one
    assert [(m.start_offset, m.state) for m in rlmm.list_remote_log_segments(TIP)] == [
        (0, S.COPY_SEGMENT_FINISHED)]
    assert len(rsm.segment_stems(TIP)) == 1


def test_fenced_copy_never_finishes_and_removes_its_data(tmp_path, stores):
    lg = make_log(tmp_path)
    fill(lg, 4)
    p = FakePartition(lg)

    def fence(part, leader_epoch, tiered_epoch):
        if tiered_epoch is not None:  # the COPY_SEGMENT_FINISHED write
            raise RemoteLogTaskFencedError("tiered epoch moved from 0 to 1")
        return []
    rlm = make_rlm(stores, fence=fence)
    with pytest.raises(RemoteLogTaskFencedError):
        CopyTask(rlm, p, TIP).run()
    assert [m.state for m in stores[0].list_remote_log_segments(TIP)] == [S.COPY_SEGMENT_STARTED]
    assert stores[1].segment_stems(TIP) == []


def test_failover_resumes_from_the_highest_copied_offset_without_duplicates(tmp_path, stores):
    leader = make_log(tmp_path, "b1/orders-0")
    fill(leader, 10)
    follower = make_log(tmp_path, "b2/orders-0")
    follower.append_as_follower(records_from(leader, 0))  # one fetch, many segments' worth
    follower.update_high_watermark(follower.log_end_offset)
    assert bases(follower) == bases(leader)       # followers roll where the leader rolled
    old = FakePartition(leader)
    leader.update_high_watermark(9)
    CopyTask(make_rlm(stores), old, TIP).run()
    assert finished(stores[0]) == [(0, 3), (4, 7)]
    new = FakePartition(follower, broker_id=2, leader_id=2, leader_epoch=1)
    CopyTask(make_rlm(stores, broker_id=2), new, TIP).run()
    assert finished(stores[0]) == [(0, 3), (4, 7), (8, 11), (12, 15)]
    assert follower.highest_offset_in_remote_storage == 15


def test_new_leader_takes_the_log_start_offset_from_the_remote_tier(tmp_path, stores):
    lg, p, rlm = offloaded(tmp_path, stores, 6)
    lg.maybe_increment_log_start_offset(4)
    rlm.expire(p, TIP)
    fresh = make_log(tmp_path, "b2/orders-0")     # a replica whose log start offset was never learned
    fresh.append_as_follower(records_from(lg, 4))
    fresh.truncate_fully_and_start_at(8, log_start_offset=0)
    fresh.append_as_follower(records_from(lg, 8))
    fresh.update_high_watermark(fresh.log_end_offset)
    q = FakePartition(fresh, broker_id=2, leader_id=2, leader_epoch=1)
    CopyTask(make_rlm(stores, broker_id=2), q, TIP).run()
    assert fresh.log_start_offset == 4


# ----------------------------------------------------------------------------------------------- followers

def test_follower_task_tracks_the_highest_remote_offset(tmp_path, stores):
    lg = make_log(tmp_path)
    fill(lg, 6)
    CopyTask(make_rlm(stores), FakePartition(lg), TIP).run()
    f = make_log(tmp_path, "b2/orders-0")
    f.append_as_follower(records_from(lg, 0))
    q = FakePartition(f, broker_id=2, leader_id=1)
    FollowerTask(make_rlm(stores, broker_id=2), q, TIP).run()
    assert f.highest_offset_in_remote_storage == 7
    f.update_high_watermark(f.log_end_offset)
    f.delete_old_segments()
    assert f.local_log_start_offset == 8


def test_follower_below_the_leaders_local_log_start_is_rebuilt(tmp_path, stores):
    lg = make_log(tmp_path)
    fill(lg, 3, epoch=0)
    fill(lg, 3, epoch=2)
    CopyTask(make_rlm(stores), FakePartition(lg), TIP).run()
    lg.delete_old_segments()
    assert lg.local_log_start_offset == 8
    f = make_log(tmp_path, "b2/orders-0")
    q = FakePartition(f, broker_id=2, leader_id=1, leader_epoch=2)
    restarted = []
    rlm = make_rlm(stores, broker_id=2, leader_offsets=lambda part: (lg.local_log_start_offset, lg.log_start_offset),
                   restart_fetcher=restarted.append)
    FollowerTask(rlm, q, TIP).run()
    assert (f.log_start_offset, f.local_log_start_offset, f.log_end_offset) == (0, 8, 8)
    assert [(e.epoch, e.start_offset) for e in f.leader_epoch_cache.epoch_entries()] == [(0, 0), (2, 6)]
    assert restarted == [q]
    f.append_as_follower(records_from(lg, 8))
    assert f.log_end_offset == lg.log_end_offset


# ---------------------------------------------------------------------------------------- scheduling, stop

def test_leadership_changes_schedule_the_right_tasks(tmp_path, stores):
    lg = make_log(tmp_path)
    p = FakePartition(lg)
    rlm = make_rlm(stores)
    with pytest.raises(RemoteStorageError, match="RemoteLogManager is not configured"):
        rlm.on_leadership_change([p], [])
    rlm.startup()
    try:
        rlm.on_leadership_change([p], [])
        tasks = rlm.tasks("orders", 0)
        assert sorted(tasks) == ["copy", "expiration"]
        assert isinstance(tasks["expiration"], ExpirationTask)
        p.leader_id = 2
        rlm.on_leadership_change([], [p])
        assert sorted(rlm.tasks("orders", 0)) == ["follower"] and tasks["copy"].cancelled
        lg.update_config(lg.config.with_overrides({"remote.log.copy.disable": "true"}))
        p.leader_id, p.leader_epoch = 1, 3
        rlm.on_leadership_change([p], [])
        assert sorted(rlm.tasks("orders", 0)) == ["expiration"]
        untiered = FakePartition(make_log(tmp_path, "b3/plain-0", remote_storage_enable="false"), topic="plain")
        untiered.log.remote_log_enabled = False
        rlm.on_leadership_change([untiered], [])
        assert rlm.tasks("plain", 0) == {}
    finally:
        rlm.shutdown()


def test_stop_with_delete_removes_all_remote_data(tmp_path, stores):
    lg, p, rlm = offloaded(tmp_path, stores, 6)
    rlm.stop_partitions([StopPartition("orders", 0, delete_local_log=True, delete_remote_log=True)])
    assert stores[0].list_remote_log_segments(TIP) == []
    assert not os.path.exists(stores[1].partition_dir(TIP))


# ------------------------------------------------------------------------------------------------- pools

def test_scheduler_runs_with_fixed_delay_survives_errors_and_cancels():
    import threading

    from kafkatier.common.scheduler import KafkaScheduler
    from kafkatier.waiting import wait_for
    pool = KafkaScheduler(2, "test-pool-")
    pool.startup()
    try:
        running, overlaps, runs = [0], [], []
        lock = threading.Lock()

        def flaky():
            with lock:
                running[0] += 1
                overlaps.append(running[0] > 1)
            runs.append(1)
            with lock:
                running[0] -= 1
            if len(runs) % 2:
                raise RuntimeError("boom")  # logged; the task stays scheduled
        task = pool.schedule("flaky", flaky, 0, 10)
        wait_for(lambda: len(runs) >= 5, 10, message="five runs")
        task.cancel()
        assert not any(overlaps)
        n = len(runs)
        wait_for(lambda: pool.queued == 0, 10, message="the cancelled task to leave the queue")
        assert len(runs) <= n + 1
    finally:
        pool.shutdown()
