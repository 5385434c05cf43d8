"""The ``__transaction_state`` partitions as the transaction coordinator sees them: the ReplicaManager behind the
coordinator's narrow :class:`~kafkatier.coordinator.transaction.transaction_state_manager.TransactionTopicLog`
protocol (Kafka's TransactionStateManager appends with acks=-1, origin COORDINATOR, and reads the log directly
when loading)."""
from __future__ import annotations

from typing import Callable

from kafkatier.common.structs import TopicPartition
from kafkatier.coordinator.transaction.transaction_log import TRANSACTION_STATE_TOPIC
from kafkatier.protocol.errors import Errors
from kafkatier.server.replica_manager import ProducePartitionResult, ReplicaManager


class ReplicaManagerTransactionLog:
    def __init__(self, replica_manager: ReplicaManager):
        self.replica_manager = replica_manager

    def append(self, partition: int, records: bytes, timeout_ms: int, callback: Callable[[int], None]) -> None:
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, partition)

        def respond(results: dict[TopicPartition, ProducePartitionResult]) -> None:
            result = results.get(tp)
            callback(int(result.error) if result is not None else int(Errors.UNKNOWN_SERVER_ERROR))
        self.replica_manager.append_records(timeout_ms, -1, {tp: records}, respond, from_coordinator=True)

    def read(self, partition: int, offset: int, max_bytes: int) -> tuple[bytes, int]:
        p = self.replica_manager.get_partition_or_error(TRANSACTION_STATE_TOPIC, partition, leader_only=True)
        plog = p.log
        offset = max(offset, plog.log_start_offset)
        info = plog.read(offset, max_bytes, None, min_one_message=True)
        return bytes(info.records or b""), plog.log_end_offset
