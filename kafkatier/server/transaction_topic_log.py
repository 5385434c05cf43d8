"""The ``__transaction_state`` partitions as the transaction coordinator sees them: the ReplicaManager behind the
coordinator's narrow :class:`~kafkatier.coordinator.transaction.transaction_state_manager.TransactionTopicLog`
protocol (Kafka's TransactionStateManager appends with acks=-1, origin COORDINATOR, and reads the log directly
when loading)."""
from __future__ import annotations

from typing import Callable

from kafkatier.coordinator.transaction.transaction_log import TRANSACTION_STATE_TOPIC
from kafkatier.server.coordinator_topic_log import ReplicaManagerTopicLog
from kafkatier.server.replica_manager import ReplicaManager


class ReplicaManagerTransactionLog(ReplicaManagerTopicLog):
    def __init__(self, replica_manager: ReplicaManager):
        super().__init__(replica_manager, TRANSACTION_STATE_TOPIC)

    def append(self, partition: int, records: bytes, timeout_ms: int, callback: Callable[[int], None]) -> None:
        self._append(partition, records, timeout_ms, callback)
