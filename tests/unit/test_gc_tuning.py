"""The broker's collector (server/gc_tuning.py): pauses recorded by generation, start-up objects frozen, and
the survivors of a costly full collection frozen."""
from __future__ import annotations

import gc
import itertools
import threading

from kafkatier.server.gc_tuning import BrokerGc, freeze_startup_objects


def _ticks(*values):
    it = iter(values)
    return lambda: next(it)


def _collect(g: BrokerGc, generation: int) -> None:
    g.on_gc("start", {"generation": generation})
    g.on_gc("stop", {"generation": generation})


def test_each_collection_is_recorded_under_its_generation():
    freezes = []
    g = BrokerGc(clock=_ticks(10.0, 10.25, 20.0, 20.002), cpu_clock=lambda: 0.0, freezer=lambda: freezes.append(1))
    _collect(g, 2)
    _collect(g, 0)
    d = g.describe()
    assert d["gen2"] == {"collections": 1, "total_ms": 250.0, "max_ms": 250.0}
    assert d["gen0"]["collections"] == 1 and d["gen1"]["collections"] == 0
    assert freezes == [] and d["freezes"] == 0   # it cost no CPU: nothing frozen


def test_a_full_collection_that_cost_cpu_freezes_its_survivors_and_a_cheap_or_young_one_does_not():
    freezes = []
    # CPU clock: start, stop (and the check) per collection; 30 ms, then 2 ms, then a young one of 30 ms
    g = BrokerGc(clock=lambda: 0.0, cpu_clock=_ticks(1.0, 1.03, 2.0, 2.002, 3.0, 3.03), freezer=lambda: freezes.append(1))
    _collect(g, 2)
    _collect(g, 2)
    _collect(g, 1)
    assert freezes == [1] and g.describe()["freezes"] == 1


def test_without_freeze_nothing_is_frozen():
    freezes = []
    g = BrokerGc(freeze=False, clock=lambda: 0.0, cpu_clock=_ticks(1.0, 2.0, 2.0), freezer=lambda: freezes.append(1))
    _collect(g, 2)
    assert freezes == [] and g.describe()["gen2"]["collections"] == 1


def test_a_stop_without_its_start_is_ignored():
    g = BrokerGc(clock=lambda: 1.0)
    g.on_gc("stop", {"generation": 1})
    assert g.describe()["gen1"]["collections"] == 0


def test_installed_it_sees_real_collections_and_uninstalls():
    g = BrokerGc(freeze=False).install()
    try:
        gc.collect()
    finally:
        g.uninstall()
    assert g.describe()["gen2"]["collections"] >= 1
    assert g.on_gc not in gc.callbacks


def test_freezing_moves_the_tracked_objects_out_of_later_collections():
    kept = [[i] for i in range(1000)]
    try:
        frozen = freeze_startup_objects()
        # Frozen objects that die (other tests' threads run on) leave the permanent generation: at most `frozen`.
        assert frozen >= len(kept) and len(kept) <= gc.get_freeze_count() <= frozen
        walked = {id(o) for g in range(3) for o in gc.get_objects(generation=g)}
        assert not any(id(k) in walked for k in kept)
    finally:
        gc.unfreeze()


def test_start_up_pauses_the_collector_until_the_logs_are_loaded_then_freezes_once():
    g = BrokerGc()
    assert gc.isenabled()
    try:
        g.pause_for_startup()
        assert not gc.isenabled()
        g.startup_loaded()
        assert gc.isenabled() and gc.get_freeze_count() > 0 and g.describe()["freezes"] == 1
        # the start-up's own call was the one: nothing more (counted by the broker's own count of freezes: the
        # permanent generation's size is no measure, it shrinks whenever a frozen object is freed, as CI saw)
        g.startup_loaded()
        assert g.describe()["freezes"] == 1
    finally:
        gc.enable()
        gc.unfreeze()


def test_the_start_up_freeze_is_counted_once_though_its_collection_is_a_costly_full_one():
    frozen_by_hook = []
    seconds = itertools.count(0.0, 1.0)   # every collection costs 1 s of (fake) CPU
    g = BrokerGc(cpu_clock=lambda: next(seconds), freezer=lambda: frozen_by_hook.append(1))
    try:
        g.pause_for_startup()
        g.install()
        g.startup_loaded()   # its gc.collect() is a costly full collection
        d = g.describe()
        assert frozen_by_hook == [] and d["freezes"] == 1 and d["gen2"]["collections"] >= 1
    finally:
        g.uninstall()
        gc.enable()
        gc.unfreeze()


def test_without_freeze_start_up_leaves_the_collector_alone():
    g = BrokerGc(freeze=False)
    g.pause_for_startup()
    assert gc.isenabled()
    g.startup_loaded()
    assert gc.get_freeze_count() == 0


def test_describe_counts_the_frozen_objects_again_only_after_a_freeze(monkeypatch):
    # gc.get_freeze_count() walks every frozen object with the interpreter lock held: a broker's status write
    # (every 5 s) must not pay that walk when nothing was frozen since the last one.
    walks = []
    monkeypatch.setattr(gc, "get_freeze_count", lambda: walks.append(1) or 100 * len(walks))
    g = BrokerGc(clock=lambda: 0.0, cpu_clock=_ticks(1.0, 1.03), freezer=lambda: None)
    assert [g.describe()["frozen_objects"] for _ in range(3)] == [100, 100, 100] and len(walks) == 1
    _collect(g, 2)   # a costly full collection: its survivors frozen
    assert [g.describe()["frozen_objects"] for _ in range(2)] == [200, 200] and len(walks) == 2


def test_a_collection_that_ends_while_its_own_thread_describes_does_not_deadlock():
    # describe() builds its answer under the stats lock, and any allocation there may start a collection in the
    # same thread, whose end (on_gc) takes that lock again: a broker's main thread stopped for good in its
    # status write (its status file went stale, it ignored SIGINT until killed).  A threshold of 1 makes the
    # collection happen there.
    g = BrokerGc(freeze=False).install()
    threshold = gc.get_threshold()
    done = threading.Event()

    def describe() -> None:
        gc.set_threshold(1)
        try:
            g.describe()
        finally:
            gc.set_threshold(*threshold)
        done.set()
    t = threading.Thread(target=describe, daemon=True)
    try:
        t.start()
        assert done.wait(10), "describe() deadlocked on a collection it started"
        assert g.describe()["gen0"]["collections"] >= 1
    finally:
        g.uninstall()
        gc.set_threshold(*threshold)
