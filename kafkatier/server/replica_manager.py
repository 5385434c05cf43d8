"""ReplicaManager (Kafka's ``kafka.server.ReplicaManager``): the partitions this broker hosts.

Control plane: LeaderAndIsr (become leader / follower, start or stop fetchers) and StopReplica (stop, delete,
or KIP-950 disable).  Data plane: leader appends with acks, reads for consumers and followers, the high
watermark, ISR shrink / expand, delayed produce, fetch and DeleteRecords in purgatories.  Record batches move as
bytes; results travel as the frozen types below (:class:`ProducePartitionResult`, :class:`FetchPartitionResult`).

Collaborators arrive through the constructor (``KafkaServer`` is the composition root): the log manager, the
topic configs, ZooKeeper (ISR writes), the metadata cache, the scheduler (ISR expiry) and, with
``remote.log.storage.system.enable=true``, the :class:`RemoteLogManager`, which this class calls directly on
leadership changes, on StopReplica (stop, delete and the KIP-950 disable of a replica), for reads below the
local log start offset and for ListOffsets by timestamp -- as Kafka's ``ReplicaManager`` calls
``remoteLogManager``.  After a log start offset moved (DeleteRecords on the leader, or a follower following it)
the segments below it are deleted at once and ``log-start-offset-checkpoint`` is written (see
``server/delete_records.py``).

JBOD (KIP-113, the section at the end): AlterReplicaLogDirs and DescribeLogDirs, with the moves themselves run
by the ``ReplicaAlterLogDirsManager`` this class creates (as Kafka's ReplicaManager does) around the throttle
it is given; I/O errors reach the ``LogDirFailureChannel`` it is given, and its ``LogDirFailureHandler`` thread
takes failed dirs offline (KIP-112).

Replication throttles (Kafka's ``QuotaFactory`` leader / follower quotas, given to the constructor): the follower
quota goes to the fetcher threads; the leader quota holds back a throttled partition in a follower's fetch while
that follower is out of the ISR and the quota is exceeded (Kafka's ``shouldLeaderThrottle``: the partition is
answered with no records), and counts the bytes sent for throttled partitions.
"""
from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from typing import Callable, Mapping, Protocol

import attrs

from kafkatier.common.file_records import FileRecords
from kafkatier.common.scheduler import KafkaScheduler
from kafkatier.common.structs import TopicPartition
from kafkatier.log.dir_names import MAX_DIR_NAME_LENGTH, move_dir_name
from kafkatier.log.errors import KafkaStorageError
from kafkatier.log.log import LATEST_TIERED_TIMESTAMP
from kafkatier.log.log_dir_failure_channel import LogDirFailureChannel, is_storage_failure
from kafkatier.log.remote.remote_log_manager import RemoteLogManager, is_tiered, offset_moved_to_tiered_storage
from kafkatier.log.record_batch import iter_batches
from kafkatier.log.remote.remote_storage_manager import RemoteStorageError
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.control_messages import (LeaderAndIsrPartitionError, LeaderAndIsrPartitionState,
                                                 LeaderAndIsrRequestData, LeaderAndIsrResponseData,
                                                 LeaderAndIsrTopicError, LeaderAndIsrTopicState,
                                                 StopReplicaPartitionError, StopReplicaPartitionState,
                                                 StopReplicaRequestData, StopReplicaResponseData)
from kafkatier.protocol.errors import (Errors, KafkaError, NotLeaderOrFollowerError, OffsetOutOfRangeError,
                                       UnknownTopicOrPartitionError)
from kafkatier.server.partition import Partition
from kafkatier.server.log_dirs import ANY_LOG_DIR, LogDirDescription, ReplicaLogDirInfo
from kafkatier.server.purgatory import DelayedOperation, DelayedOperationPurgatory
from kafkatier.server.replica_alter_log_dirs_thread import ReplicaAlterLogDirsManager
from kafkatier.server.replica_fetcher import ReplicaFetcherManager
from kafkatier.server.replication_quota_manager import LONG_MAX, ReplicationQuotaManager
from kafkatier.server.zk_isr_manager import BATCH_SUMMARY_MIN, IsrChangePropagationConfig, IsrWrite, ZkIsrManager
from kafkatier.zk import codecs, paths

log = get_logger("server.replica-manager")

INTERNAL_TOPIC_PREFIX = "__"
# LeaderAndIsr partitions logged one line each up to this many per request; above, one summary line.
MAX_PARTITIONS_LOGGED = 50
READ_COMMITTED = 1  # Fetch and ListOffsets isolation_level
# A quiet follower session (:meth:`ReplicaManager.wait_quiet_follower`) is read from every partition again at
# least this often, and at least three times per ``replica.lag.time.max.ms``: the followers' fetch positions
# (the ISR shrink's caught-up times) stay fresh, and a log start offset moved by the leader's retention (which
# changes no change number) reaches the follower.
QUIET_FOLLOWER_REFRESH_S = 5.0


class TopicConfigs(Protocol):
    """The topic config overrides this broker applies (``server/topic_config_handler.TopicConfigCache``)."""

    def __call__(self, topic: str) -> Mapping[str, str]: ...


@attrs.frozen
class ProducePartitionResult:
    """What a Produce answers for one partition."""

    error: Errors
    base_offset: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    #: Kafka's per-record errors (``log_validator.RecordError``) for INVALID_RECORD / INVALID_TIMESTAMP.
    record_errors: tuple = ()


@attrs.define
class _ProducePartitionStatus:
    """Kafka's ``ProducePartitionStatus``: the answer so far and the offset the high watermark must reach
    (``required_offset``, -1 once satisfied or failed)."""

    result: ProducePartitionResult
    required_offset: int = -1


@attrs.frozen
class FetchPartitionData:
    """One partition of a Fetch request."""

    tp: TopicPartition
    fetch_offset: int
    max_bytes: int = 1048576
    current_leader_epoch: int = -1
    log_start_offset: int = -1  # followers: their log start offset
    #: Fetch v13+ (KIP-516): the topic id the request named (22-char base64); ``tp.topic`` is then the name it
    #: resolved to, None when this broker knows no topic with that id
    topic_id: str | None = None


@attrs.frozen
class FetchPartitionResult:
    """What a Fetch answers for one partition."""

    error: Errors
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes | FileRecords = b""   # a large local read: a range of the segment file (sent with sendfile)
    #: read_committed fetches: the last stable offset and the aborted transactions overlapping ``records``
    #: (``(producer id, first offset)`` pairs); -1 / () otherwise.
    last_stable_offset: int = -1
    aborted_transactions: tuple[tuple[int, int], ...] = ()
    #: KIP-392: the replica the consumer should fetch from instead (-1: this one)
    preferred_read_replica: int = -1


RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


class ReplicaManager:
    def __init__(self, broker_id: int, log_manager, topic_config: TopicConfigs, zk=None, metadata_cache=None, *,
                 remote_log_manager: RemoteLogManager | None = None, scheduler: KafkaScheduler | None = None,
                 min_insync_replicas_default: int = 1, replica_lag_time_max_ms: int = 30000,
                 replica_fetch_wait_max_ms: int = 500, replica_fetch_max_bytes: int = 1048576,
                 replica_fetch_min_bytes: int = 1,
                 alter_log_dirs_quota: ReplicationQuotaManager | None = None,
                 num_replica_alter_log_dirs_threads: int | None = None,
                 log_dir_failure_channel: LogDirFailureChannel | None = None,
                 halt: Callable[[str], None] | None = None, inter_broker_login=None,
                 leader_replication_quota: ReplicationQuotaManager | None = None,
                 follower_replication_quota: ReplicationQuotaManager | None = None,
                 high_watermark_checkpoint_interval_ms: int = 5000,
                 isr_change_propagation: IsrChangePropagationConfig = IsrChangePropagationConfig(),
                 replica_selector_class: str | None = None):
        self.broker_id = broker_id
        # KIP-392: consumers that send their rack are pointed at a replica in it (``replica.selector.class``)
        self.rack_aware_selector = (replica_selector_class or "").strip() == RACK_AWARE_REPLICA_SELECTOR
        if replica_selector_class and not self.rack_aware_selector:
            log.warning("replica.selector.class %s is not served; consumers fetch from leaders",
                        replica_selector_class)
        self.follower_fetch_metrics = {"consumer_fetches_served_as_follower": 0,
                                       "consumer_bytes_served_as_follower": 0, "preferred_read_replica_answers": 0}
        self.log_manager = log_manager
        self.topic_config = topic_config
        self.zk = zk
        self.metadata_cache = metadata_cache
        self.remote_log_manager = remote_log_manager
        self.min_insync_replicas_default = min_insync_replicas_default
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.partitions: dict[TopicPartition, Partition] = {}
        self.offline_partitions: set[TopicPartition] = set()
        self._lock = threading.RLock()
        self.controller_epoch = 0
        self.produce_purgatory = DelayedOperationPurgatory("Produce")
        self.fetch_purgatory = DelayedOperationPurgatory("Fetch")
        self.delete_records_purgatory = DelayedOperationPurgatory("DeleteRecords")
        self.fetcher_manager = ReplicaFetcherManager(
            broker_id, self._broker_address, self.get_partition, on_fetched=self._on_follower_fetched,
            on_offset_moved_to_tiered_storage=(remote_log_manager.on_offset_moved_to_tiered_storage
                                               if remote_log_manager is not None else None),
            max_wait_ms=replica_fetch_wait_max_ms, min_bytes=replica_fetch_min_bytes,
            partition_max_bytes=replica_fetch_max_bytes,
            quota=follower_replication_quota, login=inter_broker_login)
        self.leader_replication_quota = leader_replication_quota
        self._seen_log_start: dict[TopicPartition, int] = {}  # followers' log start offsets (DeleteRecords)
        # The last "nothing new" answer given a follower at the log end of each partition led here, reused while
        # the partition's offsets stay the same (:meth:`idle_follower_read`).
        self._idle_reads: dict[TopicPartition, FetchPartitionResult] = {}
        # A new number after every change an idle follower's fetch must answer: an append, a high watermark or
        # log start offset move, a leadership change, an offline dir (:meth:`wait_quiet_follower`).  Numbers
        # come from one counter (its ``next`` is atomic), so a change never writes a number seen before.
        self._changes = itertools.count(1)
        self.change_seq = 0
        self.quiet_refresh_s = min(QUIET_FOLLOWER_REFRESH_S, replica_lag_time_max_ms / 3000)
        self._scheduler = scheduler
        self._isr_expiration_task = None
        if scheduler is not None:
            interval_ms = max(200.0, replica_lag_time_max_ms / 2)
            self._isr_expiration_task = scheduler.schedule("isr-expiration", self._maybe_shrink_isr,
                                                           delay_ms=interval_ms, period_ms=interval_ms)
        # ISR writes and their notifications to the controller (Kafka's ZkIsrManager, isr-change-propagation).
        self.isr_manager = ZkIsrManager(zk, isr_change_propagation)
        self._isr_propagation_task = None
        if scheduler is not None:
            self._isr_propagation_task = scheduler.schedule(
                "isr-change-propagation", self.isr_manager.maybe_propagate_isr_changes,
                delay_ms=isr_change_propagation.check_interval_ms, period_ms=isr_change_propagation.check_interval_ms)
        self._hw_checkpoint_task = None
        self._last_hw_checkpoint: tuple | None = None  # what the last high-watermark checkpoint wrote
        if scheduler is not None and high_watermark_checkpoint_interval_ms > 0:
            self._hw_checkpoint_task = scheduler.schedule(
                "highwatermark-checkpoint", self.checkpoint_high_watermarks,
                delay_ms=high_watermark_checkpoint_interval_ms, period_ms=high_watermark_checkpoint_interval_ms)
        self.alter_log_dirs_quota = alter_log_dirs_quota or ReplicationQuotaManager()
        self.alter_log_dirs_manager = ReplicaAlterLogDirsManager(
            log_manager, self.alter_log_dirs_quota,
            num_replica_alter_log_dirs_threads or len(getattr(log_manager, "log_dirs", ())) or 1,
            fetch_max_bytes=replica_fetch_max_bytes,
            on_log_dir_failure=lambda d, msg: log_manager.report_failure(d, msg))
        self.alter_log_dirs_manager.startup()
        self.log_dir_failure_channel = log_dir_failure_channel or getattr(log_manager, "log_dir_failure_channel", None)
        self._halt = halt or _halt
        self._stopped = threading.Event()
        self._log_dir_failure_thread = threading.Thread(target=self._log_dir_failure_handler,
                                                        name="LogDirFailureHandler", daemon=True)
        if self.log_dir_failure_channel is not None:
            self._log_dir_failure_thread.start()

    # --- lookup ---------------------------------------------------------------------------------------------
    def get_partition(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def get_partition_or_error(self, topic: str, partition: int, leader_only: bool = True) -> Partition:
        if (topic, partition) in self.offline_partitions:
            raise KafkaError(f"partition {topic}-{partition} is in an offline log directory", Errors.KAFKA_STORAGE_ERROR)
        p = self.partitions.get((topic, partition))
        if p is None:
            if self.metadata_cache is not None and self.metadata_cache.get_partition(topic, partition) is not None:
                raise NotLeaderOrFollowerError(f"broker {self.broker_id} does not host {topic}-{partition}")
            raise UnknownTopicOrPartitionError(f"this server does not host {topic}-{partition}")
        if leader_only and not p.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} is not the leader of {topic}-{partition}")
        return p

    def _broker_address(self, broker_id: int):
        if self.metadata_cache is None:
            return None
        b = self.metadata_cache.inter_broker_endpoint(broker_id)
        return (b.host, b.port) if b else None

    def _min_isr(self, topic: str) -> Callable[[], int]:
        def get() -> int:
            v = self.topic_config(topic).get("min.insync.replicas")
            return int(v) if v is not None else self.min_insync_replicas_default
        return get

    # --- LeaderAndIsr ---------------------------------------------------------------------------------------
    def _changed(self) -> None:
        self.change_seq = next(self._changes)

    def handle_leader_and_isr(self, request: LeaderAndIsrRequestData) -> LeaderAndIsrResponseData:
        self._changed()
        self.controller_epoch = max(self.controller_epoch, request.controller_epoch)
        topics_out = []
        leaders, followers = [], []
        # One line per partition for a few; past that one summary line (per partition at DEBUG), as the
        # controller logs its elections: a failover at 20,000 partitions sends each broker thousands.
        count = sum(len(ts.partition_states) for ts in request.topic_states)
        each = log.info if count <= MAX_PARTITIONS_LOGGED else log.debug if log.isEnabledFor(logging.DEBUG) else None
        with self._lock:
            # The fetchers of partitions this broker is to lead are stopped first, together (one lock per fetcher
            # thread, not one per partition).
            self.fetcher_manager.remove_fetchers([
                (ts.topic_name, ps.partition_index) for ts in request.topic_states
                for ps in ts.partition_states if self._will_lead(ts, ps)])
            for ts in request.topic_states:
                topic = ts.topic_name
                topic_id = codecs.topic_id_from_wire(ts.topic_id)
                perrs = []
                for ps in ts.partition_states:
                    err = self._become_leader_or_follower(topic, topic_id, ps, leaders, followers, each)
                    perrs.append(LeaderAndIsrPartitionError(partition_index=ps.partition_index, error_code=int(err)))
                topics_out.append(LeaderAndIsrTopicError(topic_id=ts.topic_id, partition_errors=tuple(perrs)))
        if count > MAX_PARTITIONS_LOGGED:
            log.info("became leader or follower %s", kv(partitions=count, leader=len(leaders), follower=len(followers),
                                                        ignored_or_failed=count - len(leaders) - len(followers),
                                                        controller_epoch=request.controller_epoch))
        if leaders:
            self._write_leader_epoch_checkpoints(leaders)
        self._start_following(followers)
        for p in leaders + followers:
            self._maybe_start_move(p)
        if self.remote_log_manager is not None and (leaders or followers):
            try:
                self.remote_log_manager.on_leadership_change(leaders, followers)
            except Exception:  # noqa: BLE001
                log.exception("remote log manager leadership change failed %s",
                              kv(leaders=len(leaders), followers=len(followers)))
        for p in leaders + followers:
            self._complete_delayed(p)
        self._changed()
        return LeaderAndIsrResponseData(error_code=0, topics=tuple(topics_out))

    def _will_lead(self, ts: LeaderAndIsrTopicState, ps: LeaderAndIsrPartitionState) -> bool:
        """Whether :meth:`_become_leader_or_follower` will make this broker the partition's leader (the same
        checks, in the same order)."""
        key = (ts.topic_name, ps.partition_index)
        if ps.leader != self.broker_id or key in self.offline_partitions or self.broker_id not in ps.replicas:
            return False
        cur = self.partitions.get(key)
        if cur is None:
            return True
        topic_id = codecs.topic_id_from_wire(ts.topic_id)
        if cur.topic_id and topic_id and cur.topic_id != topic_id:
            return False
        return ps.leader_epoch > cur.leader_epoch

    def _become_leader_or_follower(self, topic, topic_id, ps: LeaderAndIsrPartitionState, leaders, followers,
                                   each=log.info) -> Errors:
        key = (topic, ps.partition_index)
        if key in self.offline_partitions:
            return Errors.KAFKA_STORAGE_ERROR
        if self.broker_id not in ps.replicas:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        cur = self.partitions.get(key)
        if cur is not None and cur.topic_id and topic_id and cur.topic_id != topic_id:
            return Errors.INCONSISTENT_TOPIC_ID
        if cur is not None and ps.leader_epoch <= cur.leader_epoch:
            # Per partition only for small requests (``each``): a new controller's LeaderAndIsr repeats every
            # partition's current state, and one line each for thousands held the broker's GIL while its
            # Metadata still lagged the failover.
            if each is not None:
                each("ignoring LeaderAndIsr with an old leader epoch %s", kv(
                    partition=f"{topic}-{key[1]}", received=ps.leader_epoch, current=cur.leader_epoch))
            return Errors.STALE_CONTROLLER_EPOCH
        if cur is None:
            try:
                plog = self.log_manager.get_or_create_log(topic, key[1], self.topic_config(topic),
                                                          is_new=ps.is_new, topic_id=topic_id)
            except KafkaError as e:
                log.error("cannot create log %s", kv(partition=f"{topic}-{key[1]}", reason=e))
                return e.error
            except Exception as e:  # noqa: BLE001
                log.error("cannot create log %s", kv(partition=f"{topic}-{key[1]}", reason=e))
                return Errors.KAFKA_STORAGE_ERROR
            cur = Partition(topic, key[1], self.broker_id, plog, self.isr_manager.write, self._min_isr(topic),
                            self.replica_lag_time_max_ms, on_high_watermark_change=self._complete_delayed,
                            log_dir_failure=getattr(self.log_manager, "report_failure", None),
                            broker_alive=self.metadata_cache.has_alive_broker if self.metadata_cache is not None
                            else None)
            cur.topic_id = topic_id
            self.partitions[key] = cur
        if ps.leader == self.broker_id:
            cur.make_leader(ps, self.controller_epoch)
            leaders.append(cur)
            role = "leader"
        else:
            cur.make_follower(ps, self.controller_epoch)
            followers.append(cur)
            role = "follower"
        if each is not None:
            each("became %s %s", role, kv(partition=f"{topic}-{key[1]}", leader=ps.leader,
                                          leader_epoch=ps.leader_epoch, isr=list(ps.isr),
                                          log_end_offset=cur.log.log_end_offset, hw=cur.log.high_watermark))
        return Errors.NONE

    def _write_leader_epoch_checkpoints(self, leaders: list[Partition]) -> None:
        """The new leaders' epoch checkpoints, written off the request path (LeaderEpochFileCache's docstring)
        by the scheduler; inline without one."""
        def write() -> None:
            for p in leaders:
                try:
                    p.log.write_leader_epoch_checkpoint()
                except OSError as e:  # the log's next flush writes it again, or fails the dir
                    log.warning("could not write the leader epoch checkpoint %s",
                                kv(partition=f"{p.topic}-{p.partition}", error=e))
        if self._scheduler is None:
            write()
        else:
            self._scheduler.schedule_once("leader-epoch-checkpoints", write)

    def _start_following(self, followers: list[Partition]) -> None:
        """The fetchers of the new followers, added together (Kafka's ``addFetcherForPartitions``): at 20,000
        partitions one call per partition waited on the fetcher threads' locks as many times."""
        if not followers:
            return
        self.fetcher_manager.remove_fetchers([p.tp for p in followers if p.leader_id < 0])
        # Truncated by leader epoch once the new leader answers; the high watermark is the fallback
        # (replica_fetcher.py docstring).
        self.fetcher_manager.add_fetchers({
            p.tp: (p.leader_id, max(p.log.high_watermark, p.log.log_start_offset), p.leader_epoch)
            for p in followers if p.leader_id >= 0})

    # --- ISR changes (partition leader -> ZooKeeper, server/zk_isr_manager.py) ----------------------------------
    def _write_isr_changes(self, changes: list[tuple[Partition, IsrWrite, str]]) -> None:
        """Write the ISR changes decided in one pass together (pipelined), then apply each result."""
        if not changes:
            return
        written = self.isr_manager.write([w for _, w, _ in changes])
        # A large batch (a restarted follower rejoining thousands of ISRs) is one line of the ISR manager's.
        log_each = len(changes) < BATCH_SUMMARY_MIN
        for p, w, reason in changes:
            p.complete_isr_write(w, written.get(w.tp), reason, log_each=log_each)
        for p, _, _ in changes:
            p.maybe_increment_high_watermark()

    def _update_followers_fetch_state(self, replica_id: int, partitions: list[FetchPartitionData]) -> None:
        """A follower's fetch: record its position in each partition led here (it may move the high watermark),
        and write the ISR expansions it allows together: a restarted follower rejoins the ISR of every
        partition of this leader in one pipelined write, not one write per partition."""
        expansions = []
        deletes_waiting = bool(self.delete_records_purgatory.watched())
        for fp in partitions:
            p = self.partitions.get(fp.tp)
            if p is not None and p.is_leader:
                upd = p.follower_fetch_isr_write(replica_id, fp.fetch_offset, fp.log_start_offset,
                                                 p.log.log_end_offset)
                if not upd.moved and not deletes_waiting:
                    # An idle follower (most partitions of a fetch session): no watermark can move.
                    continue
                if upd.isr_write is not None:
                    expansions.append((p, upd.isr_write, f"expand replica={replica_id}"))
                else:
                    p.maybe_increment_high_watermark()
                self.delete_records_purgatory.check_and_complete(("delete_records", fp.tp))
        self._write_isr_changes(expansions)

    def _maybe_shrink_isr(self) -> None:
        """Kafka's ``isr-expiration`` task, every ``replica.lag.time.max.ms / 2``: the shrinks of every led
        partition, written together."""
        shrinks = []
        for p in list(self.partitions.values()):
            if not p.is_leader:
                continue
            try:
                w = p.shrink_isr_write()
            except Exception:  # noqa: BLE001
                log.exception("ISR shrink check failed %s", kv(partition=p))
                continue
            if w is not None:
                shrinks.append((p, w, f"shrink out={[r for r in p.isr if r not in w.isr]}"))
        self._write_isr_changes(shrinks)

    def restart_fetcher(self, p: Partition) -> None:
        """Fetch again from the leader at the log end offset (after the remote log manager rebuilt a follower
        from the remote tier)."""
        self.fetcher_manager.add_fetcher(p.topic, p.partition, p.leader_id, p.log.log_end_offset, p.leader_epoch,
                                         truncating=False)

    # --- StopReplica ----------------------------------------------------------------------------------------
    def handle_stop_replica(self, request: StopReplicaRequestData,
                            disable_answers: Mapping[str, Errors] | None = None) -> StopReplicaResponseData:
        """StopReplica.  ``disable_answers``: topics whose KIP-950 entries (``disable_remote_partition``) are
        answered with the given code without acting -- the caller could not read the topic's config (an error)
        or the topic has none (NONE)."""
        self._changed()
        self.controller_epoch = max(self.controller_epoch, request.controller_epoch)
        disable_answers = disable_answers or {}
        answers: list[tuple[str, int, Errors | None]] = []
        to_disable: list[Partition] = []
        for ts in request.topic_states:
            topic = ts.topic_name
            for ps in ts.partition_states:
                err = self._stop_one(topic, ps, disable_answers, to_disable)
                answers.append((topic, ps.partition_index, err))
        disabled = self._disable_remote_partitions(to_disable)
        self._changed()   # after the partitions left too (the high-watermark checkpoint's key)
        return StopReplicaResponseData(error_code=0, partition_errors=tuple(
            StopReplicaPartitionError(topic_name=t, partition_index=p,
                                      error_code=int(disabled[(t, p)] if err is None else err))
            for t, p, err in answers))

    def _stop_one(self, topic: str, ps: StopReplicaPartitionState, disable_answers: Mapping[str, Errors],
                  to_disable: list[Partition]) -> Errors | None:
        """One StopReplica entry; None for a KIP-950 disable, which ``to_disable`` collects (done together)."""
        key = TopicPartition(topic, ps.partition_index)
        delete, disable = ps.delete_partition, ps.disable_remote_partition
        if delete and disable:
            return Errors.INVALID_REQUEST
        if key in self.offline_partitions:
            return Errors.KAFKA_STORAGE_ERROR
        with self._lock:
            cur = self.partitions.get(key)
            epoch = ps.leader_epoch
            if cur is not None and epoch not in (-1, -2) and epoch < cur.leader_epoch:
                return Errors.FENCED_LEADER_EPOCH
        if disable:
            if topic in disable_answers:
                return disable_answers[topic]
            p = self.partitions.get(key)
            if (self.remote_log_manager is None or p is None or p.log.closed
                    or topic.startswith(INTERNAL_TOPIC_PREFIX)):
                return Errors.NONE
            to_disable.append(p)
            return None
        with self._lock:
            self.fetcher_manager.remove_fetcher(topic, key[1])
            cur = self.partitions.pop(key, None)
        if cur is not None:
            cur.leader_id = -1
            self.alter_log_dirs_manager.remove_partition(cur, delete_future_log=delete)
            self._complete_delayed(cur)
        elif delete:
            self.log_manager.abort_and_delete_future_log(topic, key[1])
        if delete:
            try:
                self.log_manager.delete_log(topic, key[1])
            except Exception as e:  # noqa: BLE001
                log.error("deleting log failed %s", kv(partition=f"{topic}-{key[1]}", reason=e))
                return Errors.KAFKA_STORAGE_ERROR
        self._seen_log_start.pop(key, None)
        self._idle_reads.pop(key, None)
        if self.remote_log_manager is not None:
            try:
                self.remote_log_manager.on_replica_stopped(topic, key[1], delete,
                                                           topic_deleted=ps.leader_epoch == -2)
            except Exception:  # noqa: BLE001
                log.exception("remote log manager stop failed %s", kv(partition=f"{topic}-{key[1]}"))
        log.info("stopped replica %s", kv(partition=f"{topic}-{key[1]}", delete=delete))
        return Errors.NONE

    def _disable_remote_partitions(self, ps: list[Partition]) -> dict[TopicPartition, Errors]:
        """KIP-950: the StopReplica v5 entries with ``DisableRemotePartition=true`` of hosted partitions (their
        topics' configs have been re-read by the caller), done together by the remote log manager.  The replicas
        are never stopped; NONE also for a repeat and for a partition this broker does not host; a failure
        answers with an error code and the controller retries."""
        if not ps:
            return {}
        out: dict[TopicPartition, Errors] = {}
        for key, e in self.remote_log_manager.disable_remote_partitions(ps).items():
            tp = TopicPartition(*key)
            if e is None:
                out[tp] = Errors.NONE
            elif isinstance(e, KafkaError):
                log.warning(kv(event="disable_remote_partition_failed", partition=str(tp), error=e.error.name,
                               message=e.message))
                out[tp] = e.error
            else:  # ZooKeeper or storage trouble
                log.error(kv(event="disable_remote_partition_failed", partition=str(tp), error=repr(e)),
                          exc_info=e)
                out[tp] = Errors.UNKNOWN_SERVER_ERROR
        return out

    # --- produce --------------------------------------------------------------------------------------------
    def append_records(self, timeout_ms: int, required_acks: int, entries: Mapping[TopicPartition, bytes],
                       respond: Callable[[dict[TopicPartition, ProducePartitionResult]], None], *,
                       from_coordinator: bool = False,
                       verification_guards: Mapping[TopicPartition, object] | None = None) -> None:
        """Append ``entries`` (partition -> records bytes) on this leader; ``respond`` gets one
        :class:`ProducePartitionResult` per partition, at once or (acks=all) once the ISR has the records.
        ``from_coordinator``: a coordinator's append (Kafka's origin COORDINATOR, e.g. transactional offset
        commits).  ``verification_guards``: a transactional produce verified with its coordinator (KIP-890
        part 1): the guard of each partition (absent: the partition needed none); without it no check is made."""
        guards = verification_guards
        self._append(timeout_ms, required_acks, entries, respond,
                     lambda p, records: p.append_records_to_leader(
                         records, required_acks, from_coordinator=from_coordinator,
                         verification_guard=None if guards is None else guards.get(
                             TopicPartition(p.topic, p.partition)),
                         verify=guards is not None))

    def append_txn_markers(self, timeout_ms: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                           commit: bool, partitions: list[TopicPartition],
                           respond: Callable[[dict[TopicPartition, ProducePartitionResult]], None]) -> None:
        """WriteTxnMarkers for one producer: a COMMIT or ABORT control batch on each of ``partitions`` (led
        here), acks=all; ``respond`` as for :meth:`append_records`."""
        self._append(timeout_ms, -1, {tp: b"" for tp in partitions}, respond,
                     lambda p, _records: p.append_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit))

    def _append(self, timeout_ms: int, required_acks: int, entries: Mapping[TopicPartition, bytes], respond,
                append_one) -> None:
        statuses: dict[TopicPartition, _ProducePartitionStatus] = {}
        followers: set[int] = set()  # whose waiting fetches to poke, once each (see fetch_messages)
        # acks=all: whether every appended partition's high watermark already covers its records (an ISR of
        # one), so the answer goes out now, as DelayedProduce.try_complete's first check would send it
        replicated = True
        for tp, records in entries.items():
            tp = TopicPartition(*tp)
            try:
                p = self.get_partition_or_error(*tp)
                info = append_one(p, records)
                required = info.last_offset + 1
                lg = p.log
                statuses[tp] = _ProducePartitionStatus(
                    ProducePartitionResult(Errors.NONE, info.first_offset, lg.log_start_offset), required)
                followers.update(p.replicas)
                if replicated and not (lg.high_watermark >= required and p.is_leader):
                    replicated = False
            except KafkaError as e:
                statuses[tp] = _ProducePartitionStatus(ProducePartitionResult(
                    e.error, error_message=e.message or None, record_errors=getattr(e, "record_errors", ())))
            except Exception as e:  # noqa: BLE001
                log.exception("append failed %s", kv(partition=f"{tp[0]}-{tp[1]}"))
                statuses[tp] = _ProducePartitionStatus(ProducePartitionResult(Errors.UNKNOWN_SERVER_ERROR,
                                                                              error_message=str(e)))
        # One poke per follower, not per appended partition: each runs an offset check over every partition
        # that follower's waiting fetch covers.
        self._changed()
        for r in followers - {self.broker_id}:
            self.fetch_purgatory.check_and_complete(("follower", r))
        if required_acks != -1 or replicated:
            # acks 0/1, every partition failed, or (acks=all) every appended partition's records under its high
            # watermark: answered without a DelayedProduce and a purgatory pass (the same answer)
            respond({tp: st.result for tp, st in statuses.items()})
            return
        op = DelayedProduce(timeout_ms, self, statuses, respond)
        self.produce_purgatory.try_complete_else_watch(op, [("produce", tp) for tp in statuses])

    # --- fetch ----------------------------------------------------------------------------------------------
    def fetch_messages(self, replica_id: int, max_wait_ms: int, min_bytes: int, max_bytes: int,
                       partitions: list[FetchPartitionData],
                       respond: Callable[[dict[TopicPartition, FetchPartitionResult]], None],
                       isolation_level: int = 0, follower_read: bool = False) -> None:
        """Read ``partitions`` for a consumer (``replica_id`` -1) or a follower; ``respond`` gets one
        :class:`FetchPartitionResult` per partition, at once or when ``min_bytes`` are there or at the wait.
        ``isolation_level`` 1 (read_committed): consumers read up to the last stable offset.  ``follower_read``
        (KIP-392: a consumer that sent its rack): a follower replica serves it too, up to its high watermark."""
        op = DelayedFetch(max_wait_ms, self, replica_id, min_bytes, max_bytes, partitions, respond,
                          isolation_level, follower_read=follower_read)
        is_follower = replica_id >= 0
        if is_follower:
            # Record the follower's position first: it may move the high watermark (and the ISR).
            self._update_followers_fetch_state(replica_id, partitions)
        if max_wait_ms <= 0:
            op.force_complete()
            return
        # A follower's fetch waits on one key, its replica id: an append pokes the waiting fetches of the
        # appended partitions' followers.  Kafka watches one key per partition; a follower fetches every partition it
        # follows here (thousands at scale), and registering each on every idle fetch was ~10 % of an idle
        # broker's work at 20,000 partitions.  A consumer's fetch watches its partitions.
        keys = [("follower", replica_id)] if is_follower else [("consumer", fp.tp) for fp in partitions]
        self.fetch_purgatory.try_complete_else_watch(op, keys)  # checks before and after it watches

    def wait_quiet_follower(self, replica_id: int, max_wait_ms: int, seq: int, quiet: Callable[[], None],
                            busy: Callable[[int], None]) -> None:
        """A follower's fetch that changes nothing in a session whose last answer, read from every partition,
        found nothing new at change number ``seq`` (``fetch_session.IncrementalFetchContext.quiet_at``): it
        waits up to ``max_wait_ms`` as :meth:`fetch_messages` would, without a pass over the session's
        partitions (Kafka reads each of them every round; thousands here, twice a second per follower, were
        most of an idle broker's work).  At the end of the wait ``quiet()`` answers if nothing changed here;
        after a change (an append to a partition this follower follows ends the wait at once), ``busy(ms)``
        does the whole fetch with the wait that is left."""
        self.fetch_purgatory.try_complete_else_watch(_QuietFollowerFetch(max_wait_ms, self, seq, quiet, busy),
                                                     [("follower", replica_id)])

    def preferred_read_replica(self, tp: TopicPartition, client_rack: str | None, fetch_offset: int) -> int:
        """KIP-392's ``RackAwareReplicaSelector`` on the leader: an in-sync replica in the consumer's rack that
        holds ``fetch_offset`` (the leader itself when it is in that rack); -1 (read here) when the selector is
        off, the consumer sent no rack, this broker does not lead the partition or no replica is in the rack."""
        if not self.rack_aware_selector or not client_rack or self.metadata_cache is None:
            return -1
        p = self.partitions.get(tp)
        if p is None or not p.is_leader:
            return -1

        def rack(broker_id: int) -> str | None:
            b = self.metadata_cache.broker(broker_id)
            return b.rack if b is not None else None
        if rack(self.broker_id) == client_rack:
            return -1
        candidates = []
        for r in p.isr:
            if r == self.broker_id or rack(r) != client_rack:
                continue
            state = p.followers.get(r)
            if state is not None and state.log_end_offset >= fetch_offset:
                candidates.append(r)
        if not candidates:
            return -1
        self.follower_fetch_metrics["preferred_read_replica_answers"] += 1
        return min(candidates)

    def read_partition(self, replica_id: int, fp: FetchPartitionData, max_bytes: int,
                       isolation_level: int = 0, follower_read: bool = False) -> FetchPartitionResult:
        if isolation_level == READ_COMMITTED and replica_id < 0:
            return self._read_committed(fp, max_bytes, follower_read)
        try:
            p = self.get_partition_or_error(*fp.tp, leader_only=not (follower_read and replica_id < 0))
            p.check_leader_epoch(fp.current_leader_epoch)
            plog = p.log
            if (self.remote_log_manager is not None and is_tiered(p)
                    and plog.log_start_offset <= fp.fetch_offset < plog.local_log_start_offset):
                return self._read_from_remote_tier(p, replica_id, fp.fetch_offset, max_bytes)
            max_offset = None if replica_id >= 0 else plog.high_watermark
            if fp.fetch_offset == (plog.log_end_offset if max_offset is None else max_offset):
                # Nothing to read (an idle follower or a consumer at the high watermark): no segment lookup.
                return FetchPartitionResult(Errors.NONE, plog.high_watermark, plog.log_start_offset)
            throttled = replica_id >= 0 and self._leader_throttled(p, replica_id)
            if self._held_back_by_throttle(p, replica_id, throttled):
                return FetchPartitionResult(Errors.NONE, plog.high_watermark, plog.log_start_offset)
            try:
                # a large read is a range of the segment file, sent with sendfile (common/file_records.py)
                info = plog.read(fp.fetch_offset, max_bytes, max_offset=max_offset, min_one_message=True,
                                 file_records=True)
            except OffsetOutOfRangeError:
                # Local retention removed the segment between the check above and the read: the data is in the
                # remote tier (Kafka's readFromLocalLog turns this into a remote fetch too).
                if (self.remote_log_manager is not None and is_tiered(p)
                        and plog.log_start_offset <= fp.fetch_offset < plog.local_log_start_offset):
                    return self._read_from_remote_tier(p, replica_id, fp.fetch_offset, max_bytes)
                raise
            if throttled and info.records:
                self.leader_replication_quota.record(len(info.records))
            if info.records and replica_id < 0 and not p.is_leader:
                self.follower_fetch_metrics["consumer_bytes_served_as_follower"] += len(info.records)
                self.follower_fetch_metrics["consumer_fetches_served_as_follower"] += 1
            return FetchPartitionResult(Errors.NONE, plog.high_watermark, plog.log_start_offset, info.records or b"")
        except (KafkaError, OSError) as e:
            return self._read_error(fp, e)

    def idle_follower_read(self, fp: FetchPartitionData) -> FetchPartitionResult | None:
        """:meth:`read_partition`'s answer to a follower already at the log end of a partition led here, in the
        current leader epoch (nothing to read, no error): the partition's high watermark and log start offset.
        None when any of that does not hold (the caller reads).  An idle follower's fetch that expires asks this
        for every partition of its session (thousands at scale) twice a second: the answer is reused while the
        offsets stay the same, not built again."""
        p = self.partitions.get(fp.tp)
        if p is None or p.leader_id != self.broker_id:
            return None
        epoch = fp.current_leader_epoch
        if epoch != -1 and epoch != p.leader_epoch:
            return None
        plog = p.log
        if fp.fetch_offset != plog.log_end_offset or fp.tp in self.offline_partitions:
            return None
        hw, start = plog.high_watermark, plog.log_start_offset
        last = self._idle_reads.get(fp.tp)
        if last is None or last.high_watermark != hw or last.log_start_offset != start:
            last = self._idle_reads[fp.tp] = FetchPartitionResult(Errors.NONE, hw, start)
        return last

    def _read_committed(self, fp: FetchPartitionData, max_bytes: int,
                        follower_read: bool = False) -> FetchPartitionResult:
        """A read_committed consumer's read: bounded by the last stable offset, with the aborted transactions
        overlapping what is returned (Kafka's ``FetchIsolation.TXN_COMMITTED``), from the remote tier too (its
        segments' transaction indexes, then the local log's)."""
        try:
            p = self.get_partition_or_error(*fp.tp, leader_only=not follower_read)
            p.check_leader_epoch(fp.current_leader_epoch)
            plog = p.log
            if (self.remote_log_manager is not None and is_tiered(p)
                    and plog.log_start_offset <= fp.fetch_offset < plog.local_log_start_offset):
                return self._read_committed_from_remote_tier(p, fp, max_bytes)
            lso = p.last_stable_offset
            if fp.fetch_offset == lso:
                return FetchPartitionResult(Errors.NONE, plog.high_watermark, plog.log_start_offset,
                                            last_stable_offset=lso)
            try:
                info = plog.read(fp.fetch_offset, max_bytes, max_offset=lso, min_one_message=True, file_records=True)
            except OffsetOutOfRangeError:
                # Local retention removed the segment meanwhile: the data is in the remote tier (as read_partition).
                if (self.remote_log_manager is not None and is_tiered(p)
                        and plog.log_start_offset <= fp.fetch_offset < plog.local_log_start_offset):
                    return self._read_committed_from_remote_tier(p, fp, max_bytes)
                raise
            records = info.records or b""
            aborted: tuple = ()
            if records:
                if type(records) is FileRecords:
                    upper = info.last_offset + 1     # found from the batch headers by the read
                else:
                    upper = fp.fetch_offset
                    for _, h in iter_batches(records):
                        upper = h.last_offset + 1
                aborted = tuple((t.producer_id, t.first_offset)
                                for t in plog.collect_aborted_transactions(fp.fetch_offset, upper))
            if records and not p.is_leader:
                self.follower_fetch_metrics["consumer_bytes_served_as_follower"] += len(records)
                self.follower_fetch_metrics["consumer_fetches_served_as_follower"] += 1
            return FetchPartitionResult(Errors.NONE, plog.high_watermark, plog.log_start_offset, records, lso, aborted)
        except (KafkaError, OSError) as e:
            return self._read_error(fp, e)

    def _read_error(self, fp: FetchPartitionData, e: Exception) -> FetchPartitionResult:
        """A failed read's answer: the error's code (a storage failure reports the log dir offline and answers
        KAFKA_STORAGE_ERROR), with the partition's offsets when it is here."""
        p = self.partitions.get(fp.tp)
        error = e.error if isinstance(e, KafkaError) else Errors.UNKNOWN_SERVER_ERROR
        if p is not None and is_storage_failure(e):
            self.log_manager.report_failure(p.log.parent_dir, f"Error while reading {p}", e)
            error = Errors.KAFKA_STORAGE_ERROR
        return FetchPartitionResult(error, p.log.high_watermark if p else -1,
                                    p.log.log_start_offset if p else -1)

    def _held_back_by_throttle(self, p: Partition, replica_id: int, throttled: bool | None = None) -> bool:
        """A follower's fetch of ``p`` gets nothing now: the partition is throttled for it and the leader quota
        is exceeded (``throttled``: :meth:`_leader_throttled`, when the caller already knows it)."""
        if throttled is None:
            throttled = self._leader_throttled(p, replica_id)
        return throttled and self.leader_replication_quota.is_quota_exceeded()

    def _leader_throttled(self, p: Partition, replica_id: int) -> bool:
        """Kafka's ``shouldLeaderThrottle`` without the rate check: a throttled partition, a follower out of the
        ISR."""
        q = self.leader_replication_quota
        return q is not None and not q.unlimited and replica_id not in p.isr and q.is_throttled(p.topic, p.partition)

    def _read_committed_from_remote_tier(self, p: Partition, fp: FetchPartitionData,
                                         max_bytes: int) -> FetchPartitionResult:
        """The remote-tier part of :meth:`_read_committed`: bounded by the last stable offset, listing the aborted
        transactions of the remote segments' (and, past them, the local log's) transaction indexes."""
        plog, lso = p.log, p.last_stable_offset
        if fp.fetch_offset >= lso:
            return FetchPartitionResult(Errors.NONE, plog.high_watermark, plog.log_start_offset,
                                        last_stable_offset=lso)
        r = self._read_from_remote_tier(p, -1, fp.fetch_offset, max_bytes, max_offset=lso)
        aborted: tuple = ()
        if r.records:
            upper = fp.fetch_offset
            for _, h in iter_batches(r.records):
                upper = h.last_offset + 1
            found, complete = self.remote_log_manager.collect_aborted_transactions(p, fp.fetch_offset, upper)
            if not complete:
                found += [t for t in plog.collect_aborted_transactions(fp.fetch_offset, upper) if t not in found]
            aborted = tuple((t.producer_id, t.first_offset) for t in found)
        return attrs.evolve(r, last_stable_offset=lso, aborted_transactions=aborted)

    def _read_from_remote_tier(self, p: Partition, replica_id: int, offset: int,
                               max_bytes: int, max_offset: int | None = None) -> FetchPartitionResult:
        """Consumer reads in ``[log start, local log start)`` come from remote storage; followers get
        OFFSET_MOVED_TO_TIERED_STORAGE (and rebuild from the remote tier)."""
        if replica_id >= 0:
            raise offset_moved_to_tiered_storage(offset)
        plog = p.log
        try:
            records = self.remote_log_manager.read(p, offset, max_bytes,
                                                   plog.high_watermark if max_offset is None else max_offset)
        except RemoteStorageError as e:
            log.warning(kv(event="remote_read_failed", partition=f"{p.topic}-{p.partition}", offset=offset, error=e))
            raise KafkaError(f"Error reading remote storage: {e}", Errors.UNKNOWN_SERVER_ERROR) from e
        return FetchPartitionResult(Errors.NONE, plog.high_watermark, plog.log_start_offset, records or b"")

    def _complete_delayed(self, p: Partition) -> None:
        self._changed()
        tp = TopicPartition(p.topic, p.partition)
        self.produce_purgatory.check_and_complete(("produce", tp))
        self.fetch_purgatory.check_and_complete(("consumer", tp))
        self.delete_records_purgatory.check_and_complete(("delete_records", tp))

    # --- log start offset moves (DeleteRecords) -------------------------------------------------------------
    def _on_follower_fetched(self, p: Partition) -> None:
        """A follower processed a fetch response: act if its log start offset moved (it follows the leader's
        DeleteRecords).  Consumers only read from leaders, so no purgatory to poke."""
        lso = p.log.log_start_offset
        prev = self._seen_log_start.get(p.tp)
        if prev == lso:
            return
        self._seen_log_start[p.tp] = lso
        if prev is None:
            segs = p.log.log_segments()
            if not segs or lso <= segs[0].base_offset:
                return  # nothing below the log start offset on disk, nothing new to checkpoint
        log.info("follower log start offset moved %s", kv(partition=p, log_start_offset=lso, previous=prev))
        self.after_log_start_offset_moved(p)

    def after_log_start_offset_moved(self, p: Partition) -> None:
        """Free the disk now and make the new log start offset durable (``log-start-offset-checkpoint``)."""
        self._changed()
        plog = p.log
        self._seen_log_start[p.tp] = plog.log_start_offset
        try:
            plog.delete_old_segments()
        except Exception:  # noqa: BLE001 - the retention task will retry
            log.exception("deleting segments below the log start offset failed %s", kv(partition=p))
        try:
            self.log_manager.checkpoint_log_start_offsets(plog.parent_dir)
        except Exception:  # noqa: BLE001 - the periodic checkpoint will retry
            log.exception("log start offset checkpoint failed %s", kv(partition=p, dir=plog.parent_dir))

    def on_metadata_update(self) -> None:
        """A broker may have died (or come back): re-check pending DeleteRecords, whose low watermarks only count
        replicas on live brokers (a dead follower sends no fetch that would trigger the check)."""
        purgatory = self.delete_records_purgatory
        if not purgatory.watched():
            return
        for tp, p in self.partitions.copy().items():
            if p.is_leader:
                purgatory.check_and_complete(("delete_records", tp))

    # --- offsets --------------------------------------------------------------------------------------------
    def fetch_offset_for_timestamp(self, topic: str, partition: int, timestamp: int, current_leader_epoch: int,
                                   replica_id: int = -1, isolation_level: int = 0):
        p = self.get_partition_or_error(topic, partition, leader_only=True)
        p.check_leader_epoch(current_leader_epoch)
        plog = p.log
        if timestamp == LATEST_TIERED_TIMESTAMP:   # KIP-1005 (ListOffsets v9): the highest offset in remote storage
            return (plog.highest_offset_in_remote_storage if plog.remote_log_enabled else -1), -1
        if timestamp == -1:
            if replica_id < 0 and isolation_level == READ_COMMITTED:
                return p.last_stable_offset, -1
            return (plog.high_watermark if replica_id < 0 else plog.log_end_offset), -1
        if timestamp >= 0 and self.remote_log_manager is not None and is_tiered(p):
            try:  # the remote tier first (Kafka's order)
                found = self.remote_log_manager.find_offset_by_timestamp(p, timestamp)
            except RemoteStorageError as e:
                raise KafkaError(f"Error reading remote storage: {e}", Errors.UNKNOWN_SERVER_ERROR) from e
            if found is not None:
                return found.offset, found.timestamp
        found = plog.fetch_offset_by_timestamp(timestamp)
        if found is None:
            return -1, -1
        bound = p.last_stable_offset if isolation_level == READ_COMMITTED else plog.high_watermark
        if replica_id < 0 and timestamp != -2 and found.offset >= bound:
            return -1, -1
        return found.offset, found.timestamp

    # --- lifecycle ------------------------------------------------------------------------------------------
    def high_watermarks(self) -> dict[tuple[str, int], int]:
        # dict.copy(), not list(items()): building item tuples can start a collection whose finalizers let
        # another thread add a partition mid-iteration ("dictionary changed size during iteration", seen in the
        # checkpoint task while 20,000 partitions were created); a copy iterates nothing in Python.
        return {k: p.log.high_watermark for k, p in self.partitions.copy().items()}

    def checkpoint_high_watermarks(self) -> None:
        """Kafka's ``highwatermark-checkpoint`` task (every ``replica.high.watermark.checkpoint.interval.ms``):
        each dir's ``replication-offset-checkpoint`` from the partitions' high watermarks, so a broker killed with
        -9 restarts from a recent high watermark rather than 0.  A dir that fails the write is reported by the
        log manager and goes offline."""
        if self._stopped.is_set():
            return
        # Idle work proportional to change: the files are rewritten (and fsynced) only when something they hold
        # may have changed since the last write -- a log's high watermark or place (the log manager's
        # ``offsets_version``, moved by every log) or the partitions hosted (``change_seq``, moved before and
        # after each LeaderAndIsr, StopReplica and dir failure).  Both are read before the high watermarks: a
        # change racing with this pass moves them again, and the next pass writes.  An idle broker of thousands
        # of partitions reads two numbers every 5 s.
        lm = self.log_manager
        version = getattr(lm, "offsets_version", None)
        key = None if version is None else (version, self.change_seq, len(self.partitions))
        if key is not None and key == self._last_hw_checkpoint:
            return
        hws = self.high_watermarks()
        try:
            lm.checkpoint_high_watermarks(hws)
            self._last_hw_checkpoint = key
        except KafkaStorageError:
            pass  # reported to the log dir failure channel by the log manager

    def shutdown(self) -> None:
        if self._isr_expiration_task is not None:
            self._isr_expiration_task.cancel()
        if self._hw_checkpoint_task is not None:
            self._hw_checkpoint_task.cancel()
        if self._isr_propagation_task is not None:
            self._isr_propagation_task.cancel()
            self.isr_manager.maybe_propagate_isr_changes(force=True)  # the controller learns the last changes
        self._stopped.set()
        self.alter_log_dirs_manager.shutdown()
        self.fetcher_manager.shutdown()
        for purg in (self.produce_purgatory, self.fetch_purgatory, self.delete_records_purgatory):
            purg.shutdown()
        for p in list(self.partitions.values()):   # producer state snapshots: a restart need not read every log
            if not p.log.closed:                    # (unsynced: LogManager.shutdown syncs before the marker)
                p.snapshot_producer_state(sync=False)

    def describe(self) -> list[dict]:
        return [p.describe() for _, p in sorted(self.partitions.copy().items())]


    # --- log dir failures (KIP-112; docs/kip-113-jbod.md#offline-log-dirs) ------------------------------------------
    def _log_dir_failure_handler(self) -> None:
        """Kafka's ``LogDirFailureHandler`` thread."""
        while not self._stopped.is_set():
            d = self.log_dir_failure_channel.take_next_offline_log_dir(timeout_s=0.5)
            if d is None:
                continue
            try:
                self.handle_log_dir_failure(d)
            except Exception:  # noqa: BLE001
                log.exception("handling the log dir failure failed %s", kv(dir=d))

    def handle_log_dir_failure(self, log_dir: str) -> None:
        """Partitions whose current log was in the dir go offline (fetchers and moves stopped, waiting requests
        answered, KAFKA_STORAGE_ERROR from now on); partitions whose future log was there only lose the move.
        The controller learns it from ``/log_dir_event_notification``; with no dir left the broker halts."""
        current, future = self.log_manager.handle_log_dir_failure(log_dir)
        self._changed()
        gone = []
        with self._lock:
            for tp in current:
                self.fetcher_manager.remove_fetcher(*tp)
                p = self.partitions.pop(tp, None)
                self.offline_partitions.add(tp)
                if p is not None:
                    self.alter_log_dirs_manager.remove_partition(p, delete_future_log=False)
                    p.leader_id = -1
                    gone.append(p)
            for tp in future:
                p = self.partitions.get(tp)
                if p is not None:
                    self.alter_log_dirs_manager.remove_partition(p, delete_future_log=False)
        for p in gone:
            self._complete_delayed(p)
        log.error("log dir offline %s", kv(dir=log_dir, offline_partitions=len(current), moves_dropped=len(future)))
        if not self.log_manager.live_log_dirs:
            self._halt(f"Shutdown broker because all log dirs in {', '.join(self.log_manager.log_dirs)} have failed")
            return
        if self.zk is not None:
            try:
                self.zk.create(f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{paths.LOG_DIR_EVENT_PREFIX}",
                               codecs.LogDirEventNotification(self.broker_id).encode(), sequence=True, makepath=True)
            except Exception:  # noqa: BLE001
                log.exception("could not write the log dir event notification %s", kv(dir=log_dir))

    # --- JBOD (KIP-113): AlterReplicaLogDirs, DescribeLogDirs, moves ---------------------------------------------
    def alter_replica_log_dirs(self, requested: Mapping[tuple[str, int], str]) -> dict[tuple[str, int], Errors]:
        """Kafka's ``alterReplicaLogDirs`` with KIP-113's additions (docs/kip-113-jbod.md#alterreplicalogdirs): per
        partition, in this order, INVALID_TOPIC_EXCEPTION for a destination name over 255 chars; ``"any"`` cancels;
        LOG_DIR_NOT_FOUND / KAFKA_STORAGE_ERROR for the path; a move to another dir is cancelled; the path is
        remembered; a replica not hosted here answers REPLICA_NOT_AVAILABLE (created there by a later LeaderAndIsr);
        otherwise the move starts (NONE)."""
        out = {}
        with self._lock:
            for tp, path in requested.items():
                try:
                    out[tp] = self._alter_replica_log_dir(tp, path)
                except KafkaError as e:
                    log.warning("AlterReplicaLogDirs failed %s", kv(partition=f"{tp[0]}-{tp[1]}", dir=path, error=e))
                    out[tp] = e.error
                except Exception as e:  # noqa: BLE001
                    log.exception("AlterReplicaLogDirs failed %s", kv(partition=f"{tp[0]}-{tp[1]}", dir=path))
                    out[tp] = Errors.KAFKA_STORAGE_ERROR if isinstance(e, OSError) else Errors.UNKNOWN_SERVER_ERROR
        return out

    def _alter_replica_log_dir(self, tp: tuple[str, int], path: str) -> Errors:
        topic, partition = tp
        lm = self.log_manager
        if len(move_dir_name(topic, partition)) > MAX_DIR_NAME_LENGTH:
            return Errors.INVALID_TOPIC_EXCEPTION
        p = self.partitions.get(tp)
        if path == ANY_LOG_DIR:
            if p is not None:
                self.alter_log_dirs_manager.remove_partition(p)
            else:
                lm.abort_and_delete_future_log(topic, partition)
            lm.forget_preferred_log_dir(topic, partition)
            return Errors.NONE
        log_dir = os.path.normpath(path) if os.path.isabs(path) else None
        if log_dir not in lm.log_dirs:
            return Errors.LOG_DIR_NOT_FOUND
        if log_dir in lm.offline_dirs:
            return Errors.KAFKA_STORAGE_ERROR
        if tp in self.offline_partitions:
            return Errors.KAFKA_STORAGE_ERROR
        future = lm.get_future_log(topic, partition)
        if future is not None and future.parent_dir != log_dir:
            if p is not None:
                self.alter_log_dirs_manager.remove_partition(p)
            else:
                lm.abort_and_delete_future_log(topic, partition)
            future = None
        current = lm.get_log(topic, partition)
        if not (current is not None and current.parent_dir == log_dir) and future is None:
            lm.set_preferred_log_dir(topic, partition, log_dir)
        if p is None:
            return Errors.REPLICA_NOT_AVAILABLE
        if current is None or current.parent_dir == log_dir or future is not None:
            return Errors.NONE
        lm.create_future_log(topic, partition, log_dir)
        self.alter_log_dirs_manager.add_partition(p)
        return Errors.NONE

    def _maybe_start_move(self, p: Partition) -> None:
        """After LeaderAndIsr: resume a move whose future log was found on disk, or start one to a dir an
        AlterReplicaLogDirs remembered before the partition became a replica here."""
        lm = self.log_manager
        try:
            preferred = lm.preferred_log_dir(p.topic, p.partition)
            if (lm.get_future_log(p.topic, p.partition) is None and preferred is not None
                    and preferred != p.log.parent_dir and preferred in lm.live_log_dirs):
                lm.create_future_log(p.topic, p.partition, preferred)
            self.alter_log_dirs_manager.add_partition(p)
        except Exception:  # noqa: BLE001 - the partition keeps working in its current dir
            log.exception("could not start the move %s", kv(partition=p))

    def describe_log_dirs(self, partitions: set[tuple[str, int]] | None = None) -> list[LogDirDescription]:
        """Kafka's ``describeLogDirs``: one entry per configured dir, current and future logs (``None`` = all
        partitions), sizes, offset lags, and the volume's total / usable bytes."""
        lm = self.log_manager
        by_dir: dict[str, list[ReplicaLogDirInfo]] = {d: [] for d in lm.log_dirs}
        for lg in lm.all_logs() + lm.all_future_logs():
            tp = lg.topic_partition
            if partitions is not None and tp not in partitions:
                continue
            if lg.is_future:
                current = lm.get_log(*tp)
                lag = current.log_end_offset - lg.log_end_offset if current is not None else -1
            else:
                lag = max(lg.high_watermark - lg.log_end_offset, 0)
            by_dir.setdefault(lg.parent_dir, []).append(
                ReplicaLogDirInfo(tp[0], tp[1], lg.size, lag, lg.is_future))
        out = []
        for d in lm.log_dirs:
            if d in lm.offline_dirs:
                out.append(LogDirDescription(d, Errors.KAFKA_STORAGE_ERROR, (), -1, -1))
                continue
            try:
                st = os.statvfs(d)
                total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
            except OSError:
                total = usable = -1
            out.append(LogDirDescription(d, Errors.NONE, tuple(sorted(by_dir.get(d, []))),
                                         total if total >= 0 else LONG_MAX, usable if usable >= 0 else LONG_MAX))
        return out


def _halt(message: str) -> None:
    """Kafka's ``Exit.halt(1)`` after a fatal storage failure: no clean shutdown (the dirs are not trusted)."""
    log.critical(message)
    logging.shutdown()
    os._exit(1)


class DelayedProduce(DelayedOperation):
    def __init__(self, delay_ms: int, rm: ReplicaManager, statuses: dict[TopicPartition, _ProducePartitionStatus],
                 respond: Callable[[dict[TopicPartition, ProducePartitionResult]], None]):
        super().__init__(delay_ms)
        self.rm = rm
        self.statuses = statuses
        self.respond = respond

    @staticmethod
    def _fail(st: _ProducePartitionStatus, error: Errors, message: str) -> None:
        st.result = attrs.evolve(st.result, error=error, error_message=message)
        st.required_offset = -1

    def try_complete(self) -> bool:
        for tp, st in self.statuses.items():
            if st.result.error != Errors.NONE or st.required_offset < 0:
                continue
            p = self.rm.partitions.get(tp)
            if p is None or not p.is_leader:
                self._fail(st, Errors.NOT_LEADER_OR_FOLLOWER, "leadership changed while waiting for replication")
                continue
            if p.log.high_watermark < st.required_offset:
                if len(p.isr) < p._min_isr():
                    self._fail(st, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                               f"ISR {list(p.isr)} shrank below min.insync.replicas after the append")
                    continue
                return False
            st.required_offset = -1  # satisfied
        return self.force_complete()

    def force_complete_on_expiry(self) -> bool:
        for st in self.statuses.values():
            if st.result.error == Errors.NONE and st.required_offset >= 0:
                st.result = attrs.evolve(st.result, error=Errors.REQUEST_TIMED_OUT,
                                         error_message="timed out waiting for replication")
        return self.force_complete()

    def on_complete(self) -> None:
        # A completed operation may stay on the watch lists of other keys for a while: drop the callback, which
        # reaches the request and its records through the response future.
        respond, self.respond = self.respond, None
        respond({tp: st.result for tp, st in self.statuses.items()})


class _QuietFollowerFetch(DelayedOperation):
    """:meth:`ReplicaManager.wait_quiet_follower`'s wait: complete once the change number moved, or expired."""

    def __init__(self, delay_ms: int, rm: ReplicaManager, seq: int, quiet: Callable[[], None],
                 busy: Callable[[int], None]):
        super().__init__(max(delay_ms, 0))
        self.rm = rm
        self.seq = seq
        self._deadline = time.monotonic() + max(delay_ms, 0) / 1000
        self._quiet, self._busy = quiet, busy

    def try_complete(self) -> bool:
        return self.rm.change_seq != self.seq and self.force_complete()

    def on_complete(self) -> None:
        if self.rm.change_seq == self.seq:
            self._quiet()
        else:
            self._busy(max(0, int((self._deadline - time.monotonic()) * 1000)))


class DelayedFetch(DelayedOperation):
    def __init__(self, delay_ms: int, rm: ReplicaManager, replica_id: int, min_bytes: int, max_bytes: int,
                 partitions: list[FetchPartitionData], respond, isolation_level: int = 0,
                 follower_read: bool = False):
        super().__init__(max(delay_ms, 0))
        self.rm = rm
        self.follower_read = follower_read and replica_id < 0
        self.isolation_level = isolation_level
        self.replica_id = replica_id
        self.min_bytes = max(min_bytes, 1)
        self.max_bytes = max_bytes
        self.partitions = partitions
        self.respond = respond
        self._last: dict[TopicPartition, FetchPartitionResult] | None = None

    def _read_all(self) -> dict[TopicPartition, FetchPartitionResult]:
        out = {}
        budget = self.max_bytes
        # A follower's partitions with nothing to read (most of them, at scale) answered without a read.
        idle = self.rm.idle_follower_read if self.replica_id >= 0 and not self.isolation_level else None
        for fp in self.partitions:
            if idle is not None:
                r = idle(fp)
                if r is not None:
                    out[fp.tp] = r
                    continue
            pmax = min(fp.max_bytes, max(budget, 0))
            if self.isolation_level or self.follower_read:
                r = self.rm.read_partition(self.replica_id, fp, pmax if pmax > 0 else 0, self.isolation_level,
                                           follower_read=self.follower_read)
            else:
                r = self.rm.read_partition(self.replica_id, fp, pmax if pmax > 0 else 0)
            out[fp.tp] = r
            budget -= len(r.records)
        return out

    def _has_news(self) -> bool:
        """Kafka's ``DelayedFetch.tryComplete`` checks offsets, not logs: some partition has an error to report (no
        longer led here, another leader epoch, an offline dir) or offsets past the fetch offset (the log end for a
        follower, the high watermark for a consumer) that a throttle does not hold back.  Only then are the logs
        read: an idle follower's fetch of thousands of partitions reads nothing until it expires.  Reading every
        partition on each check was most of an idle broker's work at 5,000 partitions."""
        rm = self.rm
        follower = self.replica_id >= 0
        # Locals: this loop runs over every partition of a follower's session on each fetch.
        partitions, offline = rm.partitions, rm.offline_partitions
        follower_read, committed = self.follower_read, self.isolation_level == READ_COMMITTED
        for fp in self.partitions:
            p = partitions.get(fp.tp)
            if p is None or not (p.is_leader or follower_read) or (offline and fp.tp in offline):
                return True
            epoch = fp.current_leader_epoch
            if epoch != -1 and epoch != p.leader_epoch:
                return True
            plog = p.log
            end = plog.log_end_offset if follower else (p.last_stable_offset if committed else plog.high_watermark)
            if fp.fetch_offset != end and not (follower and rm._held_back_by_throttle(p, self.replica_id)):
                return True
        return False

    def try_complete(self) -> bool:
        if not self._has_news():
            return False
        res = self._read_all()
        total = sum(len(r.records) for r in res.values())
        if total >= self.min_bytes or any(r.error != Errors.NONE for r in res.values()):
            self._last = res
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        res = self._last if self._last is not None else self._read_all()
        # As DelayedProduce: keep neither the records read nor the response future once answered.
        respond, self.respond, self._last = self.respond, None, None
        respond(res)

    def force_complete_on_expiry(self) -> bool:
        self._last = None
        return self.force_complete()
