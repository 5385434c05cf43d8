"""A fixed-size pool of daemon threads running tasks with a fixed delay (Java's ``ScheduledThreadPoolExecutor``
as the remote log manager uses it: ``scheduleWithFixedDelay``).

A task never runs twice at the same time: it is back in the queue only after its run ended, ``delay`` later.
An exception is logged and the task stays scheduled.  ``cancel()`` stops future runs (a run in progress
finishes; the task itself checks its cancelled flag to stop early).
"""
from __future__ import annotations

import heapq
import itertools
import threading
import time
from typing import Callable

from kafkatier.logsetup import get_logger, kv

log = get_logger("remote.pool")


class ScheduledTask:
    """Handle of a scheduled task."""

    def __init__(self, name: str, fn: Callable[[], object], delay_s: float):
        self.name = name
        self.fn = fn
        self.delay_s = delay_s
        self._cancelled = threading.Event()
        self.runs = 0

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        self._cancelled.set()

    def __repr__(self) -> str:
        return f"ScheduledTask({self.name}, cancelled={self.cancelled}, runs={self.runs})"


class ScheduledThreadPool:
    def __init__(self, thread_name_prefix: str, size: int, clock: Callable[[], float] = time.monotonic):
        if size < 1:
            raise ValueError(f"pool size must be at least 1, got {size}")
        self.thread_name_prefix = thread_name_prefix
        self.size = size
        self._clock = clock
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, ScheduledTask]] = []
        self._seq = itertools.count()
        self._threads: list[threading.Thread] = []
        self._running = False

    def start(self) -> None:
        with self._cond:
            if self._running:
                return
            self._running = True
            for i in range(self.size):
                t = threading.Thread(target=self._work, name=f"{self.thread_name_prefix}{i}", daemon=True)
                self._threads.append(t)
                t.start()

    def schedule_with_fixed_delay(self, name: str, fn: Callable[[], object], initial_delay_s: float,
                                  delay_s: float) -> ScheduledTask:
        task = ScheduledTask(name, fn, delay_s)
        self._push(task, initial_delay_s)
        return task

    def _push(self, task: ScheduledTask, delay_s: float) -> None:
        with self._cond:
            if not self._running or task.cancelled:
                return
            heapq.heappush(self._heap, (self._clock() + max(0.0, delay_s), next(self._seq), task))
            self._cond.notify()

    def resize(self, size: int) -> None:
        """Grow or shrink the pool at runtime (dynamic broker config): extra threads exit once idle."""
        if size < 1:
            raise ValueError(f"pool size must be at least 1, got {size}")
        with self._cond:
            self.size = size
            if self._running:
                self._threads = [t for t in self._threads if t.is_alive()]
                names = {t.name for t in self._threads}
                for i in range(size):
                    name = f"{self.thread_name_prefix}{i}"
                    if name not in names:
                        t = threading.Thread(target=self._work, name=name, daemon=True)
                        self._threads.append(t)
                        t.start()
            self._cond.notify_all()

    def _retired(self) -> bool:
        """Whether the calling worker is past the pool's size (after a shrink)."""
        name = threading.current_thread().name
        suffix = name[len(self.thread_name_prefix):]
        return suffix.isdigit() and int(suffix) >= self.size

    def _work(self) -> None:
        while True:
            with self._cond:
                while self._running and not self._retired() and (
                        not self._heap or self._heap[0][0] > self._clock()):
                    timeout = (self._heap[0][0] - self._clock()) if self._heap else None
                    self._cond.wait(timeout)
                if not self._running or self._retired():
                    return
                _, _, task = heapq.heappop(self._heap)
            if task.cancelled:
                continue
            try:
                task.runs += 1
                task.fn()
            except Exception:  # noqa: BLE001 - errors never unschedule a task
                log.exception(kv(event="task_failed", task=task.name))
            self._push(task, task.delay_s)

    @property
    def queued(self) -> int:
        with self._cond:
            return sum(1 for _, _, t in self._heap if not t.cancelled)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Drop queued tasks and wait (bounded) for running ones."""
        with self._cond:
            self._running = False
            for _, _, t in self._heap:
                t.cancel()
            self._heap.clear()
            self._cond.notify_all()
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))
        self._threads.clear()
