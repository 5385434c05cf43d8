"""A crash at each step of a cleaning (as a kill -9 would leave the files) recovers at the next load to a
consistent log holding the latest value of every key (Kafka's LogLoader: ``.cleaned`` deleted, ``.swap``
completed)."""
from __future__ import annotations

import os
import shutil

import pytest

from kafkatier.log import log as log_module
from kafkatier.log.cleaner import Cleaner
from kafkatier.log.cleaner_throttle import Throttler
from kafkatier.log.log import Log
from kafkatier.log.log_cleaner_manager import cleanable_range

from tests.unit.test_log_cleaner import COMPACT, make_log, records

NOW = 10**13


class Crash(BaseException):
    """Stands for the process dying: nothing after it runs (no cleanup of the cleaner's files)."""


def latest(lg: Log) -> dict:
    out = {}
    offsets = [o for o, *_ in records(lg)]
    assert offsets == sorted(set(offsets))
    for _, k, v, _ in records(lg):
        out[k] = v
    return out


def reload(lg: Log) -> Log:
    again = Log(lg.dir, dict(COMPACT), had_clean_shutdown=False)
    assert not [f for f in os.listdir(lg.dir) if f.endswith((".cleaned", ".swap", ".deleted"))]
    return again


@pytest.mark.parametrize("point", ["cleaner-after-swap-rename", "cleaner-after-old-segments-removed"])
def test_a_crash_in_the_swap_is_completed_at_load(tmp_path, monkeypatch, point):
    lg = make_log(tmp_path)
    expected, count = latest(lg), len(records(lg))

    def crash(name):
        if name == point:
            raise Crash(name)
    monkeypatch.setattr(log_module, "crash_point", crash)
    with pytest.raises(Crash):
        Cleaner(0, 10_000, Throttler(float("inf")), clock=lambda: NOW).clean(cleanable_range(lg, None, NOW))
    assert any(n.endswith(".swap") for n in os.listdir(lg.dir))
    monkeypatch.undo()
    again = reload(lg)
    assert latest(again) == expected and len(records(again)) < count   # the swapped-in group is cleaned


def test_a_crash_while_writing_a_cleaned_segment_leaves_its_old_segments(tmp_path):
    lg = make_log(tmp_path)
    expected = latest(lg)
    snap = str(tmp_path / "killed" / "t-0")
    calls = [0]

    def check_done(_):
        calls[0] += 1
        if calls[0] > 12 and any(n.endswith(".log.cleaned") for n in os.listdir(lg.dir)):
            # in the cleaning pass, a .cleaned segment half written: what a kill -9 leaves on disk (the
            # in-process clean-up that follows does not happen to a killed process)
            shutil.copytree(lg.dir, snap)
            raise Crash("kill -9")
    with pytest.raises(Crash):
        Cleaner(0, 10_000, Throttler(float("inf")), clock=lambda: NOW, check_done=check_done).clean(
            cleanable_range(lg, None, NOW))
    assert any(n.endswith(".cleaned") for n in os.listdir(snap))
    again = Log(snap, dict(COMPACT), had_clean_shutdown=False)
    assert not [f for f in os.listdir(snap) if f.endswith((".cleaned", ".swap", ".deleted"))]
    assert latest(again) == expected
