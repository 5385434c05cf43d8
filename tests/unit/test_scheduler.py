"""KafkaScheduler (common/scheduler.py): due order whatever the scheduling order, with one or several workers
(a push wakes a worker only when it is the new earliest deadline)."""
from __future__ import annotations

import threading

import pytest

from kafkatier.common.scheduler import KafkaScheduler


@pytest.mark.parametrize("threads", [1, 3])
def test_tasks_run_in_due_order_whatever_the_order_they_were_scheduled_in(threads):
    s = KafkaScheduler(threads, "test-sched-").startup()
    ran: list[int] = []
    done = threading.Event()
    lock = threading.Lock()

    def task(i: int):
        def run():
            with lock:
                ran.append(i)
                if len(ran) == 6:
                    done.set()
        return run
    try:
        # later deadlines first (each push a new earliest deadline), then later ones behind the head (no wake-up)
        for i, delay in enumerate((400, 300, 200, 250, 350, 450)):
            s.schedule_once(f"t{i}", task(delay), delay)
        assert done.wait(10)
    finally:
        s.shutdown()
    if threads == 1:
        assert ran == [200, 250, 300, 350, 400, 450]
    else:
        assert sorted(ran) == [200, 250, 300, 350, 400, 450]


def test_an_earlier_task_scheduled_behind_a_far_one_runs_at_its_own_time():
    s = KafkaScheduler(1, "test-sched-").startup()
    ran = threading.Event()
    try:
        s.schedule_once("far", lambda: None, 60_000)
        s.schedule_once("soon", ran.set, 10)
        assert ran.wait(10)   # not held until the far task's deadline
    finally:
        s.shutdown()


def test_a_task_behind_the_head_runs_once_the_head_has_run():
    s = KafkaScheduler(1, "test-sched-").startup()
    second = threading.Event()
    try:
        s.schedule_once("head", lambda: None, 20)
        s.schedule_once("behind", second.set, 40)   # no wake-up: the worker waits for the head's deadline first
        assert second.wait(10)
    finally:
        s.shutdown()
