"""How fast the log cleaner may go: Kafka's ``Throttler`` on its I/O (``log.cleaner.io.max.bytes.per.second``) and
the project's :class:`DutyCycle` (``kafkatier.log.cleaner.duty.cycle``; docs/log-compaction.md)."""
from __future__ import annotations

import threading
import time
from typing import Callable


class Throttler:
    """Bytes per second over all cleaner threads (Kafka's ``Throttler`` on the cleaner's I/O)."""

    def __init__(self, bytes_per_second: float, stop: threading.Event | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.rate = bytes_per_second
        self._stop = stop or threading.Event()
        self._clock = clock
        self._lock = threading.Lock()
        self._start = clock()
        self._bytes = 0.0
        self.throttled_s = 0.0

    def maybe_throttle(self, n: int) -> None:
        if self.rate <= 0 or self.rate == float("inf"):
            return
        with self._lock:
            self._bytes += n
            now = self._clock()
            elapsed = now - self._start
            wait = self._bytes / self.rate - elapsed
            if elapsed > 1.0 and wait <= 0:
                self._start, self._bytes = now, 0.0
        if wait > 0.001:
            self.throttled_s += wait
            self._stop.wait(wait)


class DutyCycle:
    """Caps the share of time a cleaner thread works (project addition, ``kafkatier.log.cleaner.duty.cycle``):
    the broker's threads share one interpreter lock, so a cleaner running flat out halves the produce path's
    throughput; after each stretch of work it sleeps so that work is at most ``fraction`` of its time.  1.0: off.

    Stretches are short (``slice_s``, 2 ms; :meth:`tick` is called per batch): while the cleaner holds the lock, a
    produce thread that released it for a write waits up to the interpreter's switch interval (5 ms) to get it
    back, once per write -- long stretches of work would cost the produce path far more than their share."""

    def __init__(self, fraction: float, stop: threading.Event | None = None, slice_s: float = 0.002):
        self.fraction = fraction
        self.slice_s = slice_s
        self._stop = stop or threading.Event()
        self._mark = time.perf_counter()
        self.slept_s = 0.0

    def begin(self) -> None:
        """Work starts now (a cleaning begins, or the thread was held elsewhere): time spent since the last
        tick was not work and earns no pause."""
        self._mark = time.perf_counter()

    def tick(self) -> None:
        if self.fraction >= 1.0:
            return
        now = time.perf_counter()
        work = now - self._mark
        if work >= self.slice_s:
            pause = work * (1.0 - self.fraction) / self.fraction
            self.slept_s += pause
            self._stop.wait(pause)
            self._mark = time.perf_counter()
