"""Moves' and reassignments' progress: sampled from the brokers' log dirs, drawn as filled boxes on the timeline."""
from __future__ import annotations

import os

from kafkatier.scenario import report
from kafkatier.scenario.copy_progress import CopyProgress
from kafkatier.scenario.history import History

FUTURE = "t-0." + "ab" * 16 + "-future"


def _segment(path, size: int) -> None:
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "00000000000000000000.log"), "wb") as f:
        f.write(b"x" * size)
    with open(os.path.join(path, "00000000000000000000.index"), "wb") as f:
        f.write(b"i" * 999)   # indexes are not the copied bytes


def _values(h: History, kind: str) -> list[dict]:
    return [e["value"] for e in h.entries() if (e.get("value") or {}).get("kind") == kind]


def test_a_move_is_followed_from_its_future_replica_to_done(tmp_path):
    d0, d1 = str(tmp_path / "b1" / "d0"), str(tmp_path / "b1" / "d1")
    _segment(os.path.join(d0, "t-0"), 100)
    _segment(os.path.join(d1, FUTURE), 40)
    os.makedirs(os.path.join(d1, "not-a-partition"))
    h = History()
    cp = CopyProgress(lambda: {1: [d0, d1]}, dict, ["t"], h)
    cp.sample()
    cp.sample()   # nothing changed: no entry
    _segment(os.path.join(d1, FUTURE), 100)
    cp.sample()
    os.rename(os.path.join(d1, FUTURE), os.path.join(d1, "t-0-x"))
    cp.sample()
    assert _values(h, "move") == [
        {"kind": "move", "tp": "t/0", "broker": 1, "copied": 40, "total": 100},
        {"kind": "move", "tp": "t/0", "broker": 1, "copied": 100, "total": 100},
        {"kind": "move", "tp": "t/0", "broker": 1, "copied": 100, "total": 100, "done": True}]


def test_a_reassignment_compares_the_new_replica_with_the_leader(tmp_path):
    leader, new = str(tmp_path / "b1"), str(tmp_path / "b3")
    _segment(os.path.join(leader, "t-0"), 200)
    os.makedirs(new)
    parts = {("t", 0): {"leader": 1, "adding": [3]}, ("other", 0): {"leader": 1, "adding": [2]}}
    h = History()
    cp = CopyProgress(lambda: {1: [leader], 3: [new]}, lambda: dict(parts), ["t"], h)
    cp.sample()
    _segment(os.path.join(new, "t-0"), 50)
    cp.sample()
    parts[("t", 0)] = {"leader": 1}
    cp.sample()
    assert [(v["copied"], v["total"], v.get("done", False)) for v in _values(h, "reassign")] == [
        (0, 200, False), (50, 200, False), (200, 200, True)]


def _entry(t, **value):
    return {"process": "observer", "f": "observe", "type": "info", "time": int(t * 1e9), "value": value}


def test_the_timeline_draws_copies_as_progress(tmp_path):
    entries = [_entry(1.0, kind="move", tp="t/0", broker=1, copied=0, total=100),
               _entry(2.0, kind="move", tp="t/0", broker=1, copied=50, total=100),
               _entry(3.0, kind="move", tp="t/0", broker=1, copied=100, total=100, done=True),
               _entry(1.5, kind="reassign", tp="t/1", broker=3, copied=10, total=0),
               _entry(5.0, kind="brokers", ids={"1": 1})]
    series = report.copy_series(entries)
    assert series[("move", "t/0", 1)] == [(1.0, 0.0, False), (2.0, 0.5, False), (3.0, 1.0, True)]
    assert series[("reassign", "t/1", 3)] == [(1.5, 0.0, False)]   # no leader bytes yet: nothing copied
    path = str(tmp_path / "timeline.png")
    report.timeline(entries, [1, 2, 3], path, "copies")
    assert os.path.getsize(path) > 0


def test_results_and_the_page_list_the_copies(tmp_path):
    entries = [_entry(1.0, kind="reassign", tp="t/1", broker=3, copied=10, total=100),
               _entry(4.0, kind="reassign", tp="t/1", broker=3, copied=100, total=100, done=True),
               _entry(2.0, kind="move", tp="t/0", broker=1, copied=5, total=10)]
    assert report.copies(entries) == [
        {"kind": "move", "tp": "t/0", "broker": 1, "from_s": 2.0, "to_s": 2.0, "copied_pct": 50, "done": False},
        {"kind": "reassign", "tp": "t/1", "broker": 3, "from_s": 1.0, "to_s": 4.0, "copied_pct": 100, "done": True}]
