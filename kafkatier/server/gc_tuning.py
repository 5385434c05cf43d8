"""The broker process's garbage collector: what Kafka's ``KAFKA_JVM_PERFORMANCE_OPTS`` (G1,
``MaxGCPauseMillis=20``) are to its JVM, for CPython's cycle collector (docs/configuration.md#garbage-collection).

A broker holding 20,000 replicas keeps millions of long-lived Python objects (logs, segments, indexes,
partitions).  CPython's full (generation 2) collection walks all of them: ~330 ms with the GIL held, at a rate
set by how fast the idle broker's allocations survive into generation 2.  Those objects live until the broker
stops, so once the broker has loaded its logs and registered, :func:`freeze_startup_objects` collects once and
moves every object then tracked to the permanent generation (``gc.freeze()``): later collections walk only what
was allocated since.  With ``kafkatier.gc.freeze.enable=false`` the collector keeps Python's behaviour.

Cost of the freeze: garbage cycles made only of frozen objects are never collected (objects freed by reference
counting, the usual case, still are).  Reference cycles among start-up objects of a log that is deleted later
(a deleted topic) stay in memory until the process ends.

:class:`GcPauses` records each collection's pause by generation (``gc.callbacks``), shown in the broker's status
file (``kafkatier cluster describe``) so the effect is measurable.
"""
from __future__ import annotations

import gc
import threading
import time
from typing import Callable

from kafkatier.logsetup import get_logger, kv

log = get_logger("server.gc")


class GcPauses:
    """Each garbage collection's pause, by generation: count, total and longest, in milliseconds."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self._clock = clock
        self._lock = threading.Lock()
        self._started: float | None = None
        self._stats = {g: {"collections": 0, "total_ms": 0.0, "max_ms": 0.0} for g in range(3)}
        self._installed = False

    def install(self) -> "GcPauses":
        if not self._installed:
            gc.callbacks.append(self.on_gc)
            self._installed = True
        return self

    def uninstall(self) -> None:
        if self._installed:
            gc.callbacks.remove(self.on_gc)
            self._installed = False

    def on_gc(self, phase: str, info: dict) -> None:
        """The ``gc.callbacks`` hook: ``start`` and ``stop`` of one collection (with the GIL held: no lock needed
        between them, the lock guards readers)."""
        if phase == "start":
            self._started = self._clock()
            return
        started, self._started = self._started, None
        if started is None:
            return
        ms = (self._clock() - started) * 1000
        st = self._stats.get(info.get("generation", 2))
        if st is None:
            return
        with self._lock:
            st["collections"] += 1
            st["total_ms"] += ms
            st["max_ms"] = max(st["max_ms"], ms)

    def describe(self) -> dict:
        with self._lock:
            out = {f"gen{g}": {k: round(v, 1) if isinstance(v, float) else v for k, v in st.items()}
                   for g, st in self._stats.items()}
        out["frozen_objects"] = gc.get_freeze_count()
        out["thresholds"] = list(gc.get_threshold())
        return out


def freeze_startup_objects() -> int:
    """Collect once, then move every object tracked now to the permanent generation (``gc.freeze()``), which
    later collections do not walk; returns how many were frozen."""
    t0 = time.monotonic()
    collected = gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("start-up objects frozen %s", kv(objects=frozen, collected=collected,
                                              ms=round((time.monotonic() - t0) * 1000, 1)))
    return frozen
