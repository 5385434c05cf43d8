"""A coordinator's internal topic (``__consumer_offsets``, ``__transaction_state``) over the ReplicaManager: appends
with acks=-1 and origin COORDINATOR, reads straight from the leader's log when the coordinator loads a partition
(Kafka's GroupMetadataManager and TransactionStateManager both do so)."""
from __future__ import annotations

from typing import Callable

from kafkatier.common.structs import TopicPartition
from kafkatier.protocol.errors import Errors
from kafkatier.server.replica_manager import ProducePartitionResult, ReplicaManager


class ReplicaManagerTopicLog:
    def __init__(self, replica_manager: ReplicaManager, topic: str):
        self.replica_manager = replica_manager
        self.topic = topic

    def _append(self, partition: int, records: bytes, timeout_ms: int, callback: Callable[[int], None],
                verification_guard: object | None = None) -> None:
        """Append ``records`` to the partition on this leader; ``callback`` gets the error code (0: appended)."""
        tp = TopicPartition(self.topic, partition)

        def respond(results: dict[TopicPartition, ProducePartitionResult]) -> None:
            result = results.get(tp)
            callback(int(result.error) if result is not None else int(Errors.UNKNOWN_SERVER_ERROR))
        self.replica_manager.append_records(timeout_ms, -1, {tp: records}, respond, from_coordinator=True,
                                            verification_guards=None if verification_guard is None
                                            else {tp: verification_guard})

    def read(self, partition: int, offset: int, max_bytes: int) -> tuple[bytes, int]:
        """Batches from ``offset`` (at least the log start) and the log end offset, on the leader only."""
        p = self.replica_manager.get_partition_or_error(self.topic, partition, leader_only=True)
        plog = p.log
        offset = max(offset, plog.log_start_offset)
        info = plog.read(offset, max_bytes, None, min_one_message=True)
        return bytes(info.records or b""), plog.log_end_offset
