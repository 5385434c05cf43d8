"""DelayedOperationPurgatory: requests that wait for a condition (acks=all produce, long-poll fetch,
DeleteRecords low watermark), completed by the event that satisfies them, or expired by a timer.

Completion is event driven: whoever changes the state an operation waits on (a follower fetch moving the high
watermark, an append, a log start offset change) calls ``check_and_complete(key)``.  The only timer is the
expiration reaper, which sleeps until the next deadline.
"""
from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import defaultdict
from typing import Hashable, Iterable

from kafkatier.logsetup import get_logger

log = get_logger("server.purgatory")


class DelayedOperation:
    """Subclasses implement ``try_complete()`` (call ``force_complete()`` and return True when done),
    ``on_complete()`` (send the response) and optionally ``on_expiration()``."""

    def __init__(self, delay_ms: int):
        self.delay_ms = delay_ms
        self.deadline = time.monotonic() + delay_ms / 1000.0
        self._completed = False
        self._lock = threading.Lock()

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        with self._lock:
            if self._completed:
                return False
            self._completed = True
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
    def __init__(self, name: str):
        self.name = name
        self._watchers: dict[Hashable, list[DelayedOperation]] = defaultdict(list)
        self._lock = threading.Lock()
        self._timer: list[tuple[float, int, DelayedOperation]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._reaper, name=f"ExpirationReaper-{name}", daemon=True)
        self._thread.start()
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
        with self._cv:
            heapq.heappush(self._timer, (op.deadline, next(self._seq), op))
            self._cv.notify()
        return False

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
        with self._cv:
            self._stopped = True
            self._cv.notify()

    def _reaper(self) -> None:
        while True:
            with self._cv:
                while not self._stopped and (not self._timer or self._timer[0][0] > time.monotonic()):
                    timeout = (self._timer[0][0] - time.monotonic()) if self._timer else None
                    self._cv.wait(timeout)
                if self._stopped:
                    return
                _, _, op = heapq.heappop(self._timer)
            if not op.is_completed:
                op.expire()
                self.metrics["expired"] += 1
            # purge completed operations from the watch lists now and then
            if self.metrics["expired"] % 100 == 0:
                with self._lock:
                    for k in list(self._watchers):
                        live = [o for o in self._watchers[k] if not o.is_completed]
                        if live:
                            self._watchers[k] = live
                        else:
                            del self._watchers[k]
