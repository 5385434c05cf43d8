"""ReplicationQuotaManager: one byte-rate limit shared by several threads (Kafka's ``ReplicationQuotaManager``
as used for ``alterLogDirsReplicationQuotaManager``, the intra-broker move throttle).

Kafka samples the bytes moved in ``alter.log.dirs.replication.quota.window.num`` (11) windows of
``alter.log.dirs.replication.quota.window.size.seconds`` (1 s) and lets a move thread skip a round while the
measured rate is above the limit.  Here the same contract is kept with a token bucket, which gives the same
long-run rate with less code and an exact answer to "how long until the next read may run":

- :meth:`allowance` says how many bytes the next read may take (0 = wait :meth:`wait_time` first);
- :meth:`record` charges the bytes actually read (a read may exceed the allowance by one record batch: the
  bucket goes into debt and the next reads wait for it);
- :meth:`set_rate` applies a new limit at once (threads waiting on the old one are woken) and forgives the
  debt run up under the old limit, so raising a throttle takes effect immediately.

``LONG_MAX`` (the default) means unlimited.  The burst is one second of the rate, at least one byte.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

LONG_MAX = (1 << 63) - 1


class ReplicationQuotaManager:
    def __init__(self, rate_bytes_per_s: int = LONG_MAX, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._cond = threading.Condition()
        self._rate = LONG_MAX
        self._tokens = 0.0
        self._last = clock()
        self._total = 0
        self.set_rate(rate_bytes_per_s)

    @property
    def rate(self) -> int:
        return self._rate

    @property
    def unlimited(self) -> bool:
        return self._rate >= LONG_MAX

    @property
    def total_bytes(self) -> int:
        """Bytes recorded since start-up (for metrics)."""
        return self._total

    def set_rate(self, rate_bytes_per_s: int) -> None:
        if rate_bytes_per_s < 0:
            raise ValueError(f"a replication quota must be >= 0, got {rate_bytes_per_s}")
        with self._cond:
            self._rate = rate_bytes_per_s
            self._last = self._clock()
            self._tokens = 0.0 if self.unlimited else min(float(self._burst()), max(self._tokens, 0.0))
            self._cond.notify_all()

    def _burst(self) -> int:
        return max(1, self._rate)

    def _refill(self) -> None:
        now = self._clock()
        if not self.unlimited:
            self._tokens = min(float(self._burst()), self._tokens + (now - self._last) * self._rate)
        self._last = now

    def allowance(self) -> int:
        """Bytes the next read may take (LONG_MAX when unlimited, 0 when the caller must wait)."""
        with self._cond:
            if self.unlimited:
                return LONG_MAX
            self._refill()
            return int(self._tokens) if self._tokens >= 1 else 0

    def wait_time(self) -> float:
        """Seconds until at least one byte is allowed."""
        with self._cond:
            if self.unlimited:
                return 0.0
            self._refill()
            if self._tokens >= 1:
                return 0.0
            return (1 - self._tokens) / self._rate if self._rate > 0 else 3600.0

    def record(self, n_bytes: int) -> None:
        with self._cond:
            self._total += n_bytes
            if not self.unlimited:
                self._refill()
                self._tokens -= n_bytes

    def await_allowance(self, stop: threading.Event, max_wait_s: float = 1.0) -> int:
        """Wait (at most ``max_wait_s``, less if the rate changes or ``stop`` is set) for a positive allowance;
        returns it, or 0 if there is none yet."""
        allowed = self.allowance()
        if allowed > 0 or stop.is_set():
            return allowed
        with self._cond:
            self._cond.wait(min(max_wait_s, max(self.wait_time(), 0.001)))
        return self.allowance()
