"""ReplicaManager: the partitions this broker hosts.

Control plane: LeaderAndIsr (become leader / follower, start or stop fetchers) and StopReplica (stop, delete,
or KIP-950 disable).  Data plane: leader appends with acks, reads for consumers and followers, the high
watermark, ISR shrink / expand, delayed produce and fetch in purgatories.  Record batches move as bytes.

JBOD (KIP-113, the section at the end): AlterReplicaLogDirs and DescribeLogDirs, with the moves themselves run
by the ``ReplicaAlterLogDirsManager`` this class creates (as Kafka's ReplicaManager does) around the throttle
it is given.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import Future
from typing import Callable, Mapping

from kazoo.exceptions import BadVersionError, NoNodeError

from kafkatier.log.dir_names import MAX_DIR_NAME_LENGTH, move_dir_name
from kafkatier.log.log_dir_failure_channel import LogDirFailureChannel, is_storage_failure
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import Errors, KafkaError, NotLeaderOrFollowerError, UnknownTopicOrPartitionError
from kafkatier.server.partition import IsrUpdate, Partition
from kafkatier.server.purgatory import DelayedOperation, DelayedOperationPurgatory
from kafkatier.server.replica_alter_log_dirs_thread import ReplicaAlterLogDirsManager
from kafkatier.server.replica_fetcher import ReplicaFetcherManager
from kafkatier.server.replication_quota_manager import LONG_MAX, ReplicationQuotaManager
from kafkatier.server.log_dirs import ANY_LOG_DIR, LogDirDescription, ReplicaLogDirInfo
from kafkatier.zk import codecs, paths

log = get_logger("server.replica-manager")


class ReplicaManager:
    def __init__(self, broker_id: int, log_manager, topic_config: Callable[[str], dict], zk=None,
                 metadata_cache=None, min_insync_replicas_default: int = 1, replica_lag_time_max_ms: int = 30000,
                 replica_fetch_wait_max_ms: int = 500, alter_log_dirs_quota: ReplicationQuotaManager | None = None,
                 num_replica_alter_log_dirs_threads: int | None = None, replica_fetch_max_bytes: int = 1048576,
                 log_dir_failure_channel: LogDirFailureChannel | None = None,
                 halt: Callable[[str], None] | None = None):
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.topic_config = topic_config
        self.zk = zk
        self.metadata_cache = metadata_cache
        self.min_insync_replicas_default = min_insync_replicas_default
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.offline_partitions: set[tuple[str, int]] = set()
        self._lock = threading.RLock()
        self.controller_epoch = 0
        self.produce_purgatory = DelayedOperationPurgatory("Produce")
        self.fetch_purgatory = DelayedOperationPurgatory("Fetch")
        self.delete_records_purgatory = DelayedOperationPurgatory("DeleteRecords")
        self.fetcher_manager = ReplicaFetcherManager(broker_id, self._broker_address, self.get_partition,
                                                     on_fetched=self._on_follower_fetched,
                                                     max_wait_ms=replica_fetch_wait_max_ms)
        self.alter_log_dirs_quota = alter_log_dirs_quota or ReplicationQuotaManager()
        self.alter_log_dirs_manager = ReplicaAlterLogDirsManager(
            log_manager, self.alter_log_dirs_quota,
            num_replica_alter_log_dirs_threads or len(getattr(log_manager, "log_dirs", ())) or 1,
            fetch_max_bytes=replica_fetch_max_bytes,
            on_log_dir_failure=lambda d, msg: log_manager.report_failure(d, msg))
        self.alter_log_dirs_manager.startup()
        self.log_dir_failure_channel = log_dir_failure_channel or getattr(log_manager, "log_dir_failure_channel", None)
        self._halt = halt or _halt

        self.on_become_leader: list[Callable[[Partition], None]] = []
        self.on_become_follower: list[Callable[[Partition], None]] = []
        self.on_stop: list[Callable[[str, int, bool], None]] = []
        # Called after a follower processed a fetch response without error (e.g. its log start offset moved).
        self.on_follower_fetched: list[Callable[[Partition], None]] = []
        # KIP-107 / tiered storage hook: (topic, partition, new_log_start_offset) after DeleteRecords raised a
        # leader's log start offset or a follower followed it (see kafkatier/server/delete_records.py).
        self.log_start_offset_listeners: list[Callable[[str, int, int], None]] = []
        # KIP-950: StopReplica entries with DisableRemotePartition=true; returns an Errors value.
        self.disable_remote_partition: Callable[[str, int], Errors] | None = None
        # Tiered storage (KIP-405): a leader read below the local log start offset; returns a read_partition
        # result, or None to read locally.  ListOffsets by timestamp over the remote tier first.
        self.remote_read: Callable[[Partition, int, dict, int], dict | None] | None = None
        self.remote_offset_for_timestamp: Callable[[Partition, int], tuple[int, int] | None] | None = None
        self._stopped = threading.Event()
        self._isr_thread = threading.Thread(target=self._isr_expiration, name="isr-expiration", daemon=True)
        self._isr_thread.start()
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
        b = self.metadata_cache.broker(broker_id)
        return (b.host, b.port) if b else None

    def _min_isr(self, topic: str) -> Callable[[], int]:
        def get() -> int:
            v = self.topic_config(topic).get("min.insync.replicas")
            return int(v) if v is not None else self.min_insync_replicas_default
        return get

    # --- LeaderAndIsr ---------------------------------------------------------------------------------------
    def handle_leader_and_isr(self, body: dict) -> dict:
        self.controller_epoch = max(self.controller_epoch, body.get("controller_epoch", 0))
        topics_out = []
        leaders, followers = [], []
        with self._lock:
            for ts in body.get("topic_states", []):
                topic = ts["topic_name"]
                topic_id = codecs.topic_id_from_wire(ts.get("topic_id"))
                perrs = []
                for ps in ts.get("partition_states", []):
                    err = self._become_leader_or_follower(topic, topic_id, ps, leaders, followers)
                    perrs.append({"partition_index": ps["partition_index"], "error_code": int(err)})
                topics_out.append({"topic_id": ts.get("topic_id"), "topic_name": topic, "partition_errors": perrs})
        for p in followers:
            self._start_following(p)
        for p in leaders + followers:
            self._maybe_start_move(p)
        for hooks, items in ((self.on_become_leader, leaders), (self.on_become_follower, followers)):
            for hook in hooks:
                for p in items:
                    try:
                        hook(p)
                    except Exception:  # noqa: BLE001
                        log.exception("leadership hook failed %s", kv(partition=p))
        for p in leaders + followers:
            self._complete_delayed(p)
        return {"error_code": 0, "topics": topics_out}

    def _become_leader_or_follower(self, topic, topic_id, ps, leaders, followers) -> Errors:
        key = (topic, ps["partition_index"])
        if key in self.offline_partitions:
            return Errors.KAFKA_STORAGE_ERROR
        if self.broker_id not in ps["replicas"]:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        cur = self.partitions.get(key)
        if cur is not None and cur.topic_id and topic_id and cur.topic_id != topic_id:
            return Errors.INCONSISTENT_TOPIC_ID
        if cur is not None and ps["leader_epoch"] <= cur.leader_epoch:
            log.info("ignoring LeaderAndIsr with an old leader epoch %s", kv(
                partition=f"{topic}-{key[1]}", received=ps["leader_epoch"], current=cur.leader_epoch))
            return Errors.STALE_CONTROLLER_EPOCH
        if cur is None:
            try:
                plog = self.log_manager.get_or_create_log(topic, key[1], self.topic_config(topic),
                                                          is_new=ps.get("is_new", False), topic_id=topic_id)
            except KafkaError as e:
                log.error("cannot create log %s", kv(partition=f"{topic}-{key[1]}", reason=e))
                return e.error
            except Exception as e:  # noqa: BLE001
                log.error("cannot create log %s", kv(partition=f"{topic}-{key[1]}", reason=e))
                return Errors.KAFKA_STORAGE_ERROR
            cur = Partition(topic, key[1], self.broker_id, plog, self._write_isr, self._min_isr(topic),
                            self.replica_lag_time_max_ms,
                            log_dir_failure=getattr(self.log_manager, "report_failure", None))
            cur.topic_id = topic_id
            cur.on_high_watermark_change.append(self._complete_delayed)
            self.partitions[key] = cur
        if ps["leader"] == self.broker_id:
            self.fetcher_manager.remove_fetcher(topic, key[1])
            cur.make_leader(ps, self.controller_epoch)
            leaders.append(cur)
            role = "leader"
        else:
            cur.make_follower(ps, self.controller_epoch)
            followers.append(cur)
            role = "follower"
        log.info("became %s %s", role, kv(partition=f"{topic}-{key[1]}", leader=ps["leader"],
                                          leader_epoch=ps["leader_epoch"], isr=list(ps["isr"]),
                                          log_end_offset=cur.log.log_end_offset, hw=cur.log.high_watermark))
        return Errors.NONE

    def _start_following(self, p: Partition) -> None:
        self.fetcher_manager.remove_fetcher(p.topic, p.partition)
        if p.leader_id < 0:
            return
        plog = p.log
        if plog.log_end_offset > plog.high_watermark:
            log.info("truncating to the high watermark before following %s",
                     kv(partition=p, log_end_offset=plog.log_end_offset, hw=plog.high_watermark))
            p.truncate_to(max(plog.high_watermark, plog.log_start_offset))
        self.fetcher_manager.add_fetcher(p.topic, p.partition, p.leader_id, plog.log_end_offset, p.leader_epoch)

    # --- ISR writes (partition leader -> ZooKeeper) ---------------------------------------------------------
    def _write_isr(self, topic: str, partition: int, upd: IsrUpdate) -> int | None:
        """Conditional update of the partition state znode; returns the new zkVersion, or None if the znode
        moved on (the controller changed it: wait for its LeaderAndIsr)."""
        if self.zk is None:
            return upd.partition_epoch + 1
        path = paths.partition_state(topic, partition)
        data = codecs.LeaderIsrAndControllerEpoch(leader=upd.leader, leader_epoch=upd.leader_epoch, isr=upd.isr,
                                                  controller_epoch=upd.controller_epoch).encode()
        try:
            stat = self.zk.set(path, data, version=upd.partition_epoch)
        except BadVersionError:
            try:
                cur_data, cur_stat = self.zk.get(path)
                cur = codecs.decode_partition_state(cur_data, cur_stat)
                if (cur.leader, cur.leader_epoch, tuple(cur.isr)) == (upd.leader, upd.leader_epoch, tuple(upd.isr)):
                    return cur_stat.version
            except (NoNodeError, codecs.MalformedZNodeError):
                pass
            return None
        except NoNodeError:
            return None
        try:
            self.zk.create(paths.ISR_CHANGE_NOTIFICATION + "/isr_change_",
                           codecs.IsrChangeNotification({(topic, partition)}).encode(), sequence=True, makepath=True)
        except Exception:  # noqa: BLE001 - the notification only refreshes metadata caches
            log.warning("could not write the ISR change notification", exc_info=True)
        return stat.version

    def _isr_expiration(self) -> None:
        interval = max(0.2, self.replica_lag_time_max_ms / 2000.0)
        while not self._stopped.wait(interval):
            for p in list(self.partitions.values()):
                try:
                    p.maybe_shrink_isr()
                except Exception:  # noqa: BLE001
                    log.exception("ISR shrink check failed %s", kv(partition=p))

    # --- StopReplica ----------------------------------------------------------------------------------------
    def handle_stop_replica(self, body: dict) -> dict:
        self.controller_epoch = max(self.controller_epoch, body.get("controller_epoch", 0))
        errors, stopped = [], []
        for ts in body.get("topic_states", []):
            topic = ts["topic_name"]
            for ps in ts.get("partition_states", []):
                err = self._stop_one(topic, ps, stopped)
                errors.append({"topic_name": topic, "partition_index": ps["partition_index"], "error_code": int(err)})
        for hook in self.on_stop:
            for item in stopped:
                try:
                    hook(*item)
                except Exception:  # noqa: BLE001
                    log.exception("stop hook failed")
        return {"error_code": 0, "partition_errors": errors}

    def _stop_one(self, topic: str, ps: dict, stopped: list) -> Errors:
        key = (topic, ps["partition_index"])
        delete = bool(ps.get("delete_partition"))
        disable = bool(ps.get("disable_remote_partition"))
        if delete and disable:
            return Errors.INVALID_REQUEST
        if key in self.offline_partitions:
            return Errors.KAFKA_STORAGE_ERROR
        with self._lock:
            cur = self.partitions.get(key)
            epoch = ps.get("leader_epoch", -1)
            if cur is not None and epoch not in (-1, -2) and epoch < cur.leader_epoch:
                return Errors.FENCED_LEADER_EPOCH
        if disable:
            return self.disable_remote_partition(topic, key[1]) if self.disable_remote_partition else Errors.NONE
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
        stopped.append((topic, key[1], delete))
        log.info("stopped replica %s", kv(partition=f"{topic}-{key[1]}", delete=delete))
        return Errors.NONE

    # --- produce --------------------------------------------------------------------------------------------
    def append_records(self, timeout_ms: int, required_acks: int, entries: dict[tuple[str, int], object],
                       respond: Callable[[dict], None]) -> None:
        """``entries``: (topic, partition) -> records bytes.  ``respond`` receives
        {(t, p): (error, base_offset, log_start_offset, error_message)}."""
        results: dict[tuple[str, int], list] = {}
        for tp, records in entries.items():
            try:
                p = self.get_partition_or_error(*tp)
                info = p.append_records_to_leader(records, required_acks)
                results[tp] = [Errors.NONE, info.first_offset, p.log.log_start_offset, None, info.last_offset + 1]
                self.fetch_purgatory.check_and_complete(("follower", tp))
            except KafkaError as e:
                results[tp] = [e.error, -1, -1, e.message or None, -1]
            except Exception as e:  # noqa: BLE001
                log.exception("append failed %s", kv(partition=f"{tp[0]}-{tp[1]}"))
                results[tp] = [Errors.UNKNOWN_SERVER_ERROR, -1, -1, str(e), -1]
        if required_acks != -1 or all(r[0] != Errors.NONE for r in results.values()):
            respond({tp: tuple(r[:4]) for tp, r in results.items()})
            return
        op = DelayedProduce(timeout_ms, self, results, respond)
        self.produce_purgatory.try_complete_else_watch(op, [("produce", tp) for tp in results])

    # --- fetch ----------------------------------------------------------------------------------------------
    def fetch_messages(self, replica_id: int, max_wait_ms: int, min_bytes: int, max_bytes: int,
                       partitions: list[dict], respond: Callable[[dict], None]) -> None:
        """``partitions``: dicts with topic, partition, fetch_offset, partition_max_bytes,
        current_leader_epoch, log_start_offset (followers).  ``respond`` gets {(t, p): FetchPartitionResult}."""
        op = DelayedFetch(max_wait_ms, self, replica_id, min_bytes, max_bytes, partitions, respond)
        is_follower = replica_id >= 0
        if is_follower:
            # Record the follower's position first: it may move the high watermark.
            for fp in partitions:
                p = self.partitions.get((fp["topic"], fp["partition"]))
                if p is not None and p.is_leader:
                    p.update_follower_fetch_state(replica_id, fp["fetch_offset"], fp.get("log_start_offset", -1),
                                                  p.log.log_end_offset)
                    self.delete_records_purgatory.check_and_complete(("delete_records", (p.topic, p.partition)))
        if max_wait_ms <= 0 or op.try_complete():
            if not op.is_completed:
                op.force_complete()
            return
        keys = [(("follower" if is_follower else "consumer"), (fp["topic"], fp["partition"])) for fp in partitions]
        self.fetch_purgatory.try_complete_else_watch(op, keys)

    def read_partition(self, replica_id: int, fp: dict, max_bytes: int) -> dict:
        tp = (fp["topic"], fp["partition"])
        try:
            p = self.get_partition_or_error(*tp, leader_only=True)
            p.check_leader_epoch(fp.get("current_leader_epoch", -1))
            plog = p.log
            if self.remote_read is not None:
                remote = self.remote_read(p, replica_id, fp, max_bytes)
                if remote is not None:
                    return remote
            max_offset = None if replica_id >= 0 else plog.high_watermark
            info = plog.read(fp["fetch_offset"], max_bytes, max_offset=max_offset, min_one_message=True)
            return {"error": Errors.NONE, "high_watermark": plog.high_watermark,
                    "log_start_offset": plog.log_start_offset, "records": info.records}
        except (KafkaError, OSError) as e:
            p = self.partitions.get(tp)
            if p is not None and is_storage_failure(e):
                self.log_manager.report_failure(p.log.parent_dir, f"Error while reading {p}", e)
                e = KafkaError(str(e), Errors.KAFKA_STORAGE_ERROR)
            return {"error": e.error, "high_watermark": p.log.high_watermark if p else -1,
                    "log_start_offset": p.log.log_start_offset if p else -1, "records": b""}

    def _complete_delayed(self, p: Partition) -> None:
        tp = (p.topic, p.partition)
        self.produce_purgatory.check_and_complete(("produce", tp))
        self.fetch_purgatory.check_and_complete(("consumer", tp))
        self.delete_records_purgatory.check_and_complete(("delete_records", tp))

    def _on_follower_fetched(self, p: Partition) -> None:
        # Consumers only read from leaders, so no purgatory to poke; features may watch the follower's log.
        for hook in self.on_follower_fetched:
            try:
                hook(p)
            except Exception:  # noqa: BLE001
                log.exception("follower fetch hook failed %s", kv(partition=p))

    # --- offsets --------------------------------------------------------------------------------------------
    def fetch_offset_for_timestamp(self, topic: str, partition: int, timestamp: int, current_leader_epoch: int,
                                   replica_id: int = -1):
        p = self.get_partition_or_error(topic, partition, leader_only=True)
        p.check_leader_epoch(current_leader_epoch)
        plog = p.log
        if timestamp == -1:
            return (plog.high_watermark if replica_id < 0 else plog.log_end_offset), -1
        if timestamp >= 0 and self.remote_offset_for_timestamp is not None:
            remote = self.remote_offset_for_timestamp(p, timestamp)
            if remote is not None:
                return remote
        found = plog.fetch_offset_by_timestamp(timestamp)
        if found is None:
            return -1, -1
        if replica_id < 0 and timestamp != -2 and found.offset >= plog.high_watermark:
            return -1, -1
        return found.offset, found.timestamp

    # --- lifecycle ------------------------------------------------------------------------------------------
    def high_watermarks(self) -> dict[tuple[str, int], int]:
        return {k: p.log.high_watermark for k, p in list(self.partitions.items())}

    def shutdown(self) -> None:
        self._stopped.set()
        self.alter_log_dirs_manager.shutdown()
        self.fetcher_manager.shutdown()
        for purg in (self.produce_purgatory, self.fetch_purgatory, self.delete_records_purgatory):
            purg.shutdown()

    def describe(self) -> list[dict]:
        return [p.describe() for _, p in sorted(list(self.partitions.items()))]


    # --- log dir failures (KIP-112; jbod.md §7) ------------------------------------------------------------------
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
        """Kafka's ``alterReplicaLogDirs`` with the seed's additions (jbod.md §3): per partition, in this order,
        INVALID_TOPIC_EXCEPTION for a destination name over 255 chars; ``"any"`` cancels; LOG_DIR_NOT_FOUND /
        KAFKA_STORAGE_ERROR for the path; a move to another dir is cancelled; the path is remembered; a replica
        not hosted here answers REPLICA_NOT_AVAILABLE (created there by a later LeaderAndIsr); otherwise the
        move starts (NONE)."""
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
    def __init__(self, delay_ms: int, rm: ReplicaManager, results: dict, respond):
        super().__init__(delay_ms)
        self.rm = rm
        self.results = results
        self.respond = respond

    def try_complete(self) -> bool:
        for tp, r in self.results.items():
            if r[0] != Errors.NONE or r[4] < 0:
                continue
            p = self.rm.partitions.get(tp)
            if p is None or not p.is_leader:
                r[0], r[3] = Errors.NOT_LEADER_OR_FOLLOWER, "leadership changed while waiting for replication"
                r[4] = -1
                continue
            if p.log.high_watermark < r[4]:
                if len(p.isr) < p._min_isr():
                    r[0] = Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                    r[3] = f"ISR {list(p.isr)} shrank below min.insync.replicas after the append"
                    r[4] = -1
                    continue
                return False
            r[4] = -1  # satisfied
        return self.force_complete()

    def on_expiration(self) -> None:
        pass

    def force_complete_on_expiry(self) -> bool:
        for r in self.results.values():
            if r[0] == Errors.NONE and r[4] >= 0:
                r[0], r[3] = Errors.REQUEST_TIMED_OUT, "timed out waiting for replication"
        return self.force_complete()

    def on_complete(self) -> None:
        # A completed operation stays in the purgatory's timer heap until its deadline (the request timeout):
        # drop the callback, which reaches the request and its records through the response future.
        respond, self.respond = self.respond, None
        respond({tp: tuple(r[:4]) for tp, r in self.results.items()})


class DelayedFetch(DelayedOperation):
    def __init__(self, delay_ms: int, rm: ReplicaManager, replica_id: int, min_bytes: int, max_bytes: int,
                 partitions: list[dict], respond):
        super().__init__(max(delay_ms, 0))
        self.rm = rm
        self.replica_id = replica_id
        self.min_bytes = max(min_bytes, 1)
        self.max_bytes = max_bytes
        self.partitions = partitions
        self.respond = respond
        self._last: dict | None = None

    def _read_all(self) -> dict:
        out = {}
        budget = self.max_bytes
        for fp in self.partitions:
            pmax = min(fp.get("partition_max_bytes", 1048576), max(budget, 0))
            r = self.rm.read_partition(self.replica_id, fp, pmax if pmax > 0 else 0)
            out[(fp["topic"], fp["partition"])] = r
            budget -= len(r["records"] or b"")
        return out

    def try_complete(self) -> bool:
        res = self._read_all()
        total = sum(len(r["records"] or b"") for r in res.values())
        if total >= self.min_bytes or any(r["error"] != Errors.NONE for r in res.values()):
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
