"""The broker process's garbage collector: what Kafka's ``KAFKA_JVM_PERFORMANCE_OPTS`` (G1,
``MaxGCPauseMillis=20``) are to its JVM, for CPython's cycle collector (docs/configuration.md#garbage-collection).

A broker holding 20,000 replicas keeps millions of long-lived Python objects (logs, segments, indexes,
partitions, fetch states).  CPython's full (generation 2) collection walks all of them with the interpreter lock
held: ~330 ms each at 20,000 partitions, at a rate set by how fast the idle broker's allocations survive into
generation 2.  Those objects live until the broker stops or the partition goes, so with
``kafkatier.gc.freeze.enable`` (the default) the broker moves them out of the collector's way
(``gc.freeze()``: the permanent generation, which no collection walks):

* :meth:`BrokerGc.startup_loaded` once the broker's logs are loaded, before it registers (the collector is off
  from the process start until then, :meth:`BrokerGc.pause_for_startup`: every full collection on the way would
  walk the logs loaded so far): one collection, then the freeze;
* :meth:`BrokerGc.on_gc` after a full collection that cost at least :data:`FREEZE_AFTER_CPU_MS` of CPU: what
  survived it is long-lived state that just grew (the partitions of a large LeaderAndIsr, a topic creation), so
  the next full collections walk only what was allocated since.  Right after a full collection the young
  generations are empty and nothing garbage is left to freeze.

The cost: a reference cycle made only of frozen objects is never collected (objects freed by reference counting,
the usual case, still are).  A frozen structure that later dies inside a cycle (a deleted partition's log, a
connection open at a freeze) stays in memory until the process ends; freezes are rare (start-up, then a full
collection that walked a heap grown by thousands of partitions), so this stays bounded.  With
``kafkatier.gc.freeze.enable=false`` the collector keeps Python's behaviour.

:class:`BrokerGc` also records each collection's pause by generation (``gc.callbacks``), shown in the broker's
status file (``kafkatier cluster describe``) so the effect is measurable.
"""
from __future__ import annotations

import gc
import threading
import time
from typing import Callable

from kafkatier.logsetup import get_logger, kv

log = get_logger("server.gc")

# A full collection that cost this much of its thread's CPU freezes what survived it.  Thread CPU, not wall
# time: the machine's load must not decide.  ~10 ms is ~100,000 objects walked: a few thousand partitions.
FREEZE_AFTER_CPU_MS = 10.0


class BrokerGc:
    """Each garbage collection's pause by generation (count, total and longest, in ms), and with ``freeze`` the
    survivors of a costly full collection frozen."""

    def __init__(self, freeze: bool = True, clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.thread_time,
                 freeze_after_cpu_ms: float = FREEZE_AFTER_CPU_MS,
                 freezer: Callable[[], None] = gc.freeze):
        self.freeze = freeze
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._freeze_after_cpu_ms = freeze_after_cpu_ms
        self._freezer = freezer
        # Reentrant: any allocation made holding it (describe() builds its answer) may start a collection in the
        # same thread, whose end (on_gc) takes it again.
        self._lock = threading.RLock()
        self._frozen_count: tuple[tuple[int, bool], int] | None = None   # describe()'s, at (freezes, paused)
        self._started: tuple[float, float] | None = None
        self._stats = {g: {"collections": 0, "total_ms": 0.0, "max_ms": 0.0} for g in range(3)}
        self._freezes = 0
        self._installed = False
        self._paused = False
        self._starting = False  # inside startup_loaded's own collection: it freezes (and counts) itself

    def install(self) -> "BrokerGc":
        if not self._installed:
            gc.callbacks.append(self.on_gc)
            self._installed = True
        return self

    def uninstall(self) -> None:
        if self._installed:
            gc.callbacks.remove(self.on_gc)
            self._installed = False

    def on_gc(self, phase: str, info: dict) -> None:
        """The ``gc.callbacks`` hook: ``start`` and ``stop`` of one collection, in the collecting thread with
        the interpreter lock held (so nothing runs between the collection and a freeze made here)."""
        if phase == "start":
            self._started = (self._clock(), self._cpu_clock())
            return
        started, self._started = self._started, None
        if started is None:
            return
        ms = (self._clock() - started[0]) * 1000
        generation = info.get("generation", 2)
        st = self._stats.get(generation)
        if st is None:
            return
        with self._lock:
            st["collections"] += 1
            st["total_ms"] += ms
            st["max_ms"] = max(st["max_ms"], ms)
        if (self.freeze and generation == 2 and not self._starting
                and (self._cpu_clock() - started[1]) * 1000 >= self._freeze_after_cpu_ms):
            self._freezer()
            with self._lock:
                self._freezes += 1

    def pause_for_startup(self) -> None:
        """With ``freeze``: the collector off until :meth:`startup_loaded` (the logs load meanwhile)."""
        if self.freeze and not self._paused:
            gc.disable()
            self._paused = True

    def startup_loaded(self) -> None:
        """The broker's long-lived start-up state is built (its logs are loaded): collect once, freeze, turn
        the collector back on -- before the broker registers, so none of it is on the path of its first
        LeaderAndIsr.  Does nothing unless :meth:`pause_for_startup` paused the collector."""
        if self._paused:
            self._paused = False
            self._starting = True   # its collection is recorded, but frozen (and counted) once, here
            try:
                freeze_startup_objects()
                with self._lock:
                    self._freezes += 1
            finally:
                self._starting = False
                gc.enable()

    def describe(self) -> dict:
        with self._lock:
            out: dict = {f"gen{g}": {k: round(v, 1) if isinstance(v, float) else v for k, v in st.items()}
                         for g, st in self._stats.items()}
        out["freezes"] = self._freezes
        # gc.get_freeze_count() walks the whole permanent generation with the interpreter lock held (~26 ms per
        # million objects: a broker's status write stalled every thread for 0.1-0.4 s every 5 s): counted again
        # only after a freeze, which is the only change to it here.
        key = (self._freezes, self._paused)
        if self._frozen_count is None or self._frozen_count[0] != key:
            self._frozen_count = (key, gc.get_freeze_count())
        out["frozen_objects"] = self._frozen_count[1]
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
