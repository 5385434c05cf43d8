"""``BrokerConfig``: its broker settings come from their one definition (``BROKER_CONFIGS``) -- the defaults,
the types and the checks -- and go back out by the same names (DescribeConfigs' static configs)."""
from __future__ import annotations

import pytest

from kafkatier.server.config import SETTINGS, BrokerConfig, BrokerSettingError, broker_setting, settings_config


def test_the_defaults_are_the_definitions_except_the_session_timeout():
    c = BrokerConfig(broker_id=1, zookeeper_connect="zk", log_dirs="/a")
    for name, field in SETTINGS.items():
        if name != "zookeeper.session.timeout.ms":
            assert getattr(c, field) == broker_setting({}, name), name
    assert c.zookeeper_session_timeout_ms == 6000   # kafkatier's: a dead broker is noticed in seconds


def test_settings_are_typed_and_checked_and_explicit_fields_win():
    props = {"unclean.leader.election.enable": "TRUE", "replica.fetch.max.bytes": "2048", "broker.rack": "r1",
             "some.custom": "x"}
    c = BrokerConfig.from_props(props, broker_id=3, zookeeper_connect="zk", log_dirs="/a,/b", rack="r2")
    assert (c.unclean_leader_election_enable, c.replica_fetch_max_bytes, c.rack) == (True, 2048, "r2")
    assert c.log_dirs == ("/a", "/b") and c.overrides == props
    with pytest.raises(BrokerSettingError, match="Invalid value many for configuration num.partitions"):
        BrokerConfig.from_props({"num.partitions": "many"}, broker_id=1, zookeeper_connect="zk", log_dirs="/a")
    with pytest.raises(BrokerSettingError, match="delete.topic.enable: Expected value to be either true or false"):
        BrokerConfig.from_props({"delete.topic.enable": "yes"}, broker_id=1, zookeeper_connect="zk", log_dirs="/a")


def test_static_props_say_every_setting_by_its_kafka_name():
    c = BrokerConfig.from_props({"min.insync.replicas": "2"}, broker_id=1, zookeeper_connect="zk:2181",
                                log_dirs="/a", port=9092)
    props = c.static_props()
    assert props["broker.id"] == "1" and props["listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert props["min.insync.replicas"] == "2" and props["delete.topic.enable"] == "true"
    assert "broker.rack" not in props                    # unset
    assert set(props) == {"broker.id", "zookeeper.connect", "log.dirs", "listeners"} | set(SETTINGS) - {"broker.rack"}


def test_the_coordinators_configs_are_read_through_the_definitions():
    from kafkatier.coordinator.group.group_coordinator import GroupConfig
    from kafkatier.coordinator.transaction.transaction_state_manager import TransactionConfig
    assert settings_config(GroupConfig, {}) == GroupConfig()
    assert settings_config(TransactionConfig, {}) == TransactionConfig()
    group = settings_config(GroupConfig, {"group.initial.rebalance.delay.ms": "0", "x.y": "z"})
    assert group.group_initial_rebalance_delay_ms == 0
    with pytest.raises(BrokerSettingError, match="must be at least 0"):
        settings_config(TransactionConfig, {"kafkatier.transaction.add.partitions.hold.ms": "-1"})


def test_the_cleaner_config_is_read_through_the_definitions():
    from kafkatier.log.log_cleaner import CleanerConfig
    from kafkatier.server.kafka_server import cleaner_config

    def config(**props):
        return cleaner_config(BrokerConfig.from_props(props, broker_id=1, zookeeper_connect="zk", log_dirs="/a"))
    assert config() == CleanerConfig()                      # Kafka's Double.MAX_VALUE rate: unthrottled
    c = config(**{"log.cleaner.threads": "2", "log.cleaner.io.max.bytes.per.second": "1000",
                  "kafkatier.log.cleaner.duty.cycle": "5", "log.cleaner.enable": "false"})
    assert (c.num_threads, c.max_io_bytes_per_second, c.duty_cycle, c.enable_cleaner) == (2, 1000.0, 1.0, False)
    with pytest.raises(BrokerSettingError, match="log.cleaner.threads"):
        config(**{"log.cleaner.threads": "-1"})
