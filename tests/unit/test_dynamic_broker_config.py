"""DynamicBrokerConfig alone, over a fake ZooKeeper entity-config store (unit test of one class)."""
from __future__ import annotations

import pytest

from kafkatier.protocol.errors import Errors, KafkaError
from kafkatier.server.dynamic_broker_config import (DEFAULT_CONFIG, DYNAMIC_BROKER_CONFIG,
                                                    DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG,
                                                    DynamicBrokerConfig)


class FakeEntityConfigs:
    def __init__(self) -> None:
        self.store: dict[tuple[str, str], tuple[dict, int]] = {}
        self.notifications: list[str] = []

    def get_entity_config_and_version(self, entity_type, name):
        cfg, version = self.store.get((entity_type, name), ({}, None))
        return dict(cfg), version

    def change_entity_config_conditionally(self, entity_type, name, config, expected_version):
        _, version = self.store.get((entity_type, name), ({}, None))
        assert version == expected_version
        self.store[(entity_type, name)] = (dict(config), (version or 0) + 1)
        self.notifications.append(f"{entity_type}/{name}")
        return f"/config/changes/config_change_{len(self.notifications):010d}"


@pytest.fixture
def cfg():
    calls = []
    zk = FakeEntityConfigs()
    d = DynamicBrokerConfig(1, {"broker.id": "1", "min.insync.replicas": "1"}, zk, reconfigurables=[
        (frozenset({"min.insync.replicas"}), lambda eff: calls.append(eff["min.insync.replicas"]))])
    return d, zk, calls


def entry(d, name, resource="1"):
    return next(e for e in d.describe(resource) if e["name"] == name)


def test_sources_and_synonyms_in_precedence_order(cfg):
    d, zk, calls = cfg
    assert entry(d, "broker.id")["source"] == STATIC_BROKER_CONFIG and entry(d, "broker.id")["read_only"]
    assert entry(d, "log.retention.hours")["source"] == DEFAULT_CONFIG
    d.on_change("<default>", {"min.insync.replicas": "2", "log.retention.minutes": "5"})
    d.on_change("1", {"min.insync.replicas": "3"})
    e = entry(d, "min.insync.replicas")
    assert e["value"] == "3" and e["source"] == DYNAMIC_BROKER_CONFIG
    assert [(s["value"], s["source"]) for s in e["synonyms"]] == [
        ("3", DYNAMIC_BROKER_CONFIG), ("2", DYNAMIC_DEFAULT_BROKER_CONFIG), ("1", STATIC_BROKER_CONFIG),
        ("1", DEFAULT_CONFIG)]
    retention = entry(d, "log.retention.ms")
    assert retention["value"] is None and [s["name"] for s in retention["synonyms"]] == [
        "log.retention.minutes", "log.retention.hours"]
    assert calls == ["2", "3"]          # reconfigured on each change of its names only
    d.on_change("2", {"min.insync.replicas": "9"})   # another broker's entity: ignored
    assert d.value("min.insync.replicas") == "3" and calls == ["2", "3"]
    assert [e["name"] for e in d.describe("")] == ["log.retention.minutes", "min.insync.replicas"]


def test_alter_writes_the_layer_with_a_notification(cfg):
    d, zk, _ = cfg
    d.alter("1", {"min.insync.replicas": "2"}, [], replace=False)
    d.alter("1", {"log.retention.ms": "100"}, [], replace=False)
    assert zk.store[("brokers", "1")][0] == {"min.insync.replicas": "2", "log.retention.ms": "100"}
    d.alter("1", {}, ["min.insync.replicas"], replace=False)
    assert zk.store[("brokers", "1")][0] == {"log.retention.ms": "100"}
    d.alter("", {"leader.replication.throttled.rate": "1000"}, [], replace=True)
    assert zk.store[("brokers", "<default>")][0] == {"leader.replication.throttled.rate": "1000"}
    assert zk.notifications == ["brokers/1"] * 3 + ["brokers/<default>"]
    d.alter("1", {"min.insync.replicas": "4"}, [], replace=False, validate_only=True)
    assert len(zk.notifications) == 4


@pytest.mark.parametrize("resource,sets,message", [
    ("1", {"broker.id": "2"}, "Cannot update these configs dynamically: Set(broker.id)"),
    ("1", {"sasl.kerberos.ticket.renew.jitter": "x"}, "Not a number of type DOUBLE"),
    ("", {"sasl.kerberos.min.time.before.relogin": "1"}, "broker id must be specified"),
    ("1", {"min.insync.replicas": "x"}, "Not a number of type INT"),
    ("1", {"min.insync.replicas": "0"}, "Value must be at least 1"),
    ("1", {"log.cleanup.policy": None}, "Null value not supported"),
    ("7", {"min.insync.replicas": "2"}, "Unexpected broker id, expected 1"),
    ("one", {"min.insync.replicas": "2"}, "Broker id must be an integer"),
])
def test_bad_changes_are_invalid_request_and_write_nothing(cfg, resource, sets, message):
    d, zk, _ = cfg
    with pytest.raises(KafkaError) as e:
        d.alter(resource, sets, [], replace=False)
    assert e.value.error == Errors.INVALID_REQUEST and message in e.value.message
    assert zk.notifications == []


def test_a_bad_stored_value_is_skipped_not_applied(cfg):
    d, _, calls = cfg
    d.on_change("1", {"min.insync.replicas": "zero", "broker.id": "5"})
    assert d.value("min.insync.replicas") == "1" and d.value("broker.id") == "1" and calls == []
