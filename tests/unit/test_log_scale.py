"""Brokers at scale (issue 15): thousands of logs without a file descriptor each, lazily loaded indexes, logs
loaded on several threads, and new logs placed without recounting every log."""
from __future__ import annotations

import os

import pytest
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from kafkatier.log.log_config import LogConfig
from kafkatier.log.log_manager import LogManager

TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"


def _blob(n: int, value: str) -> bytes:
    b = MemoryRecordsBuilder(2, 0, 1 << 20)
    for i in range(n):
        b.append(1_000 + i, f"k{i}".encode(), f"{value}-{i}".encode())
    b.close()
    return bytes(b.buffer())


def _values(data: bytes) -> list[bytes]:
    out, recs = [], MemoryRecords(data)
    while recs.has_next():
        out += [r.value for r in recs.next_batch()]
    return out


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def manager(tmp_path):
    managers = []

    def make(dirs=1, **kw) -> LogManager:
        lm = LogManager([str(tmp_path / f"d{i}") for i in range(dirs)], **kw)
        managers.append(lm)
        return lm

    yield make
    for lm in managers:
        lm.shutdown()


def test_thousands_of_logs_hold_no_file_descriptors_and_keep_their_data(manager):
    lm = manager()
    before = _open_fds()
    logs = [lm.get_or_create_log("big", p, is_new=True, topic_id=TOPIC_ID) for p in range(1500)]
    assert _open_fds() - before < 20
    for p in range(0, 1500, 100):
        logs[p].append_as_leader(_blob(3, f"p{p}"), leader_epoch=0)
    assert lm.release_files() > 0
    assert _open_fds() - before < 20
    # Read back after the release: files and indexes reopen on use.
    for p in range(0, 1500, 100):
        assert _values(logs[p].read(0, 1 << 20).records) == [f"p{p}-{i}".encode() for i in range(3)]
        logs[p].append_as_leader(_blob(1, f"again{p}"), leader_epoch=0)
        assert logs[p].log_end_offset == 4


def test_a_restart_loads_every_log_on_several_threads_without_opening_them(manager, tmp_path):
    lm = manager(num_recovery_threads_per_data_dir=1)
    for p in range(300):
        lg = lm.get_or_create_log("t", p, is_new=True, topic_id=TOPIC_ID)
        lg.append_as_leader(_blob(2, f"p{p}"), leader_epoch=0)
    lm.shutdown()
    before = _open_fds()
    again = manager(num_recovery_threads_per_data_dir=3)
    assert _open_fds() - before < 20
    assert len(again.all_logs()) == 300
    for p in (0, 150, 299):
        lg = again.get_log("t", p)
        assert lg.log_end_offset == 2 and lg.topic_id == TOPIC_ID
        assert _values(lg.read(0, 1 << 20).records) == [f"p{p}-0".encode(), f"p{p}-1".encode()]


def test_an_unloaded_index_is_read_again_on_use(manager):
    lm = manager()
    lg = lm.get_or_create_log("t", 0, config=LogConfig.from_props({"segment.bytes": "1024",
                                                                     "index.interval.bytes": "1"}),
                              is_new=True, topic_id=TOPIC_ID)
    for i in range(20):
        lg.append_as_leader(_blob(2, f"b{i}"), leader_epoch=0)
    segments = lg._segments
    assert len(segments) >= 2
    old = segments[0]
    expected = old.offset_index.lookup(old.base_offset + 1)
    lg.release_files()
    assert not old.offset_index.is_loaded and not old.has_open_file
    assert old.offset_index.lookup(old.base_offset + 1) == expected
    assert _values(lg.read(0, 1 << 20).records)[:2] == [b"b0-0", b"b0-1"]


def test_new_logs_are_spread_over_the_dirs_as_logs_come_and_go(manager):
    lm = manager(dirs=2)
    for p in range(10):
        lm.get_or_create_log("t", p, is_new=True, topic_id=TOPIC_ID)
    per_dir = {d: len(logs) for d, logs in lm.logs_by_dir().items()}
    assert sorted(per_dir.values()) == [5, 5]
    first_dir = lm.get_log("t", 0).parent_dir
    for p in range(10):
        if lm.get_log("t", p).parent_dir == first_dir:
            lm.delete_log("t", p)
    for p in range(10, 14):
        lm.get_or_create_log("t", p, is_new=True, topic_id=TOPIC_ID)
    assert {lg.parent_dir for lg in (lm.get_log("t", p) for p in range(10, 14))} == {first_dir}


def test_shutdown_of_many_logs_syncs_the_file_system_once_then_writes_the_marker_last(manager, tmp_path,
                                                                                      monkeypatch):
    """Issue 27: closing thousands of logs must not cost an fsync per file.  The logs are closed unsynced,
    the dir's file system is synced once, then the checkpoints and, last, the clean shutdown marker."""
    import kafkatier.log.log_manager as log_manager_module

    lm = manager()
    for p in range(300):
        lg = lm.get_or_create_log("many", p, is_new=True, topic_id=TOPIC_ID)
        if p % 3 == 0:
            lg.append_as_leader(_blob(2, f"p{p}"), leader_epoch=0)
    order, real_fsync, real_sync_fs = [], os.fsync, log_manager_module.sync_file_system

    def fsync(fd):
        order.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def sync_fs(path):
        order.append(("syncfs", path))
        real_sync_fs(path)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(log_manager_module, "sync_file_system", sync_fs)
    lm.shutdown()
    monkeypatch.undo()
    assert [k for k, _ in order].count("syncfs") == 1
    assert len(order) < 20, order                       # the checkpoints and the marker, not 300 logs' files
    assert order[0][0] == "syncfs" and order[-1][1].endswith(".kafka_cleanshutdown")
    d = str(tmp_path / "d0")
    points = open(os.path.join(d, "recovery-point-offset-checkpoint")).read().splitlines()
    assert "many 0 2" in points and "many 1 0" in points   # everything below the log end is durable
    again = manager()
    assert _values(again.get_log("many", 3).read(0, 1 << 20).records) == [b"p3-0", b"p3-1"]


def test_a_failed_sync_at_shutdown_leaves_no_clean_shutdown_marker(manager, tmp_path, monkeypatch):
    """Without the sync nothing says the logs are durable: no marker (the next start recovers) and no recovery
    point moved past what was fsynced before."""
    import kafkatier.log.log_manager as log_manager_module

    lm = manager()
    lg = lm.get_or_create_log("unsynced", 0, is_new=True, topic_id=TOPIC_ID)
    lg.append_as_leader(_blob(2, "x"), leader_epoch=0)

    def broken(path):
        raise OSError(5, "Input/output error", path)

    monkeypatch.setattr(log_manager_module, "sync_file_system", broken)
    lm.shutdown()
    d = str(tmp_path / "d0")
    assert not os.path.exists(os.path.join(d, ".kafka_cleanshutdown"))
    points = open(os.path.join(d, "recovery-point-offset-checkpoint")).read().splitlines()
    assert "unsynced 0 2" not in points
