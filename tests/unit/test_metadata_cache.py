"""MetadataCache alone: what a broker advertises as the controller."""
from __future__ import annotations

from kafkatier.server.metadata_cache import MetadataCache
from kafkatier.protocol.control_messages import UpdateMetadataRequestData


def _update(cache: MetadataCache, controller_id: int, live: list[int]) -> None:
    cache.update(UpdateMetadataRequestData.from_json(8, {"controller_id": controller_id, "topic_states": [],
                  "live_brokers": [{"id": b, "endpoints": [{"host": "127.0.0.1", "port": 9000 + b}]} for b in live]}))


def test_a_controller_missing_from_the_live_brokers_is_advertised_as_none():
    cache = MetadataCache(2)
    assert cache.advertised_controller_id() == -1  # not told yet
    _update(cache, 1, [1, 2, 3])
    assert cache.advertised_controller_id() == 1
    _update(cache, 1, [2, 3])  # broker 1 died; the new controller has not announced itself yet
    assert cache.advertised_controller_id() == -1
    _update(cache, 3, [2, 3])
    assert cache.advertised_controller_id() == 3


def test_endpoints_per_listener_and_the_inter_broker_resolver():
    from kafkatier.common.structs import BrokerInfo
    from kafkatier.controller.request_batch import _endpoints
    from kafkatier.protocol.control_messages import UpdateMetadataBroker
    from kafkatier.server.metadata_cache import parse_link_endpoints
    infos = [BrokerInfo(b, "127.0.0.1", 9000 + b, 1, endpoints=(f"PLAINTEXT://127.0.0.1:{9000 + b}",
                                                              f"PRODUCERS://127.0.0.1:{7000 + b}")) for b in (1, 2)]
    infos.append(BrokerInfo(3, "127.0.0.1", 9003, 1))  # no PRODUCERS listener
    cache = MetadataCache(1, parse_link_endpoints("2:127.0.0.1:41002,3:127.0.0.1:41003"))
    cache.update(UpdateMetadataRequestData(controller_id=1, live_brokers=tuple(
        UpdateMetadataBroker(id=b.id, endpoints=_endpoints(b)) for b in infos)))
    assert [(b.id, b.port) for b in cache.alive_brokers()] == [(1, 9001), (2, 9002), (3, 9003)]
    assert [(b.id, b.port) for b in cache.alive_brokers("PRODUCERS")] == [(1, 7001), (2, 7002)]
    assert cache.broker(2, "PRODUCERS").port == 7002 and cache.broker(3, "PRODUCERS") is None
    assert cache.inter_broker_endpoint(2).port == 41002     # dialled through its link
    assert cache.inter_broker_endpoint(1).port == 9001      # no link to itself: as registered
    assert cache.inter_broker_endpoint(4) is None           # not alive


def test_extra_listeners_from_listeners_and_advertised_listeners():
    import pytest

    from kafkatier.server.config import extra_listeners
    props = {"listeners": "PLAINTEXT://127.0.0.1:9001,producers://127.0.0.1:7001,CONSUMERS://:7002",
             "advertised.listeners": "PRODUCERS://127.0.0.1:41001"}
    got = {e.name: (e.port, e.advertised) for e in extra_listeners(props)}
    assert got == {"PRODUCERS": (7001, "PRODUCERS://127.0.0.1:41001"),
                   "CONSUMERS": (7002, "CONSUMERS://127.0.0.1:7002")}
    assert extra_listeners({}) == []
    with pytest.raises(ValueError, match="bad listener"):
        extra_listeners({"listeners": "PRODUCERS:7001"})
