"""The small shared helpers that give repeated code one home: the wake-up loop, delete_if_exists and a group
member's pending JoinGroup/SyncGroup answers."""
from __future__ import annotations

import threading

from kafkatier.common.files import delete_if_exists
from kafkatier.common.wake_loop import run_on_wake_ups
from kafkatier.coordinator.group.group_metadata import JoinGroupResult, MemberMetadata, SyncGroupResult

DEADLINE_S = 10.0


def test_wake_ups_run_rounds_and_stop_ends_the_loop():
    wake, stopped = threading.Event(), threading.Event()
    rounds: list[int] = []
    ran = threading.Event()

    def round_() -> None:
        rounds.append(1)
        ran.set()

    thread = threading.Thread(target=run_on_wake_ups, args=(wake, stopped, round_), daemon=True)
    thread.start()
    assert not ran.wait(0.05)          # nothing runs before a wake-up
    wake.set()
    assert ran.wait(DEADLINE_S)
    ran.clear()
    wake.set()
    assert ran.wait(DEADLINE_S)
    stopped.set()
    wake.set()
    thread.join(DEADLINE_S)
    assert not thread.is_alive()
    assert len(rounds) == 2            # the wake-up that came with the stop runs no round


def test_a_stopped_loop_returns_without_a_round():
    wake, stopped = threading.Event(), threading.Event()
    stopped.set()
    run_on_wake_ups(wake, stopped, lambda: (_ for _ in ()).throw(AssertionError("no round after stop")))


def test_delete_if_exists(tmp_path):
    f = tmp_path / "00000000000000000000.snapshot"
    f.write_bytes(b"x")
    delete_if_exists(str(f))
    assert not f.exists()
    delete_if_exists(str(f))           # already gone: not an error


def _member() -> MemberMetadata:
    return MemberMetadata("m-1", None, "client", "/127.0.0.1", 30000, 10000, "consumer", [("range", b"")])


def test_fail_pending_answers_join_and_sync_once():
    m = _member()
    joined, synced = [], []
    m.awaiting_join, m.awaiting_sync = joined.append, synced.append
    answers = m.fail_pending(25)
    assert [result for _, result in answers] == [JoinGroupResult(25, "m-1"), SyncGroupResult(25)]
    assert m.awaiting_join is None and m.awaiting_sync is None
    for callback, result in answers:
        callback(result)
    assert joined == [JoinGroupResult(25, "m-1")] and synced == [SyncGroupResult(25)]
    assert m.fail_pending(25) == []    # nothing pending any more
