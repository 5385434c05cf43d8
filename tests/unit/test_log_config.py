"""LogConfig: Kafka defaults, string parsing and Kafka's validation messages."""
from __future__ import annotations

import pytest

from kafkatier.log.errors import InvalidConfigurationError
from kafkatier.log.log_config import LogConfig, broker_topic_defaults
from kafkatier.protocol.errors import Errors


def test_kafka_defaults():
    c = LogConfig.from_props({})
    assert (c.segment_bytes, c.segment_ms, c.retention_ms, c.retention_bytes) == \
        (1073741824, 604800000, 604800000, -1)
    assert (c.index_interval_bytes, c.segment_index_bytes, c.max_message_bytes) == (4096, 10485760, 1048588)
    assert (c.cleanup_policy, c.min_insync_replicas, c.message_timestamp_type, c.file_delete_delay_ms) == \
        (("delete",), 1, "CreateTime", 60000)
    assert c.delete and not c.compact
    assert c.to_props()["cleanup.policy"] == "delete" and c.to_props()["preallocate"] == "false"


def test_parses_strings_and_overrides_defaults():
    c = LogConfig.from_props({"segment.bytes": " 1048576 ", "cleanup.policy": "compact,delete",
                              "unclean.leader.election.enable": "TRUE"},
                             defaults={"retention.ms": "1000", "segment.bytes": "2048"})
    assert c.segment_bytes == 1048576 and c.retention_ms == 1000
    assert c.compact and c.delete and c.unclean_leader_election_enable
    assert c.overridden == {"segment.bytes", "cleanup.policy", "unclean.leader.election.enable"}


@pytest.mark.parametrize("props,message", [
    ({"segment.bytes": "abc"}, "Invalid value abc for configuration segment.bytes: Not a number of type INT"),
    ({"segment.bytes": "10"}, "Invalid value 10 for configuration segment.bytes: Value must be at least 14"),
    ({"retention.ms": "-2"}, "Invalid value -2 for configuration retention.ms: Value must be at least -1"),
    ({"cleanup.policy": "delete,forever"},
     "Invalid value forever for configuration cleanup.policy: String must be one of: compact, delete"),
    ({"message.timestamp.type": "Now"},
     "Invalid value Now for configuration message.timestamp.type: String must be one of: CreateTime, "
     "LogAppendTime"),
    ({"preallocate": "yes"},
     "Invalid value yes for configuration preallocate: Expected value to be either true or false"),
    ({"min.cleanable.dirty.ratio": "1.5"},
     "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"),
    ({"segment.bytes": "99999999999"},
     "Invalid value 99999999999 for configuration segment.bytes: Not a number of type INT"),
    ({"no.such.config": "1"}, "Unknown topic config name: no.such.config"),
    ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
     "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"),
])
def test_validation_errors(props, message):
    with pytest.raises(InvalidConfigurationError) as e:
        LogConfig.from_props(props)
    assert str(e.value) == message
    assert e.value.error == Errors.INVALID_CONFIG


def test_broker_defaults_mapping():
    d = broker_topic_defaults({"log.retention.hours": "1", "log.segment.bytes": "1048576",
                               "message.max.bytes": "2000", "log.retention.check.interval.ms": "10"})
    assert d == {"retention.ms": "3600000", "segment.bytes": "1048576", "max.message.bytes": "2000"}
    assert broker_topic_defaults({"log.retention.ms": "5", "log.retention.hours": "1"})["retention.ms"] == "5"
    assert LogConfig.from_props({}, defaults=d).retention_ms == 3600000


def test_with_overrides_keeps_base():
    base = LogConfig.from_props({"retention.ms": "1000"})
    c = base.with_overrides({"segment.bytes": "4096"})
    assert c.retention_ms == 1000 and c.segment_bytes == 4096
