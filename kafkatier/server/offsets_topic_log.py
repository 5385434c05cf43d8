"""The ``__consumer_offsets`` partitions as the group coordinator sees them: the ReplicaManager behind the
coordinator's narrow :class:`~kafkatier.coordinator.group.group_metadata_manager.OffsetsTopicLog` protocol
(Kafka's GroupMetadataManager calls ``replicaManager.appendRecords`` with ``offsets.commit.required.acks`` = -1
and reads the log directly when loading).
"""
from __future__ import annotations

from typing import Callable

from kafkatier.common.structs import TopicPartition
from kafkatier.coordinator.group.group_metadata_manager import OFFSETS_TOPIC
from kafkatier.protocol.errors import Errors
from kafkatier.server.replica_manager import ProducePartitionResult, ReplicaManager


class ReplicaManagerOffsetsLog:
    def __init__(self, replica_manager: ReplicaManager, commit_timeout_ms: int = 5000):
        self.replica_manager = replica_manager
        self.commit_timeout_ms = commit_timeout_ms   # Kafka's offsets.commit.timeout.ms

    def append(self, partition: int, records: bytes, callback: Callable[[int], None]) -> None:
        tp = TopicPartition(OFFSETS_TOPIC, partition)

        def respond(results: dict[TopicPartition, ProducePartitionResult]) -> None:
            result = results.get(tp)
            callback(int(result.error) if result is not None else int(Errors.UNKNOWN_SERVER_ERROR))
        self.replica_manager.append_records(self.commit_timeout_ms, -1, {tp: records}, respond, from_coordinator=True)

    def read(self, partition: int, offset: int, max_bytes: int) -> tuple[bytes, int]:
        p = self.replica_manager.get_partition_or_error(OFFSETS_TOPIC, partition, leader_only=True)
        plog = p.log
        offset = max(offset, plog.log_start_offset)
        info = plog.read(offset, max_bytes, None, min_one_message=True)
        return bytes(info.records or b""), plog.log_end_offset
