"""A small task scheduler on one daemon thread (Kafka's ``KafkaScheduler`` for the log manager's tasks).

Tasks run one at a time; an exception in a task is logged and the task keeps its schedule.
"""
from __future__ import annotations

import heapq
import itertools
import threading
import time
from typing import Callable

from kafkatier.logsetup import get_logger, kv

log = get_logger("log")


class Scheduler:
    def __init__(self, thread_name: str = "kafka-scheduler", clock: Callable[[], float] = time.monotonic):
        self._thread_name = thread_name
        self._clock = clock
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, str, Callable[[], object], float]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._running = False

    def startup(self) -> None:
        with self._cond:
            if self._running:
                return
            self._running = True
            self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
            self._thread.start()

    @property
    def is_running(self) -> bool:
        return self._running

    def schedule(self, name: str, fn: Callable[[], object], delay_ms: float = 0, period_ms: float = -1) -> None:
        """Run ``fn`` after ``delay_ms``, then every ``period_ms`` if that is positive."""
        with self._cond:
            due = self._clock() + max(0.0, delay_ms) / 1000.0
            heapq.heappush(self._heap, (due, next(self._seq), name, fn, period_ms))
            self._cond.notify()

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Stop after the running task (if any) finishes; pending tasks are dropped."""
        with self._cond:
            if not self._running:
                return
            self._running = False
            self._heap.clear()
            self._cond.notify()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._running and (not self._heap or self._heap[0][0] > self._clock()):
                    timeout = (self._heap[0][0] - self._clock()) if self._heap else None
                    self._cond.wait(timeout)
                if not self._running:
                    return
                due, _, name, fn, period_ms = heapq.heappop(self._heap)
            try:
                fn()
            except Exception:
                log.exception(kv(event="scheduled_task_failed", task=name))
            if period_ms is not None and period_ms > 0:
                with self._cond:
                    if self._running:
                        heapq.heappush(self._heap, (self._clock() + period_ms / 1000.0, next(self._seq), name, fn,
                                                    period_ms))
