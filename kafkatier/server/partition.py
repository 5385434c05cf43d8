"""Partition: one hosted replica's data path: leader appends, high watermark, follower fetch state, ISR
expansion and shrinking (written to the partition ``state`` znode, conditional on its zkVersion, by the
:class:`~kafkatier.server.zk_isr_manager.ZkIsrManager`, which notifies the controller as Kafka did before
AlterPartition).

An ISR change is two steps, so that the replica manager can write many partitions' changes together:
:meth:`Partition.follower_fetch_isr_write` / :meth:`Partition.shrink_isr_write` decide a change and mark it in
flight (no second change of the partition is decided until it completes, as Kafka's pending ISR state), and
:meth:`Partition.complete_isr_write` applies the written result.  :meth:`Partition.update_follower_fetch_state`
and :meth:`Partition.maybe_shrink_isr` do both for one partition."""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import attrs

from kafkatier.log.log_dir_failure_channel import is_storage_failure
from kafkatier.log.producer_state import DuplicateAppend, ProducerStateManager
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.control_messages import LeaderAndIsrPartitionState
from kafkatier.protocol.errors import (Errors, FencedLeaderEpochError, KafkaError, KafkaStorageError,
                                       NotEnoughReplicasError, NotLeaderOrFollowerError)
from kafkatier.server.zk_isr_manager import IsrWrite

log = get_logger("server.partition")


def now_ms() -> int:
    return int(time.time() * 1000)


@attrs.define
class FollowerState:
    log_end_offset: int = -1
    log_start_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0


@attrs.frozen
class FollowerFetchUpdate:
    """What a follower's fetch changed on the leader: ``moved`` (its log end or start offset), and the ISR
    expansion it allows, if any."""

    moved: bool
    isr_write: IsrWrite | None = None


UNCHANGED = FollowerFetchUpdate(False)
MOVED = FollowerFetchUpdate(True)


class Partition:
    def __init__(self, topic: str, partition: int, broker_id: int, log_,
                 isr_writer: Callable[[list[IsrWrite]], dict[tuple[str, int], int | None]],
                 min_insync_replicas: Callable[[], int], replica_lag_time_max_ms: int = 30000,
                 on_high_watermark_change: Callable[["Partition"], None] | None = None,
                 log_dir_failure: Callable[[str, str, BaseException], None] | None = None,
                 broker_alive: Callable[[int], bool] | None = None):
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.log = log_
        self.topic_id: str | None = None
        self._isr_writer = isr_writer
        self._min_isr = min_insync_replicas
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self._log_dir_failure = log_dir_failure  # (dir, message, error): an I/O error takes the dir offline
        # Kafka's ``isReplicaIsrEligible`` in ZooKeeper mode (``hasAliveBroker``): a follower joins the ISR only while
        # the metadata cache lists its broker as alive, so a broker whose session expired (or a zombie still
        # fetching after it) is not added back; None: every follower is eligible
        self._broker_alive = broker_alive
        self.lock = threading.RLock()
        self.leader_id = -1
        self.leader_epoch = -1
        self.controller_epoch = 0
        self.partition_epoch = 0
        self.isr: tuple[int, ...] = ()
        self.replicas: tuple[int, ...] = ()
        self.adding_replicas: tuple[int, ...] = ()  # a reassignment in progress (from LeaderAndIsr)
        self._isr_in_flight = False  # an ISR change decided and not yet completed
        self.followers: dict[int, FollowerState] = {}
        # JBOD (KIP-113): the ``<tp>.move`` future log while a move is in progress (set and cleared by the
        # ReplicaAlterLogDirsManager); it follows truncation and counts for the low watermark.  ``future_lock``
        # (taken after ``lock``) guards it: a move round holds it while copying.
        self.future_log = None
        self.future_lock = threading.Lock()
        # Called (outside the lock) when the high watermark or the low watermark moved (the replica manager
        # completes the requests waiting in its purgatories).
        self._on_high_watermark_change = on_high_watermark_change

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def producer_state(self) -> ProducerStateManager:
        """The log's producer state, to read (the log keeps it: :meth:`Log.append_records_as_leader`)."""
        return self.log.producer_state

    # --- leadership -----------------------------------------------------------------------------------------
    def make_leader(self, ps: LeaderAndIsrPartitionState, controller_epoch: int) -> None:
        with self.lock:
            self._set_state(ps, controller_epoch)
            now = now_ms()
            self.followers = {r: FollowerState(last_caught_up_ms=now if r in self.isr else 0)
                              for r in self.replicas if r != self.broker_id}
            # Its checkpoint is written by the replica manager's background task (LeaderEpochFileCache).
            self.log.assign_epoch_start_offset(self.leader_epoch, self.log.log_end_offset, write=False)
        self.maybe_increment_high_watermark()

    def make_follower(self, ps: LeaderAndIsrPartitionState, controller_epoch: int) -> None:
        with self.lock:
            self._set_state(ps, controller_epoch)
            self.followers = {}

    def _set_state(self, ps: LeaderAndIsrPartitionState, controller_epoch: int) -> None:
        """``controller_epoch``: the request's, for a state that carries none (0)."""
        self.leader_id = ps.leader
        self.leader_epoch = ps.leader_epoch
        self.isr = tuple(ps.isr)
        self.replicas = tuple(ps.replicas)
        self.adding_replicas = tuple(ps.adding_replicas or ())
        self.partition_epoch = ps.partition_epoch
        self.controller_epoch = ps.controller_epoch or controller_epoch

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Clients and followers send the leader epoch they know (-1: unknown, not checked)."""
        if current_leader_epoch == -1:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(f"leader epoch {current_leader_epoch} is older than {self.leader_epoch}")
        if current_leader_epoch > self.leader_epoch:
            raise KafkaError(f"leader epoch {current_leader_epoch} is newer than {self.leader_epoch}",
                             Errors.UNKNOWN_LEADER_EPOCH)

    # --- leader: appends ------------------------------------------------------------------------------------
    def _check_leader_append(self, required_acks: int) -> None:
        """Under the lock: this broker leads, and with acks=all the ISR is at least ``min.insync.replicas``."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} is not the leader of {self}")
        min_isr = self._min_isr()
        if required_acks == -1 and len(self.isr) < min_isr:
            raise NotEnoughReplicasError(
                f"The size of the current ISR {set(self.isr)} is insufficient to satisfy the min.isr "
                f"requirement of {min_isr} for partition {self}")

    def append_records_to_leader(self, records, required_acks: int, *, from_coordinator: bool = False,
                                 verification_guard: object | None = None, verify: bool = False):
        with self.lock:
            self._check_leader_append(required_acks)
            try:
                info = self.log.append_records_as_leader(records, self.leader_epoch, from_coordinator=from_coordinator,
                                                         verification_guard=verification_guard, verify=verify)
            except Exception as e:
                self._maybe_log_dir_failure(e, "appending to")
                raise
            if isinstance(info, DuplicateAppend):
                log.info("duplicate batch from an idempotent producer; answering with its first offsets %s",
                         kv(partition=self, first_offset=info.first_offset, last_offset=info.last_offset))
                return info
        self.maybe_increment_high_watermark()
        return info

    # --- transactions ---------------------------------------------------------------------------------------
    def append_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                          required_acks: int = -1):
        """WriteTxnMarkers on the leader: check the producer's and the coordinator's epochs, append one control
        batch (Kafka's ``appendRecordsToLeader`` with origin COORDINATOR)."""
        with self.lock:
            self._check_leader_append(required_acks)
            try:
                info = self.log.append_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit,
                                                  self.leader_epoch)
            except Exception as e:
                self._maybe_log_dir_failure(e, "appending to")
                raise
        self.maybe_increment_high_watermark()
        return info

    def snapshot_producer_state(self, sync: bool = True) -> None:
        """The log's producer state snapshot (at shutdown: ``sync=False``), under the partition lock."""
        with self.lock:
            self.log.snapshot_producer_state(sync=sync)

    @property
    def last_stable_offset(self) -> int:
        """Kafka's ``lastStableOffset`` (the log's)."""
        return self.log.last_stable_offset

    # --- leader: follower fetches ---------------------------------------------------------------------------
    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, follower_log_start_offset: int,
                                    leader_end_offset_at_read: int) -> None:
        upd = self.follower_fetch_isr_write(replica_id, fetch_offset, follower_log_start_offset,
                                            leader_end_offset_at_read)
        w = upd.isr_write
        if w is not None:
            self.complete_isr_write(w, self._isr_writer([w]).get(w.tp), reason=f"expand replica={replica_id}")
        self.maybe_increment_high_watermark()

    def follower_fetch_isr_write(self, replica_id: int, fetch_offset: int, follower_log_start_offset: int,
                                 leader_end_offset_at_read: int) -> FollowerFetchUpdate:
        """Record a follower's fetch position: whether it moved (only then can the high or low watermark move),
        and the ISR expansion it allows (in flight until :meth:`complete_isr_write`)."""
        with self.lock:
            if not self.is_leader:
                return UNCHANGED
            st = self.followers.get(replica_id)
            if st is None:
                st = self.followers[replica_id] = FollowerState()
            now = now_ms()
            moved = st.log_end_offset != fetch_offset or st.log_start_offset != follower_log_start_offset
            st.log_end_offset = fetch_offset
            st.log_start_offset = follower_log_start_offset
            if fetch_offset >= leader_end_offset_at_read:
                st.last_caught_up_ms = now
            st.last_fetch_ms = now
            if (replica_id not in self.isr and replica_id in self.replicas and not self._isr_in_flight
                    and fetch_offset >= self.log.high_watermark
                    and fetch_offset >= self.log.epoch_start_offset(self.leader_epoch)
                    and (self._broker_alive is None or self._broker_alive(replica_id))):
                return FollowerFetchUpdate(True, self._isr_write(
                    tuple(sorted(set(self.isr) | {replica_id}, key=self._replica_order))))
            return MOVED if moved else UNCHANGED

    def _isr_write(self, new_isr: tuple[int, ...]) -> IsrWrite:
        """Under the lock: the change to ``new_isr``, marked in flight."""
        self._isr_in_flight = True
        return IsrWrite((self.topic, self.partition), self.leader_id, self.leader_epoch, new_isr,
                        self.controller_epoch, self.partition_epoch, urgent=bool(self.adding_replicas))

    def complete_isr_write(self, w: IsrWrite, new_version: int | None, reason: str, log_each: bool = True) -> None:
        """Apply a decided change once written (``new_version``), unless the partition moved on meanwhile (a
        LeaderAndIsr with another epoch or zkVersion: the controller's state wins).  ``log_each`` False (one
        of a large batch, which the ISR manager logs as one line): the partition's line is logged at DEBUG."""
        each = log.info if log_each else log.debug if log.isEnabledFor(logging.DEBUG) else None
        with self.lock:
            self._isr_in_flight = False
            if new_version is None:
                if each is not None:
                    each("ISR update skipped (state znode changed; waiting for the controller) %s",
                         kv(partition=self, reason=reason))
                return
            if not self.is_leader or (self.leader_epoch, self.partition_epoch) != (w.leader_epoch,
                                                                                   w.expected_version):
                return
            if each is not None:
                each("ISR updated %s", kv(partition=self, old=list(self.isr), new=list(w.isr), reason=reason,
                                          partition_epoch=new_version))
            self.isr = w.isr
            self.partition_epoch = new_version

    def _replica_order(self, r: int) -> int:
        try:
            return self.replicas.index(r)
        except ValueError:
            return len(self.replicas)

    def maybe_shrink_isr(self) -> None:
        w = self.shrink_isr_write()
        if w is None:
            return
        out = [r for r in self.isr if r not in w.isr]
        self.complete_isr_write(w, self._isr_writer([w]).get(w.tp), reason=f"shrink out={out}")
        self.maybe_increment_high_watermark()

    def shrink_isr_write(self) -> IsrWrite | None:
        """The ISR shrink the lagging followers call for (in flight until :meth:`complete_isr_write`), or
        None."""
        with self.lock:
            if not self.is_leader or self._isr_in_flight:
                return None
            now = now_ms()
            leo = self.log.log_end_offset
            out = []
            for r in self.isr:
                if r == self.broker_id:
                    continue
                st = self.followers.get(r)
                if st is None:
                    continue
                if st.log_end_offset < leo and now - st.last_caught_up_ms > self.replica_lag_time_max_ms:
                    if st.last_fetch_ms == 0 and leo <= self._current_epoch_start_offset():
                        # Not fetched yet since this leader took over, and nothing appended since: it misses no
                        # record of this epoch.  A broker handling a LeaderAndIsr of thousands of new partitions
                        # starts fetching long after its leaders started their lag clocks (Kafka's clock too
                        # starts at becoming leader); shrinking it then only churns the ISR and leaves partitions
                        # led by one replica.  A follower behind on records of this epoch, or one that fetched and
                        # stopped, is out of sync as before.
                        continue
                    out.append(r)
            new_isr = tuple(r for r in self.isr if r not in out)
            if not out or not new_isr:
                return None
            return self._isr_write(new_isr)

    def _current_epoch_start_offset(self) -> int:
        """Where this leader's epoch starts in the log (-1 if the epoch cache does not hold it: then nothing is
        exempt from the shrink)."""
        for entry in self.log.leader_epoch_cache.epoch_entries():
            if entry.epoch == self.leader_epoch:
                return entry.start_offset
        return -1

    def maybe_increment_high_watermark(self) -> bool:
        with self.lock:
            if not self.is_leader:
                return False
            leo = self.log.log_end_offset
            new_hw = leo
            for r in self.isr:
                if r == self.broker_id:
                    continue
                st = self.followers.get(r)
                new_hw = min(new_hw, st.log_end_offset if st and st.log_end_offset >= 0 else self.log.high_watermark)
            moved = new_hw > self.log.high_watermark
            if moved:
                self.log.update_high_watermark(new_hw)
        if moved and self._on_high_watermark_change is not None:
            self._on_high_watermark_change(self)
        return moved

    def low_watermark(self, is_alive: Callable[[int], bool] = lambda _broker_id: True) -> int:
        """KIP-107 ``lowWatermarkIfLeader`` (docs/kip-107-delete-records.md#low-watermark): the minimum log start
        offset of the leader, of every other assigned replica whose broker ``is_alive`` (in or out of the ISR; -1
        until it has fetched from this leader) and of the JBOD future log, if any.  Raises
        NotLeaderOrFollowerError."""
        with self.lock:
            if not self.is_leader:
                raise NotLeaderOrFollowerError(f"Leader not local for partition {self} on broker {self.broker_id}")
            lw = self.log.log_start_offset
            for r in self.replicas:
                if r == self.broker_id or not is_alive(r):
                    continue
                st = self.followers.get(r)
                lw = min(lw, st.log_start_offset if st is not None else -1)
            if self.future_log is not None:
                lw = min(lw, self.future_log.log_start_offset)
            return lw

    # --- follower -------------------------------------------------------------------------------------------
    def append_records_to_follower(self, records) -> None:
        # Under the partition lock, like leader appends: a JBOD swap (KIP-113) must see no append.
        with self.lock:
            try:
                self.log.append_records_as_follower(records)
            except Exception as e:
                self._maybe_log_dir_failure(e, "appending to")
                raise

    def _maybe_log_dir_failure(self, e: BaseException, what: str) -> None:
        """Report an I/O error to the log dir failure channel and answer KAFKA_STORAGE_ERROR
        (docs/kip-113-jbod.md#offline-log-dirs)."""
        if self._log_dir_failure is not None and is_storage_failure(e):
            self._log_dir_failure(self.log.parent_dir, f"Error while {what} {self}", e)
            if not isinstance(e, KafkaStorageError):
                raise KafkaStorageError(f"Error while {what} {self} in dir {self.log.parent_dir}: {e}") from e

    def truncate_to(self, offset: int) -> None:
        """Follower truncation: the log (its leader-epoch cache and producer state with it), the JBOD future
        log."""
        with self.lock:
            self.log.truncate_to(offset)
            with self.future_lock:  # the future log follows truncation (docs/kip-113-jbod.md#moving-a-replica)
                future = self.future_log
                if future is not None and future.log_end_offset > self.log.log_end_offset:
                    future.truncate_to(self.log.log_end_offset)

    # --- JBOD (KIP-113): the future log -------------------------------------------------------------------
    def attach_future_log(self, future) -> bool:
        """Make ``future`` (the log manager's ``<tp>.move`` log) this partition's future log; False when it
        already was.  The caller holds ``future_lock``."""
        if self.future_log is future:
            return False
        self.future_log = future
        return True

    def detach_future_log(self) -> bool:
        """Forget the future log (a cancelled or failed move); whether there was one.  Caller holds
        ``future_lock``."""
        had, self.future_log = self.future_log is not None, None
        return had

    def replace_current_with_future_log(self, log_manager) -> "object":
        """Kafka's ``maybeReplaceCurrentWithFutureReplica``: the log manager renames the future log into place
        and this partition serves from it; returns the new log.  The caller holds ``lock`` and ``future_lock``
        and has brought the future log level with the current one."""
        new_log = log_manager.replace_current_with_future_log(self.topic, self.partition)
        self.log, self.future_log = new_log, None
        return new_log

    def truncate_fully_and_start_at(self, offset: int) -> None:
        with self.lock:
            self.log.truncate_fully_and_start_at(offset)
            with self.future_lock:
                if self.future_log is not None:
                    self.future_log.truncate_fully_and_start_at(offset)

    def describe(self) -> dict:
        with self.lock:
            return {"partition": str(self), "leader": self.leader_id, "leader_epoch": self.leader_epoch,
                    "isr": list(self.isr), "replicas": list(self.replicas), "partition_epoch": self.partition_epoch,
                    "log_start_offset": self.log.log_start_offset, "high_watermark": self.log.high_watermark,
                    "log_end_offset": self.log.log_end_offset,
                    "followers": {r: attrs.asdict(s) for r, s in self.followers.items()}}
