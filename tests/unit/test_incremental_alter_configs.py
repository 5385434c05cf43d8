"""IncrementalAlterConfigs APPEND / SUBTRACT on LIST configs (KIP-339), as Kafka resolves them."""
from __future__ import annotations

import pytest

from kafkatier.protocol.errors import Errors, KafkaError
from kafkatier.server.incremental_alter_configs import APPEND, DELETE, SET, SUBTRACT, resolve


class Op:
    def __init__(self, name, op, value=None):
        self.name, self.config_operation, self.value = name, op, value


LISTS = {"cleanup.policy": "delete", "leader.replication.throttled.replicas": ""}.get


def test_append_and_subtract_start_from_the_override_or_default():
    sets, deletes = resolve([Op("cleanup.policy", APPEND, "compact")], {}, LISTS)
    assert sets == {"cleanup.policy": "delete,compact"} and deletes == []
    sets, _ = resolve([Op("cleanup.policy", SUBTRACT, "delete")], {"cleanup.policy": "compact,delete"}, LISTS)
    assert sets == {"cleanup.policy": "compact"}
    sets, _ = resolve([Op("leader.replication.throttled.replicas", APPEND, "0:1,0:1,1:2")],
                      {"leader.replication.throttled.replicas": "0:1"}, LISTS)
    assert sets == {"leader.replication.throttled.replicas": "0:1,1:2"}  # no duplicates
    sets, deletes = resolve([Op("retention.ms", SET, "1"), Op("segment.ms", DELETE)], {}, LISTS)
    assert sets == {"retention.ms": "1"} and deletes == ["segment.ms"]


@pytest.mark.parametrize("ops, error, text", [
    ([Op("retention.ms", APPEND, "1")], Errors.INVALID_CONFIG, "Config value append is not allowed"),
    ([Op("retention.ms", SUBTRACT, "1")], Errors.INVALID_CONFIG, "Config value subtract is not allowed"),
    ([Op("a", SET, "1"), Op("a", DELETE)], Errors.INVALID_REQUEST, "duplicate config keys"),
    ([Op("a", 7, "1")], Errors.INVALID_REQUEST, "Unknown config operation"),
])
def test_refused(ops, error, text):
    with pytest.raises(KafkaError) as e:
        resolve(ops, {}, LISTS)
    assert e.value.error == error and text in e.value.message
