"""KIP-113 moves at the log level: future logs, the move threads, the swap, truncation, throttle, and start-up
recovery (docs/kip-113-jbod.md#moving-a-replica, #start-up-recovery).  Real logs on disk; the partition is a real
``Partition`` without ZooKeeper."""
from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pytest
from kafka.record.memory_records import MemoryRecordsBuilder

from kafkatier.log.errors import LogDirectoryError
from kafkatier.log.log_manager import LogManager
from kafkatier.server.partition import Partition
from kafkatier.server.replica_alter_log_dirs_thread import ReplicaAlterLogDirsManager
from kafkatier.server.replication_quota_manager import LONG_MAX, ReplicationQuotaManager
from kafkatier.waiting import wait_for
from kafkatier.protocol.control_messages import LeaderAndIsrPartitionState

CFG = {"segment.bytes": "4096", "file.delete.delay.ms": "0"}


def blob(n: int = 5, value_size: int = 100, producer_id: int = -1, seq: int = -1) -> bytes:
    now = int(time.time() * 1000)
    b = MemoryRecordsBuilder(2, 0, 1 << 22)
    if producer_id >= 0:
        b.set_producer_state(producer_id, 0, seq, False)
    for i in range(n):
        b.append(now + i, None, b"x" * value_size)
    b.close()
    return bytes(b.buffer())


@pytest.fixture
def dirs(tmp_path):
    return [str(tmp_path / "d1"), str(tmp_path / "d2")]


@pytest.fixture
def jbod(dirs):
    """Builds the log managers (started unless ``start=False``) and move managers a test uses, and shuts every one
    down afterwards, newest first, also when the test fails; ``crash(m)`` leaves a log manager's dirs as a
    kill -9 would, and it is not shut down then."""
    made = []

    def log_manager(start: bool = True, **kw) -> LogManager:
        m = LogManager(dirs, **kw)
        made.append(m)
        if start:
            m.startup()
        return m

    def crash(m: LogManager) -> None:
        """No clean shutdown marker, no final checkpoints."""
        made.remove(m)
        for lg in m.all_logs() + m.all_future_logs():
            lg.flush()
            lg.close()
        m.scheduler.shutdown()
        m._release_locks()

    def mover(m: LogManager, quota: ReplicationQuotaManager | None = None, threads: int = 1,
              **kw) -> ReplicaAlterLogDirsManager:
        mgr = ReplicaAlterLogDirsManager(m, quota or ReplicationQuotaManager(), threads, **kw)
        made.append(mgr)
        return mgr
    try:
        yield SimpleNamespace(log_manager=log_manager, mover=mover, crash=crash)
    finally:
        for x in reversed(made):
            x.shutdown()


def leader_partition(m: LogManager, topic="t", p=0, epoch=0, batches: int = 0) -> Partition:
    """A new partition led by this broker, with ``batches`` batches of :func:`blob` appended."""
    lg = m.get_or_create_log(topic, p, CFG, is_new=True)
    part = Partition(topic, p, 1, lg, lambda *a: 1, lambda: 1)
    part.make_leader(LeaderAndIsrPartitionState.from_json(7, {"leader": 1, "leader_epoch": epoch, "isr": [1], "replicas": [1]}), 1)
    for _ in range(batches):
        part.append_records_to_leader(blob(), -1)
    return part


def other_dir(dirs, lg) -> str:
    return [d for d in map(os.path.abspath, dirs) if d != lg.parent_dir][0]


def segment_bytes(log_dir: str) -> bytes:
    return b"".join(open(os.path.join(log_dir, f), "rb").read()
                    for f in sorted(os.listdir(log_dir)) if f.endswith(".log"))


def copy_all(src, dst) -> None:
    while dst.log_end_offset < src.log_end_offset:
        dst.append_as_follower(src.read(dst.log_end_offset, 1 << 20).records)


def start_move(m: LogManager, mgr: ReplicaAlterLogDirsManager, part: Partition, dest: str) -> None:
    m.create_future_log(part.topic, part.partition, dest)
    assert mgr.add_partition(part)


def start_moving_to_the_other_dir(m: LogManager, mgr: ReplicaAlterLogDirsManager, part: Partition, dirs) -> None:
    """Start ``mgr``'s threads, then move ``part`` to the dir it is not in."""
    mgr.startup()
    start_move(m, mgr, part, other_dir(dirs, part.log))


def test_move_copies_bytes_swaps_in_seed_order_and_deletes_source(dirs, jbod):
    m = jbod.log_manager()
    part = leader_partition(m, batches=40)
    src = part.log.parent_dir
    dest = other_dir(dirs, part.log)
    before = segment_bytes(part.log.dir)
    mgr = jbod.mover(m)
    start_move(m, mgr, part, dest)
    assert os.path.isdir(os.path.join(dest, "t-0.move"))
    mgr.startup()
    wait_for(lambda: part.future_log is None and part.log.parent_dir == dest, 10, message="the swap")
    assert segment_bytes(part.log.dir) == before
    assert os.path.isdir(os.path.join(dest, "t-0")) and not os.path.exists(os.path.join(dest, "t-0.move"))
    assert not os.path.exists(os.path.join(src, "t-0")) and not os.path.exists(os.path.join(src, "t-0.delete"))
    assert part.log.high_watermark == part.log.log_end_offset == 200
    info = part.append_records_to_leader(blob(), -1)  # appends go to the new log
    assert info.first_offset == 200 and m.get_log("t", 0) is part.log


def test_swap_carries_epoch_cache_without_records_and_producer_state(dirs, jbod):
    """KAFKA-15608: a leader epoch with no record yet must reach the new log; idempotent retries are still
    recognised after the swap."""
    m = jbod.log_manager()
    part = leader_partition(m, epoch=3)
    first = blob(producer_id=7, seq=0)
    part.append_records_to_leader(first, -1)
    part.make_leader(LeaderAndIsrPartitionState.from_json(7, {"leader": 1, "leader_epoch": 4, "isr": [1], "replicas": [1]}), 1)  # epoch 4, no record
    mgr = jbod.mover(m, threads=2)
    start_moving_to_the_other_dir(m, mgr, part, dirs)
    wait_for(lambda: part.future_log is None, 10, message="the swap")
    assert [(e.epoch, e.start_offset) for e in part.log.leader_epoch_cache.epoch_entries()] == [(3, 0), (4, 5)]
    dup = part.append_records_to_leader(first, -1)
    assert (dup.first_offset, dup.last_offset) == (0, 4)


def test_throttle_holds_the_move_and_raising_it_completes(dirs, jbod):
    m = jbod.log_manager()
    part = leader_partition(m, batches=20)
    quota = ReplicationQuotaManager(1)
    mgr = jbod.mover(m, quota, 1, fetch_max_bytes=1024)
    start_moving_to_the_other_dir(m, mgr, part, dirs)
    wait_for(lambda: mgr.describe() and mgr.describe()[0].bytes_copied > 0, 10, message="the first round")
    time.sleep(0.5)  # a throttled move must not finish: observe it over a while
    status = mgr.describe()[0]
    assert part.future_log is not None and status.offset_lag > 0
    quota.set_rate(3_000_000)
    wait_for(lambda: part.future_log is None, 10, message="the swap after the raise")


def test_cancel_deletes_future_log_and_keeps_partition(dirs, jbod):
    m = jbod.log_manager()
    part = leader_partition(m, batches=20)
    mgr = jbod.mover(m, ReplicationQuotaManager(1), 1, fetch_max_bytes=512)
    mgr.startup()
    dest = other_dir(dirs, part.log)
    start_move(m, mgr, part, dest)
    mgr.remove_partition(part)
    assert part.future_log is None and m.get_future_log("t", 0) is None
    assert not os.path.exists(os.path.join(dest, "t-0.move"))
    assert part.log.log_end_offset == 100 and part.log.parent_dir != dest


def test_truncation_of_current_log_truncates_future_log(dirs, jbod):
    m = jbod.log_manager()
    part = leader_partition(m, batches=10)
    m.create_future_log("t", 0, other_dir(dirs, part.log))
    part.attach_future_log(m.get_future_log("t", 0))
    copy_all(part.log, part.future_log)
    assert part.future_log.log_end_offset == 50
    part.truncate_to(20)
    assert part.future_log.log_end_offset == 20


def test_delete_records_during_move_is_carried(dirs, jbod):
    """Scenario 43 of docs/acceptance.md at the log level, with a log start offset inside a batch (KAFKA-6975)."""
    m = jbod.log_manager()
    part = leader_partition(m, batches=20)
    part.log.maybe_increment_log_start_offset(3)
    mgr = jbod.mover(m)
    start_moving_to_the_other_dir(m, mgr, part, dirs)
    wait_for(lambda: part.future_log is None, 10, message="the swap")
    assert (part.log.log_start_offset, part.log.log_end_offset) == (3, 100)


# --- start-up recovery (docs/kip-113-jbod.md#start-up-recovery) --------------------------------------------

def test_current_and_move_resume(dirs, jbod):
    m = jbod.log_manager(start=False)
    part = leader_partition(m, batches=10)
    dest = other_dir(dirs, part.log)
    m.create_future_log("t", 0, dest)
    jbod.crash(m)
    m2 = jbod.log_manager(start=False)
    assert m2.get_future_log("t", 0).parent_dir == dest and m2.get_log("t", 0).parent_dir != dest


def test_delete_plus_move_is_completed_when_all_dirs_are_good(dirs, jbod):
    m = jbod.log_manager(start=False)
    part = leader_partition(m, batches=10)
    src, dest = part.log.parent_dir, other_dir(dirs, part.log)
    m.create_future_log("t", 0, dest)
    fut = m.get_future_log("t", 0)
    copy_all(part.log, fut)
    jbod.crash(m)
    os.rename(os.path.join(src, "t-0"), os.path.join(src, "t-0.delete"))  # crash between the renames
    m2 = jbod.log_manager(start=False, topic_configs=lambda t: CFG)
    lg = m2.get_log("t", 0)
    assert lg.parent_dir == dest and lg.log_end_offset == 50 and os.path.isdir(os.path.join(dest, "t-0"))
    assert os.path.isdir(os.path.join(src, "t-0.delete"))  # removed asynchronously, after start-up
    m2.startup()
    wait_for(lambda: not os.path.exists(os.path.join(src, "t-0.delete")), 5, message=".delete removal")


def test_move_left_untouched_when_a_dir_is_bad(dirs, jbod, tmp_path):
    m = jbod.log_manager(start=False)
    part = leader_partition(m)
    part.append_records_to_leader(blob(), -1)
    src, dest = part.log.parent_dir, other_dir(dirs, part.log)
    m.create_future_log("t", 0, dest)
    jbod.crash(m)
    os.rename(os.path.join(src, "t-0"), os.path.join(src, "t-0.delete"))
    os.rename(src, str(tmp_path / "moved-away"))
    with open(src, "w") as f:  # the source dir is now a file: offline
        f.write("broken")
    m2 = jbod.log_manager(start=False)
    assert m2.offline_dirs == {src}
    assert m2.get_log("t", 0) is None and os.path.isdir(os.path.join(dest, "t-0.move"))


def test_two_future_dirs_refuse_to_start(dirs):
    for d in dirs:
        os.makedirs(os.path.join(d, "t-0.move"))
    with pytest.raises(LogDirectoryError, match="Duplicate log directories found: .*t-0.move, .*t-0.move"):
        LogManager(dirs)


def test_kafka_future_name_is_loaded_like_move(dirs, jbod):
    m = jbod.log_manager(start=False)
    part = leader_partition(m)
    part.append_records_to_leader(blob(), -1)
    dest = other_dir(dirs, part.log)
    jbod.crash(m)
    os.makedirs(os.path.join(dest, "t-0.0123456789abcdef0123456789abcdef-future"))
    m2 = jbod.log_manager(start=False)
    assert m2.get_future_log("t", 0).parent_dir == dest


# --- the Kafka issues a move must not repeat (docs/kip-113-jbod.md#kafka-issues-a-move-must-not-repeat) ---

def test_retention_still_runs_after_a_cancelled_and_after_a_completed_move(dirs, jbod):
    """KAFKA-16709 / KAFKA-15082 / KAFKA-14824: there is no log cleaner to leave paused, and retention (the
    disk-growth symptom) keeps working on the partition after a cancel and after a swap."""
    m = jbod.log_manager(topic_configs=lambda t: {**CFG, "retention.bytes": "8000"})
    part = leader_partition(m, batches=40)
    part.log.update_config({**CFG, "retention.bytes": "8000"})
    mgr = jbod.mover(m, ReplicationQuotaManager(1), 1, fetch_max_bytes=512)
    start_moving_to_the_other_dir(m, mgr, part, dirs)
    mgr.remove_partition(part)
    assert m.cleanup_logs() > 0 and part.log.size <= 8000 + 4096
    for _ in range(40):
        part.append_records_to_leader(blob(), -1)
    mgr.quota.set_rate(LONG_MAX)
    start_move(m, mgr, part, other_dir(dirs, part.log))
    wait_for(lambda: part.future_log is None, 10, message="the swap")
    assert m.get_log("t", 0) is part.log and m.cleanup_logs() > 0 and part.log.size <= 8000 + 4096


def test_segments_deleted_during_a_move_leave_no_orphans(dirs, jbod):
    """KAFKA-16424: segments marked deleted in the source during a move must not survive the renames."""
    m = jbod.log_manager(topic_configs=lambda t: {**CFG, "file.delete.delay.ms": "300"})
    part = leader_partition(m)
    part.log.update_config({**CFG, "file.delete.delay.ms": "300"})
    for _ in range(40):
        part.append_records_to_leader(blob(), -1)
    quota = ReplicationQuotaManager(1)
    mgr = jbod.mover(m, quota, 1, fetch_max_bytes=512)
    start_moving_to_the_other_dir(m, mgr, part, dirs)
    part.log.maybe_increment_log_start_offset(120)
    assert part.log.delete_old_segments() > 0  # renamed .deleted, removal scheduled 300 ms later
    quota.set_rate(LONG_MAX)
    wait_for(lambda: part.future_log is None, 10, message="the swap")
    assert part.log.log_start_offset == 120

    def leftovers():
        return [os.path.join(r, f) for d in dirs for r, _, fs in os.walk(d) for f in fs if f.endswith(".deleted")]
    wait_for(lambda: not leftovers(), 5, message="no .deleted segment files anywhere")
    wait_for(lambda: not os.path.exists(os.path.join(os.path.abspath(dirs[0]), "t-0.delete"))
             and not os.path.exists(os.path.join(os.path.abspath(dirs[1]), "t-0.delete")), 5, message=".delete gone")


def test_recreated_future_log_and_offset_mismatch_restart_from_the_future_high_watermark(dirs, jbod):
    """KAFKA-9087: a future log recreated mid-move, or one holding data the current log does not have at that
    offset, does not kill the move: it restarts from the future log's own high watermark."""
    m = jbod.log_manager()
    part = leader_partition(m, batches=20)
    quota = ReplicationQuotaManager(1)
    mgr = jbod.mover(m, quota, 1, fetch_max_bytes=512)
    mgr.startup()
    dest = other_dir(dirs, part.log)
    start_move(m, mgr, part, dest)
    mgr.remove_partition(part)
    start_move(m, mgr, part, dest)  # recreated while the thread may be mid-round
    before = segment_bytes(part.log.dir)
    with part.future_lock:  # the future log ends inside one of the current log's batches
        fut = part.future_log
        fut.append_as_follower(part.log.read(0, 600).records)  # offsets 0-4
        fut.append_as_leader(blob(n=2), 0)
        assert fut.log_end_offset == 7
    quota.set_rate(LONG_MAX)
    wait_for(lambda: part.future_log is None, 10, message="the swap")
    assert segment_bytes(part.log.dir) == before
    assert part.log.parent_dir == dest and part.log.log_end_offset == 100


def test_leader_epoch_bump_mid_move_keeps_the_move_running(dirs, jbod):
    """KAFKA-9654: the move thread survives leadership changes (it never looks at leader epochs)."""
    m = jbod.log_manager()
    part = leader_partition(m, epoch=1, batches=20)
    quota = ReplicationQuotaManager(1)
    mgr = jbod.mover(m, quota, 1, fetch_max_bytes=512)
    start_moving_to_the_other_dir(m, mgr, part, dirs)
    part.make_follower(LeaderAndIsrPartitionState.from_json(7, {"leader": 2, "leader_epoch": 2, "isr": [1, 2], "replicas": [1, 2]}), 1)
    part.truncate_to(90)  # the new leader has less: the future log follows
    assert part.future_log.log_end_offset <= 90
    part.make_leader(LeaderAndIsrPartitionState.from_json(7, {"leader": 1, "leader_epoch": 3, "isr": [1], "replicas": [1, 2]}), 1)
    part.append_records_to_leader(blob(), -1)
    quota.set_rate(LONG_MAX)
    wait_for(lambda: part.future_log is None, 10, message="the swap after two epoch changes")
    assert part.log.log_end_offset == 95
    assert [e.epoch for e in part.log.leader_epoch_cache.epoch_entries()] == [1, 3]


def test_tiered_log_keeps_its_highest_remote_offset_after_the_swap(dirs, jbod):
    """KAFKA-16711: after a move the new log knows how far the remote tier goes (local cleanup needs it)."""
    m = jbod.log_manager()
    part = leader_partition(m, batches=20)
    part.log.update_highest_offset_in_remote_storage(59)
    mgr = jbod.mover(m)
    start_moving_to_the_other_dir(m, mgr, part, dirs)
    wait_for(lambda: part.future_log is None, 10, message="the swap")
    assert part.log.highest_offset_in_remote_storage == 59


def test_flush_after_the_renames_does_not_fail(dirs, jbod):
    """The flush/rename race (user report: NoSuchFileException ...-future took the dir offline): files are
    flushed through open descriptors, so flushing either log after the renames works and reports nothing."""
    m = jbod.log_manager()
    part = leader_partition(m, batches=20)
    old = part.log
    mgr = jbod.mover(m)
    start_moving_to_the_other_dir(m, mgr, part, dirs)
    wait_for(lambda: part.future_log is None, 10, message="the swap")
    part.append_records_to_leader(blob(), -1)
    part.log.flush()
    if not old.closed:
        old.flush()
    m.flush_dirty_logs()
    m.checkpoint_recovery_points()
    assert m.offline_dirs == set() and m.log_dir_failure_channel.take_next_offline_log_dir(0) is None


def test_move_back_before_the_first_deletion_ran(dirs, jbod):
    """A->B->A->B within file.delete.delay.ms: the third move's source meets the first move's <tp>.delete; the
    older one is set aside (renamed, removed in the background), the new one takes its name, and nothing is
    left once the delays pass."""
    m = jbod.log_manager(topic_configs=lambda t: {**CFG, "file.delete.delay.ms": "2000"})
    part = leader_partition(m)
    part.log.update_config({**CFG, "file.delete.delay.ms": "2000"})
    for _ in range(20):
        part.append_records_to_leader(blob(), -1)
    before = segment_bytes(part.log.dir)
    a = part.log.parent_dir
    b = other_dir(dirs, part.log)
    mgr = jbod.mover(m)
    mgr.startup()
    for dest in (b, a, b):
        start_move(m, mgr, part, dest)
        wait_for(lambda: part.future_log is None and part.log.parent_dir == dest, 10, message=f"moved to {dest}")
    assert os.path.isdir(os.path.join(a, "t-0.delete")) and segment_bytes(part.log.dir) == before
    wait_for(lambda: sorted(n for d in (a, b) for n in os.listdir(d) if n.startswith("t-0")) == ["t-0"], 10,
             message="only t-0 left")
