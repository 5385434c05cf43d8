"""Every broker setting is checked by Kafka 3.9's validator for it: a bad value stops the broker with Kafka's
``ConfigException`` text, and a dynamic update with the same value is refused with the same text."""
from __future__ import annotations

import pytest

from kafkatier.server.config import BrokerConfig, BrokerSettingError, broker_setting
from kafkatier.server.dynamic_broker_config import BROKER_CONFIGS, CLUSTER_WIDE, PER_BROKER, parse_setting
from kafkatier.server.kafka_config_defs import KAFKA_BROKER_CONFIGS

#: (setting, bad value, Kafka 3.9's message for it).
BAD_VALUES = [
    ("offsets.topic.replication.factor", "0", "Value must be at least 1"),
    ("offsets.topic.replication.factor", "40000", "Not a number of type SHORT"),
    ("offsets.topic.num.partitions", "0", "Value must be at least 1"),
    ("offsets.retention.minutes", "0", "Value must be at least 1"),
    ("offsets.retention.check.interval.ms", "0", "Value must be at least 1"),
    ("group.max.size", "0", "Value must be at least 1"),
    ("transaction.state.log.num.partitions", "0", "Value must be at least 1"),
    ("transaction.state.log.replication.factor", "0", "Value must be at least 1"),
    ("transaction.state.log.min.isr", "0", "Value must be at least 1"),
    ("transaction.state.log.segment.bytes", "0", "Value must be at least 1"),
    ("transaction.state.log.load.buffer.size", "0", "Value must be at least 1"),
    ("transaction.max.timeout.ms", "0", "Value must be at least 1"),
    ("transactional.id.expiration.ms", "0", "Value must be at least 1"),
    ("transaction.abort.timed.out.transaction.cleanup.interval.ms", "0", "Value must be at least 1"),
    ("transaction.remove.expired.transaction.cleanup.interval.ms", "0", "Value must be at least 1"),
    ("num.partitions", "0", "Value must be at least 1"),
    ("replica.fetch.max.bytes", "-1", "Value must be at least 0"),
    ("kafkatier.network.inline.max.bytes", "-1", "Value must be at least 0"),
    ("kafkatier.network.max.in.flight.requests.per.connection", "0", "Value must be at least 1"),
    ("log.retention.check.interval.ms", "0", "Value must be at least 1"),
    ("leader.imbalance.check.interval.seconds", "0", "Value must be at least 1"),
    ("min.insync.replicas", "0", "Value must be at least 1"),
    ("log.segment.bytes", "13", "Value must be at least 14"),
    ("log.cleaner.min.cleanable.ratio", "1.5", "Value must be no more than 1"),
    ("log.cleaner.min.cleanable.ratio", "-0.1", "Value must be at least 0"),
    ("num.partitions", "many", "Not a number of type INT"),
    ("num.partitions", "3000000000", "Not a number of type INT"),
    ("replica.lag.time.max.ms", "soon", "Not a number of type LONG"),
    ("auto.create.topics.enable", "yes", "Expected value to be either true or false"),
    ("log.cleaner.io.buffer.load.factor", "most", "Not a number of type DOUBLE"),
    ("security.inter.broker.protocol", "sasl_ssl",
     "String must be one of: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ("compression.type", "brotli",
     "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
]


@pytest.mark.parametrize("name,value,message", BAD_VALUES)
def test_a_bad_value_stops_the_broker_with_kafkas_message(name, value, message):
    with pytest.raises(BrokerSettingError) as e:
        BrokerConfig.from_props({name: value}, broker_id=0, zookeeper_connect="z", log_dirs="d")
    assert str(e.value) == f"Invalid value {value} for configuration {name}: {message}"


@pytest.mark.parametrize("name,value,message", BAD_VALUES)
def test_a_dynamic_update_with_a_bad_value_is_refused_with_the_same_message(name, value, message):
    with pytest.raises(ValueError, match=f"^Invalid value {value} for configuration {name}: {message}$"):
        parse_setting(BROKER_CONFIGS[name], value)


def test_a_list_setting_names_the_element_that_is_not_allowed():
    with pytest.raises(BrokerSettingError) as e:
        broker_setting({"log.cleanup.policy": "compact,forever"}, "log.cleanup.policy")
    assert str(e.value) == ("Invalid value forever for configuration log.cleanup.policy: "
                            "String must be one of: compact, delete")
    assert broker_setting({"log.cleanup.policy": "compact,delete"}, "log.cleanup.policy") == "compact,delete"


@pytest.mark.parametrize("name,value", [("offsets.topic.replication.factor", "1"), ("num.partitions", "1"),
                                        ("log.cleaner.min.cleanable.ratio", "1"), ("compression.type", "zstd"),
                                        ("replica.fetch.max.bytes", "0")])
def test_the_smallest_good_values_pass(name, value):
    assert str(broker_setting({name: value}, name)) in (value, f"{value}.0")


def test_every_default_passes_its_own_validator():
    for name, d in BROKER_CONFIGS.items():
        if d.default is not None and d.type != "PASSWORD":
            broker_setting({}, name)


#: Rows whose validator is stricter than Kafka's on purpose (a thread count of 0, a retention below -1).
STRICTER = {"num.replica.alter.log.dirs.threads", "log.retention.ms", "log.retention.minutes",
            "log.retention.hours", "log.retention.bytes", "log.roll.ms"}
#: Defaults kafkatier changes on purpose (docs/configuration.md and docs/differences.md say why).
OWN_DEFAULTS = {"num.recovery.threads.per.data.dir", "offsets.topic.num.partitions", "sasl.enabled.mechanisms",
                "sasl.mechanism.inter.broker.protocol"}


def test_each_row_kafka_defines_has_kafkas_minimum_and_default_unless_documented():
    kafka = {row[0]: row for row in KAFKA_BROKER_CONFIGS}
    for name, d in BROKER_CONFIGS.items():
        if d.inert or name not in kafka:
            continue
        _, type_, default, _, minimum = kafka[name]
        assert d.type == type_, name
        if name not in STRICTER:
            assert d.minimum == minimum, name
        if name not in OWN_DEFAULTS:
            assert d.default == default, name


def test_dynamic_rows_are_checked_on_update_too():
    assert BROKER_CONFIGS["log.cleaner.min.cleanable.ratio"].mode == CLUSTER_WIDE
    assert BROKER_CONFIGS["remote.log.reader.threads"].mode == PER_BROKER
    with pytest.raises(ValueError, match="Value must be at least 1"):
        parse_setting(BROKER_CONFIGS["remote.log.reader.threads"], "0")
