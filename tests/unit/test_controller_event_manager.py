"""ControllerEventManager: one thread, FIFO, clear_and_put pre-empts, failures are dropped, moves resign."""
from __future__ import annotations

import threading

from kafkatier.controller.event_manager import ControllerEvent, ControllerEventManager
from kafkatier.zk.fenced import ControllerMovedError


def test_events_run_in_order_on_one_thread():
    m = ControllerEventManager()
    m.start()
    seen, threads = [], set()
    evs = [m.put(ControllerEvent(f"e{i}", lambda i=i: (seen.append(i), threads.add(threading.current_thread().name))))
           for i in range(50)]
    for e in evs:
        assert e.done.wait(5)
    assert seen == list(range(50))
    assert threads == {"controller-event-thread"}
    m.shutdown()


def test_clear_and_put_preempts_queued_events():
    m = ControllerEventManager()
    gate = threading.Event()
    preempted, ran = [], []
    m.put(ControllerEvent("blocker", lambda: gate.wait(5)))
    m.start()
    queued = [m.put(ControllerEvent(f"q{i}", lambda i=i: ran.append(i), preempt=lambda i=i: preempted.append(i)))
              for i in range(3)]
    final = m.clear_and_put(ControllerEvent("Expire", lambda: ran.append("expire")))
    gate.set()
    assert final.done.wait(5)
    assert all(q.done.is_set() for q in queued)
    assert preempted == [0, 1, 2]
    assert ran == ["expire"]
    m.shutdown()


def test_failing_event_is_dropped_and_loop_continues():
    m = ControllerEventManager()
    m.start()
    ok = []

    def boom():
        raise RuntimeError("bad event")
    m.put(ControllerEvent("bad", boom))
    assert m.put(ControllerEvent("good", lambda: ok.append(1))).done.wait(5)
    assert ok == [1]
    assert m.metrics["events_failed"] == 1
    m.shutdown()


def test_controller_moved_triggers_resignation_callback():
    moved = []
    m = ControllerEventManager(on_controller_moved=lambda e: moved.append(str(e)))
    m.start()

    def fenced():
        raise ControllerMovedError("epoch moved")
    assert m.put(ControllerEvent("write", fenced)).done.wait(5)
    assert moved and "epoch moved" in moved[0]
    m.shutdown()


def test_events_after_shutdown_are_not_run():
    m = ControllerEventManager()
    m.start()
    m.shutdown()
    ran = []
    ev = m.put(ControllerEvent("late", lambda: ran.append(1)))
    assert ev.done.is_set() and ran == []


def test_urgent_events_run_before_queued_ones_in_their_own_order():
    m = ControllerEventManager()
    gate = threading.Event()
    ran = []
    m.put(ControllerEvent("blocker", lambda: gate.wait(5)))
    m.start()
    bulk = [m.put(ControllerEvent(f"bulk{i}", lambda i=i: ran.append(f"bulk{i}"))) for i in range(3)]
    urgent = [m.put(ControllerEvent(f"urgent{i}", lambda i=i: ran.append(f"urgent{i}")), urgent=True)
              for i in range(2)]
    assert m.queue_size() == 5
    gate.set()
    for e in bulk + urgent:
        assert e.done.wait(5)
    assert ran == ["urgent0", "urgent1", "bulk0", "bulk1", "bulk2"]
    m.shutdown()


def test_clear_and_put_preempts_urgent_events_too():
    m = ControllerEventManager()
    gate = threading.Event()
    preempted = []
    m.put(ControllerEvent("blocker", lambda: gate.wait(5)))
    m.start()
    u = m.put(ControllerEvent("ControlledShutdown(2)", lambda: None, preempt=lambda: preempted.append("u")),
              urgent=True)
    final = m.clear_and_put(ControllerEvent("Expire", lambda: None))
    gate.set()
    assert final.done.wait(5) and u.done.is_set()
    assert preempted == ["u"]
    m.shutdown()
