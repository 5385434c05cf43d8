"""FindCoordinator over an internal topic (``server/internal_topics.py``): the key's partition leader on the
request's listener, COORDINATOR_NOT_AVAILABLE while the topic is being created or the partition has no leader,
and a creation that another broker won is not an error."""
from __future__ import annotations

import pytest

from kafkatier.protocol.errors import Errors, KafkaError, TopicAlreadyExistsError
from kafkatier.server.internal_topics import AutoTopicCreationManager, InternalTopic, find_coordinator
from kafkatier.server.metadata_cache import BrokerEndpoint, MetadataCache, PartitionMetadata

OFFSETS = InternalTopic("__consumer_offsets", "offsets topic", "group id")


def cache_with(leaders: dict[int, int]) -> MetadataCache:
    cache = MetadataCache(broker_id=1)
    cache.partitions = {OFFSETS.name: {p: PartitionMetadata(OFFSETS.name, p, leader, 0, (leader,), (leader,), (), 0)
                                       for p, leader in leaders.items()}}
    cache.brokers = {1: BrokerEndpoint(1, "127.0.0.1", 9092), 2: BrokerEndpoint(2, "127.0.0.2", 9093)}
    cache.listeners = {2: {"SSL": BrokerEndpoint(2, "127.0.0.2", 9443)}}
    return cache


def test_the_coordinator_is_the_leader_of_the_keys_partition_on_the_listener():
    cache = cache_with({0: 1, 1: 2})
    created = []
    assert find_coordinator(cache, OFFSETS, "g", lambda key: 1, lambda: created.append(1)) == (
        0, None, 2, "127.0.0.2", 9093)
    assert find_coordinator(cache, OFFSETS, "g", lambda key: 1, lambda: created.append(1), "SSL") == (
        0, None, 2, "127.0.0.2", 9443)
    assert created == []


def test_a_missing_topic_is_created_and_answered_not_available():
    created = []
    answer = find_coordinator(cache_with({}), OFFSETS, "g", lambda key: 0, lambda: created.append(1))
    assert answer == (int(Errors.COORDINATOR_NOT_AVAILABLE), "the offsets topic is being created", -1, "", -1)
    assert created == [1]


@pytest.mark.parametrize("leaders, partition", [({0: -1}, 0), ({0: 1}, 5), ({0: 7}, 0)])
def test_no_leader_no_partition_or_no_endpoint_is_not_available(leaders, partition):
    answer = find_coordinator(cache_with(leaders), OFFSETS, "g", lambda key: partition, lambda: None)
    assert answer[:2] == (int(Errors.COORDINATOR_NOT_AVAILABLE), "the coordinator is not available")


def test_an_empty_key_is_an_invalid_request():
    assert find_coordinator(cache_with({0: 1}), OFFSETS, "", lambda key: 0, lambda: None) == (
        int(Errors.INVALID_REQUEST), "the group id must not be empty", -1, "", -1)


def test_the_replication_factor_is_at_most_the_live_brokers():
    live = [0]
    manager = AutoTopicCreationManager(lambda *a: None, live_brokers=lambda: live[0])
    out = []
    for live[0] in (0, 1, 2, 5):
        out.append(manager.replication_factor(3))
    assert out == [1, 1, 2, 3]


def test_creation_passes_the_topic_shape_and_tolerates_failures():
    calls = []
    manager = AutoTopicCreationManager(lambda *a: calls.append(a), lambda: 3)
    manager.create(OFFSETS, 50, 3, {"cleanup.policy": "compact"})
    assert calls == [("__consumer_offsets", 50, 3, {"cleanup.policy": "compact"})]

    def already(*_):
        raise TopicAlreadyExistsError("exists")
    AutoTopicCreationManager(already, lambda: 3).create(OFFSETS, 50, 3, {})    # another broker created it: fine

    def refused(*_):
        raise KafkaError("no", Errors.INVALID_REPLICATION_FACTOR)
    AutoTopicCreationManager(refused, lambda: 3).create(OFFSETS, 50, 3, {})    # logged; FindCoordinator asks again

    def broken(*_):
        raise OSError("zk down")
    AutoTopicCreationManager(broken, lambda: 3).create(OFFSETS, 50, 3, {})
