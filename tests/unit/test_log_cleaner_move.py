"""A KIP-113 move of a compacted log while its broker's log cleaner runs: the moved log keeps the latest value of
every key at its offset, the cleaner goes on cleaning it in its new dir, and the cleaner-offset-checkpoint entry
follows it (docs/log-compaction.md, docs/kip-113-jbod.md)."""
from __future__ import annotations

from kafkatier.log.log_cleaner import CleanerConfig
from kafkatier.log.log_cleaner_manager import CLEANER_OFFSET_CHECKPOINT
from kafkatier.log.log_manager import LogManager
from kafkatier.server.replica_alter_log_dirs_thread import ReplicaAlterLogDirsManager
from kafkatier.server.replication_quota_manager import ReplicationQuotaManager
from kafkatier.server.partition import Partition
from kafkatier.waiting import wait_for
from kafkatier.protocol.control_messages import LeaderAndIsrPartitionState

from tests.unit.test_jbod_move import other_dir, start_move
from tests.unit.test_log_cleaner import blob, records

CFG = {"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01",
       "file.delete.delay.ms": "0", "delete.retention.ms": "86400000"}
KEYS = 7


def write(part: Partition, start: int, n: int) -> dict[bytes, tuple[int, bytes]]:
    latest = {}
    for i in range(start, start + n):
        k, v = f"k{i % KEYS}".encode(), f"v{i}".encode() * 10
        info = part.append_records_to_leader(blob([(k, v)]), -1)
        latest[k] = (info.first_offset, v)
    return latest


def latest_of(lg) -> dict[bytes, tuple[int, bytes]]:
    out = {}
    offsets = []
    for o, k, v, _ in records(lg):
        out[k] = (o, v)
        offsets.append(o)
    assert offsets == sorted(set(offsets))   # strictly increasing: nothing reordered or duplicated
    return out


def checkpoint(d: str) -> str:
    try:
        with open(f"{d}/{CLEANER_OFFSET_CHECKPOINT}") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def test_a_compacted_log_moves_between_dirs_while_the_cleaner_runs(tmp_path):
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    m = LogManager(dirs, cleaner_config=CleanerConfig(backoff_ms=10, duty_cycle=1.0))
    m.startup()
    mgr = None
    try:
        lg = m.get_or_create_log("t", 0, CFG, is_new=True)
        part = Partition("t", 0, 1, lg, lambda *a: 1, lambda: 1)
        part.make_leader(LeaderAndIsrPartitionState.from_json(7, {"leader": 1, "leader_epoch": 0, "isr": [1], "replicas": [1]}), 1)
        expected = write(part, 0, 200)
        src = part.log.parent_dir
        wait_for(lambda: "t 0 " in checkpoint(src), 20, interval=0.05, message="a first cleaning")
        assert len(records(part.log)) < 200      # the cleaner removed superseded records before the move
        dest = other_dir(dirs, part.log)
        mgr = ReplicaAlterLogDirsManager(m, ReplicationQuotaManager(), 1)
        start_move(m, mgr, part, dest)
        mgr.startup()
        expected.update(write(part, 200, 100))   # writes (and cleanings) go on during the move
        wait_for(lambda: part.future_log is None and part.log.parent_dir == dest, 20, interval=0.05,
                 message="the swap")
        assert "t 0 " in checkpoint(dest) and "t 0 " not in checkpoint(src)   # moved at the swap
        expected.update(write(part, 300, 100))
        assert latest_of(part.log) == expected
        # The cleaner cleans the moved log in its new dir; the old dir's checkpoint forgets it.
        wait_for(lambda: "t 0 " in checkpoint(dest), 20, interval=0.05, message="a cleaning in the new dir")
        assert latest_of(part.log) == expected
        assert "t 0 " not in checkpoint(src)     # the entry moved with the log (Kafka's alterCheckpointDir)
    finally:
        if mgr is not None:
            mgr.shutdown()
        m.shutdown()


def test_a_failed_cleaning_keeps_the_cleaner_off_that_dir_only(tmp_path):
    from kafkatier.log.log_cleaner_manager import LogCleanerManager
    from tests.unit.test_log_cleaner import make_log
    old = make_log(tmp_path / "d1")
    moved = make_log(tmp_path / "d2")
    current = [old]
    mgr = LogCleanerManager([str(tmp_path / "d1"), str(tmp_path / "d2")], lambda: list(current), clock=lambda: 10**13)
    todo = mgr.grab_filthiest_compacted_log()
    mgr.mark_failed(todo.log)          # e.g. a corrupt segment in d1
    mgr.done_cleaning(todo.log, None)
    assert mgr.grab_filthiest_compacted_log() is None
    current[:] = [moved]               # the partition moved to d2 (KIP-113): cleaned again there
    todo = mgr.grab_filthiest_compacted_log()
    assert todo is not None and todo.log is moved
