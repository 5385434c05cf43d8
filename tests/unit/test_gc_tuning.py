"""The broker's collector (server/gc_tuning.py): pauses recorded by generation, start-up objects frozen."""
from __future__ import annotations

import gc

from kafkatier.server.gc_tuning import GcPauses, freeze_startup_objects


def test_each_collection_is_recorded_under_its_generation():
    ticks = iter([10.0, 10.25, 20.0, 20.002])
    pauses = GcPauses(clock=lambda: next(ticks))
    pauses.on_gc("start", {"generation": 2})
    pauses.on_gc("stop", {"generation": 2})
    pauses.on_gc("start", {"generation": 0})
    pauses.on_gc("stop", {"generation": 0})
    d = pauses.describe()
    assert d["gen2"] == {"collections": 1, "total_ms": 250.0, "max_ms": 250.0}
    assert d["gen0"]["collections"] == 1 and d["gen1"]["collections"] == 0


def test_a_stop_without_its_start_is_ignored():
    pauses = GcPauses(clock=lambda: 1.0)
    pauses.on_gc("stop", {"generation": 1})
    assert pauses.describe()["gen1"]["collections"] == 0


def test_installed_it_sees_real_collections_and_uninstalls():
    pauses = GcPauses().install()
    try:
        gc.collect()
    finally:
        pauses.uninstall()
    assert pauses.describe()["gen2"]["collections"] >= 1
    assert pauses.on_gc not in gc.callbacks


def test_freezing_moves_the_tracked_objects_out_of_later_collections():
    kept = [[i] for i in range(1000)]
    try:
        frozen = freeze_startup_objects()
        assert frozen >= len(kept) and gc.get_freeze_count() == frozen
        walked = {id(o) for g in range(3) for o in gc.get_objects(generation=g)}
        assert not any(id(k) in walked for k in kept)
    finally:
        gc.unfreeze()
