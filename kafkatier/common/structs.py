"""Value types shared by every layer (aiokafka's ``structs.py``; Kafka's ``org.apache.kafka.common``
``TopicPartition``, ``TopicIdPartition`` and the controller's ``PartitionAndReplica``, ``LeaderAndIsr``,
``BrokerInfo``), and the one topic-name rule (Kafka's ``Topic.validate``).

``TopicPartition`` and ``PartitionAndReplica`` are named tuples: interchangeable with the ``(topic, partition)``
keys used on the data plane, and cheap to hash and sort (the controller sorts thousands of them per request);
they print like Kafka's (``topic-partition``, ``topic-partition-replica``).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import attrs


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@attrs.frozen(order=True)
class TopicIdPartition:
    """A partition with its topic id (22-char base64); printed like Kafka's ``TopicIdPartition``."""

    topic_id: str
    topic: str
    partition: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def __str__(self) -> str:
        return f"{self.topic_id}:{self.topic}-{self.partition}"


class PartitionAndReplica(NamedTuple):
    tp: TopicPartition
    replica: int

    def __str__(self) -> str:
        return f"{self.tp}-{self.replica}"


@attrs.frozen
class LeaderAndIsr:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    partition_epoch: int  # the state znode's zkVersion
    leader_recovery_state: int = 0

    NO_LEADER = -1
    LEADER_DURING_DELETE = -2
    EPOCH_DURING_DELETE = -2
    NO_EPOCH = -1


@attrs.frozen
class BrokerInfo:
    id: int
    host: str
    port: int
    epoch: int  # czxid of /brokers/ids/{id}
    endpoints: tuple[str, ...] = ()
    rack: str | None = None


# ------------------------------------------------------------------------------------------------ topic names

MAX_TOPIC_NAME_LENGTH = 249


def _legal_char(c: str) -> bool:
    return ("a" <= c <= "z") or ("A" <= c <= "Z") or ("0" <= c <= "9") or c in "._-"


def topic_name_error(name: object) -> str | None:
    """Kafka's ``Topic.validate``: None for a legal topic name, else Kafka's message.  Callers raise it as
    their layer's error (InvalidTopicError on the broker, a usage error in the CLI)."""
    if not isinstance(name, str) or name == "":
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return (f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, "
                f"Topic name: {name}")
    if not all(_legal_char(c) for c in name):
        return (f'Topic name "{name}" is illegal, it contains a character other than ASCII alphanumerics, '
                "'.', '_' and '-'")
    return None


def is_valid_topic_name(name: object) -> bool:
    return topic_name_error(name) is None


def validate_topic_name(name: object, error: Callable[[str], Exception]) -> None:
    """Raise ``error(message)`` for an illegal topic name (the caller's layer picks the error type)."""
    message = topic_name_error(name)
    if message is not None:
        raise error(message)
