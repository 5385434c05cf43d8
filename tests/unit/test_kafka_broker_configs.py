"""Every Kafka 3.9 broker config is known: inert ones accepted, stored and described as Kafka would; names Kafka
does not define are custom configs, stored (DynamicBrokerConfig over a fake entity-config store)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from kafkatier.server import incremental_alter_configs
from kafkatier.server.dynamic_broker_config import (BROKER_CONFIGS, DEFAULT_CONFIG, DYNAMIC_BROKER_CONFIG,
                                                    PER_BROKER, READ_ONLY, DynamicBrokerConfig)
from kafkatier.server.kafka_config_defs import KAFKA_BROKER_CONFIGS
from tests.unit.test_dynamic_broker_config import FakeEntityConfigs

RELOGIN = "sasl.kerberos.min.time.before.relogin"


@pytest.fixture
def dyn():
    zk = FakeEntityConfigs()
    return DynamicBrokerConfig(1, {"broker.id": "1"}, zk), zk


def test_the_table_holds_kafkas_names_types_defaults_and_modes():
    table = {row[0]: row for row in KAFKA_BROKER_CONFIGS}
    assert len(table) > 300
    assert table[RELOGIN] == (RELOGIN, "LONG", "60000", PER_BROKER, None)
    assert table["num.io.threads"][1:4] == ("INT", "8", "cluster-wide")
    assert table["zookeeper.connect"][3] == READ_ONLY
    assert table["advertised.listeners"][3] == PER_BROKER
    assert set(table) <= set(BROKER_CONFIGS)


def test_incremental_alter_of_an_inert_per_broker_config_is_stored_and_described(dyn):
    d, zk = dyn
    sets, deletes = incremental_alter_configs.resolve(
        [SimpleNamespace(name=RELOGIN, config_operation=incremental_alter_configs.SET, value="120000")], {},
        lambda name: None)
    d.alter("1", sets, deletes, replace=False)
    assert zk.store[("brokers", "1")][0] == {RELOGIN: "120000"}
    d.on_change("1", zk.store[("brokers", "1")][0])
    entries = {e["name"]: e for e in d.describe("1")}
    assert entries[RELOGIN]["value"] == "120000" and entries[RELOGIN]["source"] == DYNAMIC_BROKER_CONFIG
    assert not entries[RELOGIN]["read_only"] and entries[RELOGIN]["type"] == 5  # LONG
    assert {row[0] for row in KAFKA_BROKER_CONFIGS} <= set(entries)


def test_describe_lists_every_kafka_name_with_its_default(dyn):
    d, _ = dyn
    entries = {e["name"]: e for e in d.describe("1")}
    e = entries["background.threads"]
    assert e["value"] == "10" and e["source"] == DEFAULT_CONFIG and not e["read_only"]
    assert entries["zookeeper.connect"]["read_only"]
    assert entries["ssl.keystore.password"]["sensitive"] and entries["ssl.keystore.password"]["value"] is None


def test_a_name_kafka_does_not_define_is_a_custom_config_kept(dyn):
    d, zk = dyn
    d.alter("1", {"my.custom.setting": "x"}, [], replace=False)
    assert zk.store[("brokers", "1")][0] == {"my.custom.setting": "x"}
    d.on_change("1", {"my.custom.setting": "x"})
    assert d.value("my.custom.setting") == "x"


def test_a_read_only_kafka_name_is_still_refused(dyn):
    d, zk = dyn
    with pytest.raises(Exception) as e:
        d.alter("1", {"zookeeper.connect": "elsewhere:2181"}, [], replace=False)
    assert "Cannot update these configs dynamically: Set(zookeeper.connect)" in str(e.value)
    assert zk.notifications == []
