"""The broker's one clock (Kafka's ``org.apache.kafka.common.utils.Time``).

Kafka's ``Time`` has two readings that must not be confused: ``milliseconds()`` is the wall clock (record
timestamps, ``LogAppendTime``, time-based retention and segment rolling, remote retention, what a timestamp
ListOffsets compares against), ``nanoseconds()`` is monotonic (timeouts, deadlines, the scheduler's delays).
``KafkaServer`` builds one :class:`Time` and hands ``milliseconds`` to what stamps or ages data and
``nanoseconds`` to what waits.

:class:`SkewedTime` is the clock fault (``kafkatier cluster clock``, ``server/fault_injection.py``): its wall
clock is the system's plus an offset that can grow with a drift, changed at run time through
:meth:`SkewedTime.set_skew`; its monotonic clock is the system's, untouched, so a skewed broker still times
out, waits and schedules correctly -- what a real NTP step or slew does to ``System.currentTimeMillis`` but not to
``System.nanoTime``.  A change of offset is a step of the wall clock (forwards or backwards), as ``date -s`` is.
"""
from __future__ import annotations

import time as _time
from typing import Protocol


class Time(Protocol):
    def milliseconds(self) -> int:
        """Wall-clock time, ms since the epoch."""

    def nanoseconds(self) -> int:
        """Monotonic time, ns (only differences mean anything)."""

    def sleep(self, ms: float) -> None:
        ...


class SystemTime:
    """The system clocks, unchanged."""

    def milliseconds(self) -> int:
        return _time.time_ns() // 1_000_000

    def nanoseconds(self) -> int:
        return _time.monotonic_ns()

    def sleep(self, ms: float) -> None:
        _time.sleep(ms / 1000.0)


SYSTEM = SystemTime()


class SkewedTime:
    """The system's wall clock ``offset_ms`` ahead (negative: behind), gaining ``drift_ppm`` microseconds per
    second since the skew was set; the monotonic clock is the system's.  Thread-safe."""

    def __init__(self, base: Time = SYSTEM):
        self._base = base
        # (offset ms, ms gained per ms elapsed, anchor ns), or None without skew: replaced whole, read without a
        # lock (every append and fetch reads the clock)
        self._skew: tuple[float, float, int] | None = None

    def set_skew(self, offset_ms: float = 0.0, drift_ppm: float = 0.0) -> None:
        """From now on the wall clock reads ``offset_ms`` ahead and drifts by ``drift_ppm`` (0, 0: no skew)."""
        offset, drift = float(offset_ms), float(drift_ppm) / 1_000_000.0
        self._skew = (offset, drift, self._base.nanoseconds()) if offset or drift else None

    @property
    def skew_ms(self) -> float:
        """How far ahead the wall clock reads now."""
        skew = self._skew
        if skew is None:
            return 0.0
        offset, drift, anchor = skew
        return offset + drift * (self._base.nanoseconds() - anchor) / 1_000_000.0

    def milliseconds(self) -> int:
        if self._skew is None:
            return self._base.milliseconds()
        return self._base.milliseconds() + int(self.skew_ms)

    def nanoseconds(self) -> int:
        return self._base.nanoseconds()

    def sleep(self, ms: float) -> None:
        self._base.sleep(ms)


class MockTime:
    """A clock tests move by hand (Kafka's ``MockTime``)."""

    def __init__(self, ms: int = 1_700_000_000_000, ns: int = 0):
        self._ms = ms
        self._ns = ns

    def milliseconds(self) -> int:
        return self._ms

    def nanoseconds(self) -> int:
        return self._ns

    def sleep(self, ms: float) -> None:
        self._ms += int(ms)
        self._ns += int(ms * 1_000_000)


__all__ = ["Time", "SystemTime", "SkewedTime", "MockTime", "SYSTEM"]
