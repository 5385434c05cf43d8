"""Partition directory names inside a log dir (Kafka's ``LocalLog`` naming).

``<topic>-<partition>`` is a partition's directory. Kafka marks a directory for deletion as
``<topic>-<partition>.<uuid-hex>-delete`` and a JBOD destination as ``<topic>-<partition>.<uuid-hex>-future``;
KIP-113's names ``.delete`` / ``.move`` are recognised too (docs/kip-113-jbod.md#directory-names).
"""
from __future__ import annotations

import os
import re
import uuid

import attrs

from kafkatier.common import structs
from kafkatier.log.errors import InvalidTopicError

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
KIP113_DELETE_SUFFIX = ".delete"
KIP113_MOVE_SUFFIX = ".move"
REMOTE_INDEX_CACHE_DIR = "remote-log-index-cache"

# Kafka: ".<32 hex chars>-delete" / "-future".
_KAFKA_SUFFIX = re.compile(r"\.([0-9a-fA-F]{32})-(delete|future)$")
MAX_DIR_NAME_LENGTH = 255


class MalformedDirNameError(ValueError):
    """A directory inside a log dir whose name is not a partition directory."""


@attrs.frozen
class PartitionDirName:
    """A parsed partition directory name."""

    topic: str
    partition: int
    kind: str  # "current", "delete" or "future"

    @property
    def topic_partition(self) -> tuple[str, int]:
        return (self.topic, self.partition)


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def _capped_name(topic: str, partition: int, suffix: str) -> str:
    unique = uuid.uuid4().hex
    tail = f"-{partition}.{unique}{suffix}"
    return topic[: max(0, MAX_DIR_NAME_LENGTH - len(tail))] + tail


def move_dir_name(topic: str, partition: int) -> str:
    """KIP-113's name for a JBOD move destination (what kafkatier writes): ``<tp>.move``."""
    return f"{topic}-{partition}{KIP113_MOVE_SUFFIX}"


def kip113_delete_dir_name(topic: str, partition: int) -> str:
    """KIP-113's name for a moved-away source pending deletion: ``<tp>.delete``."""
    return f"{topic}-{partition}{KIP113_DELETE_SUFFIX}"


def delete_dir_name(topic: str, partition: int) -> str:
    """Kafka's name for a directory scheduled for deletion (topic shortened so the name fits 255 chars)."""
    return _capped_name(topic, partition, DELETE_DIR_SUFFIX)


def future_dir_name(topic: str, partition: int) -> str:
    """Kafka's name for a JBOD move destination."""
    return _capped_name(topic, partition, FUTURE_DIR_SUFFIX)


def malformed_message(path: str, name: str) -> str:
    return (f"Found directory {path}, '{name}' is not in the form of topic-partition or "
            f"topic-partition.uniqueId-delete (if marked for deletion).\n"
            f"Kafka's log directories (and children) should only contain Kafka topic data.")


def parse_partition_dir(path: str) -> PartitionDirName:
    """Parse a partition directory path; raise :class:`MalformedDirNameError` with Kafka's message."""
    name = os.path.basename(os.path.normpath(path))
    kind = "current"
    base = name
    m = _KAFKA_SUFFIX.search(name)
    if m:
        kind = m.group(2)
        base = name[: m.start()]
    elif name.endswith(KIP113_DELETE_SUFFIX):
        kind, base = "delete", name[: -len(KIP113_DELETE_SUFFIX)]
    elif name.endswith(KIP113_MOVE_SUFFIX):
        kind, base = "future", name[: -len(KIP113_MOVE_SUFFIX)]
    idx = base.rfind("-")
    if idx <= 0 or idx == len(base) - 1:
        raise MalformedDirNameError(malformed_message(path, name))
    topic, part = base[:idx], base[idx + 1:]
    if not part.isdigit() or not part.isascii():
        raise MalformedDirNameError(malformed_message(path, name))
    return PartitionDirName(topic, int(part), kind)


def validate_topic_name(topic: str) -> None:
    """Kafka's topic name rules (``Topic.validate``); raise InvalidTopicError."""
    structs.validate_topic_name(topic, InvalidTopicError)
