"""Leader epoch lineage of a partition (Kafka's ``LeaderEpochFileCache``), kept in ``leader-epoch-checkpoint``.

Entries ``(epoch, start_offset)``: the first offset written in each leader epoch. Both epochs and start
offsets strictly increase. The file is rewritten atomically on every change::

    0
    2
    0 0
    3 120
"""
from __future__ import annotations

import os
import threading
from typing import Iterable

import attrs

from kafkatier.log.checkpoints import (LEADER_EPOCH_CHECKPOINT, CheckpointFile, _java_split, decode_entries,
                                       encode_entries)
from kafkatier.logsetup import get_logger, kv

log = get_logger("log")

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@attrs.frozen(order=True)
class EpochEntry:
    epoch: int
    start_offset: int


def _parse(line: str) -> EpochEntry | None:
    parts = _java_split(line)
    if len(parts) != 2:
        return None
    try:
        return EpochEntry(int(parts[0]), int(parts[1]))
    except ValueError:
        return None


def _format(entry: EpochEntry) -> str:
    return f"{entry.epoch} {entry.start_offset}"


def encode_leader_epoch_checkpoint(entries: Iterable[EpochEntry]) -> bytes:
    """``leader-epoch-checkpoint`` bytes (also the remote tier's ``.leader_epoch_checkpoint`` index)."""
    return encode_entries(entries, _format)


def decode_leader_epoch_checkpoint(data: bytes, where: str = LEADER_EPOCH_CHECKPOINT) -> list[EpochEntry]:
    """Inverse of :func:`encode_leader_epoch_checkpoint`; raises CheckpointReadError."""
    return decode_entries(data, _parse, where)


class LeaderEpochCheckpointFile:
    """``leader-epoch-checkpoint`` in a partition directory."""

    def __init__(self, path: str):
        self._file: CheckpointFile[EpochEntry] = CheckpointFile(path, _format, _parse)

    @property
    def path(self) -> str:
        return self._file.path

    def write(self, entries: list[EpochEntry], sync: bool = True) -> None:
        self._file.write_entries(entries, sync=sync)

    def read(self) -> list[EpochEntry]:
        return self._file.read_entries()

    def move_to(self, path: str) -> None:
        self._file.path = path


class LeaderEpochFileCache:
    """Thread-safe epoch cache backed by a checkpoint file (``None`` path keeps it in memory only).

    Every change rewrites the checkpoint atomically but without fsync; :meth:`flush` (called by the log's flush,
    before it moves its recovery point, and by its close) makes it durable.  Like Kafka since 3.7 (KAFKA-15046):
    becoming leader of 20,000 partitions must not cost 40,000 fsyncs, and entries lost in a machine crash are
    above the recovery point, so recovery rebuilds them from the batches it scans.

    A new leader's epoch (``assign(..., write=False)``) is not written at once: the broker writes the
    checkpoints of all partitions a LeaderAndIsr made leaders in a background task
    (:meth:`write_if_dirty`), so the request is answered without one file replacement per partition (~1 ms each
    in a busy broker: seconds at a failover).  Differs from Kafka, which writes it inside ``makeLeader``.  Lost
    by a kill before that task, the entry is harmless: with no batch in the epoch, the previous epoch ends at
    the same log end offset; with batches, they are above the recovery point (:meth:`flush` writes a pending
    entry before the point moves) and recovery assigns their epoch again.

    The log's load truncates entries at or past its end in memory only (``truncate_from_end(..., write=False)``,
    Kafka's ``truncateFromEndAsyncFlush``): after a kill -9 a broker holding 20,000 empty replicas would otherwise
    replace one file per partition it led before registering.  The stale file is rewritten by the next write of
    the cache, before any batch follows the log end offset (a follower's append asks :meth:`assign` to write
    even when its epoch is not new; a leader's appends come in a newer epoch, which recovery would assign over
    the stale entries), by the log's flush before its recovery point moves, by its close, and by the log
    manager's background pass after start-up; a kill before then truncates the same entries at the next load.
    """

    def __init__(self, path: str | None, topic_partition: str = ""):
        self.topic_partition = topic_partition
        self._lock = threading.RLock()
        self._checkpoint = LeaderEpochCheckpointFile(path) if path else None
        self._epochs: list[EpochEntry] = []   # replaced by every update, never changed in place (latest_epoch)
        self._unsynced = False
        self._dirty = False  # a change not written to the checkpoint yet (assign with write=False)
        if self._checkpoint is not None:
            for entry in self._checkpoint.read():
                self._assign(entry)

    # --- reads ----------------------------------------------------------------------------------------
    def epoch_entries(self) -> list[EpochEntry]:
        with self._lock:
            return list(self._epochs)

    @property
    def latest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._epochs[-1] if self._epochs else None

    @property
    def latest_epoch(self) -> int | None:
        # Read on every leader append, without the lock: every update replaces the list (never changes it in
        # place), so the list read here is one consistent version.
        epochs = self._epochs
        return epochs[-1].epoch if epochs else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._epochs[0] if self._epochs else None

    def previous_epoch(self) -> int | None:
        with self._lock:
            return self._epochs[-2].epoch if len(self._epochs) >= 2 else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch in which ``offset`` was written, as far as the cache knows."""
        with self._lock:
            previous = None
            for entry in self._epochs:
                if entry.start_offset == offset:
                    return entry.epoch
                if entry.start_offset > offset:
                    return previous
                previous = entry.epoch
            return previous

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end offset)`` for OffsetsForLeaderEpoch: where ``requested_epoch`` ended.

        The latest epoch ends at the log end offset; an older one ends where the next known epoch starts, and
        the answer names the largest known epoch <= requested. Unknown (above the latest, or undefined)
        gives ``(-1, -1)``.
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if requested_epoch == self._epochs[-1].epoch:
                return requested_epoch, log_end_offset
            higher = next((e for e in self._epochs if e.epoch > requested_epoch), None)
            if higher is None:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            floor = None
            for e in self._epochs:
                if e.epoch <= requested_epoch:
                    floor = e
            if floor is None:
                return requested_epoch, higher.start_offset
            return floor.epoch, higher.start_offset

    # --- writes ---------------------------------------------------------------------------------------
    def assign(self, epoch: int, start_offset: int, write: bool = True) -> None:
        """Record that ``epoch`` starts at ``start_offset``; entries it contradicts are removed.  ``write=False``
        leaves the checkpoint to :meth:`write_if_dirty` or the next change (see the class docstring)."""
        with self._lock:
            if self._assign(EpochEntry(epoch, start_offset)):
                log.debug(kv(event="epoch_assigned", partition=self.topic_partition, epoch=epoch,
                             start_offset=start_offset))
                if write:
                    self._flush()
                else:
                    self._dirty = self._checkpoint is not None
            elif write and self._dirty:
                # A change left unwritten (a truncation at load, a new leader's epoch) is written before batches
                # it describes follow it: a follower's appends call this for their first epoch even when it is
                # not new.
                self._flush()

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"Received invalid partition leader epoch entry {entry}")
        latest = self._epochs[-1] if self._epochs else None
        if latest is not None and entry.epoch == latest.epoch and entry.start_offset >= latest.start_offset:
            return False
        removed = [e for e in self._epochs if e.epoch >= entry.epoch or e.start_offset >= entry.start_offset]
        # Warned only when it drops data's epochs: a previous epoch starting at the same offset held no batch
        # (a leader elected again before anything was written), as Kafka's maybeTruncateNonMonotonicEntries.
        if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
            log.warning(kv(event="epoch_entries_truncated", partition=self.topic_partition, new=entry,
                           removed=removed))
        self._epochs = [e for e in self._epochs if e not in removed] + [entry]
        return True

    def truncate_from_end(self, end_offset: int, write: bool = True) -> None:
        """Remove entries starting at or after ``end_offset`` (log truncation).  ``write=False`` (the log's load)
        leaves the checkpoint to the next write, :meth:`write_if_dirty` or :meth:`flush` (see :meth:`assign`)."""
        with self._lock:
            if end_offset >= 0 and self._epochs and self._epochs[-1].start_offset >= end_offset:
                self._epochs = [e for e in self._epochs if e.start_offset < end_offset]
                if write:
                    self._flush()
                else:
                    self._dirty = self._checkpoint is not None

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly below ``start_offset``; the one covering it is moved to start there."""
        with self._lock:
            if start_offset < 0:
                return
            removed = [e for e in self._epochs if e.start_offset <= start_offset]
            if not removed:
                return
            kept = [e for e in self._epochs if e.start_offset > start_offset]
            last = removed[-1]
            self._epochs = [EpochEntry(last.epoch, start_offset)] + kept
            if removed != [self._epochs[0]]:
                self._flush()

    def clear_and_flush(self) -> None:
        with self._lock:
            self._epochs = []
            self._flush()

    def _flush(self) -> None:
        if self._checkpoint is not None:
            self._checkpoint.write(self._epochs, sync=False)
            self._dirty = False
            self._unsynced = True

    def write_if_dirty(self) -> None:
        """Write (without fsync) a change that ``assign(..., write=False)`` left unwritten."""
        with self._lock:
            if self._dirty:
                self._flush()

    def flush(self) -> None:
        """Make the checkpoint durable if a change since the last flush was not written or written without
        fsync."""
        with self._lock:
            if self._checkpoint is not None and (self._unsynced or self._dirty):
                self._checkpoint.write(self._epochs)
                self._unsynced = self._dirty = False

    def move_to_dir(self, new_dir: str) -> None:
        """Follow a rename of the partition directory."""
        with self._lock:
            if self._checkpoint is not None:
                self._checkpoint.move_to(os.path.join(new_dir, LEADER_EPOCH_CHECKPOINT))

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self.topic_partition}, {self._epochs})"
