"""A partition's local log (Kafka's ``UnifiedLog`` + ``LocalLog``): ordered segments in ``<topic>-<partition>``.

Offsets: ``log_start_offset`` (first readable), ``log_end_offset`` (next to be written), ``high_watermark``
(set by the replica manager, bounded by both), ``recovery_point`` (everything below is fsynced).

All public methods are thread-safe (one re-entrant lock per log). Appends and reads move whole batches;
only batch headers are parsed.
"""
from __future__ import annotations

import bisect
import logging
import os
import shutil
import threading
import time
from typing import Any, Callable, Mapping, Protocol

import attrs

from kafkatier.common.files import delete_if_exists
from kafkatier.log import log_validator, record_batch
from kafkatier.log.checkpoints import LEADER_EPOCH_CHECKPOINT
from kafkatier.log.dir_names import parse_partition_dir
from kafkatier.log.errors import (
    CheckpointReadError,
    CorruptIndexError,
    InconsistentTopicIdError,
    KafkaError,
    MissingIndexFileError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    UnexpectedAppendOffsetError,
)
from kafkatier.common.atomic_file import fsync_dir
from kafkatier.common.faults import crash_point
from kafkatier.log.leader_epoch_cache import LeaderEpochFileCache
from kafkatier.log.log_config import LogConfig
from kafkatier.log.producer_state import DuplicateAppend, ProducerStateManager
from kafkatier.log.partition_metadata import (
    PartitionMetadataError,
    read_partition_metadata,
    write_partition_metadata,
)
from kafkatier.log.record_batch import NO_TIMESTAMP, AppendInfo, end_transaction_marker
from kafkatier.log.transaction_index import AbortedTxn
from kafkatier.log.segment import (
    CLEANED_FILE_SUFFIX,
    DELETED_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    FetchDataInfo,
    LogOffsetMetadata,
    LogSegment,
    SourceReadError,
    TimestampAndOffset,
    filename_prefix,
    random_roll_jitter,
)
from kafkatier.logsetup import get_logger, kv

# Re-exported: the broker builds logs from here.
__all__ = ["Log", "LogConfig", "AppendInfo", "FetchDataInfo", "TimestampAndOffset", "LogOffsetMetadata",
           "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP", "EARLIEST_LOCAL_TIMESTAMP",
           "LATEST_TIERED_TIMESTAMP"]

log = get_logger("log")

# ListOffsets special timestamps (Kafka's ListOffsetsRequest).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5   # KIP-1005 (ListOffsets v9): answered by the replica manager from the remote offset

# LogStartOffsetIncrementReason
LEADER_OFFSET_INCREMENTED = "LeaderOffsetIncremented"
CLIENT_RECORD_DELETION = "ClientRecordDeletion"
SEGMENT_DELETION = "SegmentDeletion"


class TaskScheduler(Protocol):
    def schedule(self, name: str, fn: Callable[[], object], delay_ms: float = 0, period_ms: float = -1) -> None:
        ...


def _now_ms() -> int:
    return int(time.time() * 1000)


class Log:
    """The local log of one partition replica."""

    def __init__(self, dir_path: str, config: LogConfig | Mapping[str, Any] | None = None, *,
                 log_start_offset: int = 0, recovery_point: int = 0, high_watermark: int | None = None,
                 had_clean_shutdown: bool = False, scheduler: TaskScheduler | None = None,
                 clock: Callable[[], int] = _now_ms, topic_id: str | None = None,
                 default_config: LogConfig | None = None, remote_log_enabled: bool = False):
        self._dir = os.path.abspath(dir_path)
        parsed = parse_partition_dir(self._dir)
        self.topic = parsed.topic
        self.partition = parsed.partition
        self._name = f"{parsed.topic}-{parsed.partition}"   # read on every append
        self.is_future = parsed.kind == "future"
        self._default_config = default_config or LogConfig()
        self._config = self._to_config(config)
        self._max_segment_ms = self._config.max_segment_ms
        self._validator = log_validator.LeaderAppendValidator(self._config)
        self._scheduler = scheduler
        self._clock = clock
        self._lock = threading.RLock()
        self._closed = False
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._next_offset = 0
        self._hw_meta: tuple[int, int, int] | None = None  # (hw, segment base, position)
        self.last_flush_time_ms = clock()
        # Hooks for tiered storage: while enabled, the log start offset may lie below the first local
        # segment, and local retention only removes uploaded segments.
        self.remote_log_enabled = remote_log_enabled
        self._highest_offset_in_remote_storage = -1
        self._producer_state: ProducerStateManager | None = None   # built on first use (producer_state)
        # Called (with this log) after its high watermark, recovery point or log start offsets may have moved:
        # the log manager's checkpoints are written only when something changed (LogManager.offsets_version).
        self.offsets_listener: Callable[[Log], None] | None = None
        self._snapshot_base: int | None = None   # the active segment's base when the producer state last looked
        os.makedirs(self._dir, exist_ok=True)
        self.topic_id: str | None = None
        self._topic_id_unsynced = False
        self._load_topic_id()
        self._epoch_cache_unreadable = False  # set by the load below: rebuilt from the batch headers
        self.leader_epoch_cache = self._load_leader_epoch_cache()
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._local_log_start_offset = 0
        self._load(had_clean_shutdown)
        self._high_watermark = self._log_start_offset
        if high_watermark is not None:
            self.update_high_watermark(high_watermark)
        if topic_id is not None:
            self.assign_topic_id(topic_id)
        if log.isEnabledFor(logging.DEBUG):  # the log manager logs one line per dir (20,000 logs at start-up)
            log.debug(kv(event="log_loaded", partition=self.name, dir=self._dir,
                         log_start_offset=self._log_start_offset, log_end_offset=self._next_offset,
                         segments=len(self._segments), clean_shutdown=had_clean_shutdown))

    # --- identity and offsets ------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def topic_partition(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def dir(self) -> str:
        return self._dir

    @property
    def parent_dir(self) -> str:
        return os.path.dirname(self._dir)

    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        self.update_config(config)

    def _to_config(self, config: LogConfig | Mapping[str, Any] | None) -> LogConfig:
        if config is None:
            return self._default_config
        if isinstance(config, LogConfig):
            return config
        return LogConfig.from_props(config, defaults=self._default_config)

    def update_config(self, config: LogConfig | Mapping[str, Any], default_config: LogConfig | None = None) -> None:
        """Apply a new topic config (a LogConfig, or Kafka topic config strings over the broker defaults, which
        ``default_config`` replaces when given: a dynamic broker config change).

        Segment and index settings affect segments created from now on."""
        if default_config is not None:
            self._default_config = default_config
        config = self._to_config(config)
        with self._lock:
            self._config = config
            self._max_segment_ms = config.max_segment_ms
            self._validator = log_validator.LeaderAppendValidator(config)
            for seg in self._segments:
                seg.index_interval_bytes = config.index_interval_bytes

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def local_log_start_offset(self) -> int:
        """First offset on local disk (differs from the log start offset only for tiered logs)."""
        return self._local_log_start_offset if self.remote_log_enabled else self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        self.update_high_watermark(value)

    def update_high_watermark(self, hw: int) -> int:
        """Set the high watermark, clamped to [log start offset, log end offset]; return the value set."""
        with self._lock:
            hw = max(self._log_start_offset, min(hw, self._next_offset))
            if hw != self._high_watermark:
                self._high_watermark = hw
                self._hw_meta = None
                self._offsets_changed()
            return hw

    def _offsets_changed(self) -> None:
        listener = self.offsets_listener
        if listener is not None:
            listener(self)

    @property
    def size(self) -> int:
        """Bytes in all segments."""
        with self._lock:
            return sum(s.size for s in self._segments)

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    def log_segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def latest_epoch(self) -> int | None:
        return self.leader_epoch_cache.latest_epoch

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """``(epoch, end offset)`` for OffsetsForLeaderEpoch."""
        with self._lock:
            return self.leader_epoch_cache.end_offset_for(leader_epoch, self._next_offset)

    def assign_epoch_start_offset(self, leader_epoch: int, start_offset: int, write: bool = True) -> None:
        """Record where ``leader_epoch`` starts (a new leader calls this with its log end offset).
        ``write=False``: the checkpoint is written by :meth:`write_leader_epoch_checkpoint` later."""
        with self._lock:
            self.leader_epoch_cache.assign(leader_epoch, start_offset, write=write)

    def write_leader_epoch_checkpoint(self) -> None:
        """Write an epoch left unwritten by ``assign_epoch_start_offset(..., write=False)``."""
        with self._lock:
            if self._closed:
                return
            self.leader_epoch_cache.write_if_dirty()

    def epoch_start_offset(self, leader_epoch: int) -> int:
        """Start offset of ``leader_epoch`` in the epoch cache (the log end offset if it is not there)."""
        for entry in self.leader_epoch_cache.epoch_entries():
            if entry.epoch == leader_epoch:
                return entry.start_offset
        return self._next_offset

    @property
    def unflushed_messages(self) -> int:
        return self._next_offset - self._recovery_point

    def __repr__(self) -> str:
        return (f"Log({self.name}, dir={self._dir}, logStartOffset={self._log_start_offset}, "
                f"logEndOffset={self._next_offset}, highWatermark={self._high_watermark})")

    # --- loading -------------------------------------------------------------------------------------
    def _new_segment(self, base_offset: int) -> LogSegment:
        cfg = self._config
        return LogSegment(self._dir, base_offset, index_interval_bytes=cfg.index_interval_bytes,
                          max_index_size=cfg.segment_index_bytes,
                          roll_jitter_ms=random_roll_jitter(cfg.segment_jitter_ms, cfg.max_segment_ms),
                          clock=self._clock)

    def _load_topic_id(self) -> None:
        try:
            self.topic_id = read_partition_metadata(self._dir)
        except (PartitionMetadataError, OSError) as e:
            log.warning(kv(event="partition_metadata_unreadable", partition=self.name, error=e))

    def _load_leader_epoch_cache(self) -> LeaderEpochFileCache:
        path = os.path.join(self._dir, LEADER_EPOCH_CHECKPOINT)
        try:
            return LeaderEpochFileCache(path, self.name)
        except (CheckpointReadError, ValueError, OSError) as e:
            # Rebuilt from the batch headers once segments are loaded (see _load).
            log.warning(kv(event="leader_epoch_checkpoint_unreadable", partition=self.name, error=e,
                           action="rebuilding from segments"))
            try:
                os.replace(path, path + ".corrupt")
            except OSError:
                pass
            self._epoch_cache_unreadable = True
            return LeaderEpochFileCache(path, self.name)

    def _load(self, had_clean_shutdown: bool) -> None:
        names = sorted(os.listdir(self._dir))
        changed = False
        for name in names:
            path = os.path.join(self._dir, name)
            if name.endswith(DELETED_FILE_SUFFIX) or name.endswith(CLEANED_FILE_SUFFIX) or name.endswith(".tmp"):
                log.info(kv(event="leftover_file_deleted", partition=self.name, file=name))
                delete_if_exists(path)
                changed = True
        if any(name.endswith(SWAP_FILE_SUFFIX) for name in names):
            self._complete_swaps()
            changed = True
        if changed:  # else the one listing serves (20,000 logs at start-up: one directory read each)
            names = sorted(os.listdir(self._dir))
        log_bases = set()
        for name in names:
            if name.endswith(LOG_FILE_SUFFIX):
                stem = name[: -len(LOG_FILE_SUFFIX)]
                if stem.isdigit():
                    log_bases.add(int(stem))
                else:
                    log.warning(kv(event="unexpected_log_file_skipped", partition=self.name, file=name))
        for name in names:
            for suffix in (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX):
                if name.endswith(suffix):
                    stem = name[: -len(suffix)]
                    if stem.isdigit() and int(stem) not in log_bases:
                        log.warning(kv(event="orphaned_index_deleted", partition=self.name, file=name))
                        delete_if_exists(os.path.join(self._dir, name))
        for base in sorted(log_bases):
            seg = self._new_segment(base)
            try:
                seg.sanity_check()
            except MissingIndexFileError as e:
                # Expected for a small active segment (index files are created lazily); after a crash, for any.
                log.info(kv(event="missing_index_rebuilt", partition=self.name, segment=base, error=e))
                seg.recover()
                if base != max(log_bases):  # an inactive segment always has both files (tiered storage copies them)
                    seg.offset_index.ensure_file()
                    seg.time_index.ensure_file()
            except CorruptIndexError as e:
                log.warning(kv(event="corrupt_index_rebuilt", partition=self.name, segment=base, error=e))
                seg.recover()
            self._add_segment(seg)

        rebuild_epochs = self._epoch_cache_unreadable
        if self._segments and not had_clean_shutdown:
            self._recover_from(self._recovery_point)
        if self._segments and self._log_start_offset > self._segments[-1].next_offset():
            log.warning(kv(event="log_start_offset_beyond_end", partition=self.name,
                           log_start_offset=self._log_start_offset, log_end_offset=self._segments[-1].next_offset()))
            for seg in list(self._segments):
                self._remove_segment(seg)
                seg.delete()
        if not self._segments:
            self._add_segment(self._new_segment(self._log_start_offset))
        self._next_offset = self._segments[-1].next_offset()
        self._segments[-1].txn_index.truncate_to(self._next_offset)  # entries of markers lost in a crash
        first_base = self._segments[0].base_offset
        self._local_log_start_offset = max(self._log_start_offset, first_base)
        if not (self.remote_log_enabled and 0 <= self._log_start_offset < first_base):
            self._log_start_offset = max(self._log_start_offset, first_base)
        if had_clean_shutdown:
            self._recovery_point = self._next_offset
        else:
            self._recovery_point = min(self._recovery_point, self._next_offset)
        if rebuild_epochs:
            self._rebuild_leader_epoch_cache()
        self.leader_epoch_cache.truncate_from_end(self._next_offset, write=False)  # see LeaderEpochFileCache
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)

    def _complete_swaps(self) -> None:
        """Finish a log cleaner swap cut short by a crash, as Kafka does: a ``.swap`` segment holds fully written,
        synced data, so the segments it replaces (those whose base offset lies in its offset range) are deleted
        and it is renamed into place; its index files are rebuilt.  ``.cleaned`` files were deleted already."""
        for name in sorted(os.listdir(self._dir)):
            if not name.endswith(LOG_FILE_SUFFIX + SWAP_FILE_SUFFIX):
                continue
            stem = name[: -len(LOG_FILE_SUFFIX + SWAP_FILE_SUFFIX)]
            if not stem.isdigit():
                continue
            base = int(stem)
            for suffix in (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX):  # rebuilt from the data below
                delete_if_exists(os.path.join(self._dir, stem + suffix + SWAP_FILE_SUFFIX))
            swap = LogSegment(self._dir, base, file_suffix=SWAP_FILE_SUFFIX)
            last = swap.next_offset() - 1
            swap.close_without_index_update()
            for suffix in (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX):
                delete_if_exists(os.path.join(self._dir, stem + suffix + SWAP_FILE_SUFFIX))
            for other in os.listdir(self._dir):
                if other.endswith(LOG_FILE_SUFFIX) and other[: -len(LOG_FILE_SUFFIX)].isdigit():
                    ob = int(other[: -len(LOG_FILE_SUFFIX)])
                    if base <= ob <= max(base, last):
                        for suffix in (LOG_FILE_SUFFIX, INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX,
                                       TXN_INDEX_FILE_SUFFIX):
                            delete_if_exists(os.path.join(self._dir, filename_prefix(ob) + suffix))
            for suffix in (LOG_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX):
                src = os.path.join(self._dir, stem + suffix + SWAP_FILE_SUFFIX)
                if os.path.exists(src):
                    os.replace(src, os.path.join(self._dir, stem + suffix))
            fsync_dir(self._dir)
            log.info(kv(event="swap_completed", partition=self.name, segment=base, last_offset=last))

    def cleanable_segments(self) -> list[LogSegment]:
        """Every segment but the active one (the log cleaner never touches the active segment)."""
        with self._lock:
            return list(self._segments[:-1])

    def replace_segments(self, cleaned: LogSegment, old: list[LogSegment]) -> bool:
        """Swap a log cleaner's ``.cleaned`` segment in for ``old`` (Kafka's ``replaceSegments``): rename it
        ``.swap``, remove the old segments, rename the swap into place.  A crash anywhere in between is completed
        at the next load (:meth:`_complete_swaps`).  False (nothing changed) when the log moved on meanwhile
        (closed, segments deleted by retention or truncation)."""
        with self._lock:
            if self._closed or any(seg not in self._segments for seg in old) or not self._segments \
                    or self._segments[-1] in old:
                return False
            cleaned.flush()
            cleaned.change_file_suffixes(CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)
            fsync_dir(self._dir)
            crash_point("cleaner-after-swap-rename")
            for seg in old:
                self._remove_segment(seg)
                seg.rename_to_deleted()
            crash_point("cleaner-after-old-segments-removed")
            for seg in old:
                seg.delete()
            cleaned.change_file_suffixes(SWAP_FILE_SUFFIX, "")
            fsync_dir(self._dir)
            self._add_segment(cleaned)
            self._hw_meta = None
            return True

    def _recover_from(self, recovery_point: int) -> None:
        """Recover segments from the one holding the recovery point; drop everything after a corruption."""
        i = max(0, bisect.bisect_right(self._bases, recovery_point) - 1)
        unflushed = self._segments[i:]
        for n, seg in enumerate(unflushed):
            if seg.size:  # an empty segment has nothing to recover (most of 20,000 replicas): no line
                log.info(kv(event="recovering_segment", partition=self.name, segment=seg.base_offset,
                            recovered=n, unflushed=len(unflushed)))
            truncated = seg.recover(self.leader_epoch_cache)
            if truncated > 0:
                rest = unflushed[n + 1:]
                if rest:
                    log.warning(kv(event="segments_deleted_after_corruption", partition=self.name,
                                   segments=[s.base_offset for s in rest]))
                for later in rest:
                    self._remove_segment(later)
                    later.delete()
                break

    def _rebuild_leader_epoch_cache(self) -> None:
        cache = self.leader_epoch_cache
        for seg in self._segments:
            for h in seg.batch_headers():
                if h.partition_leader_epoch >= 0 and (cache.latest_epoch is None
                                                      or h.partition_leader_epoch > cache.latest_epoch):
                    cache.assign(h.partition_leader_epoch, h.base_offset)

    def _add_segment(self, seg: LogSegment) -> None:
        i = bisect.bisect_left(self._bases, seg.base_offset)
        self._bases.insert(i, seg.base_offset)
        self._segments.insert(i, seg)

    def _remove_segment(self, seg: LogSegment) -> None:
        i = self._segments.index(seg)
        del self._segments[i]
        del self._bases[i]

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"The log for partition {self.name} is closed")

    # --- topic id ------------------------------------------------------------------------------------
    def assign_topic_id(self, topic_id: str) -> None:
        """Record the topic id in ``partition.metadata``; a different stored id is an error.

        Written without fsync, made durable when the log closes (Kafka flushes it on its scheduler): a new
        log per partition of a big LeaderAndIsr must not cost two fsyncs, and an id lost in a machine crash
        is assigned again by the next LeaderAndIsr."""
        with self._lock:
            if self.topic_id is not None and self.topic_id != topic_id:
                raise InconsistentTopicIdError(
                    f"Tried to assign topic ID {topic_id} to log for topic partition {self.name}, but log "
                    f"already contained topic ID {self.topic_id}")
            # Known (read at load or written here): the file holds it; no stat per partition of every LeaderAndIsr
            # (Kafka looks for the file only while the log has no id).
            if self.topic_id is None:
                write_partition_metadata(self._dir, topic_id, sync=False)
                self.topic_id = topic_id
                self._topic_id_unsynced = True

    # --- append --------------------------------------------------------------------------------------
    def append_as_leader(self, records, leader_epoch: int, *, now_ms: int | None = None,
                         from_coordinator: bool = False) -> AppendInfo:
        """Validate a produced blob, assign offsets from the log end offset and append it
        (``from_coordinator``: transaction markers and transactional offset commits, Kafka's origin COORDINATOR)."""
        with self._lock:
            if self._closed:
                self._check_open()
            now = self._clock() if now_ms is None else now_ms
            info = self._validator.validate(records, self._next_offset, leader_epoch, now, self._log_start_offset,
                                            self._name, from_coordinator)
            if info.num_batches == 0:
                return info
            self._append(info, now)
            if leader_epoch >= 0 and leader_epoch != self.leader_epoch_cache.latest_epoch:
                self.leader_epoch_cache.assign(leader_epoch, info.first_offset)
            if self._next_offset - self._recovery_point >= self._config.flush_messages:   # _maybe_flush_by_messages
                self.flush()
            return info

    def append_as_follower(self, records) -> AppendInfo:
        """Append batches fetched from the leader, keeping their offsets and leader epochs.

        An append that starts below the log end offset raises UnexpectedAppendOffsetError, except into an
        empty log when the first batch contains the log end offset (a leader log start offset inside a
        batch): then the log restarts at the batch's base offset, as Kafka's follower does."""
        with self._lock:
            self._check_open()
            info = record_batch.validate_follower_records(records, topic_partition=self.name)
            if info.num_batches == 0:
                return info
            if info.first_offset < self._next_offset:
                leo = self._next_offset
                if leo == self._log_start_offset and info.first_offset < leo <= info.last_offset:
                    log.info(kv(event="follower_restart_at_batch_base", partition=self.name,
                                batch_base=info.first_offset, log_end_offset=leo))
                    self.truncate_fully_and_start_at(info.first_offset)
                else:
                    raise UnexpectedAppendOffsetError(
                        f"Unexpected offset in append to {self.name}. First offset {info.first_offset} is less "
                        f"than the next offset {leo}. First batch offsets in append: [{info.first_offset}, ...], "
                        f"last offset in append: {info.last_offset}. Log start offset = {self._log_start_offset}",
                        info.first_offset, info.last_offset)
            self._append_fetched(info, self._clock())
            for epoch, base in info.epoch_starts:
                self.leader_epoch_cache.assign(epoch, base)
            self._maybe_flush_by_messages()
            return attrs.evolve(info, log_start_offset=self._log_start_offset)

    # --- producer state (Kafka's UnifiedLog owns its ProducerStateManager) -------------------------------
    @property
    def producer_state(self) -> ProducerStateManager:
        """This log's producer state (log/producer_state.py), built from its latest snapshot and its batches on
        first use.  Callers read it; it changes only through the appends below and this log's truncations."""
        state = self._producer_state
        if state is None:
            with self._lock:
                if self._producer_state is None:
                    built = ProducerStateManager()
                    built.rebuild(self)
                    self._producer_state = built
                state = self._producer_state
        return state

    def append_records_as_leader(self, records, leader_epoch: int, *, from_coordinator: bool = False,
                                 verification_guard: object | None = None,
                                 verify: bool = False) -> AppendInfo | DuplicateAppend:
        """Kafka's ``appendAsLeader`` with its producer-state analysis: a retried idempotent batch already in
        the log is answered with its first offsets (:class:`DuplicateAppend`) and not appended; every batch (a
        coordinator's too) is then checked against its producer's epoch and open transaction, as Kafka's
        ``analyzeAndValidateProducerState``; then :meth:`append_as_leader`, and the
        producer state follows the appended batches."""
        with self._lock:
            if self._producer_state is not None and record_batch.without_producer_ids(records):
                # a plain producer's batches: nothing to find, check or record in the built state (the same
                # outcome as the three passes below, without them); the snapshot at a roll is still taken
                info = self.append_as_leader(records, leader_epoch, from_coordinator=from_coordinator)
                if info.num_batches:
                    self._snapshot_on_roll()
                return info
            if type(records) is memoryview:  # a view of the Produce frame (protocol/produce_codec.py): bytes here
                records = bytes(records)
            state = self.producer_state
            dup = state.find_duplicate(records)
            if dup is not None:
                return DuplicateAppend(dup.first_offset, dup.last_offset)
            # after the duplicate check, as Kafka's analyzeAndValidateProducerState; a coordinator's batches too
            # (a transactional offset commit of a fenced producer epoch is refused like its produce)
            state.check_append(records, verification_guard, verify)
            info = self.append_as_leader(records, leader_epoch, from_coordinator=from_coordinator)
            if info.num_batches:
                self._update_producer_state(info.records)
            return info

    def append_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                          leader_epoch: int) -> AppendInfo:
        """A COMMIT or ABORT marker for ``producer_id`` (WriteTxnMarkers on the leader), once the producer's and
        the coordinator's epochs pass the producer state's check; the transaction completes in the state and an
        aborted one is indexed."""
        with self._lock:
            self.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch)
            marker = end_transaction_marker(producer_id, producer_epoch, coordinator_epoch, commit, self._clock())
            info = self.append_as_leader(marker, leader_epoch, from_coordinator=True)
            self._update_producer_state(info.records, coordinator_epoch)
            return info

    def append_records_as_follower(self, records) -> AppendInfo:
        """:meth:`append_as_follower`, with the producer state following the fetched batches."""
        with self._lock:
            self.producer_state   # built (on first use) from the log as it was before this append: not counted twice
            info = self.append_as_follower(records)
            if info.num_batches:
                if record_batch.without_producer_ids(info.records):
                    # a plain producer's batches (as on the leader): nothing for the state to record; only the
                    # snapshot at a roll
                    self._snapshot_on_roll()
                else:
                    self._update_producer_state(info.records)
            return info

    def _update_producer_state(self, records, coordinator_epoch: int | None = None) -> None:
        """The producer state after an append of ``records``: completed transactions recorded (the aborted ones
        indexed), and a snapshot when the append rolled a segment."""
        state = self.producer_state
        completed = state.update(records, coordinator_epoch)
        if completed:   # forget completed transactions whose markers are below the HW (bounded memory)
            state.first_unstable_offset(self._high_watermark)
        for txn in completed:
            if txn.is_aborted:
                entry = AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                   state.last_stable_offset_after(txn))
                try:
                    self.append_aborted_txn(entry)
                except (ValueError, OSError) as e:
                    # The marker is in the log already: report, do not fail the append (read_committed
                    # consumers would then see this aborted transaction's records).
                    log.error("cannot index an aborted transaction %s", kv(partition=self.name, entry=entry, reason=e))
        self._snapshot_on_roll()

    def _snapshot_on_roll(self) -> None:
        """A producer state snapshot when the log rolled a segment (Kafka's snapshot at roll), so a restart reads
        the log from there rather than from its start (log/producer_state.py)."""
        base = self._segments[-1].base_offset
        if base == self._snapshot_base:
            return
        first = self._snapshot_base is None
        self._snapshot_base = base
        if not first:
            self.snapshot_producer_state()

    def snapshot_producer_state(self, sync: bool = True) -> None:
        """Write the producer state at the log end offset (at a roll, and at shutdown, where ``sync=False``: the
        log manager syncs the file system before the clean shutdown marker); a failure is logged.  A state never
        built (no append since the log was loaded) is not built for this: the log and its snapshots are as they
        were, and a restart of thousands of partitions does not read each one's batch headers at shutdown."""
        with self._lock:
            if self._producer_state is None:
                return
            try:
                self.producer_state.take_snapshot(self._dir, self._next_offset, sync=sync)
            except OSError as e:
                log.warning("cannot write a producer state snapshot %s", kv(partition=self.name, reason=e))

    def _rebuild_producer_state(self) -> None:
        """After a truncation: the producer state read again, if it was built (else it is built when used)."""
        if self._producer_state is not None:
            self._producer_state.rebuild(self)

    @property
    def last_stable_offset(self) -> int:
        """Kafka's ``lastStableOffset``: the first unstable offset if below the high watermark, else the HW."""
        with self._lock:
            hw = self._high_watermark
            first = self.producer_state.first_unstable_offset(hw)
            if first is None:
                return hw
            return min(max(first, self._log_start_offset), hw)

    def append_copy_from(self, source: "Log", max_bytes: int) -> int:
        """JBOD moves: append ``source``'s batches from this log's end offset, at most ``max_bytes`` (at least
        one batch) and never past the end of one source segment, with the bytes copied by the kernel
        (:func:`~kafkatier.log.segment.copy_file_range`) and only batch headers read in Python.  Offsets and
        leader epochs are kept, as :meth:`append_as_follower` keeps them; CRCs are not recomputed (the batches
        were checked when they were appended to ``source``).  Returns the bytes copied (0 when ``source`` has
        nothing more).

        Raises UnexpectedAppendOffsetError when the source's batch starts below this log's end offset (except
        in an empty log whose start falls inside the batch, KAFKA-6975: the log restarts at the batch's base
        offset); a batch starting above it is a compacted log's gap and is copied, KafkaStorageError(cause SourceReadError) when reading the source fails, and
        KafkaStorageError(cause OSError) when writing here fails."""
        with source._lock:
            source._check_open()
            offset = self._next_offset
            if offset >= source._next_offset:
                return 0
            i = max(0, bisect.bisect_right(source._bases, offset) - 1)
            headers, src_seg = [], None
            while i < len(source._segments) and not headers:
                src_seg = source._segments[i]
                try:
                    headers = src_seg.batches_from(offset, max_bytes)
                except OSError as e:
                    raise KafkaStorageError(f"Error while reading {source.name} in dir {source.parent_dir}: "
                                            f"{e}") from SourceReadError(e.errno, str(e))
                i += 1
            if not headers:
                return 0
            with self._lock:
                self._check_open()
                first = headers[0]
                leo = self._next_offset
                if first.base_offset < leo:   # above it: a compacted log's gap (Kafka accepts it as well)
                    if leo == self._log_start_offset and first.base_offset < leo <= first.last_offset:
                        self.truncate_fully_and_start_at(first.base_offset)
                    else:
                        raise UnexpectedAppendOffsetError(
                            f"Unexpected offset in append to {self.name}. First offset {first.base_offset} does "
                            f"not match the log end offset {leo}.", first.base_offset, headers[-1].last_offset)
                copied = 0
                now = self._clock()
                while headers:
                    active = self._segments[-1]
                    room = self._config.segment_bytes - active.size
                    take = []
                    size = 0
                    for h in headers:
                        if take and size + h.size > room:
                            break
                        take.append(h)
                        size += h.size
                    if active.should_roll(segment_bytes=self._config.segment_bytes, max_segment_ms=self._max_segment_ms,
                                          messages_size=size, max_timestamp_in_messages=take[-1].max_timestamp,
                                          max_offset_in_messages=take[-1].last_offset, now_ms=now):
                        active = self._roll(take[0].base_offset)
                    try:
                        active.append_copy(src_seg, take)
                    except SourceReadError as e:
                        raise KafkaStorageError(f"Error while reading {source.name} in dir {source.parent_dir}: "
                                                f"{e}") from e
                    except OSError as e:
                        raise KafkaStorageError(f"Error while appending records to {self.name} in dir "
                                                f"{self.parent_dir}: {e}") from e
                    self._next_offset = take[-1].last_offset + 1
                    for h in take:
                        if h.partition_leader_epoch >= 0 and h.partition_leader_epoch != \
                                self.leader_epoch_cache.latest_epoch:
                            self.leader_epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
                    copied += size
                    headers = headers[len(take):]
                self._maybe_flush_by_messages()
                return copied

    def _append_fetched(self, info: AppendInfo, now_ms: int) -> None:
        """Append fetched batches; when they do not all fit the active segment, one batch at a time, so the
        follower rolls where the leader rolled (tiered storage copies whole segments: replicas must agree
        on segment boundaries) and a fetch larger than ``segment.bytes`` is not refused."""
        if info.num_batches == 1 or self._segments[-1].size + info.valid_bytes <= self._config.segment_bytes:
            self._append(info, now_ms)
            return
        for pos, h in record_batch.iter_batches(info.records):
            size = h.size_in_bytes
            self._append(AppendInfo(h.base_offset, h.last_offset, h.max_timestamp, h.last_offset, 1,
                                    h.records_count, size, info.records[pos:pos + size]), now_ms)

    def _append(self, info: AppendInfo, now_ms: int) -> None:
        segment_bytes = self._config.segment_bytes
        size = info.valid_bytes
        if size > segment_bytes:
            raise RecordBatchTooLargeError(
                f"Message batch size is {size} bytes in append to partition {self.name} which "
                f"exceeds the maximum configured segment size of {segment_bytes}.")
        segment = self._segments[-1]
        last = info.last_offset
        max_ts = info.max_timestamp
        # positional: should_roll(segment_bytes, max_segment_ms, messages_size, max timestamp, max offset, now)
        if segment.should_roll(segment_bytes, self._max_segment_ms, size, max_ts, last, now_ms):
            segment = self._roll(info.first_offset)
        try:
            segment.append(last, max_ts, info.offset_of_max_timestamp, info.records)
        except OSError as e:
            raise KafkaStorageError(f"Error while appending records to {self.name} in dir {self.parent_dir}: "
                                    f"{e}") from e
        self._next_offset = last + 1

    def _maybe_flush_by_messages(self) -> None:
        if self.unflushed_messages >= self._config.flush_messages:
            self.flush()

    # --- roll ----------------------------------------------------------------------------------------
    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected, log end offset)."""
        with self._lock:
            self._check_open()
            return self._roll(expected_next_offset)

    def _roll(self, expected_next_offset: int | None) -> LogSegment:
        new_offset = max(expected_next_offset or 0, self._next_offset)
        active = self._segments[-1]
        if active.base_offset == new_offset:
            if active.size == 0:
                log.warning(kv(event="roll_skipped_empty_active", partition=self.name, offset=new_offset))
                return active
            raise KafkaError(f"Trying to roll a new log segment for topic partition {self.name} with start "
                             f"offset {new_offset} =max(provided offset = {expected_next_offset}, LEO = "
                             f"{self._next_offset}) while it already exists.")
        active.on_become_inactive()
        for suffix in (LOG_FILE_SUFFIX, INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX):
            stale = os.path.join(self._dir, f"{new_offset:020d}{suffix}")
            if os.path.exists(stale):
                log.warning(kv(event="stale_segment_file_deleted", partition=self.name, file=stale))
                delete_if_exists(stale)
        seg = self._new_segment(new_offset)
        self._add_segment(seg)
        log.info(kv(event="rolled_segment", partition=self.name, new_base_offset=new_offset,
                    previous_size=active.size))
        self._schedule("flush-log", lambda: self.flush(new_offset), 0)
        return seg

    def _schedule(self, name: str, fn: Callable[[], object], delay_ms: int) -> None:
        """Run ``fn`` on the scheduler, or right now when there is no running scheduler."""
        sched = self._scheduler
        if sched is None or not getattr(sched, "is_running", True):
            fn()
        else:
            sched.schedule(name, fn, delay_ms)

    # --- read ----------------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, max_offset: int | None = None, *,
             min_one_message: bool = True, file_records: bool = False) -> FetchDataInfo:
        """Whole batches from the one containing ``offset``, up to ``max_bytes`` and below ``max_offset``.

        ``max_offset`` is the isolation bound (the high watermark for consumers, None for the log end
        offset): batches at or past it are not returned. With ``min_one_message`` the first batch is
        returned whole even if it is larger than ``max_bytes`` (KIP-74). Raises OffsetOutOfRangeError
        for an offset below the log start offset or above the log end offset.  ``file_records``: a large read may
        come back as a ``FileRecords`` range of the segment file (``LogSegment.read``), for a Fetch answer."""
        with self._lock:
            self._check_open()
            if offset < self._log_start_offset:
                raise OffsetOutOfRangeError(
                    f"Received request for offset {offset} for partition {self.name}, but we only have log "
                    f"segments starting from offset: {self._log_start_offset}.")
            leo = self._next_offset
            if offset > leo:
                raise OffsetOutOfRangeError(
                    f"Received request for offset {offset} for partition {self.name}, but we only have log "
                    f"segments upto {leo}.")
            bound = leo if max_offset is None else min(max_offset, leo)
            if offset >= bound:
                return FetchDataInfo(LogOffsetMetadata(offset), b"")
            first_base = self._segments[0].base_offset
            if offset < first_base:  # only possible on a tiered log: the data is in remote storage
                raise OffsetOutOfRangeError(
                    f"Received request for offset {offset} for partition {self.name}, but we only have local "
                    f"log segments starting from offset: {first_base}.")
            bound_meta = None if bound >= leo else self._offset_metadata(bound)
            i = max(0, bisect.bisect_right(self._bases, offset) - 1)
            while i < len(self._segments):
                seg = self._segments[i]
                max_position = None
                if bound_meta is not None:
                    if seg.base_offset > bound_meta[0]:
                        break
                    if seg.base_offset == bound_meta[0]:
                        max_position = bound_meta[1]
                try:
                    fetched = seg.read(offset, max_bytes, max_position, min_one_message, file_records=file_records)
                except OSError as e:
                    raise KafkaStorageError(f"Error while reading {self.name} in dir {self.parent_dir}: {e}") from e
                if fetched is not None:
                    return fetched
                i += 1
            return FetchDataInfo(LogOffsetMetadata(offset), b"")

    # --- aborted transactions (log/transaction_index.py) -----------------------------------------------
    def append_aborted_txn(self, txn: AbortedTxn) -> None:
        """Index an aborted transaction in the segment holding its marker (Kafka's ``updateTxnIndex``)."""
        with self._lock:
            self._check_open()
            i = max(0, bisect.bisect_right(self._bases, txn.last_offset) - 1)
            self._segments[i].txn_index.append(txn)

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of ``[fetch_offset, upper_bound_offset)`` must list
        (Kafka's ``LocalLog.collectAbortedTransactions``)."""
        with self._lock:
            out: list[AbortedTxn] = []
            i = max(0, bisect.bisect_right(self._bases, fetch_offset) - 1)
            for seg in self._segments[i:]:
                found = seg.txn_index.collect(fetch_offset, upper_bound_offset)
                out.extend(found.aborted)
                if found.is_complete:
                    break
            return out

    def _offset_metadata(self, offset: int) -> tuple[int, int]:
        """(segment base, position of the batch holding ``offset`` or segment end) — cached for the HW."""
        if self._hw_meta is not None and self._hw_meta[0] == offset:
            return self._hw_meta[1], self._hw_meta[2]
        i = max(0, bisect.bisect_right(self._bases, offset) - 1)
        seg = self._segments[i]
        found = seg.translate_offset(offset)
        meta = (seg.base_offset, found[0] if found else seg.size)
        if offset == self._high_watermark:
            self._hw_meta = (offset, meta[0], meta[1])
        return meta

    # --- ListOffsets ---------------------------------------------------------------------------------
    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets: -2 earliest, -4 earliest local, -1 latest, -3 max timestamp, else the first record
        with a timestamp >= ``timestamp`` (None when there is none)."""
        with self._lock:
            self._check_open()
            cache = self.leader_epoch_cache
            if timestamp == EARLIEST_TIMESTAMP or timestamp == EARLIEST_LOCAL_TIMESTAMP:
                start = self._log_start_offset if timestamp == EARLIEST_TIMESTAMP else self.local_log_start_offset
                earliest = cache.earliest_entry
                epoch = earliest.epoch if earliest is not None and earliest.start_offset <= start else None
                if timestamp == EARLIEST_LOCAL_TIMESTAMP:
                    epoch = cache.epoch_for_offset(start)
                return TimestampAndOffset(NO_TIMESTAMP, start, epoch)
            if timestamp == LATEST_TIMESTAMP:
                return TimestampAndOffset(NO_TIMESTAMP, self._next_offset, cache.latest_epoch)
            if timestamp == MAX_TIMESTAMP:
                best = None
                for seg in self._segments:
                    if seg.max_timestamp_so_far >= 0 and (best is None or seg.max_timestamp_so_far >
                                                         best.max_timestamp_so_far):
                        best = seg
                if best is None:
                    return None
                return best.find_offset_by_timestamp(best.max_timestamp_so_far, self._log_start_offset)
            if timestamp < 0:
                return None
            for seg in self._segments:
                if seg.largest_timestamp >= timestamp:
                    found = seg.find_offset_by_timestamp(timestamp, self._log_start_offset)
                    if found is not None:
                        return found
            return None

    # --- log start offset and retention --------------------------------------------------------------
    def maybe_increment_log_start_offset(self, new_log_start_offset: int,
                                         reason: str = CLIENT_RECORD_DELETION) -> bool:
        """Raise the log start offset (DeleteRecords, leader propagation, segment deletion).

        Records below it are never served again; the segments wholly below it are removed by the next
        retention pass (:meth:`delete_old_segments`), as in Kafka. Raises OffsetOutOfRangeError above the
        high watermark. Returns whether the offset moved."""
        with self._lock:
            self._check_open()
            if new_log_start_offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"Cannot increment the log start offset to {new_log_start_offset} of partition {self.name} "
                    f"since it is larger than the high watermark {self._high_watermark}")
            if new_log_start_offset <= self._log_start_offset:
                return False
            log.info(kv(event="log_start_offset_incremented", partition=self.name,
                        log_start_offset=new_log_start_offset, reason=reason))
            self._log_start_offset = new_log_start_offset
            if self._local_log_start_offset < new_log_start_offset:
                self._local_log_start_offset = new_log_start_offset
            if self._recovery_point < new_log_start_offset:
                self._recovery_point = new_log_start_offset
            self._offsets_changed()
            self.leader_epoch_cache.truncate_from_start(new_log_start_offset)
            return True

    def update_log_start_offset_from_remote_tier(self, remote_log_start_offset: int) -> None:
        """Tiered logs only: set the log start offset to the start of the remote tier (a new leader's copy
        task, Kafka's ``updateLogStartOffsetFromRemoteTier``); no high watermark check."""
        with self._lock:
            if not self.remote_log_enabled:
                log.warning(kv(event="remote_log_start_offset_ignored", partition=self.name,
                               offset=remote_log_start_offset, reason="remote storage is not enabled"))
                return
            log.info(kv(event="log_start_offset_from_remote_tier", partition=self.name,
                        log_start_offset=remote_log_start_offset, previous=self._log_start_offset))
            self._log_start_offset = remote_log_start_offset
            self._local_log_start_offset = max(self._local_log_start_offset, remote_log_start_offset)
            self._recovery_point = max(self._recovery_point, min(remote_log_start_offset, self._next_offset))
            self._offsets_changed()
            if self._high_watermark < remote_log_start_offset:
                self.update_high_watermark(remote_log_start_offset)
            self.leader_epoch_cache.truncate_from_start(remote_log_start_offset)

    def disable_remote_log(self) -> None:
        """KIP-950 disablement with delete: the log start offset moves up to the local log start offset and the
        log stops being tiered, in one step under the log's lock.  A retention pass in between would delete
        local segments (moving the local log start offset) after it was read, leaving a log start offset
        below data that is neither local nor (soon) remote."""
        with self._lock:
            if not self.remote_log_enabled:
                return
            local_start = self.local_log_start_offset
            if local_start > self._high_watermark:  # a rebuilt follower: its local log starts above the HW
                self.update_log_start_offset_from_remote_tier(local_start)
            else:
                self.maybe_increment_log_start_offset(local_start, SEGMENT_DELETION)
            self.remote_log_enabled = False
            self._highest_offset_in_remote_storage = -1
            self._offsets_changed()

    @property
    def highest_offset_in_remote_storage(self) -> int:
        """The last offset known to be in remote storage (-1: none); local retention of a tiered log only
        removes segments at or below it.  Changed only by the two methods below and by disablement."""
        return self._highest_offset_in_remote_storage

    def update_highest_offset_in_remote_storage(self, offset: int) -> None:
        """Kafka's ``updateHighestOffsetInRemoteStorage``: an upload (or a leader's local log start) shows that
        data up to ``offset`` is remote; the offset only moves forward."""
        with self._lock:
            if offset > self._highest_offset_in_remote_storage:
                self._highest_offset_in_remote_storage = offset

    def reset_highest_offset_in_remote_storage(self, offset: int) -> None:
        """The remote tier's metadata says ``offset`` is the highest remote offset (a task starting, a follower
        re-reading it after a leadership change): taken as is, even below the previous value."""
        with self._lock:
            self._highest_offset_in_remote_storage = offset

    def maybe_increment_log_start_offset_as_follower(self, leader_log_start_offset: int) -> bool:
        """Follow the leader's log start offset (from a fetch response), never past this log's end.

        The follower's high watermark is raised to the new log start offset if needed: both are bounded by
        the leader's high watermark."""
        with self._lock:
            if leader_log_start_offset < 0:
                return False
            target = min(leader_log_start_offset, self._next_offset)
            if target > self._high_watermark:
                self.update_high_watermark(target)
            return self.maybe_increment_log_start_offset(target, LEADER_OFFSET_INCREMENTED)

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Retention pass: delete whole segments breaching retention.ms, retention.bytes or the log start
        offset. Only segments wholly below the high watermark go; if every segment qualifies, a new empty
        active segment is rolled first so the log always keeps one. Returns the number deleted."""
        with self._lock:
            if self._closed:
                return 0
            now = self._clock() if now_ms is None else now_ms
            deleted = 0
            # Read-only tiering (KIP-950): retention runs oldest first across both tiers, so local segments
            # wait until no remote data lies below them (the remote tier expires first, moving the log start
            # offset); offsets then stay continuous when copying is switched back on.
            remote_data_below = self._remote_copy_disabled() and self._log_start_offset < self._local_log_start_offset
            if self._config.delete and not remote_data_below:
                deleted += self._delete_retention_ms_breached(now)
                deleted += self._delete_retention_size_breached()
            deleted += self._delete_log_start_offset_breached()
            return deleted

    def _remote_copy_disabled(self) -> bool:
        """Tiered, but read-only (``remote.log.copy.disable=true``): nothing more is uploaded."""
        return self.remote_log_enabled and self._config.remote_log_copy_disable

    def _local_retention_applies(self) -> bool:
        return self.remote_log_enabled and not self._config.remote_log_copy_disable

    def _retention_ms(self) -> int:
        cfg = self._config
        return cfg.local_retention_ms_effective if self._local_retention_applies() else cfg.retention_ms

    def _retention_bytes(self) -> int:
        cfg = self._config
        return cfg.local_retention_bytes_effective if self._local_retention_applies() else cfg.retention_bytes

    def _uploaded(self, seg: LogSegment, nxt: LogSegment | None) -> bool:
        if not self._local_retention_applies():
            return True  # not tiered, or read-only: segments no longer wait for an upload (KAFKA-17236)
        upper = nxt.base_offset if nxt is not None else self._next_offset
        return upper - 1 <= self._highest_offset_in_remote_storage

    def _delete_retention_ms_breached(self, now: int) -> int:
        retention_ms = self._retention_ms()
        if retention_ms < 0:
            return 0
        return self._delete_old(lambda seg, nxt: now - seg.largest_timestamp > retention_ms,
                                f"retention time {retention_ms}ms breach")

    def _delete_retention_size_breached(self) -> int:
        retention_bytes = self._retention_bytes()
        total = sum(s.size for s in self._segments)
        if retention_bytes < 0 or total < retention_bytes:
            return 0
        diff = [total - retention_bytes]

        def breach(seg: LogSegment, nxt: LogSegment | None) -> bool:
            if diff[0] - seg.size >= 0:
                diff[0] -= seg.size
                return True
            return False
        return self._delete_old(breach, f"retention size {retention_bytes} breach")

    def _delete_log_start_offset_breached(self) -> int:
        start = self.local_log_start_offset
        return self._delete_old(lambda seg, nxt: nxt is not None and nxt.base_offset <= start,
                                f"log start offset {start} breach")

    def _delete_old(self, predicate: Callable[[LogSegment, LogSegment | None], bool], reason: str) -> int:
        deletable: list[LogSegment] = []
        segs = self._segments
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            upper = nxt.base_offset if nxt is not None else self._next_offset
            if nxt is None and seg.size == 0:
                break
            if self._high_watermark >= upper and self._uploaded(seg, nxt) and predicate(seg, nxt):
                deletable.append(seg)
            else:
                break
        if not deletable:
            return 0
        if len(deletable) == len(segs):
            new_active = self._roll(None)
            if deletable[-1].base_offset == new_active.base_offset:
                deletable = deletable[:-1]
        for seg in deletable:
            self._remove_segment(seg)
        log.info(kv(event="deleting_segments", partition=self.name, reason=reason,
                    segments=[s.base_offset for s in deletable]))
        self._schedule_segment_deletion(deletable)
        first = self._segments[0].base_offset
        if self._local_retention_applies():
            self._local_log_start_offset = max(self._local_log_start_offset, first)
        elif first > self._log_start_offset:
            self.maybe_increment_log_start_offset(first, SEGMENT_DELETION)
        self._hw_meta = None
        self._offsets_changed()   # the first segment moved: log-start-offset-checkpoint's entry may have
        return len(deletable)

    def _schedule_segment_deletion(self, segments: list[LogSegment]) -> None:
        """Rename to ``.deleted`` now; remove the files after ``file.delete.delay.ms`` (at once without a
        scheduler)."""
        for seg in segments:
            try:
                seg.rename_to_deleted()
            except OSError as e:
                log.warning(kv(event="segment_rename_failed", partition=self.name, segment=seg.base_offset, error=e))
        def delete_files(segs=tuple(segments)):
            for s in segs:
                s.delete()
        if self._config.file_delete_delay_ms <= 0:
            delete_files()
        else:
            self._schedule("delete-file", delete_files, self._config.file_delete_delay_ms)

    # --- truncation ----------------------------------------------------------------------------------
    def truncate_to(self, target_offset: int) -> bool:
        """Remove everything at or after ``target_offset`` (follower catching up with a new leader).

        The batch containing the target goes whole, so the log end offset becomes the start of that batch
        when the target falls inside one. Returns False when there was nothing to remove."""
        if target_offset < 0:
            raise ValueError(f"Cannot truncate partition {self.name} to a negative offset ({target_offset}).")
        with self._lock:
            self._check_open()
            if target_offset >= self._next_offset:
                # Nothing to remove, but an epoch this replica started as leader without writing to it may end
                # the cache; it conflicts with the new leader's lineage (Kafka's UnifiedLog.truncateTo).
                self.leader_epoch_cache.truncate_from_end(self._next_offset)
                return False
            log.info(kv(event="truncating", partition=self.name, target_offset=target_offset,
                        log_end_offset=self._next_offset))
            if self._segments[0].base_offset > target_offset:
                self.truncate_fully_and_start_at(target_offset)
                return True
            doomed = [s for s in self._segments if s.base_offset > target_offset]
            for seg in doomed:
                self._remove_segment(seg)
                seg.delete()
            active = self._segments[-1]
            active.truncate_to(target_offset)
            self._next_offset = active.next_offset()
            self.leader_epoch_cache.truncate_from_end(target_offset)
            self._log_start_offset = min(target_offset, self._log_start_offset)
            self._high_watermark = min(self._high_watermark, self._next_offset)
            self._recovery_point = min(self._recovery_point, self._next_offset)
            self._hw_meta = None
            self._offsets_changed()
            self._rebuild_producer_state()
            return True

    def truncate_fully_and_start_at(self, new_offset: int, log_start_offset: int | None = None) -> None:
        """Delete all data and restart the log at ``new_offset`` (log start offset defaults to it)."""
        with self._lock:
            self._check_open()
            log.info(kv(event="truncate_fully", partition=self.name, new_offset=new_offset))
            for seg in list(self._segments):
                self._remove_segment(seg)
                seg.delete()
            self._add_segment(self._new_segment(new_offset))
            self.leader_epoch_cache.clear_and_flush()
            self._next_offset = new_offset
            self._log_start_offset = new_offset if log_start_offset is None else log_start_offset
            self._local_log_start_offset = new_offset
            self._recovery_point = new_offset
            self._high_watermark = new_offset
            self._hw_meta = None
            self._offsets_changed()
            self._rebuild_producer_state()

    # --- durability and lifecycle --------------------------------------------------------------------
    def flush(self, offset: int | None = None) -> None:
        """fsync segments holding offsets in [recovery point, offset) and move the recovery point there."""
        with self._lock:
            if self._closed:
                return
            target = self._next_offset if offset is None else min(offset, self._next_offset)
            if target <= self._recovery_point:
                return
            i = max(0, bisect.bisect_right(self._bases, self._recovery_point) - 1)
            to_flush = [s for s in self._segments[i:] if s.base_offset < target]
        for seg in to_flush:
            try:
                seg.flush()
            except OSError as e:
                if not seg.closed:
                    raise KafkaStorageError(f"Error while flushing {self.name}: {e}") from e
        try:
            self.leader_epoch_cache.flush()
        except OSError as e:
            raise KafkaStorageError(f"Error while flushing the leader epoch checkpoint of {self.name}: {e}") from e
        with self._lock:
            if target > self._recovery_point:
                self._recovery_point = target
                self._offsets_changed()
            self.last_flush_time_ms = self._clock()

    def close(self, sync: bool = True) -> None:
        """Close all files; the log can no longer be used.  ``sync=False`` writes what is buffered (index
        entries, the leader epoch checkpoint) without fsync: the caller makes the whole
        file system durable at once and then calls :meth:`mark_synced` (``LogManager.shutdown``, which closes
        thousands of logs; an fsync per file made that ~20 ms per log)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for seg in self._segments:
                seg.close()
            try:
                if sync:
                    self.leader_epoch_cache.flush()
                else:
                    self.leader_epoch_cache.write_if_dirty()
                if sync and self._topic_id_unsynced and self.topic_id is not None:  # else written, unsynced
                    write_partition_metadata(self._dir, self.topic_id)
                    self._topic_id_unsynced = False
            except OSError as e:
                log.warning(kv(event="log_metadata_flush_failed", partition=self.name, error=e))
            log.info(kv(event="log_closed", partition=self.name))

    def mark_synced(self) -> None:
        """The caller synced the file system holding this closed log (see :meth:`close`): everything up to the
        log end is durable, so the recovery point moves there."""
        with self._lock:
            if self._closed:
                self._recovery_point = self._next_offset
                self._topic_id_unsynced = False
                self._offsets_changed()

    def release_files(self) -> int:
        """Close every segment's .log descriptor and drop the index entries of all but the active segment;
        both come back on next use.  Returns the number of descriptors closed (the log manager's idle-file
        sweep, see :mod:`kafkatier.log.segment`)."""
        with self._lock:
            if self._closed:
                return 0
            closed = 0
            active = self._segments[-1] if self._segments else None
            for seg in self._segments:
                closed += seg.has_open_file
                seg.release_files(unload_indexes=seg is not active)
            return closed

    @property
    def closed(self) -> bool:
        return self._closed

    def rename_dir(self, name: str) -> None:
        """Rename the partition directory inside its log dir (deletion / JBOD); files stay open."""
        with self._lock:
            new_dir = os.path.join(self.parent_dir, name)
            os.rename(self._dir, new_dir)
            self._dir = new_dir
            self.is_future = parse_partition_dir(new_dir).kind == "future"
            for seg in self._segments:
                seg.change_dir(new_dir)
            self.leader_epoch_cache.move_to_dir(new_dir)

    def delete(self) -> None:
        """Close the log and remove its directory with everything in it."""
        with self._lock:
            self.close()
            shutil.rmtree(self._dir, ignore_errors=True)
