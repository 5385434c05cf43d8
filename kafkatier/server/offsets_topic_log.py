"""The ``__consumer_offsets`` partitions as the group coordinator sees them: the ReplicaManager behind the
coordinator's narrow :class:`~kafkatier.coordinator.group.group_metadata_manager.OffsetsTopicLog` protocol
(Kafka's GroupMetadataManager calls ``replicaManager.appendRecords`` with ``offsets.commit.required.acks`` = -1
and reads the log directly when loading).
"""
from __future__ import annotations

from typing import Callable

from kafkatier.common.structs import TopicPartition
from kafkatier.coordinator.group.group_metadata_manager import OFFSETS_TOPIC
from kafkatier.protocol.errors import Errors, KafkaError
from kafkatier.server.add_partitions_to_txn_manager import AddPartitionsToTxnManager
from kafkatier.server.coordinator_topic_log import ReplicaManagerTopicLog
from kafkatier.server.replica_manager import ReplicaManager


class ReplicaManagerOffsetsLog(ReplicaManagerTopicLog):
    def __init__(self, replica_manager: ReplicaManager, commit_timeout_ms: int = 5000,
                 txn_verification: AddPartitionsToTxnManager | None = None):
        super().__init__(replica_manager, OFFSETS_TOPIC)
        self.commit_timeout_ms = commit_timeout_ms   # Kafka's offsets.commit.timeout.ms
        self.txn_verification = txn_verification     # None: transaction.partition.verification.enable=false

    def append(self, partition: int, records: bytes, callback: Callable[[int], None],
               verification_guard: object | None = None) -> None:
        self._append(partition, records, self.commit_timeout_ms, callback, verification_guard)

    def verify_transaction(self, partition: int, transactional_id: str | None, producer_id: int,
                           producer_epoch: int, callback: Callable[[int, object | None], None]) -> None:
        """KIP-890 part 1 for a transactional offset commit (Kafka's
        ``ReplicaManager.maybeStartTransactionVerificationForPartition``): when the producer has no transaction
        open on the partition, ask its coordinator whether the partition is in its ongoing transaction.
        ``callback(error_code, guard)``: the guard goes with the append, so a marker written meanwhile refuses it."""
        tp = TopicPartition(OFFSETS_TOPIC, partition)
        if self.txn_verification is None or not transactional_id:
            callback(0, None)
            return
        try:
            p = self.replica_manager.get_partition_or_error(OFFSETS_TOPIC, partition, leader_only=True)
        except KafkaError as e:
            callback(int(e.error), None)
            return
        if p.producer_state.ongoing_first_offset(producer_id) is not None:
            callback(0, None)    # already in the transaction here: the producer epoch is checked at append
            return
        guard = p.producer_state.start_verification(producer_id)
        self.txn_verification.verify(transactional_id, producer_id, producer_epoch, [tp],
                                     lambda errors: callback(int(errors.get(tp, Errors.NONE)), guard))
