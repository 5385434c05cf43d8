"""ReplicaManager: the partitions this broker hosts, driven by LeaderAndIsr and StopReplica.

This module holds the control-plane half (become leader / follower, stop, delete).  The data path (produce,
fetch, high watermark, ISR changes) lives in :mod:`kafkatier.server.partition` and the fetcher threads.
"""
from __future__ import annotations

import threading
from typing import Callable

import attrs

from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import Errors

log = get_logger("server.replica-manager")


@attrs.define
class HostedPartition:
    topic: str
    partition: int
    topic_id: str | None
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    partition_epoch: int
    log: object | None = None

    def is_leader(self, broker_id: int) -> bool:
        return self.leader == broker_id


class ReplicaManager:
    def __init__(self, broker_id: int, log_manager=None, topic_config: Callable[[str], dict] | None = None):
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.topic_config = topic_config or (lambda t: {})
        self.partitions: dict[tuple[str, int], HostedPartition] = {}
        self.offline_partitions: set[tuple[str, int]] = set()
        self._lock = threading.RLock()
        # Hooks other components register: called with (topic, partition) after the change.
        self.on_become_leader: list[Callable] = []
        self.on_become_follower: list[Callable] = []
        self.on_stop: list[Callable] = []
        # KIP-950: called for StopReplica entries with DisableRemotePartition=true; returns an Errors value.
        self.disable_remote_partition: Callable[[str, int], Errors] | None = None

    def get_partition(self, topic: str, partition: int) -> HostedPartition | None:
        with self._lock:
            return self.partitions.get((topic, partition))

    # --- LeaderAndIsr ---------------------------------------------------------------------------------------
    def handle_leader_and_isr(self, body: dict) -> dict:
        topics_out = []
        became_leader, became_follower = [], []
        with self._lock:
            for ts in body.get("topic_states", []):
                topic = ts["topic_name"]
                topic_id = ts.get("topic_id")
                perrs = []
                for ps in ts.get("partition_states", []):
                    err = self._become_leader_or_follower(topic, topic_id, ps, became_leader, became_follower)
                    perrs.append({"partition_index": ps["partition_index"], "error_code": int(err)})
                topics_out.append({"topic_id": topic_id, "topic_name": topic, "partition_errors": perrs})
        for hook_list, items in ((self.on_become_leader, became_leader), (self.on_become_follower, became_follower)):
            for hook in hook_list:
                for hp in items:
                    try:
                        hook(hp)
                    except Exception:  # noqa: BLE001
                        log.exception("leadership hook failed %s", kv(partition=f"{hp.topic}-{hp.partition}"))
        return {"error_code": 0, "topics": topics_out}

    def _become_leader_or_follower(self, topic, topic_id, ps, became_leader, became_follower) -> Errors:
        key = (topic, ps["partition_index"])
        if key in self.offline_partitions:
            return Errors.KAFKA_STORAGE_ERROR
        if self.broker_id not in ps["replicas"]:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        cur = self.partitions.get(key)
        if cur is not None and cur.topic_id and topic_id and cur.topic_id != topic_id:
            return Errors.INCONSISTENT_TOPIC_ID
        if cur is not None and ps["leader_epoch"] <= cur.leader_epoch:
            log.info("ignoring LeaderAndIsr with old leader epoch %s", kv(
                partition=f"{topic}-{key[1]}", received=ps["leader_epoch"], current=cur.leader_epoch))
            return Errors.STALE_CONTROLLER_EPOCH
        hp = HostedPartition(topic, key[1], topic_id, ps["leader"], ps["leader_epoch"], tuple(ps["isr"]),
                             tuple(ps["replicas"]), ps.get("partition_epoch", 0), cur.log if cur else None)
        if hp.log is None and self.log_manager is not None:
            try:
                hp.log = self.log_manager.get_or_create_log(topic, key[1], self.topic_config(topic),
                                                            is_new=ps.get("is_new", False), topic_id=topic_id)
            except Exception as e:  # noqa: BLE001
                log.error("cannot create log %s", kv(partition=f"{topic}-{key[1]}", reason=e))
                return Errors.KAFKA_STORAGE_ERROR
        self.partitions[key] = hp
        role = "leader" if hp.is_leader(self.broker_id) else "follower"
        (became_leader if role == "leader" else became_follower).append(hp)
        log.info("became %s %s", role, kv(partition=f"{topic}-{key[1]}", leader=hp.leader,
                                          leader_epoch=hp.leader_epoch, isr=list(hp.isr)))
        return Errors.NONE

    # --- StopReplica ----------------------------------------------------------------------------------------
    def handle_stop_replica(self, body: dict) -> dict:
        errors = []
        stopped = []
        with self._lock:
            for ts in body.get("topic_states", []):
                topic = ts["topic_name"]
                for ps in ts.get("partition_states", []):
                    err = self._stop_one(topic, ps, stopped)
                    errors.append({"topic_name": topic, "partition_index": ps["partition_index"],
                                   "error_code": int(err)})
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
        cur = self.partitions.get(key)
        epoch = ps.get("leader_epoch", -1)
        if cur is not None and epoch not in (-1, -2) and epoch < cur.leader_epoch:
            return Errors.FENCED_LEADER_EPOCH
        if disable:
            if self.disable_remote_partition is None:
                return Errors.NONE
            return self.disable_remote_partition(topic, key[1])
        if cur is not None:
            self.partitions.pop(key, None)
        if delete and self.log_manager is not None:
            try:
                self.log_manager.delete_log(topic, key[1])
            except Exception as e:  # noqa: BLE001
                log.error("deleting log failed %s", kv(partition=f"{topic}-{key[1]}", reason=e))
                return Errors.KAFKA_STORAGE_ERROR
        stopped.append((topic, key[1], delete))
        log.info("stopped replica %s", kv(partition=f"{topic}-{key[1]}", delete=delete))
        return Errors.NONE

    def describe(self) -> list[dict]:
        with self._lock:
            return [{"partition": f"{t}-{p}", "leader": hp.leader, "leader_epoch": hp.leader_epoch,
                     "isr": list(hp.isr), "replicas": list(hp.replicas)}
                    for (t, p), hp in sorted(self.partitions.items())]
