"""Moving a replica between log dirs of one broker (Kafka's ``ReplicaAlterLogDirsManager`` and
``ReplicaAlterLogDirsThread``, KIP-113; docs/kip-113-jbod.md#moving-a-replica).

A move copies a partition's *current* log into its *future* log (``<tp>.move`` in the destination dir) and then
swaps them.  ``num.replica.alter.log.dirs.threads`` threads (``ReplicaAlterLogDirsThread-<n>``) share the
moves; a partition always goes to the same thread (crc32 of ``topic-partition`` modulo the pool size).  Each
thread copies one partition at a time: it keeps the partition it is on while there is data to copy, otherwise
it takes the lowest topic-partition.

One round of a move (:meth:`ReplicaAlterLogDirsThread._copy_round`), holding ``Partition.future_lock``:

1. if the future log ended below the current local log start offset (retention or DeleteRecords ran; for a
   tiered log, the data below it is remote and stays there), it restarts there (``truncate_fully_and_start_at``);
2. copy whole batches from the current log at the future log end offset, up to the current **LEO** (Kafka:
   the local leader end point with replica id -3), at most ``replica.fetch.max.bytes`` (32 MiB,
   :data:`UNTHROTTLED_ROUND_BYTES`, when no throttle applies: fewer rounds, each holding the current log's lock
   ~10 ms) and at most what the shared throttle allows
   (:class:`~kafkatier.server.replication_quota_manager.ReplicationQuotaManager`; at least one batch once the
   throttle allows any byte);
3. the bytes are copied by the kernel (``Log.append_copy_from``: ``copy_file_range``, zero-copy;
   only batch headers are read in Python, offsets and leader epochs kept), and their write-back to disk is
   started at once (``sync_file_range``), so the fsync before the swap waits only for the last round's.  A batch that starts below the
   future LEO fails with Kafka's ``Offset mismatch for the future replica`` -- except the KAFKA-6975 case, a
   log start offset inside the first batch of an empty log; one above it (a compacted log's gap) is copied;
4. the future log takes the current high watermark and log start offset (so DeleteRecords during a move also
   applies to it).

When the LEOs are equal the thread swaps (:meth:`ReplicaAlterLogDirsThread._swap`): it takes the partition
lock (leader appends and follower appends take it too, so nothing is appended meanwhile), copies what arrived
since, copies the leader epoch cache entries the batches do not carry (KAFKA-15608: a new leader's epoch with
no record yet), and asks the log manager to rename (source ``<tp>`` -> ``<tp>.delete``, then ``<tp>.move`` ->
``<tp>``).  The partition then holds only the new log; its producer state is the partition's own and the data
is byte-identical, so it stays valid.

Truncation of the current log (a follower following a new leader) truncates the future log under the same
``future_lock`` (``Partition.truncate_to``), so a round never appends data the current log no longer has.
Leader epoch changes do not touch the move (KAFKA-9654).  A move that fails (an offset mismatch, an I/O
error) restarts from the future log's own high watermark (KAFKA-9087) up to ``MAX_CONSECUTIVE_FAILURES`` times,
then the future log is dropped and the partition stays where it is.  An I/O error in the destination dir is
reported to ``on_log_dir_failure`` and drops the future log; the partition stays online.

Differences from Kafka: unthrottled rounds of 32 MiB (above); no fetch sessions or fetch states (the thread reads the local log directly, so leader
epochs, fencing and OffsetsForLeaderEpoch are not involved); batches are copied file to file without
re-checking their CRCs (they were checked when appended to the current log); the throttle is a token bucket
(same long-run rate as Kafka's sampled windows); the log cleaner never cleans a future log, so nothing is paused.
"""
from __future__ import annotations

import threading
import time
import zlib
from collections import deque
from typing import Callable, Protocol

import attrs

from kafkatier.log.errors import KafkaStorageError, OffsetOutOfRangeError, UnexpectedAppendOffsetError
from kafkatier.log.segment import SourceReadError
from kafkatier.logsetup import get_logger, kv
from kafkatier.server.replication_quota_manager import LONG_MAX, ReplicationQuotaManager

log = get_logger("server.alter-log-dirs")

TopicPartition = tuple[str, int]

MAX_CONSECUTIVE_FAILURES = 5
#: Bytes per round of an unthrottled move: a round costs a few header reads and lock hand-offs besides the kernel
#: copy (~10 % of a 1 MiB round); the current log's lock is held for one round (a few ms at this size).
UNTHROTTLED_ROUND_BYTES = 32 * 1024 * 1024
FAILURE_BACKOFF_S = 0.5
_RATE_WINDOW_S = 5.0


class OffsetMismatchError(Exception):
    """A batch read from the current log does not start at the future log's end offset."""


class FutureLogPartition(Protocol):
    """What a move needs of ``kafkatier.server.partition.Partition``."""

    topic: str
    partition: int
    lock: threading.RLock
    future_lock: threading.Lock
    log: object
    future_log: object

    def attach_future_log(self, future) -> bool: ...
    def detach_future_log(self) -> bool: ...
    def replace_current_with_future_log(self, log_manager) -> object: ...


class LogDirsLogManager(Protocol):
    """What a move needs of ``kafkatier.log.log_manager.LogManager``."""

    def get_future_log(self, topic: str, partition: int): ...
    def abort_and_delete_future_log(self, topic: str, partition: int): ...
    def replace_current_with_future_log(self, topic: str, partition: int): ...


@attrs.frozen
class MoveStatus:
    """One move as ``kafkatier cluster describe`` shows it."""

    partition: str
    source_dir: str
    destination_dir: str
    bytes_copied: int
    offset_lag: int
    rate_bytes_per_s: float
    thread: str


@attrs.define
class _Move:
    partition: FutureLogPartition
    bytes_copied: int = 0
    failures: int = 0
    samples: deque = attrs.field(factory=deque)  # (monotonic time, bytes) of recent rounds

    def rate(self, now: float) -> float:
        while self.samples and now - self.samples[0][0] > _RATE_WINDOW_S:
            self.samples.popleft()
        if not self.samples:
            return 0.0
        return sum(b for _, b in self.samples) / _RATE_WINDOW_S


class ReplicaAlterLogDirsThread(threading.Thread):
    def __init__(self, index: int, manager: "ReplicaAlterLogDirsManager"):
        super().__init__(name=f"ReplicaAlterLogDirsThread-{index}", daemon=True)
        self._manager = manager
        self._cond = threading.Condition()
        self._moves: dict[TopicPartition, _Move] = {}
        self._in_progress: TopicPartition | None = None
        self._stopped = threading.Event()

    # --- membership ---------------------------------------------------------------------------------------
    def add(self, p: FutureLogPartition) -> None:
        with self._cond:
            self._moves[(p.topic, p.partition)] = _Move(p)
            self._cond.notify_all()

    def remove(self, tp: TopicPartition) -> bool:
        with self._cond:
            found = self._moves.pop(tp, None) is not None
            if self._in_progress == tp:
                self._in_progress = None
            return found

    def moves(self) -> dict[TopicPartition, _Move]:
        with self._cond:
            return dict(self._moves)

    def shutdown(self) -> None:
        self._stopped.set()
        self._manager.quota.set_rate(self._manager.quota.rate)  # wakes a thread waiting on the throttle
        with self._cond:
            self._cond.notify_all()

    # --- loop ---------------------------------------------------------------------------------------------
    def run(self) -> None:
        while not self._stopped.is_set():
            with self._cond:
                if not self._moves:
                    self._cond.wait(1.0)
                    continue
                tp = self._in_progress if self._in_progress in self._moves else min(self._moves)
                move = self._moves[tp]
            try:
                more = self._do_work(move)
            except Exception as e:  # noqa: BLE001 - one partition's failure must not stop the thread
                more = self._on_failure(move, e)
            with self._cond:
                self._in_progress = tp if more and tp in self._moves else None

    def _do_work(self, move: _Move) -> bool:
        """One round for one partition; returns whether it has more to copy right now."""
        p = move.partition
        quota = self._manager.quota
        with p.future_lock:
            future, current = p.future_log, p.log
            if future is None:
                self.remove((p.topic, p.partition))
                return False
            local_start = current.local_log_start_offset  # = the log start offset unless tiered
            if future.log_end_offset < local_start:
                future.truncate_fully_and_start_at(local_start, log_start_offset=current.log_start_offset)
            if future.log_end_offset >= current.log_end_offset:
                caught_up = True
            else:
                allowed = quota.allowance()
                if allowed <= 0:
                    caught_up = False
                else:
                    self._copy_round(move, future, current, min(self._round_bytes(allowed), allowed))
                    return True
        if caught_up:
            future.flush()  # fsync the copy before taking the partition lock: the swap then flushes only the rest
            self._swap(move)
            return False
        quota.await_allowance(self._stopped)
        return True

    def _round_bytes(self, allowed: int) -> int:
        """``replica.fetch.max.bytes`` per round, or :data:`UNTHROTTLED_ROUND_BYTES` when no throttle applies."""
        fetch_max = self._manager.fetch_max_bytes
        return max(fetch_max, UNTHROTTLED_ROUND_BYTES) if allowed >= LONG_MAX else fetch_max

    def _copy_round(self, move: _Move, future, current, max_bytes: int) -> int:
        start = future.log_end_offset
        try:
            n = future.append_copy_from(current, max_bytes)
        except OffsetOutOfRangeError:
            return 0  # the current log moved under us (retention): the next round adjusts
        except UnexpectedAppendOffsetError as e:
            raise OffsetMismatchError(
                f"Offset mismatch for the future replica {current.name}: fetched offset = {e.first_offset}, "
                f"log end offset = {start}.") from e
        if n == 0:
            return 0
        self._manager.quota.record(n)
        move.bytes_copied += n
        move.samples.append((time.monotonic(), n))
        move.failures = 0
        self._follow_offsets(future, current)
        return n

    @staticmethod
    def _follow_offsets(future, current) -> None:
        future.update_high_watermark(current.high_watermark)
        lso = min(current.log_start_offset, future.high_watermark)
        if lso > future.log_start_offset:
            future.maybe_increment_log_start_offset(lso)

    def _swap(self, move: _Move) -> None:
        p = move.partition
        with p.lock, p.future_lock:
            future = p.future_log
            if future is None:
                self.remove((p.topic, p.partition))
                return
            current = p.log
            while future.log_end_offset < current.log_end_offset:  # appended since the check: unthrottled
                if self._copy_round(move, future, current, self._manager.fetch_max_bytes) == 0:
                    raise OffsetMismatchError(f"the future log of {current.name} cannot catch up at "
                                              f"{future.log_end_offset} (current {current.log_end_offset})")
            for entry in current.leader_epoch_cache.epoch_entries():  # KAFKA-15608
                future.assign_epoch_start_offset(entry.epoch, entry.start_offset)
            future.update_highest_offset_in_remote_storage(current.highest_offset_in_remote_storage)  # KAFKA-16711
            new_log = p.replace_current_with_future_log(self._manager.log_manager)
        self.remove((p.topic, p.partition))
        log.info("replica moved %s", kv(partition=f"{p.topic}-{p.partition}", dir=new_log.parent_dir,
                                        log_end_offset=new_log.log_end_offset, bytes=move.bytes_copied))
        self._manager.on_move_completed(p)

    def _on_failure(self, move: _Move, e: Exception) -> bool:
        p = move.partition
        tp = (p.topic, p.partition)
        future = p.future_log
        if isinstance(e, KafkaStorageError) and isinstance(e.__cause__, SourceReadError):
            log.error("reading the current log failed %s", kv(partition=f"{tp[0]}-{tp[1]}", error=e))
            self._manager.report_failure(p.log.parent_dir, f"Error while moving {tp[0]}-{tp[1]}: {e}")
            return False  # the current log's dir goes offline: the partition and its move stop there
        if isinstance(e, KafkaStorageError) and future is not None:
            log.error("future log failed; the move is dropped %s", kv(partition=f"{tp[0]}-{tp[1]}", error=e))
            self._manager.abandon(tp, failed_dir=future.parent_dir)
            return False
        move.failures += 1
        if move.failures >= MAX_CONSECUTIVE_FAILURES or future is None:
            log.error("the move failed too often; the future log is dropped %s",
                      kv(partition=f"{tp[0]}-{tp[1]}", failures=move.failures, error=e))
            self._manager.abandon(tp)
            return False
        log.warning("move round failed; restarting from the future log's high watermark %s",
                    kv(partition=f"{tp[0]}-{tp[1]}", attempt=move.failures, error=repr(e)))
        if isinstance(e, (OffsetMismatchError, UnexpectedAppendOffsetError)):
            with p.future_lock:
                f = p.future_log
                if f is not None:
                    f.truncate_to(min(f.high_watermark, p.log.high_watermark))  # KAFKA-9087
        self._stopped.wait(FAILURE_BACKOFF_S)
        return False


class ReplicaAlterLogDirsManager:
    """Assigns moves to the thread pool, cancels them, and reports them."""

    def __init__(self, log_manager: LogDirsLogManager, quota: ReplicationQuotaManager, num_threads: int,
                 fetch_max_bytes: int = 1048576,
                 on_log_dir_failure: Callable[[str, str], None] | None = None):
        self.log_manager = log_manager
        self.quota = quota
        self.fetch_max_bytes = max(1, fetch_max_bytes)
        self._on_log_dir_failure = on_log_dir_failure
        self._lock = threading.Lock()
        self._threads = [ReplicaAlterLogDirsThread(i, self) for i in range(max(1, num_threads))]
        self._started = False
        self.completed_moves = 0

    def startup(self) -> None:
        with self._lock:
            if not self._started:
                self._started = True
                for t in self._threads:
                    t.start()

    def _thread_for(self, tp: TopicPartition) -> ReplicaAlterLogDirsThread:
        return self._threads[zlib.crc32(f"{tp[0]}-{tp[1]}".encode()) % len(self._threads)]

    def add_partition(self, p: FutureLogPartition) -> bool:
        """Start (or resume) moving ``p`` into its future log, if the log manager has one; returns whether
        a move is running.  A resumed future log is first truncated to the current high watermark: data
        above it may differ after a restart (the current log itself restarts from its high watermark)."""
        tp = (p.topic, p.partition)
        future = self.log_manager.get_future_log(*tp)
        if future is None:
            return False
        with p.future_lock:
            if p.attach_future_log(future):
                safe = min(future.log_end_offset, future.high_watermark, p.log.high_watermark)
                if future.log_end_offset > safe:
                    log.info("resuming a move from the future log's high watermark %s",
                             kv(partition=f"{tp[0]}-{tp[1]}", offset=safe, log_end_offset=future.log_end_offset))
                    future.truncate_to(safe)
        self._thread_for(tp).add(p)
        log.info("move started %s", kv(partition=f"{tp[0]}-{tp[1]}", source=p.log.parent_dir,
                                       destination=future.parent_dir, thread=self._thread_for(tp).name))
        return True

    def remove_partition(self, p: FutureLogPartition, delete_future_log: bool = True) -> None:
        """Stop moving ``p`` (cancel, StopReplica, offline dir); the future log is deleted unless asked not to."""
        tp = (p.topic, p.partition)
        self._thread_for(tp).remove(tp)
        with p.future_lock:
            had = p.detach_future_log()
        if delete_future_log:
            self.log_manager.abort_and_delete_future_log(*tp)
        if had:
            log.info("move stopped %s", kv(partition=f"{tp[0]}-{tp[1]}", future_log_deleted=delete_future_log))

    def abandon(self, tp: TopicPartition, failed_dir: str | None = None) -> None:
        thread = self._thread_for(tp)
        move = thread.moves().get(tp)
        thread.remove(tp)
        if move is not None:
            with move.partition.future_lock:
                move.partition.detach_future_log()
        try:
            self.log_manager.abort_and_delete_future_log(*tp)
        except Exception:  # noqa: BLE001 - the dir may be gone; it is offline then
            log.exception("could not delete the future log %s", kv(partition=f"{tp[0]}-{tp[1]}"))
        if failed_dir is not None and self._on_log_dir_failure is not None:
            self._on_log_dir_failure(failed_dir, f"the future log of {tp[0]}-{tp[1]} failed")

    def report_failure(self, log_dir: str, message: str) -> None:
        if self._on_log_dir_failure is not None:
            self._on_log_dir_failure(log_dir, message)

    def on_move_completed(self, p: FutureLogPartition) -> None:
        self.completed_moves += 1

    def is_moving(self, tp: TopicPartition) -> bool:
        return tp in self._thread_for(tp).moves()

    def describe(self) -> list[MoveStatus]:
        now = time.monotonic()
        out = []
        for t in self._threads:
            for tp, m in sorted(t.moves().items()):
                p = m.partition
                future, current = p.future_log, p.log
                if future is None:
                    continue
                out.append(MoveStatus(f"{tp[0]}-{tp[1]}", current.parent_dir, future.parent_dir, m.bytes_copied,
                                      max(0, current.log_end_offset - future.log_end_offset), round(m.rate(now), 1),
                                      t.name))
        return out

    def shutdown(self) -> None:
        for t in self._threads:
            t.shutdown()
        for t in self._threads:
            if t.is_alive():
                t.join(5.0)


__all__ = ["ReplicaAlterLogDirsManager", "ReplicaAlterLogDirsThread", "MoveStatus", "OffsetMismatchError",
           "LONG_MAX"]
