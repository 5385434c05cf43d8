"""KafkaScheduler: the one timer of a broker -- a delay queue of cancellable tasks served by a fixed number of
worker threads, with an injectable clock (Kafka's ``KafkaScheduler``, which wraps a
``ScheduledThreadPoolExecutor``; its ``SystemTimer`` for purgatory expiry is the same queue here).

Used by the log manager's periodic tasks, the remote log manager's copy / expiration / follower pools, purgatory
expiry, ISR expiry and the controller's disablement retries.

Guarantees:

* a task runs at or after its due time (``clock() >= due``); tasks due at the same time run in scheduling order;
* a periodic task runs with a *fixed delay* (``scheduleWithFixedDelay``): it is queued again ``period_ms`` after
  its run ended, so it never runs twice at the same time, even with several workers;
* an exception is logged and a periodic task keeps its schedule;
* :meth:`ScheduledTask.cancel` stops future runs (a run in progress finishes; a long task may check
  :attr:`ScheduledTask.cancelled` to stop early) and drops the task's callable at once, so a cancelled task
  holds no memory until its slot comes up;
* :meth:`KafkaScheduler.shutdown` drops queued tasks and waits (bounded) for running ones.

The clock is seconds (``time.monotonic`` by default).  A test that injects a fake clock calls :meth:`wake` after
moving it so that the workers re-read it.
"""
from __future__ import annotations

import heapq
import itertools
import threading
import time
from typing import Callable

from kafkatier.logsetup import get_logger, kv

log = get_logger("scheduler")


class ScheduledTask:
    """Handle of a scheduled task."""

    def __init__(self, name: str, fn: Callable[[], object], period_ms: float):
        self.name = name
        self._fn: Callable[[], object] | None = fn
        self.period_ms = period_ms
        self._cancelled = False
        self.runs = 0

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def periodic(self) -> bool:
        return self.period_ms is not None and self.period_ms > 0

    def cancel(self) -> None:
        self._cancelled = True
        self._fn = None

    def __repr__(self) -> str:
        return f"ScheduledTask({self.name}, cancelled={self.cancelled}, runs={self.runs})"


class KafkaScheduler:
    def __init__(self, threads: int = 1, thread_name_prefix: str = "kafka-scheduler-",
                 clock: Callable[[], float] = time.monotonic):
        if threads < 1:
            raise ValueError(f"the scheduler needs at least 1 thread, got {threads}")
        self.threads = threads
        self.thread_name_prefix = thread_name_prefix
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: list[tuple[float, int, ScheduledTask]] = []
        self._seq = itertools.count()
        self._workers: list[threading.Thread] = []
        self._running = False

    # --- lifecycle ----------------------------------------------------------------------------------------
    def startup(self) -> KafkaScheduler:
        with self._cond:
            if self._running:
                return self
            self._running = True
            for i in range(self.threads):
                t = threading.Thread(target=self._work, name=f"{self.thread_name_prefix}{i}", daemon=True)
                self._workers.append(t)
                t.start()
        return self

    @property
    def is_running(self) -> bool:
        return self._running

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Drop queued tasks and wait (bounded) for running ones."""
        with self._cond:
            self._running = False
            for _, _, task in self._queue:
                task.cancel()
            self._queue.clear()
            self._cond.notify_all()
        deadline = time.monotonic() + timeout_s
        for t in self._workers:
            if t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))
        self._workers.clear()

    # --- scheduling ---------------------------------------------------------------------------------------
    def schedule(self, name: str, fn: Callable[[], object], delay_ms: float = 0,
                 period_ms: float = -1) -> ScheduledTask:
        """Run ``fn`` after ``delay_ms``, then (if ``period_ms`` is positive) ``period_ms`` after each run ends.
        Scheduling on a scheduler that is not running returns a cancelled task."""
        task = ScheduledTask(name, fn, period_ms)
        self._push(task, delay_ms)
        return task

    def schedule_once(self, name: str, fn: Callable[[], object], delay_ms: float = 0) -> ScheduledTask:
        return self.schedule(name, fn, delay_ms=delay_ms)

    def wake(self) -> None:
        """Make the workers re-read the clock (after a test moved a fake one)."""
        with self._cond:
            self._cond.notify_all()

    @property
    def queued(self) -> int:
        with self._cond:
            return sum(1 for _, _, t in self._queue if not t.cancelled)

    def _push(self, task: ScheduledTask, delay_ms: float) -> None:
        with self._cond:
            if not self._running or task.cancelled:
                task.cancel()
                return
            entry = (self._clock() + max(0.0, delay_ms) / 1000.0, next(self._seq), task)
            heapq.heappush(self._queue, entry)
            # Only a new earliest deadline needs a worker to re-read the queue: the others wake by the head's
            # deadline (or finish their task) anyway.  Waking one on every push cost a thread switch per delayed
            # operation (a purgatory's expiry timer: each acks=all produce and each waiting follower fetch).
            if self._queue[0] is entry:
                self._cond.notify()

    def resize(self, threads: int) -> None:
        """Grow or shrink the worker pool at runtime (a dynamic broker config); surplus workers exit once idle."""
        if threads < 1:
            raise ValueError(f"the scheduler needs at least 1 thread, got {threads}")
        with self._cond:
            self.threads = threads
            if self._running:
                self._workers = [t for t in self._workers if t.is_alive()]
                names = {t.name for t in self._workers}
                for i in range(threads):
                    name = f"{self.thread_name_prefix}{i}"
                    if name not in names:
                        t = threading.Thread(target=self._work, name=name, daemon=True)
                        self._workers.append(t)
                        t.start()
            self._cond.notify_all()

    def _retired(self) -> bool:
        """Whether the calling worker is beyond the pool's size (after a shrink)."""
        suffix = threading.current_thread().name[len(self.thread_name_prefix):]
        return suffix.isdigit() and int(suffix) >= self.threads

    def _work(self) -> None:
        while True:
            with self._cond:
                while self._running and not self._retired() and (
                        not self._queue or self._queue[0][0] > self._clock()):
                    if self._queue and self._queue[0][2].cancelled:
                        heapq.heappop(self._queue)  # drop cancelled tasks as they reach the head
                        continue
                    timeout = (self._queue[0][0] - self._clock()) if self._queue else None
                    self._cond.wait(timeout)
                if not self._running or self._retired():
                    return
                _, _, task = heapq.heappop(self._queue)
            fn = task._fn
            if fn is None:
                continue
            task.runs += 1
            try:
                fn()
            except Exception:  # noqa: BLE001 - errors never unschedule a task
                log.exception(kv(event="scheduled_task_failed", task=task.name))
            if task.periodic:
                self._push(task, task.period_ms)
