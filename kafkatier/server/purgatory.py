"""DelayedOperationPurgatory: requests that wait for a condition (acks=all produce, long-poll fetch,
DeleteRecords low watermark), completed by the event that satisfies them, or expired by a timer.

Completion is event driven: whoever changes the state an operation waits on (a follower fetch moving the high
watermark, an append, a log start offset change) calls ``check_and_complete(key)``.  Expiry is a task on the
purgatory's timer (the broker's :class:`KafkaScheduler` kind, ``ExpirationReaper-<name>``), cancelled when the
operation completes, so a completed operation leaves the timer at once.
"""
from __future__ import annotations

import threading
from collections import defaultdict
from typing import Hashable, Iterable

from kafkatier.common.scheduler import KafkaScheduler, ScheduledTask
from kafkatier.logsetup import get_logger

log = get_logger("server.purgatory")


class DelayedOperation:
    """Subclasses implement ``try_complete()`` (call ``force_complete()`` and return True when done),
    ``on_complete()`` (send the response) and optionally ``on_expiration()``."""

    def __init__(self, delay_ms: int):
        self.delay_ms = delay_ms
        self._completed = False
        self._expiration: ScheduledTask | None = None
        self._lock = threading.Lock()

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        with self._lock:
            if self._completed:
                return False
            self._completed = True
            expiration = self._expiration
        if expiration is not None:
            expiration.cancel()
        try:
            self.on_complete()
        except Exception:  # noqa: BLE001
            log.exception("completing %s failed", type(self).__name__)
        return True

    def expire(self) -> None:
        if self.force_complete_on_expiry():
            try:
                self.on_expiration()
            except Exception:  # noqa: BLE001
                log.exception("expiring %s failed", type(self).__name__)

    def force_complete_on_expiry(self) -> bool:
        return self.force_complete()

    def try_complete(self) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def on_complete(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def on_expiration(self) -> None:
        pass


class DelayedOperationPurgatory:
    def __init__(self, name: str, timer: KafkaScheduler | None = None):
        self.name = name
        self._watchers: dict[Hashable, list[DelayedOperation]] = defaultdict(list)
        self._lock = threading.Lock()
        self._owns_timer = timer is None
        self._timer = timer if timer is not None else KafkaScheduler(1, f"ExpirationReaper-{name}-").startup()
        self._expired_since_purge = 0
        self.metrics = {"completed": 0, "expired": 0}

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        keys = list(keys)
        if op.try_complete():
            self.metrics["completed"] += 1
            return True
        with self._lock:
            for k in keys:
                self._watchers[k].append(op)
        # A state change may have happened between the first check and the watch: check again.
        if op.try_complete():
            self.metrics["completed"] += 1
            return True
        task = self._timer.schedule_once(f"expire-{self.name}", lambda: self._expire(op), op.delay_ms)
        with op._lock:
            op._expiration = task
            completed = op._completed
        if completed:  # completed meanwhile by another thread, which found no task to cancel
            task.cancel()
        return False

    def _expire(self, op: DelayedOperation) -> None:
        if op.is_completed:
            return
        op.expire()
        self.metrics["expired"] += 1
        self._expired_since_purge += 1
        if self._expired_since_purge >= 100:  # purge completed operations from the watch lists now and then
            self._expired_since_purge = 0
            with self._lock:
                for k in list(self._watchers):
                    live = [o for o in self._watchers[k] if not o.is_completed]
                    if live:
                        self._watchers[k] = live
                    else:
                        del self._watchers[k]

    def check_and_complete(self, key: Hashable) -> int:
        with self._lock:
            ops = self._watchers.get(key)
            if not ops:
                return 0
            ops = [o for o in ops if not o.is_completed]
            self._watchers[key] = ops
            candidates = list(ops)
        done = 0
        for op in candidates:
            if not op.is_completed and op.try_complete():
                done += 1
        if done:
            self.metrics["completed"] += done
            with self._lock:
                remaining = [o for o in self._watchers.get(key, []) if not o.is_completed]
                if remaining:
                    self._watchers[key] = remaining
                else:
                    self._watchers.pop(key, None)
        return done

    def watched(self) -> int:
        with self._lock:
            return sum(1 for ops in self._watchers.values() for o in ops if not o.is_completed)

    def shutdown(self) -> None:
        if self._owns_timer:
            self._timer.shutdown()
