"""FindCoordinator over an internal topic: Kafka's ``KafkaApis.getCoordinator`` with the creation of
``__consumer_offsets`` and ``__transaction_state`` on first use (Kafka's ``AutoTopicCreationManager`` for
internal topics).

The coordinator of a key (a group id, a transactional id) is the leader of the key's partition of its internal
topic.  While the topic does not exist, the lookup asks for it to be created and answers COORDINATOR_NOT_AVAILABLE,
which clients retry; so it does while that partition has no leader.  Used by ``server/group_apis.py`` and
``server/transaction_apis.py``, which say how many partitions, which replication factor and which topic configs.

Difference from Kafka: the callers cap the replication factor at the number of live brokers (Kafka refuses to
create the topic with fewer live brokers than configured; a simulator with one broker should still work).
"""
from __future__ import annotations

from typing import Callable, Mapping

import attrs

from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import Errors, KafkaError

log = get_logger("server.internal-topics")

#: FindCoordinator's answer: (error code, error message, node id, host, port).
CoordinatorAnswer = tuple[int, "str | None", int, str, int]
_NO_NODE = (-1, "", -1)


@attrs.frozen
class InternalTopic:
    """An internal topic that holds coordinator state."""

    name: str
    description: str   # in log lines and FindCoordinator's messages: "offsets topic"
    key_name: str      # what its keys are: "group id"


def find_coordinator(cache, topic: InternalTopic, key: str, partition_for: Callable[[str], int],
                     create: Callable[[], None], listener: str = "PLAINTEXT") -> CoordinatorAnswer:
    """The coordinator of ``key``: the leader of ``topic``'s partition ``partition_for(key)`` on ``listener``;
    ``create()`` when the topic does not exist yet.  ``cache`` is the broker's metadata cache."""
    if not key:
        return (int(Errors.INVALID_REQUEST), f"the {topic.key_name} must not be empty", *_NO_NODE)
    parts = cache.topic_partitions(topic.name)
    if not parts:
        create()
        return (int(Errors.COORDINATOR_NOT_AVAILABLE), f"the {topic.description} is being created", *_NO_NODE)
    partition = partition_for(key)
    pm = next((p for p in parts if p.partition == partition), None)
    broker = cache.broker(pm.leader, listener) if pm is not None and pm.leader >= 0 else None
    if broker is None:
        return (int(Errors.COORDINATOR_NOT_AVAILABLE), "the coordinator is not available", *_NO_NODE)
    return (0, None, broker.id, broker.host, broker.port)


class AutoTopicCreationManager:
    """Kafka's ``AutoTopicCreationManager``, for the internal topics: creates one through ``create_topic(name,
    partitions, replication factor, configs)`` (the admin ZooKeeper client's)."""

    def __init__(self, create_topic: Callable[[str, int, int, dict], None], live_brokers: Callable[[], int]):
        self.create_topic = create_topic
        self.live_brokers = live_brokers

    def replication_factor(self, configured: int) -> int:
        """An internal topic's replication factor: the configured one, at most the live brokers (kafkatier's)."""
        return max(1, min(configured, self.live_brokers()))

    def create(self, topic: InternalTopic, partitions: int, replication_factor: int,
               configs: Mapping[str, str]) -> None:
        """Ask for ``topic`` to be created; another broker creating it first (TOPIC_ALREADY_EXISTS) is success,
        any other failure is logged and the next FindCoordinator asks again."""
        try:
            self.create_topic(topic.name, partitions, replication_factor, dict(configs))
            log.info("creating the %s %s", topic.description, kv(topic=topic.name, partitions=partitions,
                                                                  replication_factor=replication_factor))
        except KafkaError as e:
            if e.error != Errors.TOPIC_ALREADY_EXISTS:
                log.warning("cannot create the %s %s", topic.description, kv(reason=e))
        except Exception:  # noqa: BLE001
            log.exception("cannot create the %s", topic.description)
