"""TransactionStateManager: the transactional ids this broker coordinates, and their home, ``__transaction_state``
(Kafka's ``TransactionStateManager``).

An id lives in partition :func:`~.transaction_log.partition_for` of ``__transaction_state``; the leader of that
partition is its coordinator, and the partition's leader epoch is the *coordinator epoch* (carried by markers, so
partition leaders can fence a deposed coordinator).  On becoming leader the partition is loaded (start to log
end, last record per key wins, tombstones delete); while loading, lookups answer COORDINATOR_LOAD_IN_PROGRESS; a
partition not owned answers NOT_COORDINATOR.

Writes go through :class:`TransactionTopicLog`, the narrow view of the ReplicaManager the broker passes in:
append with acks=all, read.  :meth:`append_transaction_to_log` is Kafka's ``appendTransactionToLog``: it writes
one record, translates append errors (``APPEND_ERRORS``), and completes the pending transition only if the
partition is still owned at the same coordinator epoch (else NOT_COORDINATOR).

Not thread safe on its own: the TransactionCoordinator's lock guards the cache; log reads run outside it.
"""
from __future__ import annotations

import time
from typing import Callable, Iterable, Protocol, Sequence

import attrs
from kafka.record.default_records import DefaultRecordBatchBuilder

from kafkatier.coordinator.append_errors import COORDINATOR_APPEND_ERRORS
from kafkatier.coordinator.transaction import transaction_log
from kafkatier.coordinator.transaction.transaction_log import MalformedTransactionRecordError, TransactionLogValue
from kafkatier.coordinator.transaction.transaction_metadata import TransactionMetadata, TxnTransitMetadata
from kafkatier.coordinator.log_reader import batches_of, read_to_log_end
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import Errors

log = get_logger("coordinator.transaction.state-manager")

#: Kafka's ``transactionTopicConfigs`` (min.insync.replicas is added from ``transaction.state.log.min.isr``).
TRANSACTION_TOPIC_CONFIGS = {"cleanup.policy": "compact", "compression.type": "uncompressed",
                             "unclean.leader.election.enable": "false", "segment.bytes": str(100 * 1024 * 1024)}

# Append errors as the transaction coordinator answers them (TSM ``appendTransactionToLog``).
APPEND_ERRORS = {
    **COORDINATOR_APPEND_ERRORS,
    Errors.MESSAGE_TOO_LARGE: Errors.UNKNOWN_SERVER_ERROR,
    Errors.RECORD_LIST_TOO_LARGE: Errors.UNKNOWN_SERVER_ERROR,
}


def append_error(code: int) -> Errors:
    try:
        e = Errors(code)
    except ValueError:
        return Errors.UNKNOWN_SERVER_ERROR
    return APPEND_ERRORS.get(e, e)


class TransactionTopicLog(Protocol):
    """What the coordinator needs of the ReplicaManager, for partitions of ``__transaction_state`` only."""

    def append(self, partition: int, records: bytes, timeout_ms: int, callback: Callable[[int], None]) -> None:
        """Append as leader with acks=all; ``callback(error_code)`` once replicated, failed or timed out."""

    def read(self, partition: int, offset: int, max_bytes: int) -> tuple[bytes, int]:
        """``(record batches from offset, log end offset)``; raises ``KafkaError`` when not the leader."""


@attrs.frozen
class TransactionConfig:
    """The broker configs of the transaction coordinator (Kafka's names and defaults)."""
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 100 * 1024 * 1024
    transaction_state_log_load_buffer_size: int = 5 * 1024 * 1024
    transaction_max_timeout_ms: int = 900000
    transactional_id_expiration_ms: int = 604800000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3600000
    request_timeout_ms: int = 30000
    # kafkatier's: how long AddPartitionsToTxn waits for the markers of the previous transaction (see
    # TransactionCoordinator.handle_add_partitions); 0 answers CONCURRENT_TRANSACTIONS at once, as Kafka does.
    kafkatier_transaction_add_partitions_hold_ms: int = 1000


@attrs.frozen
class LoadedTransactions:
    """What one ``__transaction_state`` partition holds: the last value per transactional id."""
    values: dict[str, TransactionLogValue]
    skipped: int = 0


def build_record(transactional_id: str, value: TransactionLogValue | None, now_ms: int) -> bytes:
    return build_records(transactional_id, [value], now_ms)


def build_records(transactional_id: str, values: Sequence[TransactionLogValue | None], now_ms: int) -> bytes:
    """One batch of ``values`` (None: a tombstone) under the id's key, in order: the last one is the state."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    key = transaction_log.key_bytes(transactional_id)
    for delta, value in enumerate(values):
        builder.append(delta, timestamp=now_ms, key=key,
                       value=None if value is None else transaction_log.value_bytes(value), headers=[])
    return bytes(builder.build())


def parse_partition(chunks: Iterable[bytes]) -> LoadedTransactions:
    """Replay ``__transaction_state`` batches: last value per key, tombstones delete; unreadable records are
    counted, logged and skipped (Kafka skips keys of unknown versions too)."""
    values: dict[str, TransactionLogValue] = {}
    skipped = 0
    for batch in batches_of(chunks):
        if getattr(batch, "is_control_batch", False):
            continue
        for rec in batch:
            try:
                if rec.key is None:
                    raise MalformedTransactionRecordError("a record without a key")
                tid = transaction_log.read_key(rec.key)
                value = transaction_log.read_value(rec.value)
            except MalformedTransactionRecordError as e:
                skipped += 1
                log.error("skipping unreadable record %s", kv(topic=transaction_log.TRANSACTION_STATE_TOPIC,
                                                              reason=e))
                continue
            if value is None:
                values.pop(tid, None)
            else:
                values[tid] = value
    return LoadedTransactions(values, skipped)


class TransactionStateManager:
    def __init__(self, topic_log: TransactionTopicLog, config: TransactionConfig,
                 time_ms: Callable[[], int] = lambda: int(time.time() * 1000)):
        if config.transaction_state_log_num_partitions <= 0:
            raise ValueError("transaction.state.log.num.partitions must be positive")
        self.log = topic_log
        self.config = config
        self.num_partitions = config.transaction_state_log_num_partitions
        self.time_ms = time_ms
        self.owned: dict[int, int] = {}                  # partition -> coordinator epoch
        self.loading: set[int] = set()
        self.metadata: dict[int, dict[str, TransactionMetadata]] = {}

    def partition_for(self, transactional_id: str) -> int:
        return transaction_log.partition_for(transactional_id, self.num_partitions)

    def validate_transaction_timeout_ms(self, txn_timeout_ms: int) -> bool:
        return 0 < txn_timeout_ms <= self.config.transaction_max_timeout_ms

    def get_transaction_state(self, transactional_id: str) -> tuple[Errors | None, int, TransactionMetadata | None]:
        """``(error, coordinator epoch, metadata or None)`` (Kafka's ``getTransactionState``)."""
        p = self.partition_for(transactional_id)
        if p in self.loading:
            return Errors.COORDINATOR_LOAD_IN_PROGRESS, -1, None
        if p not in self.owned:
            return Errors.NOT_COORDINATOR, -1, None
        return None, self.owned[p], self.metadata.get(p, {}).get(transactional_id)

    def put_if_absent(self, m: TransactionMetadata) -> TransactionMetadata:
        cache = self.metadata.setdefault(self.partition_for(m.transactional_id), {})
        return cache.setdefault(m.transactional_id, m)

    def all_metadata(self) -> list[tuple[int, TransactionMetadata]]:
        """``(coordinator epoch, metadata)`` of every id of the loaded partitions."""
        return [(self.owned[p], m) for p, cache in self.metadata.items() if p in self.owned and p not in self.loading
                for m in cache.values()]

    # --- writes -------------------------------------------------------------------------------------------
    def write(self, transactional_id: str, transits: Sequence[TxnTransitMetadata],
              callback: Callable[[int], None]) -> None:
        """Append the transitions' records, in order and in one batch (outside the coordinator's lock);
        ``callback(raw error code)``."""
        values = [None if t.txn_state.name == "DEAD" else t.to_log_value() for t in transits]
        timeout = max(1, min(min(t.txn_timeout_ms for t in transits), self.config.request_timeout_ms))
        self.log.append(self.partition_for(transactional_id), build_records(transactional_id, values, self.time_ms()),
                        timeout, callback)

    # --- loading ------------------------------------------------------------------------------------------
    def read_partition(self, partition: int) -> LoadedTransactions:
        """Read the partition from its start to its log end (outside the coordinator's lock)."""
        return parse_partition(read_to_log_end(self.log, partition, self.config.transaction_state_log_load_buffer_size))
