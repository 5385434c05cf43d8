"""Which log the log cleaner cleans next: Kafka's ``LogCleanerManager`` (docs/log-compaction.md).

Per log dir it owns ``cleaner-offset-checkpoint`` (``topic partition offset``: the first dirty offset of each
compacted log).  :meth:`LogCleanerManager.grab_filthiest_compacted_log` picks, among the compacted logs no other
cleaner thread holds, the one with the largest dirty ratio at or above ``min.cleanable.dirty.ratio`` (or any whose
dirty part waited past ``max.compaction.lag.ms``), and marks it in progress until :meth:`done_cleaning`.

The cleanable range of a log is ``[first dirty offset, first uncleanable offset)``; the first uncleanable offset
is, as Kafka's ``cleanableOffsets``, the smallest of the last stable offset (the high watermark, or the first offset
of the oldest transaction not yet decided below it), the active segment's base offset, and the base offset of the
first segment younger than ``min.compaction.lag.ms`` (by its largest timestamp).  The last stable offset comes
from :attr:`Log.last_stable_offset` (the log owns its producer state), as Kafka's cleaner reads
``UnifiedLog.lastStableOffset``; before its partition exists a loaded log's high watermark is its checkpointed one,
so the range never passes what was committed.
"""
from __future__ import annotations

import os
import threading
from typing import Callable, Iterable

import attrs

from kafkatier.log.checkpoints import CheckpointReadError, OffsetCheckpointFile
from kafkatier.log.log import Log
from kafkatier.logsetup import get_logger, kv

log = get_logger("log.cleaner.manager")

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"


@attrs.frozen
class LogToClean:
    """A compacted log and its cleanable range (Kafka's ``LogToClean``)."""
    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool
    compaction_delay_ms: int = 0   # how long past max.compaction.lag.ms its first dirty batch is

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


@attrs.define
class PreCleanStats:
    """What one choice saw (Kafka's ``PreCleanStats``): logs ready to clean, those past ``max.compaction.lag.ms``
    and the largest delay past it."""
    cleanable_partitions: int = 0
    delayed_partitions: int = 0
    max_compaction_delay_ms: int = 0


def first_uncleanable_offset(lg: Log, now_ms: int, last_stable_offset: int | None = None) -> int:
    """Kafka's ``firstUncleanableDirtyOffset``: the LSO, the active segment, ``min.compaction.lag.ms``."""
    segs = lg.log_segments()
    stable = lg.high_watermark if last_stable_offset is None else last_stable_offset
    bound = min(segs[-1].base_offset, stable)
    lag = lg.config.min_compaction_lag_ms
    if lag > 0:
        for seg in segs[:-1]:
            if seg.largest_timestamp > now_ms - lag:
                bound = min(bound, seg.base_offset)
                break
    return bound


def cleanable_range(lg: Log, checkpointed: int | None, now_ms: int,
                    last_stable_offset: int | None = None) -> LogToClean:
    """Kafka's ``cleanableOffsets`` and the byte counts of the clean and dirty parts."""
    start = lg.log_start_offset
    first_dirty = checkpointed if checkpointed is not None else start
    if first_dirty < start or first_dirty > lg.log_end_offset:
        if checkpointed is not None:
            log.warning(kv(event="cleaner_checkpoint_reset", partition=lg.name, checkpointed=checkpointed,
                           log_start_offset=start, log_end_offset=lg.log_end_offset))
        first_dirty = start
    uncleanable = max(first_dirty, first_uncleanable_offset(lg, now_ms, last_stable_offset))
    clean = dirty = 0
    needs_now = False
    delay = 0
    max_lag = lg.config.max_compaction_lag_ms
    segs = lg.log_segments()[:-1]
    for i, seg in enumerate(segs):
        nxt = segs[i + 1].base_offset if i + 1 < len(segs) else lg.active_segment.base_offset
        if nxt <= first_dirty:
            clean += seg.size
        elif nxt <= uncleanable:
            if dirty == 0 and max_lag < 2**63 - 1:
                ts = seg.first_batch_timestamp()
                needs_now = ts >= 0 and now_ms - ts > max_lag
                delay = now_ms - ts - max_lag if needs_now else 0
            dirty += seg.size
    return LogToClean(lg, first_dirty, uncleanable, clean, dirty, needs_now, delay)


class LogCleanerManager:
    """Checkpoints, in-progress marks and the choice of the dirtiest log."""

    def __init__(self, log_dirs: Iterable[str], logs: Callable[[], list[Log]], clock: Callable[[], int]):
        self._dirs = [os.path.abspath(d) for d in log_dirs]
        self._logs = logs
        self._clock = clock
        self._lock = threading.Lock()
        self._in_progress: set[tuple[str, int]] = set()
        self._paused: dict[tuple[str, int], int] = {}
        self._uncleanable: set[tuple[str, tuple[str, int]]] = set()   # (log dir, tp), as Kafka's
        self._delete_horizons: dict[tuple[str, int], int] = {}  # the earliest KIP-534 horizon left in each log
        self._checkpoints = {d: OffsetCheckpointFile(os.path.join(d, CLEANER_OFFSET_CHECKPOINT)) for d in self._dirs
                             if os.path.isdir(d)}
        self.max_dirty_ratio = 0.0

    # --- checkpoints ---------------------------------------------------------------------------------
    def all_checkpoints(self) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        for d, f in self._checkpoints.items():
            try:
                out.update(f.read())
            except (CheckpointReadError, OSError) as e:
                log.warning(kv(event="cleaner_checkpoint_unreadable", dir=d, error=e))
        return out

    def _checkpoints_by_dir(self) -> dict[str, dict[tuple[str, int], int]]:
        out: dict[str, dict[tuple[str, int], int]] = {}
        for d, f in self._checkpoints.items():
            try:
                out[d] = f.read()
            except (CheckpointReadError, OSError):
                out[d] = {}
        return out

    def update_checkpoint(self, lg: Log, offset: int) -> None:
        """Record ``offset`` as the log's first dirty offset in its dir's checkpoint; entries of logs no longer
        in that dir (deleted, moved by KIP-113) are dropped."""
        f = self._checkpoints.get(lg.parent_dir)
        if f is None or not self.is_current(lg):
            return   # replaced meanwhile (a KIP-113 swap): its old dir no longer holds it
        with self._lock:
            try:
                current = f.read()
            except (CheckpointReadError, OSError):
                current = {}
            here = {l.topic_partition for l in self._logs() if l.parent_dir == lg.parent_dir and not l.is_future}
            current = {tp: o for tp, o in current.items() if tp in here}
            current[lg.topic_partition] = offset
            f.write(current)

    # --- choosing ------------------------------------------------------------------------------------
    def grab_filthiest_compacted_log(self, pre_clean_stats: PreCleanStats | None = None) -> LogToClean | None:
        """The dirtiest log ready to clean, marked in progress; ``pre_clean_stats`` gets what the choice saw."""
        now = self._clock()
        with self._lock:
            candidates = []
            for lg in self._logs():
                tp = lg.topic_partition
                if lg.is_future or lg.closed or not lg.config.compact or tp in self._in_progress \
                        or tp in self._paused or (lg.parent_dir, tp) in self._uncleanable \
                        or lg.config.remote_storage_enable:
                    continue
                candidates.append(lg)
        ranges = []
        checkpoints = self._checkpoints_by_dir() if candidates else {}
        for lg in candidates:
            try:
                ranges.append(cleanable_range(lg, checkpoints.get(lg.parent_dir, {}).get(lg.topic_partition), now,
                                              lg.last_stable_offset))
            except Exception as e:  # noqa: BLE001 - a log closed under us is simply skipped
                log.debug(kv(event="cleanable_range_failed", partition=lg.name, error=repr(e)))
        horizons = dict(self._delete_horizons)
        ranges = [r for r in ranges if r.cleanable_bytes > 0 or horizons.get(r.log.topic_partition, now + 1) <= now]
        self.max_dirty_ratio = max((r.cleanable_ratio for r in ranges), default=0.0)
        ready = [r for r in ranges
                 if r.needs_compaction_now or r.cleanable_ratio >= r.log.config.min_cleanable_dirty_ratio
                 or horizons.get(r.log.topic_partition, now + 1) <= now]
        if pre_clean_stats is not None:
            delayed = [r for r in ready if r.needs_compaction_now]
            pre_clean_stats.cleanable_partitions = len(ready)
            pre_clean_stats.delayed_partitions = len(delayed)
            pre_clean_stats.max_compaction_delay_ms = max((r.compaction_delay_ms for r in delayed), default=0)
        if not ready:
            return None
        best = max(ready, key=lambda r: (r.needs_compaction_now, r.cleanable_ratio))
        with self._lock:
            if best.log.topic_partition in self._in_progress or best.log.topic_partition in self._paused:
                return None
            self._in_progress.add(best.log.topic_partition)
        return best

    def done_cleaning(self, lg: Log, end_offset: int | None, next_delete_horizon: int | None = None) -> None:
        """A cleaning ended: checkpoint its end (None: it failed or was given up) and remember the earliest
        delete horizon left in the log (the log is cleaned again once it passes)."""
        if end_offset is not None:
            self.update_checkpoint(lg, end_offset)
        with self._lock:
            self._in_progress.discard(lg.topic_partition)
            if next_delete_horizon is not None:
                if next_delete_horizon < 2**63 - 1:
                    self._delete_horizons[lg.topic_partition] = next_delete_horizon
                else:
                    self._delete_horizons.pop(lg.topic_partition, None)

    def is_current(self, lg: Log) -> bool:
        """Whether ``lg`` is still the log of its partition (not replaced by a KIP-113 swap, not deleted)."""
        return any(l is lg for l in self._logs())

    def mark_failed(self, lg: Log) -> None:
        """A cleaning failed (e.g. a corrupt segment): leave the log alone in its dir until the broker restarts
        (Kafka's ``uncleanablePartitions``, per log dir: the partition moved to another dir is cleaned again)."""
        with self._lock:
            self._uncleanable.add((lg.parent_dir, lg.topic_partition))

    def alter_checkpoint_dir(self, tp: tuple[str, int], source_dir: str, dest_dir: str) -> None:
        """A KIP-113 swap moved ``tp`` (Kafka's ``alterCheckpointDir``): its first dirty offset moves with it."""
        src = self._checkpoints.get(os.path.abspath(source_dir))
        dst = self._checkpoints.get(os.path.abspath(dest_dir))
        if src is None or dst is None:
            return
        with self._lock:
            try:
                moved = src.read()
                offset = moved.pop(tp, None)
                if offset is None:
                    return
                src.write(moved)
                here = dst.read()
                here[tp] = offset
                dst.write(here)
            except (CheckpointReadError, OSError) as e:
                log.warning(kv(event="cleaner_checkpoint_move_failed", partition=f"{tp[0]}-{tp[1]}", error=e))

    def pause_cleaning(self, tp: tuple[str, int]) -> None:
        """Keep the cleaner off a log (counted; Kafka's ``abortAndPauseCleaning`` without the wait)."""
        with self._lock:
            self._paused[tp] = self._paused.get(tp, 0) + 1

    def resume_cleaning(self, tp: tuple[str, int]) -> None:
        with self._lock:
            n = self._paused.get(tp, 0) - 1
            if n > 0:
                self._paused[tp] = n
            else:
                self._paused.pop(tp, None)
