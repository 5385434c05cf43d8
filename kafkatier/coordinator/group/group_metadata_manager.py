"""GroupMetadataManager: the groups this broker coordinates and their home, the ``__consumer_offsets`` log
(Kafka's ``kafka.coordinator.group.GroupMetadataManager``).

A group lives in partition :func:`~.records.partition_for` of ``__consumer_offsets``; the broker leading that
partition is its coordinator.  On becoming leader the partition is *loaded*: read from the log start to the log
end, last record per key wins, tombstones delete.  While loading, requests for its groups are answered
COORDINATOR_LOAD_IN_PROGRESS.  On losing leadership the partition is *unloaded*: its groups are dropped from
memory (the coordinator answers their waiting members NOT_COORDINATOR).  Each load/unload carries the leader
epoch, so a late unload never removes a newer load (Kafka's coordinator epoch).

Writes go through :class:`OffsetsTopicLog`, the narrow view of the ReplicaManager the broker passes in:
append with acks=all (``offsets.commit.required.acks``) and read.  Records are built here as one uncompressed
record batch per write (group metadata, offsets or tombstones of one request).

Not thread safe on its own: the GroupCoordinator's lock guards ``groups``, ``owned`` and ``loading``; the log
reads of a load run outside it.
"""
from __future__ import annotations

import time
from typing import Callable, Iterable, Protocol

import attrs
from kafka.record.default_records import DefaultRecordBatchBuilder

from kafkatier.coordinator.group import records
from kafkatier.coordinator.group.group_metadata import GroupMetadata
from kafkatier.coordinator.group.records import GroupMetadataKey, GroupRecord, OffsetAndMetadata, OffsetKey
from kafkatier.coordinator.log_reader import batches_of, read_to_log_end
from kafkatier.logsetup import get_logger, kv

log = get_logger("coordinator.group.metadata-manager")

OFFSETS_TOPIC = "__consumer_offsets"

#: Our default for ``offsets.topic.num.partitions`` (Kafka: 50).  A simulated cluster runs every replica as a
#: Python object in a few processes; 10 partitions spread groups over brokers as well while keeping start-up
#: (and the LeaderAndIsr of the offsets topic) small.  Set the config to 50 for Kafka's layout.
DEFAULT_OFFSETS_TOPIC_PARTITIONS = 10

#: The offsets topic's configs, as Kafka's ``GroupMetadataManager.offsetsTopicConfigs``.
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "compression.type": "producer",
                         "segment.bytes": str(100 * 1024 * 1024)}


class OffsetsTopicLog(Protocol):
    """What the coordinator needs of the ReplicaManager, for partitions of ``__consumer_offsets`` only."""

    def append(self, partition: int, records: bytes, callback: Callable[[int], None],
               verification_guard: object | None = None) -> None:
        """Append as leader with acks=all; ``callback(error_code)`` once replicated, failed or timed out.  Must
        not call back on the caller's thread while the caller may hold locks (run it asynchronously).
        ``verification_guard``: from :meth:`verify_transaction`, for a transactional offset commit."""

    def verify_transaction(self, partition: int, transactional_id: str | None, producer_id: int,
                           producer_epoch: int, callback: Callable[[int, object | None], None]) -> None:
        """KIP-890 part 1: ``callback(error_code, guard)`` once the producer's coordinator confirmed that the
        partition is in its ongoing transaction (at once when nothing needs asking)."""

    def read(self, partition: int, offset: int, max_bytes: int) -> tuple[bytes, int]:
        """``(record batches from offset, log end offset)``; raises ``KafkaError`` when not the leader."""


@attrs.frozen
class LoadedPartition:
    """What one ``__consumer_offsets`` partition holds: the last group record and offsets per group."""
    groups: dict[str, GroupRecord]
    offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]]
    skipped: int = 0
    #: transactional offset commits without a marker yet: producer id -> group -> offsets
    pending_txn_offsets: dict = attrs.field(factory=dict)
    #: pending ones a plain commit written later supersedes: {(producer id, group, (topic, partition))}
    superseded_txn_offsets: set = attrs.field(factory=set)


def build_records(entries: Iterable[tuple[bytes, bytes | None]], now_ms: int, producer_id: int = -1,
                  producer_epoch: int = -1) -> bytes:
    """One uncompressed batch; transactional (Kafka's ``withTransactionalRecords``, no sequence) when a
    producer id is given: a transactional offset commit, which the producer's marker commits or aborts."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=producer_id >= 0,
                                        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=-1,
                                        batch_size=1 << 30)
    for i, (key, value) in enumerate(entries):
        builder.append(i, timestamp=now_ms, key=key, value=value, headers=[])
    return bytes(builder.build())


def parse_partition(chunks: Iterable[bytes]) -> LoadedPartition:
    """Replay ``__consumer_offsets`` batches: last value per key, tombstones delete; unreadable records are
    counted and skipped (Kafka logs and skips them too)."""
    groups: dict[str, GroupRecord] = {}
    offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
    pending: dict[int, dict[str, dict[tuple[str, int], OffsetAndMetadata]]] = {}
    superseded: set[tuple[int, str, tuple[str, int]]] = set()
    skipped = 0
    for batch in batches_of(chunks):
        if getattr(batch, "is_control_batch", False):
            # A transaction marker: COMMIT merges the producer's pending offsets, ABORT drops them.
            kind = next((int.from_bytes(bytes(r.key)[2:4], "big") for r in batch
                         if r.key is not None and len(r.key) >= 4), None)
            txn = pending.pop(batch.producer_id, {})
            if kind == 1:    # the newer record wins: a plain commit written after the transactional one
                for g, o in txn.items():
                    offsets.setdefault(g, {}).update(
                        {tp: v for tp, v in o.items() if (batch.producer_id, g, tp) not in superseded})
            superseded = {s for s in superseded if s[0] != batch.producer_id}
            continue
        if getattr(batch, "is_transactional", False):
            for rec in batch:
                try:
                    key = records.read_key(rec.key) if rec.key is not None else None
                    if isinstance(key, OffsetKey):
                        value = records.read_offset_value(rec.value)
                        if value is not None:
                            pending.setdefault(batch.producer_id, {}).setdefault(key.group, {})[
                                (key.topic, key.partition)] = value
                            superseded.discard((batch.producer_id, key.group, (key.topic, key.partition)))
                except records.MalformedRecordError as e:
                    skipped += 1
                    log.error("skipping unreadable record %s", kv(topic=OFFSETS_TOPIC, reason=e))
            continue
        for rec in batch:
            if rec.key is None:
                skipped += 1
                continue
            try:
                key = records.read_key(rec.key)
                if isinstance(key, OffsetKey):
                    value = records.read_offset_value(rec.value)
                    per_group = offsets.setdefault(key.group, {})
                    if value is None:
                        per_group.pop((key.topic, key.partition), None)
                    else:
                        per_group[(key.topic, key.partition)] = value
                        superseded.update((pid, key.group, (key.topic, key.partition))
                                          for pid, per in pending.items()
                                          if (key.topic, key.partition) in per.get(key.group, {}))
                elif isinstance(key, GroupMetadataKey):
                    group = records.read_group_value(rec.value)
                    if group is None:
                        groups.pop(key.group, None)
                        offsets.pop(key.group, None)
                    else:
                        groups[key.group] = group
            except records.MalformedRecordError as e:
                skipped += 1
                log.error("skipping unreadable record %s", kv(topic=OFFSETS_TOPIC, reason=e))
    return LoadedPartition(groups, {g: o for g, o in offsets.items() if o}, skipped, pending, superseded)


class GroupMetadataManager:
    def __init__(self, offsets_log: OffsetsTopicLog, num_partitions: int,
                 time_ms: Callable[[], int] = lambda: int(time.time() * 1000), load_buffer_size: int = 5 << 20):
        if num_partitions <= 0:
            raise ValueError(f"offsets.topic.num.partitions must be positive, not {num_partitions}")
        self.log = offsets_log
        self.num_partitions = num_partitions
        self.time_ms = time_ms
        self.load_buffer_size = load_buffer_size
        self.groups: dict[str, GroupMetadata] = {}
        self.owned: dict[int, int] = {}       # partition -> leader epoch it was loaded at
        self.loading: set[int] = set()

    def partition_for(self, group_id: str) -> int:
        return records.partition_for(group_id, self.num_partitions)

    def is_local(self, group_id: str) -> bool:
        p = self.partition_for(group_id)
        return p in self.owned and p not in self.loading

    def is_loading(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.loading

    def any_loading(self) -> bool:
        return bool(self.loading)

    def groups_of(self, partition: int) -> list[GroupMetadata]:
        return [g for g in self.groups.values() if self.partition_for(g.group_id) == partition]

    # --- writes -------------------------------------------------------------------------------------------
    def store(self, group_id: str, entries: list[tuple[bytes, bytes | None]], callback: Callable[[int], None]) -> None:
        """Append ``entries`` (key, value-or-tombstone) to the group's partition; ``callback(error_code)``."""
        self.log.append(self.partition_for(group_id), build_records(entries, self.time_ms()), callback)

    def store_transactional(self, group_id: str, producer_id: int, producer_epoch: int,
                            entries: list[tuple[bytes, bytes | None]], callback: Callable[[int], None],
                            verification_guard: object | None = None) -> None:
        """Append a transactional offset commit (a transactional batch of the producer, no sequence)."""
        records_ = build_records(entries, self.time_ms(), producer_id, producer_epoch)
        if verification_guard is None:
            self.log.append(self.partition_for(group_id), records_, callback)
        else:
            self.log.append(self.partition_for(group_id), records_, callback, verification_guard=verification_guard)

    def verify_transaction(self, group_id: str, transactional_id: str | None, producer_id: int, producer_epoch: int,
                           callback: Callable[[int, object | None], None]) -> None:
        """KIP-890 part 1 for the group's partition (see :class:`OffsetsTopicLog`); nothing to ask without a
        transactional id."""
        if not transactional_id:
            callback(0, None)
            return
        self.log.verify_transaction(self.partition_for(group_id), transactional_id, producer_id, producer_epoch,
                                    callback)

    @staticmethod
    def group_entry(group: GroupMetadata) -> tuple[bytes, bytes | None]:
        return records.group_metadata_key(group.group_id), records.group_metadata_value(group.to_record())

    @staticmethod
    def offset_entry(group_id: str, tp: tuple[str, int], value: OffsetAndMetadata | None) -> tuple[bytes, bytes | None]:
        key = records.offset_commit_key(group_id, tp[0], tp[1])
        return key, (records.offset_commit_value(value) if value is not None else None)

    @staticmethod
    def group_tombstone(group_id: str) -> tuple[bytes, None]:
        return records.group_metadata_key(group_id), None

    # --- loading ------------------------------------------------------------------------------------------
    def read_partition(self, partition: int) -> LoadedPartition:
        """Read the partition from its start to its log end (outside the coordinator's lock)."""
        return parse_partition(read_to_log_end(self.log, partition, self.load_buffer_size))
