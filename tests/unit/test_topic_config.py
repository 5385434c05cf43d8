"""Topic config validation (Kafka's LogConfig rules and ConfigException messages) and the DescribeConfigs view."""
from __future__ import annotations

import pytest

from kafkatier.admin import topic_config as tc
from kafkatier.log import log_config as lc
from kafkatier.log.log_config import LogConfig
from kafkatier.admin.topic_config import ConfigSource, ConfigSynonym
from kafkatier.protocol.errors import Errors, InvalidConfigurationError


def invalid(props, **kw) -> str:
    with pytest.raises(InvalidConfigurationError) as e:
        lc.validate_topic_config(props, **kw)
    assert e.value.error is Errors.INVALID_CONFIG
    return e.value.message


def test_known_names_and_kafka_defaults():
    for name in ("cleanup.policy", "retention.ms", "retention.bytes", "segment.bytes", "segment.ms",
                 "min.insync.replicas", "max.message.bytes", "unclean.leader.election.enable",
                 "message.timestamp.type", "remote.storage.enable", "local.retention.ms", "local.retention.bytes",
                 "remote.log.copy.disable", "remote.log.delete.on.disable", "file.delete.delay.ms",
                 "index.interval.bytes", "segment.index.bytes", "compression.type", "flush.messages", "flush.ms",
                 "delete.retention.ms", "min.compaction.lag.ms", "max.compaction.lag.ms",
                 "min.cleanable.dirty.ratio", "preallocate", "segment.jitter.ms"):
        assert name in lc.TOPIC_CONFIG_NAMES
    d = lc.TOPIC_CONFIG_DEFAULTS
    assert d["retention.ms"] == "604800000" and d["retention.bytes"] == "-1"
    assert d["segment.bytes"] == "1073741824" and d["max.message.bytes"] == "1048588"
    assert d["cleanup.policy"] == "delete" and d["min.insync.replicas"] == "1"
    assert d["local.retention.ms"] == "-2" and d["local.retention.bytes"] == "-2"
    assert d["remote.storage.enable"] == "false" and d["flush.ms"] == str(2**63 - 1)
    assert d["message.timestamp.type"] == "CreateTime" and d["min.cleanable.dirty.ratio"] == "0.5"


def test_valid_config_parses_to_typed_values():
    values = lc.validate_topic_config({"retention.ms": " 1000 ", "cleanup.policy": "compact, delete",
                                       "unclean.leader.election.enable": "TRUE", "min.cleanable.dirty.ratio": "0.25",
                                       "preallocate": "true"})
    assert values["retention.ms"] == 1000
    assert values["cleanup.policy"] == ["compact", "delete"]
    assert values["unclean.leader.election.enable"] is True
    assert values["min.cleanable.dirty.ratio"] == 0.25
    assert values["segment.bytes"] == 1073741824          # default filled in
    assert lc.normalize_value("cleanup.policy", " compact ,delete ") == "compact,delete"


@pytest.mark.parametrize("props,message", [
    ({"retention.mss": "1"}, "Unknown topic config name: retention.mss"),
    ({"retention.ms": "abc"}, "Invalid value abc for configuration retention.ms: Not a number of type LONG"),
    ({"retention.ms": "-5"}, "Invalid value -5 for configuration retention.ms: Value must be at least -1"),
    ({"retention.ms": "1_000"}, "Invalid value 1_000 for configuration retention.ms: Not a number of type LONG"),
    ({"max.message.bytes": "3000000000"},
     "Invalid value 3000000000 for configuration max.message.bytes: Not a number of type INT"),
    ({"segment.bytes": "10"}, "Invalid value 10 for configuration segment.bytes: Value must be at least 14"),
    ({"min.insync.replicas": "0"}, "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"),
    ({"cleanup.policy": "compact,foo"},
     "Invalid value foo for configuration cleanup.policy: String must be one of: compact, delete"),
    ({"compression.type": "brotli"}, "Invalid value brotli for configuration compression.type: String must be one "
                                     "of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ({"message.timestamp.type": "createtime"}, "Invalid value createtime for configuration message.timestamp.type: "
                                               "String must be one of: CreateTime, LogAppendTime"),
    ({"min.cleanable.dirty.ratio": "1.5"},
     "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"),
    ({"min.cleanable.dirty.ratio": "x"},
     "Invalid value x for configuration min.cleanable.dirty.ratio: Not a number of type DOUBLE"),
    ({"unclean.leader.election.enable": "yes"},
     "Invalid value yes for configuration unclean.leader.election.enable: Expected value to be either true or false"),
    ({"remote.storage.enable": "maybe"},
     "Invalid value maybe for configuration remote.storage.enable: Expected value to be either true or false"),
    ({"local.retention.ms": "-3"}, "Invalid value -3 for configuration local.retention.ms: Value must be at least -2"),
    ({"local.retention.bytes": "x"},
     "Invalid value x for configuration local.retention.bytes: Not a number of type LONG"),
    ({"compression.gzip.level": "0"},
     "Invalid value 0 for configuration compression.gzip.level: Value must be between 1 and 9 or equal to -1"),
    ({"leader.replication.throttled.replicas": "0:1,x"},
     "Invalid value [0:1, x] for configuration leader.replication.throttled.replicas: "
     "leader.replication.throttled.replicas must be the literal '*' or a list of replicas in the following "
     "format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."),
    ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
     "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"),
    ({"retention.ms": None}, "Null value not supported for topic configs: retention.ms"),
])
def test_invalid_configs_give_kafkas_messages(props, message):
    assert invalid(props) == message


def test_first_invalid_value_in_kafkas_definition_order_is_reported():
    # segment.bytes is defined before retention.ms in Kafka's ConfigDef.
    assert "segment.bytes" in invalid({"retention.ms": "x", "segment.bytes": "x"})


def test_throttled_replicas_accept_star_and_pairs():
    lc.validate_topic_config({"leader.replication.throttled.replicas": "*",
                              "follower.replication.throttled.replicas": "0:1, 1:2"})


def test_tiered_rules_see_the_broker_flag_after_every_value_parsed():
    msg = invalid({"remote.storage.enable": "true"}, existing={"retention.ms": "5"})
    assert msg.startswith("Tiered Storage functionality is disabled in the broker.")
    lc.validate_topic_config({"remote.storage.enable": "true"},
                             broker_config={"remote.log.storage.system.enable": "true"})
    # The tiered rules run only after every value parsed: a bad value is reported first.
    assert "Not a number" in invalid({"remote.storage.enable": "true", "retention.ms": "x"})


def test_broker_properties_supply_defaults_with_unit_conversion():
    d = lc.topic_defaults_from_broker({"log.retention.hours": "24", "log.roll.ms": "1000", "log.roll.hours": "1",
                                       "message.max.bytes": "2000", "log.retention.bytes": "garbage"})
    assert d["retention.ms"] == str(24 * 3600 * 1000)
    assert d["segment.ms"] == "1000"                   # log.roll.ms wins over log.roll.hours
    assert d["max.message.bytes"] == "2000"
    assert d["retention.bytes"] == "-1"                # unparsable broker value: Kafka's default
    assert lc.topic_defaults_from_broker({"log.retention.ms": "7", "log.retention.hours": "1"})["retention.ms"] == "7"


def entries(overrides, broker=None):
    return {e.name: e for e in tc.describe_topic_config(overrides, broker)}


def test_describe_override_broker_and_default_sources():
    es = entries({"retention.ms": " 1000 ", "cleanup.policy": "compact"}, {"log.segment.bytes": "2097152"})
    assert set(es) == set(lc.TOPIC_CONFIG_NAMES)
    r = es["retention.ms"]
    assert (r.value, r.source, r.read_only, r.sensitive) == ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG, False, False)
    assert r.synonyms == (ConfigSynonym("retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG),)
    c = es["cleanup.policy"]
    assert c.synonyms == (ConfigSynonym("cleanup.policy", "compact", ConfigSource.DYNAMIC_TOPIC_CONFIG),
                          ConfigSynonym("log.cleanup.policy", "delete", ConfigSource.DEFAULT_CONFIG))
    s = es["segment.bytes"]
    assert (s.value, s.source) == ("2097152", ConfigSource.STATIC_BROKER_CONFIG)
    assert s.synonyms == (ConfigSynonym("log.segment.bytes", "2097152", ConfigSource.STATIC_BROKER_CONFIG),
                          ConfigSynonym("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG))
    m = es["max.message.bytes"]
    assert (m.value, m.source) == ("1048588", ConfigSource.DEFAULT_CONFIG)
    assert m.synonyms == (ConfigSynonym("message.max.bytes", "1048588", ConfigSource.DEFAULT_CONFIG),)
    # As in Kafka, retention.ms lists no default synonym (log.retention.ms has no default of its own).
    assert entries({})["retention.ms"].synonyms == ()
    assert entries({})["remote.storage.enable"].value == "false"
    assert entries({})["min.cleanable.dirty.ratio"].value == "0.5"


def test_describe_selected_names_and_unparsable_override():
    es = tc.describe_topic_config({"retention.ms": "oops"}, None, names=["retention.ms", "nope"])
    assert [(e.name, e.value, e.source) for e in es] == [("retention.ms", "oops", ConfigSource.DYNAMIC_TOPIC_CONFIG)]


def test_java_double_rendering():
    assert [lc.java_double_str(x) for x in (0.5, 1.0, 1e-5, 1e7, 123.25)] == ["0.5", "1.0", "1.0E-5", "1.0E7",
                                                                             "123.25"]


def test_the_log_layers_config_takes_broker_defaults():
    cfg = LogConfig.from_props({"segment.ms": "100"}, defaults=lc.broker_topic_defaults({"log.retention.hours": "1"}))
    assert cfg.segment_ms == 100 and cfg.retention_ms == 3_600_000
    assert cfg.overridden == frozenset({"segment.ms"})


def test_describe_agrees_with_the_log_layer():
    assert LogConfig.from_props({}).to_props() == tc.effective_topic_config({})
