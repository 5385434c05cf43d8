"""Idle work proportional to change (issue 27): the log manager's periodic checkpoints rewrite a dir's file only
when something it holds may have changed (``LogManager.offsets_version``, moved by each log's offset changes
and by logs joining, leaving or moving); explicit checkpoints always write."""
from __future__ import annotations

import ast
import inspect
import os
import textwrap
import time

import pytest
from kafka.record.memory_records import MemoryRecordsBuilder

from kafkatier.log import log as log_module
from kafkatier.log.checkpoints import (LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT,
                                       OffsetCheckpointFile)
from kafkatier.log.log_manager import LogManager


def blob(n: int = 5) -> bytes:
    now = int(time.time() * 1000)
    b = MemoryRecordsBuilder(2, 0, 1 << 20)
    for i in range(n):
        b.append(now + i, None, b"x" * 50)
    b.close()
    return bytes(b.buffer())


@pytest.fixture
def lm(tmp_path):
    m = LogManager([str(tmp_path / "d1"), str(tmp_path / "d2")])
    yield m
    m.shutdown()


def _touch_old(path: str) -> None:
    os.utime(path, ns=(1, 1))


def _rewritten(path: str) -> bool:
    return os.stat(path).st_mtime_ns != 1


def periodic(m: LogManager) -> None:
    m.checkpoint_recovery_points(only_if_changed=True)
    m.checkpoint_log_start_offsets(only_if_changed=True)


def files(m: LogManager) -> list[str]:
    return [os.path.join(d, name) for d in m.log_dirs for name in (RECOVERY_POINT_CHECKPOINT,
                                                                      LOG_START_OFFSET_CHECKPOINT)]


def test_an_idle_manager_rewrites_no_checkpoint_and_a_change_rewrites_them(lm):
    lg = lm.get_or_create_log("t", 0)
    lm.get_or_create_log("t", 1)
    periodic(lm)
    for f in files(lm):
        _touch_old(f)
    version = lm.offsets_version
    periodic(lm)
    periodic(lm)
    assert lm.offsets_version == version and not any(_rewritten(f) for f in files(lm))
    lg.append_as_leader(blob(), 0)
    lg.flush()                       # the recovery point moves
    assert lm.offsets_version > version
    periodic(lm)
    assert OffsetCheckpointFile(os.path.join(lg.parent_dir, RECOVERY_POINT_CHECKPOINT)).read()[("t", 0)] == 5
    assert all(_rewritten(f) for f in files(lm))   # one version for the manager: every dir written once more
    for f in files(lm):
        _touch_old(f)
    periodic(lm)
    assert not any(_rewritten(f) for f in files(lm))


@pytest.mark.parametrize("change", ["high_watermark", "log_start_offset", "truncate", "truncate_fully",
                                    "new_log", "deleted_log", "topic_config"])
def test_every_change_a_checkpoint_holds_moves_the_version(lm, change):
    lg = lm.get_or_create_log("t", 0)
    lg.append_as_leader(blob(), 0)
    lg.update_high_watermark(3)
    before = lm.offsets_version
    if change == "high_watermark":
        lg.update_high_watermark(5)
    elif change == "log_start_offset":
        lg.maybe_increment_log_start_offset(2)
    elif change == "truncate":
        lg.truncate_to(1)
    elif change == "truncate_fully":
        lg.truncate_fully_and_start_at(9)
    elif change == "new_log":
        lm.get_or_create_log("u", 0)
    elif change == "deleted_log":
        lm.delete_log("t", 0)
    else:
        lm.update_topic_config("t", {"retention.ms": "1000"})
    assert lm.offsets_version > before


def test_an_unchanged_high_watermark_does_not_move_the_version(lm):
    lg = lm.get_or_create_log("t", 0)
    lg.append_as_leader(blob(), 0)
    lg.update_high_watermark(3)
    before = lm.offsets_version
    lg.update_high_watermark(3)
    lg.flush(0)                     # below the recovery point: nothing moves
    assert lm.offsets_version == before


def test_a_failed_write_is_retried_by_the_next_pass(lm, monkeypatch):
    lm.get_or_create_log("t", 0)
    real = OffsetCheckpointFile.write
    calls = []

    def failing(self, offsets):
        calls.append(self.path)
        if len(calls) == 1:
            raise OSError("disk full")
        return real(self, offsets)
    monkeypatch.setattr(OffsetCheckpointFile, "write", failing)
    monkeypatch.setattr(lm, "report_failure", lambda *a, **kw: None)   # the dir stays online for the test
    with pytest.raises(Exception):
        lm.checkpoint_recovery_points(only_if_changed=True)
    lm.checkpoint_recovery_points(only_if_changed=True)
    assert calls[0] in calls[1:]     # the dir whose write failed is written again, with nothing changed since


def test_explicit_checkpoints_always_write(lm):
    lm.get_or_create_log("t", 0)
    periodic(lm)
    for f in files(lm):
        _touch_old(f)
    lm.checkpoint_recovery_points()
    lm.checkpoint_log_start_offsets()
    assert all(_rewritten(f) for f in files(lm))


def test_a_restart_reads_what_the_skipping_passes_left(tmp_path):
    dirs = [str(tmp_path / "d")]
    m = LogManager(dirs)
    lg = m.get_or_create_log("t", 0)
    lg.append_as_leader(blob(), 0)
    lg.update_high_watermark(5)
    lg.maybe_increment_log_start_offset(2)
    lg.flush()
    periodic(m)
    periodic(m)                 # skipped: still current
    lg.close()
    m._release_locks()          # a crash: no shutdown checkpoint, no clean marker
    m2 = LogManager(dirs)
    try:
        again = m2.get_log("t", 0)
        assert (again.log_start_offset, again.recovery_point) == (2, 5)
    finally:
        m2.shutdown()


OFFSET_FIELDS = {"_high_watermark", "_recovery_point", "_log_start_offset", "_local_log_start_offset"}


def test_every_method_of_log_that_moves_a_checkpointed_offset_tells_its_listener():
    """A guard for later edits of log.py: each method assigning one of the checkpointed offsets calls
    ``_offsets_changed`` (directly or through a method that does), except the constructor and the load, which
    run before the log manager listens (it counts a log joining as a change)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(log_module.Log)))
    methods = {f.name: f for f in tree.body[0].body if isinstance(f, ast.FunctionDef)}

    def assigns(f):
        return any(isinstance(n, (ast.Assign, ast.AugAssign)) and any(
            isinstance(t, ast.Attribute) and t.attr in OFFSET_FIELDS
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])) for n in ast.walk(f))

    def calls(f):
        return {n.func.attr for n in ast.walk(f) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    notifying = {"_offsets_changed"}
    for _ in range(3):
        notifying |= {name for name, f in methods.items() if calls(f) & notifying}
    silent = [name for name, f in methods.items() if assigns(f) and name not in notifying]
    assert set(silent) <= {"__init__", "_load"}, silent
    assert {"update_high_watermark", "flush", "truncate_to", "maybe_increment_log_start_offset"} <= notifying
