"""MetadataCache alone: what a broker advertises as the controller."""
from __future__ import annotations

from kafkatier.server.metadata_cache import MetadataCache


def _update(cache: MetadataCache, controller_id: int, live: list[int]) -> None:
    cache.update({"controller_id": controller_id, "topic_states": [],
                  "live_brokers": [{"id": b, "endpoints": [{"host": "127.0.0.1", "port": 9000 + b}]} for b in live]})


def test_a_controller_missing_from_the_live_brokers_is_advertised_as_none():
    cache = MetadataCache(2)
    assert cache.advertised_controller_id() == -1  # not told yet
    _update(cache, 1, [1, 2, 3])
    assert cache.advertised_controller_id() == 1
    _update(cache, 1, [2, 3])  # broker 1 died; the new controller has not announced itself yet
    assert cache.advertised_controller_id() == -1
    _update(cache, 3, [2, 3])
    assert cache.advertised_controller_id() == 3
