"""ProducerStateManager: idempotent-producer de-duplication for one partition (Kafka's ProducerStateManager,
reduced to what de-duplication needs).

For each producer id it keeps the last five batches appended (producer epoch, first and last sequence, first
and last offset), taken from batch headers only.  A retried batch whose producer epoch and sequence range match
one of those is a duplicate: the broker answers with the offsets it was first written at and appends nothing
(Kafka's behaviour, so a producer retry after a lost acknowledgement does not write a record twice).  The
state is rebuilt when a replica is opened and after a truncation: from the latest producer state snapshot at or
below the log end offset (``<offset>.snapshot``, Kafka's format version 1: version, CRC-32C, then per producer its
id, epoch, last sequence, last offset, offset delta, timestamp, coordinator epoch and ``currentTxnFirstOffset``),
then the batch headers of the log from that offset on -- or of the whole log when there is no usable snapshot (a
bad CRC or version is logged and the file ignored).  :meth:`take_snapshot` writes one (the log does at each
segment roll and at shutdown, Kafka's points); snapshots above the log end are deleted at rebuild (a truncation
made them wrong) and only the two most recent are kept.  As in Kafka, a producer's state loaded from a snapshot
holds its last batch only (de-duplication of the four before it needs the log).  Out-of-order sequences are not
rejected (see docs/differences.md).

Transactions (Kafka's ``ProducerStateManager`` / ``ProducerAppendInfo``): per producer the latest epoch and
coordinator epoch, and the first offset of its open transaction (``currentTxnFirstOffset``), set by its first
transactional batch and cleared by its COMMIT/ABORT control batch.  :meth:`update` returns the transactions an
append completed (:class:`CompletedTxn`); the log indexes the aborted ones (``log/transaction_index.py``).
:meth:`first_unstable_offset` is the first offset of the oldest open transaction, or of the oldest completed one
whose marker is not yet below the high watermark (Kafka's ``firstUnstableOffset``); the last stable offset is
that, bounded by the high watermark.  :meth:`check_append` is the leader's check of a client batch: an epoch
older than the producer's is INVALID_PRODUCER_EPOCH, a non-transactional batch while the producer has a
transaction open is INVALID_TXN_STATE; :meth:`check_marker` the check of a marker (older epoch:
INVALID_PRODUCER_EPOCH; older coordinator epoch: TRANSACTION_COORDINATOR_FENCED).
"""
from __future__ import annotations

import os
import struct
import threading
from collections import deque

import attrs
from crc32c import crc32c

from kafkatier.common.atomic_file import atomic_write
from kafkatier.common.byte_utils import read_varint as _read_varint
from kafkatier.common.files import delete_if_exists
from kafkatier.logsetup import get_logger, kv

from kafkatier.log.errors import Errors, KafkaError
from kafkatier.log.record_batch import (CONTROL_FLAG_MASK, HEADER, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2,
                                        TRANSACTIONAL_FLAG_MASK, iter_batches)

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_ID = -1
_SCAN_CHUNK = 1 << 20

log = get_logger("log.producer-state")

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
SNAPSHOTS_KEPT = 2
_SNAPSHOT_HEADER = struct.Struct(">hIi")        # version, crc (of what follows it), number of producers
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")     # id, epoch, last seq, last offset, offset delta, timestamp,
#                                                  coordinator epoch, current transaction's first offset


@attrs.frozen
class DuplicateAppend:
    """A retried idempotent batch already in the log: answered with its original offsets, not appended again."""
    first_offset: int
    last_offset: int


class CorruptSnapshotError(ValueError):
    """A ``.snapshot`` file that cannot be used (Kafka's CorruptSnapshotException)."""


def snapshot_path(log_dir: str, offset: int) -> str:
    return os.path.join(log_dir, f"{offset:020d}{SNAPSHOT_SUFFIX}")


def snapshot_offsets(log_dir: str) -> list[int]:
    """The offsets of the snapshots in ``log_dir``, ascending."""
    try:
        names = os.listdir(log_dir)
    except OSError:
        return []
    return sorted(int(n[:-len(SNAPSHOT_SUFFIX)]) for n in names
                  if n.endswith(SNAPSHOT_SUFFIX) and n[:-len(SNAPSHOT_SUFFIX)].isdigit())


@attrs.frozen
class SnapshotEntry:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def encode_snapshot(entries: list[SnapshotEntry]) -> bytes:
    body = struct.pack(">i", len(entries)) + b"".join(
        _SNAPSHOT_ENTRY.pack(e.producer_id, e.producer_epoch, e.last_sequence, e.last_offset, e.offset_delta,
                             e.timestamp, e.coordinator_epoch, e.current_txn_first_offset) for e in entries)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(body)) + body


def decode_snapshot(data: bytes) -> list[SnapshotEntry]:
    if len(data) < _SNAPSHOT_HEADER.size:
        raise CorruptSnapshotError(f"{len(data)} bytes: shorter than the header")
    version, crc, count = _SNAPSHOT_HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"version {version}, expected {SNAPSHOT_VERSION}")
    if crc32c(data[6:]) != crc:
        raise CorruptSnapshotError("CRC mismatch")
    if count < 0 or len(data) != _SNAPSHOT_HEADER.size + count * _SNAPSHOT_ENTRY.size:
        raise CorruptSnapshotError(f"{count} producers do not fit {len(data)} bytes")
    return [SnapshotEntry(*_SNAPSHOT_ENTRY.unpack_from(data, _SNAPSHOT_HEADER.size + i * _SNAPSHOT_ENTRY.size))
            for i in range(count)]


@attrs.frozen
class BatchMetadata:
    producer_epoch: int
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


#: Control record types (Kafka's ``ControlRecordType``).
ABORT, COMMIT = 0, 1
_CONTROL_KEY = struct.Struct(">hh")


@attrs.frozen
class ActiveProducer:
    """One producer as DescribeProducers shows it (-1: unknown / none)."""
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


@attrs.frozen
class CompletedTxn:
    """A transaction closed by a marker: its producer, first offset, the marker's offset, and how it ended."""
    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


def control_record_type(batch, position: int = 0) -> int | None:
    """The type (ABORT 0, COMMIT 1) of the first record of the control batch at ``position``; None when the
    batch holds no readable control record (a cleaned, empty control batch)."""
    try:
        pos = position + HEADER_SIZE
        _, pos = _read_varint(batch, pos)       # record length
        pos += 1                                # attributes
        _, pos = _read_varint(batch, pos)       # timestamp delta
        _, pos = _read_varint(batch, pos)       # offset delta
        key_len, pos = _read_varint(batch, pos)
        if key_len < 4:
            return None
        _version, kind = _CONTROL_KEY.unpack_from(batch, pos)
        return kind
    except (IndexError, struct.error):
        return None


def _entry(base_offset: int, last_offset_delta: int, producer_epoch: int, base_sequence: int) -> BatchMetadata:
    return BatchMetadata(producer_epoch, base_sequence, base_sequence + last_offset_delta, base_offset,
                         base_offset + last_offset_delta)


class ProducerStateManager:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._producers: dict[int, deque[BatchMetadata]] = {}
        self._epochs: dict[int, int] = {}              # producer id -> latest producer epoch
        self._coordinator_epochs: dict[int, int] = {}  # producer id -> coordinator epoch of its last marker
        self._ongoing: dict[int, int] = {}             # producer id -> first offset of its open transaction
        self._unreplicated: list[CompletedTxn] = []    # completed, marker not yet below the high watermark
        self._last_timestamps: dict[int, int] = {}     # producer id -> max timestamp of its last batch
        self._verification_guards: dict[int, object] = {}  # KIP-890: producer id -> guard of its verification

    # --- transactions -------------------------------------------------------------------------------------
    def start_verification(self, producer_id: int) -> object:
        """KIP-890 part 1: the guard for a verification of ``producer_id`` with its coordinator: the pending one if
        there is one (concurrent produces of the producer share it, as Kafka's ``maybeCreateVerificationStateEntry``
        does), else a new one; a marker of the producer clears it, so a verification that raced with a marker
        does not let a late batch open a transaction."""
        with self._lock:
            return self._verification_guards.setdefault(producer_id, object())

    def check_append(self, records, verification_guard: object | None = None, verify: bool = False) -> None:
        """The leader's checks of a client's batches (raise KafkaError).  ``verify``: a transactional batch of
        a producer without an open transaction needs ``verification_guard`` to be its current guard (KIP-890)."""
        with self._lock:
            for _, h in iter_batches(records):
                if h.producer_id == NO_PRODUCER_ID:
                    continue
                if (verify and h.attributes & TRANSACTIONAL_FLAG_MASK and h.producer_id not in self._ongoing
                        and (verification_guard is None
                             or self._verification_guards.get(h.producer_id) is not verification_guard)):
                    raise KafkaError("Record was not part of an ongoing transaction", Errors.INVALID_TXN_STATE)
                current = self._epochs.get(h.producer_id)
                if current is not None and h.producer_epoch < current:
                    raise KafkaError(f"Epoch of producer {h.producer_id} at offset in batch is {h.producer_epoch}, "
                                     f"which is smaller than the last seen epoch {current}",
                                     Errors.INVALID_PRODUCER_EPOCH)
                if not h.attributes & TRANSACTIONAL_FLAG_MASK and h.producer_id in self._ongoing:
                    raise KafkaError(f"Expected transactional write from producer {h.producer_id} at offset in "
                                     f"batch", Errors.INVALID_TXN_STATE)

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        with self._lock:
            current = self._epochs.get(producer_id)
            if current is not None and producer_epoch < current:
                raise KafkaError(f"Epoch of producer {producer_id} in the marker is {producer_epoch}, which is "
                                 f"smaller than the last seen epoch {current}", Errors.INVALID_PRODUCER_EPOCH)
            stored = self._coordinator_epochs.get(producer_id, -1)
            if coordinator_epoch < stored:
                raise KafkaError(f"Invalid coordinator epoch for producer {producer_id}: {coordinator_epoch} "
                                 f"(zombie), {stored} (current)", Errors.TRANSACTION_COORDINATOR_FENCED)

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        with self._lock:
            self._unreplicated = [t for t in self._unreplicated if t.last_offset >= high_watermark]
            firsts = list(self._ongoing.values()) + [t.first_offset for t in self._unreplicated]
            return min(firsts) if firsts else None

    def ongoing_first_offset(self, producer_id: int) -> int | None:
        with self._lock:
            return self._ongoing.get(producer_id)

    def last_stable_offset_after(self, txn: CompletedTxn) -> int:
        """Kafka's ``lastStableOffset(completedTxn)``: the first offset of the oldest other open transaction,
        else the offset after the marker."""
        with self._lock:
            others = [o for pid, o in self._ongoing.items() if pid != txn.producer_id]
            return min(others) if others else txn.last_offset + 1

    def active_producers(self) -> dict[int, ActiveProducer]:
        """DescribeProducers: what the partition knows of each producer."""
        with self._lock:
            return {pid: ActiveProducer(pid, e, q[-1].last_seq if (q := self._producers.get(pid)) else -1,
                                        self._last_timestamps.get(pid, -1), self._coordinator_epochs.get(pid, -1),
                                        self._ongoing.get(pid, -1))
                    for pid, e in self._epochs.items()}

    def find_duplicate(self, records) -> BatchMetadata | None:
        """If the first batch of ``records`` was already appended by its producer, its original metadata."""
        for _, h in iter_batches(records):
            if h.producer_id == NO_PRODUCER_ID or h.base_sequence < 0:
                return None
            first, last = h.base_sequence, h.base_sequence + h.last_offset_delta
            with self._lock:
                for b in self._producers.get(h.producer_id, ()):
                    if b.producer_epoch == h.producer_epoch and b.first_seq == first and b.last_seq == last:
                        return b
            return None
        return None

    def update(self, records, coordinator_epoch: int | None = None) -> list[CompletedTxn]:
        """Record the batches of an append (``records`` with their final offsets); return the transactions
        its control batches completed.  ``coordinator_epoch`` is the marker's, when the leader knows it (a
        follower reads it from the marker's value)."""
        done: list[CompletedTxn] = []
        with self._lock:
            for pos, h in iter_batches(records):
                kind = control_record_type(records, pos) if h.attributes & CONTROL_FLAG_MASK else None
                if h.producer_id != NO_PRODUCER_ID:
                    self._last_timestamps[h.producer_id] = h.max_timestamp
                txn = self._track(h.producer_id, h.producer_epoch, h.attributes, h.base_offset, h.last_offset,
                                  kind, coordinator_epoch if coordinator_epoch is not None
                                  else _marker_coordinator_epoch(records, pos, h.attributes))
                if txn is not None:
                    done.append(txn)
                self._add(h.producer_id, _entry(h.base_offset, h.last_offset_delta, h.producer_epoch,
                                                h.base_sequence))
        return done

    def _track(self, pid: int, epoch: int, attributes: int, base_offset: int, last_offset: int, kind: int | None,
               coordinator_epoch: int) -> CompletedTxn | None:
        if pid == NO_PRODUCER_ID:
            return None
        if epoch > self._epochs.get(pid, -1):
            self._epochs[pid] = epoch
        if attributes & CONTROL_FLAG_MASK:
            self._verification_guards.pop(pid, None)
            if kind not in (ABORT, COMMIT):
                return None
            if coordinator_epoch >= 0:
                self._coordinator_epochs[pid] = coordinator_epoch
            first = self._ongoing.pop(pid, None)
            if first is None:
                return None
            txn = CompletedTxn(pid, first, last_offset, kind == ABORT)
            self._unreplicated.append(txn)
            return txn
        if attributes & TRANSACTIONAL_FLAG_MASK and pid not in self._ongoing:
            self._ongoing[pid] = base_offset
            self._verification_guards.pop(pid, None)
        return None

    def _add(self, producer_id: int, entry: BatchMetadata) -> None:
        if producer_id == NO_PRODUCER_ID or entry.first_seq < 0:
            return
        q = self._producers.get(producer_id)
        if q is None or (q and q[-1].producer_epoch != entry.producer_epoch):
            q = self._producers[producer_id] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        q.append(entry)

    def rebuild(self, log) -> None:
        """Load the latest usable snapshot at or below the log end offset (deleting those above it), then read the
        producer batches from there on in the log's segments (batch headers, and the key of control records)."""
        with self._lock:
            self._producers.clear()
            self._epochs.clear()
            self._coordinator_epochs.clear()
            self._ongoing.clear()
            self._unreplicated.clear()
            self._last_timestamps.clear()
            end = log.log_end_offset
            start = self._load_snapshot(log.dir, end, log.log_start_offset)
            segments = log.log_segments()
            for i, seg in enumerate(segments):
                if i + 1 < len(segments) and segments[i + 1].base_offset <= start:
                    continue   # wholly below the snapshot
                for (base, delta, pid, epoch, seq, attributes, kind, coordinator_epoch,
                     ts) in _scan_headers(seg.log_path):
                    if base + delta >= end:
                        break
                    if base < start:
                        continue
                    if pid != NO_PRODUCER_ID:
                        self._last_timestamps[pid] = ts
                        self._track(pid, epoch, attributes, base, base + delta, kind, coordinator_epoch)
                        self._add(pid, _entry(base, delta, epoch, seq))
            self._unreplicated.clear()

    def _load_snapshot(self, log_dir: str, end: int, log_start: int) -> int:
        """The state of the newest usable snapshot at or below ``end``; returns its offset (the log start when
        there is none: the whole log is read).  Snapshots above ``end`` are deleted."""
        for offset in reversed(snapshot_offsets(log_dir)):
            path = snapshot_path(log_dir, offset)
            if offset > end:
                log.info("deleting a producer state snapshot above the log end %s", kv(file=path, log_end=end))
                delete_if_exists(path)
                continue
            if offset < log_start:
                break
            try:
                with open(path, "rb") as f:
                    entries = decode_snapshot(f.read())
            except (OSError, CorruptSnapshotError) as e:
                log.warning("ignoring an unreadable producer state snapshot %s", kv(file=path, reason=e))
                continue
            for e in entries:
                self._epochs[e.producer_id] = e.producer_epoch
                if e.coordinator_epoch >= 0:
                    self._coordinator_epochs[e.producer_id] = e.coordinator_epoch
                if e.current_txn_first_offset >= 0:
                    self._ongoing[e.producer_id] = e.current_txn_first_offset
                if e.timestamp >= 0:
                    self._last_timestamps[e.producer_id] = e.timestamp
                if e.last_sequence >= 0 and e.last_offset >= 0:
                    first_seq = e.last_sequence - e.offset_delta
                    self._add(e.producer_id, BatchMetadata(e.producer_epoch, first_seq, e.last_sequence,
                                                           e.last_offset - e.offset_delta, e.last_offset))
            return offset
        return log_start

    def take_snapshot(self, log_dir: str, offset: int, sync: bool = True) -> str | None:
        """Write the state (of every batch below ``offset``: the caller's log end) as ``<offset>.snapshot`` and keep
        only the newest :data:`SNAPSHOTS_KEPT`; returns the path.  As Kafka, nothing is written (None) for an empty
        log or when the newest snapshot is at ``offset`` already.  ``sync=False`` skips the fsyncs (the caller
        syncs the file system: a broker's shutdown)."""
        if offset <= 0:
            return None
        existing = snapshot_offsets(log_dir)
        if existing and existing[-1] == offset:
            return None
        with self._lock:
            pids = set(self._producers) | set(self._epochs) | set(self._ongoing)
            entries = []
            for pid in sorted(pids):
                q = self._producers.get(pid)
                last = q[-1] if q else None
                entries.append(SnapshotEntry(
                    pid, self._epochs.get(pid, last.producer_epoch if last else -1),
                    last.last_seq if last else -1, last.last_offset if last else -1,
                    last.last_offset - last.first_offset if last else 0, self._last_timestamps.get(pid, -1),
                    self._coordinator_epochs.get(pid, -1), self._ongoing.get(pid, -1)))
        path = snapshot_path(log_dir, offset)
        atomic_write(path, encode_snapshot(entries), sync=sync)
        for old in sorted(set(existing) | {offset})[:-SNAPSHOTS_KEPT]:
            delete_if_exists(snapshot_path(log_dir, old))
        return path

    def producers(self) -> int:
        with self._lock:
            return len(self._producers)


_MARKER_VALUE = struct.Struct(">hi")


def _marker_coordinator_epoch(batch, position: int, attributes: int) -> int:
    """The coordinator epoch in the value of the control record at ``position`` (-1 if unreadable)."""
    if not attributes & CONTROL_FLAG_MASK:
        return -1
    try:
        pos = position + HEADER_SIZE
        _, pos = _read_varint(batch, pos)
        pos += 1
        _, pos = _read_varint(batch, pos)
        _, pos = _read_varint(batch, pos)
        key_len, pos = _read_varint(batch, pos)
        pos += max(key_len, 0)
        value_len, pos = _read_varint(batch, pos)
        if value_len < 6:
            return -1
        return _MARKER_VALUE.unpack_from(batch, pos)[1]
    except (IndexError, struct.error):
        return -1


_CONTROL_PEEK = 64


def _scan_headers(path: str):
    """(base offset, last offset delta, producer id, producer epoch, base sequence, attributes, control type,
    marker coordinator epoch, max timestamp) of each whole batch."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        size = os.fstat(fd).st_size
        pos = 0
        while pos + HEADER_SIZE <= size:
            head = os.pread(fd, HEADER_SIZE, pos)
            if len(head) < HEADER_SIZE:
                return
            h = HEADER.unpack(head)
            length = h[1] + LOG_OVERHEAD
            if length < HEADER_SIZE or pos + length > size or h[3] != MAGIC_V2:
                return
            kind, coordinator_epoch = None, -1
            if h[5] & CONTROL_FLAG_MASK:
                batch = os.pread(fd, min(length, HEADER_SIZE + _CONTROL_PEEK), pos)
                kind = control_record_type(batch)
                coordinator_epoch = _marker_coordinator_epoch(batch, 0, h[5])
            yield h[0], h[6], h[9], h[10], h[11], h[5], kind, coordinator_epoch, h[8]
            pos += length
    finally:
        os.close(fd)
