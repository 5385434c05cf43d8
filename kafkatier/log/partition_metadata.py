"""``partition.metadata`` in a partition directory: the topic id the data belongs to (Kafka 2.8+)::

    version: 0
    topic_id: <topic id>
"""
from __future__ import annotations

import os
import re

from kafkatier.common.atomic_file import atomic_write

PARTITION_METADATA_FILE = "partition.metadata"
CURRENT_VERSION = 0
_SEP = re.compile(r":\s+")


class PartitionMetadataError(ValueError):
    """A malformed ``partition.metadata`` file."""


def write_partition_metadata(dir_path: str, topic_id: str, sync: bool = True) -> None:
    """Write the file atomically; ``sync=False`` skips the fsyncs (see ``Log.assign_topic_id``)."""
    atomic_write(os.path.join(dir_path, PARTITION_METADATA_FILE),
                 f"version: {CURRENT_VERSION}\ntopic_id: {topic_id}\n".encode("utf-8"), sync=sync)


def read_partition_metadata(dir_path: str) -> str | None:
    """The stored topic id, None if there is no file; PartitionMetadataError if it is malformed."""
    path = os.path.join(dir_path, PARTITION_METADATA_FILE)
    try:
        with open(path, "r", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    if len(lines) < 2:
        raise PartitionMetadataError(f"Malformed partition metadata file {path}: expected 2 lines")
    version = _SEP.split(lines[0], maxsplit=1)
    if len(version) != 2 or version[0] != "version":
        raise PartitionMetadataError(f"Malformed line in partition metadata file {path}: {lines[0]}")
    if version[1].strip() != str(CURRENT_VERSION):
        raise PartitionMetadataError(f"Unrecognized version of partition metadata file + {path}: {version[1]}")
    topic = _SEP.split(lines[1], maxsplit=1)
    if len(topic) != 2 or topic[0] != "topic_id" or not topic[1].strip():
        raise PartitionMetadataError(f"Malformed line in partition metadata file {path}: {lines[1]}")
    return topic[1].strip()
