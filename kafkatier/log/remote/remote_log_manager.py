"""RemoteLogManager: copies a leader's rolled segments to remote storage, expires remote data, keeps followers'
view of the remote tier, and serves reads below the local log start offset
(docs/kip-950-tiered-storage.md#the-remote-log-manager).

Pools (KIP-950 split): ``kafka-rlm-copy-thread-pool-*`` (copier size), ``kafka-rlm-expiration-thread-pool-*``
(expiration size) and ``kafka-rlm-follower-thread-pool-*`` (``remote.log.manager.thread.pool.size``).  Every
task runs with a fixed delay of ``remote.log.manager.task.interval.ms``, first run at once.  Per partition there
is at most one copy, one expiration and one follower task.

Copy task (leader).  First run: the log start offset is taken from the remote tier (never lowered, see below)
and the highest copied offset from the metadata; each run then copies, oldest first, every local segment whose
next segment starts at or below the last stable offset (the high watermark here: no transactions) — never the
active segment.  Per segment: COPY_SEGMENT_STARTED, upload of the segment and its indexes, then
COPY_SEGMENT_FINISHED in one ZooKeeper multi with checks on the partition state znode (this broker still
leads at the task's leader epoch) and on the topic's ``tiered_epoch`` (unchanged since the task read it) and
``state`` (ENABLED).  A run does nothing while the log's config says copying is off (KIP-950).  A
failed or fenced copy deletes what it uploaded; its metadata stays COPY_SEGMENT_STARTED ("dangling") and the
expiration task deletes it.  A new leader resumes after the highest COPY_SEGMENT_FINISHED offset, so a failover
mid-copy neither loses nor duplicates a segment.

Expiration task (leader).  Deletes, oldest first: dangling copies (COPY_SEGMENT_STARTED not being copied by this
broker), DELETE_SEGMENT_STARTED leftovers, segments below the log start offset, then segments breaching
``retention.ms`` (``maxTimestamp <= now - retention.ms``) or ``retention.bytes`` (over remote + not yet uploaded
local bytes).  The log start offset is advanced *before* deleting.  Each deletion is DELETE_SEGMENT_STARTED ->
storage delete -> DELETE_SEGMENT_FINISHED; a storage failure ends the run (the next one retries).

Follower task.  Records the highest remote offset in the local log (local retention deletes only uploaded
segments), and rebuilds the replica when it fell below the leader's local log start offset (the leader answers
its fetches with OFFSET_MOVED_TO_TIERED_STORAGE): ListOffsets EARLIEST_LOCAL (-4) and EARLIEST (-2) to the
leader, the leader epochs up to there from the remote segment's leader-epoch checkpoint, then the log is
truncated fully and restarted at the leader's local log start offset with the leader's log start offset
(simplified version of Kafka's ``buildRemoteLogAuxState``: no producer state is rebuilt).

Simplifications (documented): segments are walked by start offset rather than per leader epoch of the lineage;
no copy/fetch quotas; remote reads run on the request thread (no remote-fetch purgatory).

Tiered epoch: every copy is stamped with the topic's tiered epoch read when the copy task starts.  Segments of
an older tiered epoch below the log start offset are garbage (never served, sized or used for offsets) and are
deleted as log-start-offset breaches; segments of an older epoch being deleted (DELETE_SEGMENT_STARTED) do not
count for size retention whatever their offsets.

KIP-950 disablement (StopReplica v5, docs/kip-950-tiered-storage.md#broker-work-for-stopreplica-v5;
``ReplicaManager`` calls :meth:`RemoteLogManager.disable_remote_partitions` after re-reading the topics' configs):
:meth:`RemoteLogManager.stop_copy` (read-only: the copy task goes, expiration and follower tasks stay) and
:meth:`RemoteLogManager.disable_with_delete` (every task goes, the log start offset moves up to the local log
start offset and the log is no longer tiered; the leader marks every segment DELETE_SEGMENT_STARTED and a
:class:`CleanupTask` in the expiration slot deletes them, then unregisters itself).  On a read-only topic the
expiration task's first run takes the log start offset from the remote tier, as the missing copy task would.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Iterable, Protocol, Sequence

import attrs
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from kafkatier.common.scheduler import KafkaScheduler, ScheduledTask
from kafkatier.common.structs import TopicIdPartition
from kafkatier.log.errors import CheckpointReadError
from kafkatier.log.leader_epoch_cache import (EpochEntry, decode_leader_epoch_checkpoint,
                                              encode_leader_epoch_checkpoint)
from kafkatier.log.record_batch import HEADER, HEADER_SIZE
from kafkatier.log.remote import remote_log_reader
from kafkatier.log.remote.config import RemoteLogManagerConfig
from kafkatier.log.remote.remote_log_metadata_manager import (SIZED_STATES, RemoteLogMetadataFencedError,
                                                              RemoteLogMetadataManager)
from kafkatier.log.remote.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    new_segment_metadata,
)
from kafkatier.log.remote.remote_storage_manager import (IndexType, LogSegmentData, RemoteResourceNotFoundError,
                                                         RemoteStorageError, RemoteStorageManager)
from kafkatier.log.segment import TimestampAndOffset
from kafkatier.log.transaction_index import ENTRY_SIZE, AbortedTxn
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import Errors, KafkaError, OffsetOutOfRangeError
from kafkatier.zk.codecs import MalformedZNodeError

log = get_logger("remote.rlm")

S = RemoteLogSegmentState
SEGMENT_DELETION = "SegmentDeletion"


class RemoteLogTaskFencedError(RemoteStorageError):
    """This broker may no longer act for the partition: not the leader at the task's epoch, or the topic's
    tiered epoch moved on."""


class PartitionLike(Protocol):
    """What the manager needs of a hosted partition (``kafkatier.server.partition.Partition``)."""

    topic: str
    partition: int
    topic_id: str | None
    leader_id: int
    leader_epoch: int
    log: Any

    @property
    def is_leader(self) -> bool: ...


@attrs.frozen
class StopPartition:
    """Kafka's ``StopPartition``: what to do with one partition's remote state when it stops here."""

    topic: str
    partition: int
    delete_local_log: bool = False
    delete_remote_log: bool = False
    stop_remote_log_metadata_manager: bool = False


# (partition, leader epoch, tiered epoch or None) -> fence ops for the metadata manager; raises
# RemoteLogTaskFencedError when the broker already knows it is fenced.
FenceProvider = Callable[[PartitionLike, int, "int | None"], list]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _tip(p: PartitionLike) -> TopicIdPartition | None:
    return TopicIdPartition(p.topic_id, p.topic, p.partition) if p.topic_id else None


def is_tiered(p: PartitionLike) -> bool:
    """The partition's log is tiered (system flag on, topic tiered, not compacted, not internal)."""
    plog = p.log
    return bool(getattr(plog, "remote_log_enabled", False)) and not plog.closed and bool(p.topic_id)


READ_ONLY, DELETE, NOT_DISABLED = "read-only", "delete", "enabled"


def disablement_kind(log_config: Any) -> str:
    """What a topic's (current) config asks of its replicas on a KIP-950 disablement: ``delete``,
    ``read-only``, or ``enabled`` (tiering on with copying: nothing to disable)."""
    if not log_config.remote_storage_enable:
        return DELETE
    return READ_ONLY if log_config.remote_log_copy_disable else NOT_DISABLED


def needs_cleanup(p: PartitionLike) -> bool:
    """A leader of a topic whose tiering was switched off with deletion (``remote.log.delete.on.disable=true``,
    log not tiered) runs the cleanup pass, so leftovers are removed whoever leads.  A topic that never had remote
    data costs one metadata listing."""
    lc = p.log.config
    return not (p.topic.startswith("__") or is_tiered(p) or not p.topic_id or p.log.closed
                or not getattr(lc, "remote_log_delete_on_disable", False) or lc.remote_storage_enable)


def copy_disabled(plog: Any) -> bool:
    """The log's config stops uploads (KIP-950): read-only tiering (``remote.log.copy.disable=true``) or
    tiering switched off (``remote.storage.enable=false``)."""
    cfg = plog.config
    return bool(getattr(cfg, "remote_log_copy_disable", False)) or not getattr(cfg, "remote_storage_enable", True)


# ------------------------------------------------------------------------------------------------- tasks

class _Task:
    kind = "task"

    def __init__(self, rlm: RemoteLogManager, p: PartitionLike, tip: TopicIdPartition):
        self.rlm = rlm
        self.partition = p
        self.tip = tip
        self.leader_epoch = p.leader_epoch
        self._cancelled = threading.Event()
        self.handle: ScheduledTask | None = None
        self._last_problem: str | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        self._cancelled.set()
        if self.handle is not None:
            self.handle.cancel()

    def run(self) -> None:
        if self.cancelled or self.partition.log.closed:
            return
        try:
            self.execute()
        except MalformedZNodeError as e:
            # an unreadable znode (a bad tiered_epoch) fails every run alike: one line per change, no traceback
            if str(e) != self._last_problem:
                self._last_problem = str(e)
                log.error(kv(event="task_skipped_malformed_znode", task=type(self).__name__, partition=self.tip,
                             reason=str(e)))
            return
        self._last_problem = None

    def execute(self) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.tip}, leader_epoch={self.leader_epoch})"


class CopyTask(_Task):
    """Leader: copy rolled segments up to the last stable offset (see the module docstring)."""

    kind = "copy"

    def __init__(self, rlm: RemoteLogManager, p: PartitionLike, tip: TopicIdPartition):
        super().__init__(rlm, p, tip)
        self.tiered_epoch: int | None = None
        self.copied_offset = -1
        self.initialized = False

    def execute(self) -> None:
        p = self.partition
        if not p.is_leader or p.leader_epoch != self.leader_epoch:
            return
        plog = p.log
        if copy_disabled(plog):
            return  # KIP-950: the config already says no more uploads; StopReplica v5 will cancel the task
        if not self.initialized:
            self.tiered_epoch = self.rlm.tiered_epoch_of(p.topic)
            self.rlm.update_log_start_offset_from_remote(p, self.tip, self.tiered_epoch)
            self.copied_offset = self.rlm.highest_remote_offset(p, self.tip, self.tiered_epoch)
            plog.reset_highest_offset_in_remote_storage(self.copied_offset)
            self.initialized = True
            log.info(kv(event="copy_task_initialized", partition=self.tip, leader_epoch=self.leader_epoch,
                        tiered_epoch=self.tiered_epoch, highest_remote_offset=self.copied_offset,
                        log_start_offset=plog.log_start_offset))
        lso = plog.high_watermark
        from_offset = max(self.copied_offset + 1, plog.log_start_offset)
        if lso <= 0 or from_offset >= lso:
            return
        for seg, next_base in self.candidates(from_offset, lso):
            if self.cancelled or not p.is_leader:
                return
            self.copy_segment(seg, next_base)

    def candidates(self, from_offset: int, lso: int) -> list[tuple[Any, int]]:
        """(segment, next segment's base offset) for every rolled segment holding offsets >= ``from_offset``
        whose successor starts at or below ``lso``."""
        segs = self.partition.log.log_segments()
        out = []
        for seg, nxt in zip(segs, segs[1:]):
            if nxt.base_offset > lso:
                break
            if nxt.base_offset > from_offset and nxt.base_offset > seg.base_offset:
                out.append((seg, nxt.base_offset))
        return out

    def copy_segment(self, seg: Any, next_base: int) -> None:
        rlm, p, plog = self.rlm, self.partition, self.partition.log
        start, end = seg.base_offset, next_base - 1
        size = os.path.getsize(seg.log_path)
        epochs = self.segment_leader_epochs(seg, start, end)
        max_ts = seg.max_timestamp_so_far if seg.max_timestamp_so_far >= 0 else seg.largest_timestamp
        md = new_segment_metadata(RemoteLogSegmentId.generate(self.tip), start, end, max_ts, rlm.broker_id, size,
                                  epochs, self.tiered_epoch or 0, rlm.clock())
        entries = [e for e in plog.leader_epoch_cache.epoch_entries() if e.start_offset <= end]
        txn = os.path.join(plog.dir, f"{start:020d}.txnindex")
        snapshot = os.path.join(plog.dir, f"{next_base:020d}.snapshot")
        data = LogSegmentData(seg.log_path, seg.offset_index.path, seg.time_index.path,
                              txn if os.path.exists(txn) else None,
                              snapshot if os.path.exists(snapshot) else None, encode_leader_epoch_checkpoint(entries))
        sid = md.remote_log_segment_id
        rlm.segment_ids_being_copied[sid.id] = self.tip
        if self.cancelled:
            # Registered first, checked second: a KIP-950 disablement cancels first and looks for copies in flight
            # second, so either it sees this copy or this copy sees the cancellation.
            rlm.segment_ids_being_copied.pop(sid.id, None)
            return
        try:
            log.info(kv(event="copying_segment", partition=self.tip, segment=sid.id, start_offset=start,
                        end_offset=end, size=size, tiered_epoch=md.tiered_epoch))
            rlm.rlmm.add_remote_log_segment_metadata(md, rlm.fence(p, self.leader_epoch, None))
            custom = rlm.rsm.copy_log_segment_data(md, data)
            try:
                if custom is not None and len(custom) > rlm.config.custom_metadata_max_bytes:
                    self.cancel()
                    raise RemoteStorageError(f"Custom metadata size {len(custom)} exceeds configured limit "
                                             f"{rlm.config.custom_metadata_max_bytes}; copy task cancelled")
                if self.cancelled:
                    raise RemoteLogTaskFencedError(f"copy task of {self.tip} was cancelled")
                upd = RemoteLogSegmentMetadataUpdate(sid, rlm.clock(), S.COPY_SEGMENT_FINISHED, rlm.broker_id, custom)
                done = rlm.publish(upd, lambda: rlm.fence(p, self.leader_epoch, self.tiered_epoch),
                                   S.COPY_SEGMENT_STARTED)
                if done is None:
                    raise RemoteLogTaskFencedError(f"segment {sid.id} can no longer become COPY_SEGMENT_FINISHED")
            except BaseException:
                rlm.discard_uploaded(md)
                raise
        finally:
            rlm.segment_ids_being_copied.pop(sid.id, None)
        self.copied_offset = end
        plog.update_highest_offset_in_remote_storage(end)
        log.info(kv(event="copied_segment", partition=self.tip, segment=sid.id, start_offset=start,
                    end_offset=end, tiered_epoch=md.tiered_epoch))

    def segment_leader_epochs(self, seg: Any, start: int, end: int) -> dict[int, int]:
        """Epoch -> first offset of the epochs in ``[start, end]`` (the first clamped to ``start``)."""
        out: dict[int, int] = {}
        for e in self.partition.log.leader_epoch_cache.epoch_entries():
            if e.start_offset <= start:
                out = {e.epoch: start}
            elif e.start_offset <= end:
                out[e.epoch] = e.start_offset
        if not out:  # an empty cache: take the epoch of the segment's first batch
            with open(seg.log_path, "rb") as f:
                head = f.read(HEADER_SIZE)
            epoch = HEADER.unpack_from(head, 0)[2] if len(head) == HEADER_SIZE else self.leader_epoch
            out = {max(epoch, 0): start}
        return out


class ExpirationTask(_Task):
    """Leader: remote retention (see the module docstring).  On a read-only topic (no copy task) its first run
    also takes the log start offset from the remote tier, as a copy task would."""

    kind = "expiration"

    def __init__(self, rlm: RemoteLogManager, p: PartitionLike, tip: TopicIdPartition):
        super().__init__(rlm, p, tip)
        self.initialized = False

    def execute(self) -> None:
        p = self.partition
        if not p.is_leader:
            return
        if not self.initialized:
            self.initialized = True
            if copy_disabled(p.log):
                tiered_epoch = self.rlm.tiered_epoch_of(p.topic)
                self.rlm.update_log_start_offset_from_remote(p, self.tip, tiered_epoch)
                p.log.reset_highest_offset_in_remote_storage(self.rlm.highest_remote_offset(p, self.tip, tiered_epoch))
        self.rlm.expire(p, self.tip, self)


class CleanupTask(_Task):
    """Leader of a partition whose tiering was switched off with deletion (KIP-950): finishes deleting every
    remote segment (DELETE_SEGMENT_STARTED -> storage delete -> DELETE_SEGMENT_FINISHED), then stops the
    metadata manager for the partition and unregisters itself.  It takes the expiration task's slot, so a
    re-enable (which schedules a real expiration task) replaces it."""

    kind = "expiration"

    def execute(self) -> None:
        p = self.partition
        if not p.is_leader or is_tiered(p):
            self.rlm.unregister(self)  # a follower now, or tiering is back on: the expiration task takes over
            return
        if self.rlm.cleanup_pass(p, self.tip, self):
            self.rlm.unregister(self)
            self.rlm.rlmm.on_stop_partitions([self.tip])


class FollowerTask(_Task):
    """Follower: track the highest remote offset; rebuild when below the leader's local log start."""

    kind = "follower"

    def execute(self) -> None:
        p = self.partition
        if p.is_leader:
            return
        tiered_epoch = self.rlm.tiered_epoch_of(p.topic)
        highest = self.rlm.highest_remote_offset(p, self.tip, tiered_epoch)
        p.log.reset_highest_offset_in_remote_storage(highest)
        if p.leader_id >= 0 and 0 <= p.log.log_end_offset <= highest:
            self.rlm.maybe_rebuild_follower(p, self.tip)


@attrs.define
class _PartitionTasks:
    tip: TopicIdPartition
    partition: PartitionLike
    copy: CopyTask | None = None
    expiration: ExpirationTask | None = None
    follower: FollowerTask | None = None
    was_leader: bool = False

    def all(self) -> list[_Task]:
        return [t for t in (self.copy, self.expiration, self.follower) if t is not None]


# --------------------------------------------------------------------------------------------------- manager

class RemoteLogManager:
    """One per broker with ``remote.log.storage.system.enable=true``.

    Collaborators are injected so that the manager does not depend on ZooKeeper directly: ``tiered_epoch_of``
    (topic -> current tiered epoch), ``fence`` (see :data:`FenceProvider`), ``leader_offsets`` (partition ->
    ``(leader local log start, leader log start)`` or None) and ``restart_fetcher`` (partition -> None).
    """

    def __init__(self, config: RemoteLogManagerConfig, broker_id: int, rsm: RemoteStorageManager,
                 rlmm: RemoteLogMetadataManager, *, tiered_epoch_of: Callable[[str], int] | None = None,
                 fence: FenceProvider | None = None,
                 leader_offsets: Callable[[PartitionLike], tuple[int, int] | None] | None = None,
                 restart_fetcher: Callable[[PartitionLike], None] | None = None,
                 clock: Callable[[], int] = _now_ms):
        self.config = config
        self.broker_id = broker_id
        self.rsm = rsm
        self.rlmm = rlmm
        self._tiered_epoch_of = tiered_epoch_of or (lambda topic: 0)
        self._fence = fence
        self._leader_offsets = leader_offsets
        self._restart_fetcher = restart_fetcher
        self.clock = clock
        self.copier_pool = KafkaScheduler(config.effective_copier_thread_pool_size, "kafka-rlm-copy-thread-pool-")
        self.expiration_pool = KafkaScheduler(config.effective_expiration_thread_pool_size,
                                              "kafka-rlm-expiration-thread-pool-")
        self.follower_pool = KafkaScheduler(config.thread_pool_size, "kafka-rlm-follower-thread-pool-")
        self.segment_ids_being_copied: dict[str, TopicIdPartition] = {}  # segment id -> partition
        self.remote_bytes_by_epoch: dict[str, dict[int, int]] = {}  # "topic-partition" -> tiered epoch -> bytes
        self._partitions: dict[tuple[str, int], _PartitionTasks] = {}
        self._lock = threading.RLock()
        self._started = False
        self._closed = False

    # --- lifecycle ----------------------------------------------------------------------------------------
    def startup(self) -> None:
        for pool in (self.copier_pool, self.expiration_pool, self.follower_pool):
            pool.startup()
        self._started = True
        log.info(kv(event="remote_log_manager_started", broker=self.broker_id,
                    copier_threads=self.copier_pool.threads, expiration_threads=self.expiration_pool.threads,
                    follower_threads=self.follower_pool.threads, task_interval_ms=self.config.task_interval_ms))

    def resize_thread_pools(self, copier: int, expiration: int, follower: int) -> None:
        """Dynamic broker config: new pool sizes take effect without a restart."""
        for pool, size in ((self.copier_pool, copier), (self.expiration_pool, expiration),
                           (self.follower_pool, follower)):
            if size != pool.threads:
                pool.resize(size)
        log.info(kv(event="remote_log_manager_pools_resized", copier_threads=copier, expiration_threads=expiration,
                    follower_threads=follower))

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._lock:
            for st in self._partitions.values():
                for t in st.all():
                    t.cancel()
        try:
            self.rsm.close()  # interrupts copies waiting in the storage manager
        except Exception:  # noqa: BLE001
            log.exception(kv(event="rsm_close_failed"))
        for pool in (self.copier_pool, self.expiration_pool, self.follower_pool):
            pool.shutdown(timeout_s=5.0)
        try:
            self.rlmm.close()
        except Exception:  # noqa: BLE001
            log.exception(kv(event="rlmm_close_failed"))
        log.info(kv(event="remote_log_manager_shutdown", broker=self.broker_id))

    # --- collaborators ----------------------------------------------------------------------------------------
    def tiered_epoch_of(self, topic: str) -> int:
        return self._tiered_epoch_of(topic)

    def fence(self, p: PartitionLike, leader_epoch: int, tiered_epoch: int | None) -> list:
        return self._fence(p, leader_epoch, tiered_epoch) if self._fence is not None else []

    def publish(self, update: RemoteLogSegmentMetadataUpdate, fence: Callable[[], list],
                expected_state: RemoteLogSegmentState | None = None) -> RemoteLogSegmentMetadata | None:
        """Apply ``update`` under a fresh fence; a fence check that failed only because the partition state
        znode moved (e.g. an ISR change) is retried while the broker still leads."""
        retrying = Retrying(stop=stop_after_attempt(3), wait=wait_exponential(multiplier=0.05, max=0.5),
                            retry=retry_if_exception_type(RemoteLogMetadataFencedError), reraise=True)
        return retrying(lambda: self.rlmm.update_remote_log_segment_metadata(update, fence(), expected_state))

    def discard_uploaded(self, md: RemoteLogSegmentMetadata) -> None:
        """Remove what a copy uploaded (its metadata stays COPY_SEGMENT_STARTED unless it already finished)."""
        try:
            cur = self.rlmm.segment_metadata(md.remote_log_segment_id)
            if cur is not None and cur.state == S.COPY_SEGMENT_FINISHED:
                return  # the FINISHED write went through although its answer was lost: keep the data
        except Exception:  # noqa: BLE001 - cannot tell: delete, the expiration task cleans the metadata
            log.warning(kv(event="segment_state_unknown", segment=md.segment_id), exc_info=True)
        try:
            self.rsm.delete_log_segment_data(md)
            log.info(kv(event="uploaded_data_discarded", partition=md.topic_id_partition, segment=md.segment_id))
        except Exception:  # noqa: BLE001
            log.exception(kv(event="discard_uploaded_failed", segment=md.segment_id))

    # --- leadership ---------------------------------------------------------------------------------------
    def on_leadership_change(self, leaders: Iterable[PartitionLike], followers: Iterable[PartitionLike]) -> None:
        """Schedule tasks for the tiered partitions: leaders get a copy task (unless copy is disabled) and an
        expiration task, followers a follower task; a replaced task is cancelled."""
        if not self._started:
            raise RemoteStorageError("RemoteLogManager is not configured when remote storage system is enabled")
        interval = self.config.task_interval_ms
        leaders, followers = list(leaders), list(followers)
        for p in leaders:
            if needs_cleanup(p):
                self.schedule_cleanup(p)
        leaders, followers = [p for p in leaders if is_tiered(p)], [p for p in followers if is_tiered(p)]
        self.rlmm.on_partition_leadership_changes([_tip(p) for p in leaders], [_tip(p) for p in followers])
        with self._lock:
            for p in leaders:
                st = self._state(p)
                for task in ("follower", "copy", "expiration"):
                    self._cancel(st, task)
                st.was_leader = True
                if not getattr(p.log.config, "remote_log_copy_disable", False):
                    st.copy = CopyTask(self, p, st.tip)
                    st.copy.handle = self.copier_pool.schedule(
                        f"copy-{st.tip}", st.copy.run, 0, interval)
                st.expiration = ExpirationTask(self, p, st.tip)
                st.expiration.handle = self.expiration_pool.schedule(
                    f"expiration-{st.tip}", st.expiration.run, 0, interval)
                log.info(kv(event="leader_tasks_scheduled", partition=st.tip, leader_epoch=p.leader_epoch,
                            copy=st.copy is not None))
            for p in followers:
                st = self._state(p)
                for task in ("copy", "expiration", "follower"):
                    self._cancel(st, task)
                st.was_leader = False
                st.follower = FollowerTask(self, p, st.tip)
                st.follower.handle = self.follower_pool.schedule(
                    f"follower-{st.tip}", st.follower.run, 0, interval)
                log.info(kv(event="follower_task_scheduled", partition=st.tip, leader=p.leader_id))

    def _state(self, p: PartitionLike) -> _PartitionTasks:
        key = (p.topic, p.partition)
        tip = _tip(p)
        st = self._partitions.get(key)
        if st is None or st.tip != tip:
            if st is not None:
                for t in st.all():
                    t.cancel()
            st = _PartitionTasks(tip, p)
            self._partitions[key] = st
        st.partition = p
        return st

    def _cancel(self, st: _PartitionTasks, kind: str, quiet: bool = False) -> bool:
        """Cancel the partition's task of ``kind``; True if there was one.  ``quiet``: the caller logs one line
        for the partition instead (a StopReplica v5 of a thousand partitions)."""
        task = getattr(st, kind)
        if task is None:
            return False
        task.cancel()
        setattr(st, kind, None)
        if not quiet:
            log.info(f"Cancelling the {kind} RLM task for tpId: {st.tip}")
        return True

    def tasks(self, topic: str, partition: int) -> dict[str, _Task]:
        """The partition's scheduled tasks by kind (for tests and status)."""
        with self._lock:
            st = self._partitions.get((topic, partition))
            return {t.kind: t for t in st.all()} if st else {}

    # --- stopping -----------------------------------------------------------------------------------------
    def stop_partitions(self, stops: Sequence[StopPartition]) -> None:
        """Cancel the partitions' tasks; delete remote data where asked (errors are logged, as in Kafka)."""
        for sp in stops:
            with self._lock:
                key = (sp.topic, sp.partition)
                # A stop without deletion keeps what the partition was (leader or not): ZooKeeper topic deletion
                # stops replicas first and deletes them in a second StopReplica.
                st = self._partitions.pop(key, None) if sp.delete_local_log else self._partitions.get(key)
                if st is not None:
                    for kind in ("copy", "expiration", "follower"):
                        self._cancel(st, kind)
            tip = st.tip if st is not None else None
            if sp.delete_remote_log:
                tips = [tip] if tip is not None else [t for t in self.rlmm.list_partitions(sp.topic)
                                                      if t.partition == sp.partition]
                for t in tips:
                    try:
                        self.delete_remote_partition(t)
                    except Exception:  # noqa: BLE001
                        log.exception(kv(event="remote_partition_delete_failed", partition=t))
            if sp.stop_remote_log_metadata_manager and tip is not None:
                self.rlmm.on_stop_partitions([tip])

    def on_replica_stopped(self, topic: str, partition: int, deleted: bool, topic_deleted: bool = True) -> None:
        """ReplicaManager ``on_stop`` hook (ZooKeeper StopReplica): on topic deletion (the request's leader epoch
        is -2), the leader deletes the partition's remote data (Kafka: ``deleteRemoteLog = DeletePartition &&
        isLeader && LeaderEpoch == EpochDuringDelete``); a replica deleted by a reassignment keeps it."""
        with self._lock:
            st = self._partitions.get((topic, partition))
            was_leader = st is not None and st.was_leader
        if st is None and not deleted:
            return
        self.stop_partitions([StopPartition(topic, partition, delete_local_log=deleted,
                                            delete_remote_log=deleted and was_leader and topic_deleted,
                                            stop_remote_log_metadata_manager=deleted)])

    # --- KIP-950 disablement (StopReplica v5, docs/kip-950-tiered-storage.md#broker-work-for-stopreplica-v5) ---
    def stop_copy(self, topic: str, partition: int) -> bool:
        """Read-only disablement: cancel the partition's copy task; expiration and follower tasks stay.
        Returns whether a copy task was cancelled (False on a repeat)."""
        with self._lock:
            st = self._partitions.get((topic, partition))
            if st is None or st.copy is None:
                return False
            self._cancel(st, "copy")
            return True

    def disable_with_delete(self, p: PartitionLike) -> int:
        """Delete disablement of one replica (idempotent): cancel its tasks, move the log start offset up to the
        local log start offset and stop tiering the log.  The leader then marks every remote segment
        DELETE_SEGMENT_STARTED (what it answers on) and leaves the storage deletions to a :class:`CleanupTask`;
        a follower stops the metadata manager for the partition.  Returns the number of segments marked."""
        cancelled = self._switch_off(p)
        log.info(kv(event="tiering_switched_off", partition=f"{p.topic}-{p.partition}",
                    log_start_offset=p.log.log_start_offset, leader=p.is_leader,
                    tasks_cancelled=",".join(cancelled) or None))
        tip = _tip(p)
        if tip is None:
            return 0
        segs = self.rlmm.list_remote_log_segments(tip) if p.is_leader else []
        return self._delete_remote(p, tip, segs)

    def _switch_off(self, p: PartitionLike) -> list[str]:
        """First half of :meth:`disable_with_delete`: the tasks go (a copy in flight is found by its
        registration), the log start offset moves up and the log stops being tiered.  Returns the kinds of the
        tasks cancelled (logged by the caller, with the outcome)."""
        cancelled = []
        with self._lock:
            st = self._partitions.get((p.topic, p.partition))
            if st is not None:
                kinds = ["copy", "follower"] + ([] if isinstance(st.expiration, CleanupTask) else ["expiration"])
                cancelled = [kind for kind in kinds if self._cancel(st, kind, quiet=True)]
        p.log.disable_remote_log()  # atomic with local retention (which moves the local log start offset)
        return cancelled

    def _delete_remote(self, p: PartitionLike, tip: TopicIdPartition, segs: list[RemoteLogSegmentMetadata]) -> int:
        """Second half of :meth:`disable_with_delete`, given the partition's segments listed after
        :meth:`_switch_off`."""
        if not p.is_leader:
            self.rlmm.on_stop_partitions([tip])
            return 0
        listed, marked = self.mark_for_deletion(tip, segs)
        if listed or self._copying(tip):
            self.schedule_cleanup(p)
        else:  # no remote data at all (the copy task was cancelled above, no copy in flight): done already
            self.rlmm.on_stop_partitions([tip])
        return marked

    def _copying(self, tip: TopicIdPartition) -> bool:
        return any(t == tip for t in list(self.segment_ids_being_copied.values()))

    def mark_for_deletion(self, tip: TopicIdPartition,
                          segs: list[RemoteLogSegmentMetadata] | None = None) -> tuple[int, int]:
        """DELETE_SEGMENT_STARTED for every segment (``segs``: listed by the caller; None: list them now) not
        already being deleted (unfenced: whoever runs this was told to delete everything, and the
        compare-and-set transitions keep it safe).  Returns (segments listed, segments marked)."""
        marked = 0
        segs = self.rlmm.list_remote_log_segments(tip) if segs is None else segs
        for md in segs:
            if md.state not in (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED):
                continue
            upd = RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, self.clock(), S.DELETE_SEGMENT_STARTED,
                                                 self.broker_id)
            try:
                if self.rlmm.update_remote_log_segment_metadata(upd) is not None:
                    marked += 1
            except RemoteResourceNotFoundError:
                continue  # deleted meanwhile
        if segs:
            log.info(kv(event="remote_segments_marked_for_deletion", partition=tip, segments=marked))
        return len(segs), marked

    def disable_remote_partitions(self, ps: Sequence[PartitionLike]) -> dict[tuple[str, int], Exception | None]:
        """KIP-950 (StopReplica v5 with ``DisableRemotePartition=true``) for hosted replicas whose log configs
        are their topics' current ones: a delete disablement (:meth:`disable_with_delete`) or a read-only one
        (:meth:`stop_copy`); a config that has tiering on with copying is logged and ignored.  The leaders'
        remote-metadata listings of a delete disablement are read together, pipelined.  Returns each
        partition's failure (None: done); a failure leaves the others alone."""
        outcome: dict[tuple[str, int], Exception | None] = {}
        deleting: list[tuple[PartitionLike, TopicIdPartition | None, list[str]]] = []
        for p in ps:
            key = (p.topic, p.partition)
            try:
                kind = disablement_kind(p.log.config)
                if kind == DELETE:
                    deleting.append((p, _tip(p), self._switch_off(p)))
                    continue
                if kind == READ_ONLY:
                    cancelled = self.stop_copy(p.topic, p.partition)
                    log.info(kv(event="remote_partition_disabled", partition=f"{p.topic}-{p.partition}",
                                policy=kind, leader=p.is_leader, copy_task_cancelled=cancelled))
                else:
                    log.warning(kv(event="disable_remote_partition_ignored", partition=f"{p.topic}-{p.partition}",
                                   reason="the topic config has tiering enabled with copying"))
                outcome[key] = None
            except Exception as e:  # noqa: BLE001 - answered per partition; the controller retries
                outcome[key] = e
        leaders = [tip for p, tip, _ in deleting if tip is not None and p.is_leader]
        try:
            listed = self.rlmm.list_remote_log_segments_of(leaders) if leaders else {}
        except Exception as e:  # noqa: BLE001
            listed = None
            failure: Exception = e
        for p, tip, cancelled in deleting:
            key = (p.topic, p.partition)
            try:
                marked = 0
                if tip is not None:
                    if p.is_leader and listed is None:
                        raise failure
                    marked = self._delete_remote(p, tip, listed.get(tip, []) if listed else [])
                log.info(kv(event="remote_partition_disabled", partition=f"{p.topic}-{p.partition}", policy=DELETE,
                            leader=p.is_leader, log_start_offset=p.log.log_start_offset, segments_marked=marked,
                            tasks_cancelled=",".join(cancelled) or None))
                outcome[key] = None
            except Exception as e:  # noqa: BLE001
                outcome[key] = e
        return outcome

    def schedule_cleanup(self, p: PartitionLike) -> bool:
        """Schedule a :class:`CleanupTask` for a leader whose topic's tiering is off (after a delete
        disablement, or on becoming leader of such a topic); False if one is already scheduled."""
        tip = _tip(p)
        if tip is None or not self._started or self._closed:
            return False
        with self._lock:
            st = self._state(p)
            if isinstance(st.expiration, CleanupTask) and not st.expiration.cancelled:
                return False
            for kind in ("copy", "expiration", "follower"):
                self._cancel(st, kind)
            st.was_leader = True
            st.expiration = CleanupTask(self, p, tip)
            st.expiration.handle = self.expiration_pool.schedule(
                f"cleanup-{tip}", st.expiration.run, 0, self.config.task_interval_ms)
        log.info(kv(event="remote_cleanup_scheduled", partition=tip))
        return True

    def unregister(self, task: _Task) -> None:
        """Remove a task that finished its job (a cleanup task after its last pass)."""
        with self._lock:
            st = self._partitions.get((task.partition.topic, task.partition.partition))
            if st is not None and getattr(st, task.kind) is task:
                setattr(st, task.kind, None)
        task.cancel()
        log.info(kv(event="rlm_task_unregistered", task=repr(task)))

    def cleanup_pass(self, p: PartitionLike, tip: TopicIdPartition, task: _Task | None = None) -> bool:
        """Delete every remote segment of a partition whose tiering is off; True when none is left.  A segment
        still being uploaded by a cancelled copy waits for the next pass (the copier removes its data)."""
        if self._copying(tip):
            return False
        left = False
        segs = self.rlmm.list_remote_log_segments(tip)
        self._record_bytes_by_epoch(tip, segs)
        for md in segs:
            if task is not None and task.cancelled:
                return False
            try:
                if not self.delete_segment(p, md):
                    left = True
            except RemoteResourceNotFoundError:
                continue  # someone else finished it
        if left or self.rlmm.list_remote_log_segments(tip):
            return False
        self._record_bytes_by_epoch(tip, [])
        log.info(kv(event="remote_cleanup_done", partition=tip))
        return True

    def delete_remote_partition(self, tip: TopicIdPartition) -> int:
        """Delete every remote segment of the partition (STARTED for all, delete each, FINISHED for all), then
        its metadata and directory.  Returns the number of segments deleted."""
        segs = self.rlmm.list_remote_log_segments(tip)
        for md in segs:
            if md.state != S.DELETE_SEGMENT_STARTED:
                self.rlmm.update_remote_log_segment_metadata(
                    RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, self.clock(), S.DELETE_SEGMENT_STARTED,
                                                   self.broker_id))
        for md in segs:
            self.rsm.delete_log_segment_data(md)
        for md in segs:
            self.rlmm.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, self.clock(), S.DELETE_SEGMENT_FINISHED,
                                               self.broker_id))
        if not self.rlmm.list_remote_log_segments(tip):
            self.rlmm.delete_partition_metadata(tip)
            self.rsm.delete_partition(tip)
        log.info(kv(event="remote_partition_deleted", partition=tip, segments=len(segs)))
        return len(segs)

    # --- remote view of a partition -------------------------------------------------------------------------
    def valid_segments(self, p: PartitionLike, tip: TopicIdPartition, tiered_epoch: int | None,
                       segments: list[RemoteLogSegmentMetadata] | None = None) -> list[RemoteLogSegmentMetadata]:
        """COPY_SEGMENT_FINISHED segments that are part of the log: not garbage of an older tiered epoch
        (``tieredEpoch`` < current and wholly below the log start offset)."""
        segs = self.rlmm.list_remote_log_segments(tip) if segments is None else segments
        lso = p.log.log_start_offset
        return [s for s in segs if s.state == S.COPY_SEGMENT_FINISHED
                and not (tiered_epoch is not None and s.tiered_epoch < tiered_epoch and s.end_offset < lso)]

    def highest_remote_offset(self, p: PartitionLike, tip: TopicIdPartition, tiered_epoch: int | None) -> int:
        return max((s.end_offset for s in self.valid_segments(p, tip, tiered_epoch)), default=-1)

    def update_log_start_offset_from_remote(self, p: PartitionLike, tip: TopicIdPartition,
                                            tiered_epoch: int | None) -> None:
        """New leader: the log start offset is the start of the remote tier (local log start without remote
        data); it is raised, never lowered, so segments already expired stay expired (KAFKA-15351)."""
        plog = p.log
        valid = [s for s in self.valid_segments(p, tip, tiered_epoch) if s.end_offset >= plog.log_start_offset]
        target = min((s.start_offset for s in valid), default=plog.local_log_start_offset)
        if target > plog.log_start_offset:
            plog.update_log_start_offset_from_remote_tier(target)

    # --- expiration -------------------------------------------------------------------------------------------
    def expire(self, p: PartitionLike, tip: TopicIdPartition, task: _Task | None = None) -> int:
        """One expiration pass (docs/kip-950-tiered-storage.md#the-remote-log-manager); returns the number of
        segments deleted."""
        plog = p.log
        cfg = plog.config
        segs = self.rlmm.list_remote_log_segments(tip)
        self._record_bytes_by_epoch(tip, segs)
        if not segs:
            return 0
        tiered_epoch = self.tiered_epoch_of(p.topic)
        lso = plog.log_start_offset
        valid = self.valid_segments(p, tip, tiered_epoch, segs)
        highest = max((s.end_offset for s in valid), default=-1)
        breach_bytes = 0
        if cfg.retention_bytes > -1:
            local_only = sum(s.size for s in plog.log_segments() if s.base_offset > highest)
            # Segments of an older tiered epoch being deleted (a delete disablement) are no longer part of the
            # log, whatever their offsets (docs/kip-950-tiered-storage.md#tiered-epoch).
            remote = sum(s.segment_size_in_bytes for s in segs if s.state in SIZED_STATES
                         and s.end_offset >= lso
                         and not (s.state == S.DELETE_SEGMENT_STARTED and s.tiered_epoch < tiered_epoch))
            breach_bytes = max(0, local_only + remote - cfg.retention_bytes)
        cleanup_until = None
        if cfg.retention_ms > -1:
            cleanup_until = self.clock() - cfg.retention_ms
            if cleanup_until < 0:
                log.warning(kv(event="time_retention_skipped", partition=tip,
                               reason=f"cleanupUntilMs should be non negative, but it is {cleanup_until}"))
                cleanup_until = None
        dangling, to_delete = [], []
        new_lso = lso
        walking = True
        for md in segs:
            if md.segment_id in self.segment_ids_being_copied:
                if walking:
                    log.info(f"Copy for the segment {md.remote_log_segment_id} is currently in process. Skipping "
                             f"cleanup for it and the remaining segments")
                walking = False
                continue
            if md.state == S.COPY_SEGMENT_STARTED:
                dangling.append(md)
                continue
            if md.state == S.DELETE_SEGMENT_STARTED or md.end_offset < lso:
                to_delete.append(md)
                continue
            if not walking:
                continue
            by_time = cleanup_until is not None and md.max_timestamp_ms <= cleanup_until
            by_size = breach_bytes > 0 and breach_bytes - md.segment_size_in_bytes >= 0
            if by_time or by_size:
                if by_size:
                    breach_bytes -= md.segment_size_in_bytes
                to_delete.append(md)
                new_lso = max(new_lso, md.end_offset + 1)
                log.info(kv(event="remote_segment_expired", partition=tip, segment=md.segment_id,
                            end_offset=md.end_offset, reason="retention.ms" if by_time else "retention.bytes"))
            else:
                walking = False
        if new_lso > lso:
            try:
                plog.maybe_increment_log_start_offset(new_lso, SEGMENT_DELETION)
            except KafkaError as e:
                log.warning(kv(event="log_start_offset_not_moved", partition=tip, target=new_lso, error=e.message))
                to_delete = [md for md in to_delete if md.end_offset < plog.log_start_offset
                             or md.state == S.DELETE_SEGMENT_STARTED]
        deleted = 0
        for md in dangling + to_delete:
            if task is not None and task.cancelled:
                break
            if self.delete_segment(p, md):
                deleted += 1
        return deleted

    def delete_segment(self, p: PartitionLike, md: RemoteLogSegmentMetadata) -> bool:
        """DELETE_SEGMENT_STARTED -> storage delete -> DELETE_SEGMENT_FINISHED, fenced by leadership.
        A storage failure propagates (ends the pass).  A segment another task finished deleting meanwhile (a
        KIP-950 cleanup task and the expiration task that replaced it) is not an error: False."""
        fence = (lambda: self.fence(p, p.leader_epoch, None))
        sid = md.remote_log_segment_id
        try:
            if md.state != S.DELETE_SEGMENT_STARTED:
                if md.state == S.COPY_SEGMENT_STARTED and sid.id in self.segment_ids_being_copied:
                    return False  # not dangling: this broker is copying it
                upd = RemoteLogSegmentMetadataUpdate(sid, self.clock(), S.DELETE_SEGMENT_STARTED, self.broker_id)
                if self.publish(upd, fence, expected_state=md.state) is None:
                    return False
            self.rsm.delete_log_segment_data(md)
            self.publish(RemoteLogSegmentMetadataUpdate(sid, self.clock(), S.DELETE_SEGMENT_FINISHED,
                                                        self.broker_id), fence)
        except RemoteResourceNotFoundError:
            log.info(kv(event="remote_segment_already_deleted", partition=md.topic_id_partition, segment=sid.id))
            return False
        log.info(kv(event="remote_segment_deleted", partition=md.topic_id_partition, segment=sid.id,
                    start_offset=md.start_offset, end_offset=md.end_offset, state_was=md.state.name))
        return True

    # --- followers ----------------------------------------------------------------------------------------
    def maybe_rebuild_follower(self, p: PartitionLike, tip: TopicIdPartition) -> bool:
        """Restart a follower that lies below the leader's local log start offset at that offset (see the
        module docstring).  Returns True when the log was rebuilt."""
        if self._leader_offsets is None:
            return False
        offsets = self._leader_offsets(p)
        if offsets is None:
            return False
        leader_local_start, leader_start = offsets
        plog = p.log
        if leader_local_start < 0 or plog.log_end_offset >= leader_local_start or p.is_leader:
            return False
        entries: list[EpochEntry] = []
        if leader_local_start > 0:
            md = self.rlmm.remote_log_segment_metadata(tip, leader_local_start - 1)
            if md is None:
                log.warning(kv(event="follower_rebuild_deferred", partition=tip,
                               reason=f"no remote segment holds offset {leader_local_start - 1}"))
                return False
            try:
                lineage = decode_leader_epoch_checkpoint(self.rsm.fetch_index(md, IndexType.LEADER_EPOCH),
                                                         f"{md.segment_id}{IndexType.LEADER_EPOCH.value}")
            except CheckpointReadError as e:
                log.warning(kv(event="follower_rebuild_deferred", partition=tip, reason=str(e)))
                return False
            entries = [e for e in lineage if e.start_offset < leader_local_start]
        log.info(kv(event="rebuilding_follower_from_remote", partition=tip, log_end_offset=plog.log_end_offset,
                    leader_local_log_start_offset=leader_local_start, leader_log_start_offset=leader_start))
        plog.truncate_fully_and_start_at(leader_local_start, log_start_offset=min(leader_start, leader_local_start))
        for e in entries:
            plog.assign_epoch_start_offset(e.epoch, max(e.start_offset, plog.log_start_offset))
        plog.update_highest_offset_in_remote_storage(leader_local_start - 1)
        if self._restart_fetcher is not None:
            self._restart_fetcher(p)
        return True

    def on_offset_moved_to_tiered_storage(self, p: PartitionLike) -> bool:
        """For a replica fetcher that got OFFSET_MOVED_TO_TIERED_STORAGE: rebuild now instead of at the next
        follower task run."""
        tip = _tip(p)
        return tip is not None and is_tiered(p) and self.maybe_rebuild_follower(p, tip)

    # --- reads --------------------------------------------------------------------------------------------
    def read(self, p: PartitionLike, fetch_offset: int, max_bytes: int, max_offset: int | None,
             min_one_message: bool = True) -> bytes:
        """Consumer read of an offset in ``[log start, local log start)`` from the remote tier."""
        tip = _tip(p)
        md = self.rlmm.remote_log_segment_metadata(tip, fetch_offset) if tip else None
        if md is None or md.end_offset < p.log.log_start_offset:
            epoch = p.log.leader_epoch_cache.epoch_for_offset(fetch_offset)
            raise OffsetOutOfRangeError(
                f"Received request for offset {fetch_offset} for leader epoch "
                f"{epoch if epoch is not None else 'NOT AVAILABLE'} and partition {p.topic}-{p.partition} which "
                f"does not exist in remote tier.")
        return remote_log_reader.read_batches(self.rsm, md, fetch_offset, max_bytes, max_offset, min_one_message)

    def collect_aborted_transactions(self, p: PartitionLike, fetch_offset: int,
                                     upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Kafka's ``RemoteLogManager.collectAbortedTransactions``: the entries of the transaction indexes of the
        remote segments from the one holding ``fetch_offset`` on that overlap ``[fetch_offset, upper_bound)``, and
        whether the search is complete (an entry's last stable offset reached the bound); if not, the caller goes
        on in the local log.  A segment without a transaction index had no aborted transaction."""
        tip = _tip(p)
        if tip is None:
            return [], False
        out: list[AbortedTxn] = []
        segs = sorted((s for s in self.valid_segments(p, tip, self.tiered_epoch_of(p.topic))
                       if s.end_offset >= fetch_offset), key=lambda s: (s.start_offset, s.end_offset))
        for md in segs:
            try:
                data = self.rsm.fetch_index(md, IndexType.TRANSACTION)
            except RemoteResourceNotFoundError:
                continue
            for pos in range(0, len(data) - len(data) % ENTRY_SIZE, ENTRY_SIZE):
                e = AbortedTxn.decode(data, pos)
                if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset and e not in out:
                    out.append(e)
                if e.last_stable_offset >= upper_bound_offset:
                    return out, True
        return out, False

    def find_offset_by_timestamp(self, p: PartitionLike, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets by timestamp over the remote segments at or above the log start offset."""
        tip = _tip(p)
        if tip is None:
            return None
        lso = p.log.log_start_offset
        for md in self.valid_segments(p, tip, self.tiered_epoch_of(p.topic)):
            if md.end_offset < lso or md.max_timestamp_ms < timestamp:
                continue
            found = remote_log_reader.find_offset_by_timestamp(self.rsm, md, timestamp, lso)
            if found is not None:
                return found
        return None

    def describe(self) -> dict:
        with self._lock:
            return {f"{t}-{p}": sorted(k.kind for k in st.all()) for (t, p), st in sorted(self._partitions.items())}

    def _record_bytes_by_epoch(self, tip: TopicIdPartition, segs: Sequence[RemoteLogSegmentMetadata]) -> None:
        by_epoch: dict[int, int] = {}
        for s in segs:
            by_epoch[s.tiered_epoch] = by_epoch.get(s.tiered_epoch, 0) + s.segment_size_in_bytes
        self.remote_bytes_by_epoch[f"{tip.topic}-{tip.partition}"] = by_epoch

    def metrics(self) -> dict:
        """Status snapshot: tasks per partition and, for partitions whose leader tasks ran here, remote bytes by
        tiered epoch (as of the last expiration or cleanup pass)."""
        return {"tasks": self.describe(),
                "remote_bytes_by_tiered_epoch": {k: {str(e): b for e, b in sorted(v.items())}
                                                 for k, v in sorted(self.remote_bytes_by_epoch.items()) if v}}


def offset_moved_to_tiered_storage(offset: int) -> KafkaError:
    """The error a follower gets for an offset that is only in remote storage (Kafka's text)."""
    return KafkaError(f"Given offset{offset} is moved to tiered storage", Errors.OFFSET_MOVED_TO_TIERED_STORAGE)
