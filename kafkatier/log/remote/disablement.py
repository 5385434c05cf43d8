"""Broker side of KIP-950's ZooKeeper design (tiered_storage.md §4.2–§4.3).

* :func:`disable_remote_partition_hook` — ``ReplicaManager.disable_remote_partition``: the work of one replica
  for a StopReplica v5 entry with ``DisableRemotePartition=true``.  The broker first re-reads
  ``/config/topics/{t}`` (its cached copy may predate the disablement) and applies it if it changed, then:

  - read-only (``remote.storage.enable=true``, ``remote.log.copy.disable=true``): the leader cancels its copy
    task; expiration, follower tasks and remote reads continue;
  - delete (``remote.storage.enable=false``): every task is cancelled, the log start offset moves up to the
    local log start offset and the log stops being tiered; the leader marks every remote segment
    DELETE_SEGMENT_STARTED and a cleanup task finishes the storage deletions in the background.

  The replica is never stopped.  The answer is NONE once that is done (also for a repeat, and for a partition
  this broker does not host); any failure answers with an error code and the controller retries.
* :func:`config_change_hook` — topic config listener: tiering switched on (first time or re-enable after a delete
  disablement) schedules the tasks; copying switched back on for a read-only topic schedules the leader's copy
  task.  Nothing is started while the topic's state is DISABLING, and no copy task unless it is ENABLED.
  Switching tiering off is left to StopReplica v5.
* :func:`become_leader_hook` — a new leader of a topic whose tiering was switched off with deletion schedules the
  same cleanup pass, so leftovers are removed whoever leads.
"""
from __future__ import annotations

from typing import Any, Callable

from kazoo.exceptions import NoNodeError

from kafkatier.log.remote.remote_log_manager import PartitionLike, RemoteLogManager, is_tiered
from kafkatier.log.remote.tiered_znodes import read_tiered_state
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import Errors, KafkaError
from kafkatier.zk import codecs, paths
from kafkatier.zk.fenced import read_retrying

log = get_logger("remote.disablement")

READ_ONLY, DELETE, ENABLED = "read-only", "delete", "enabled"


def _internal(topic: str) -> bool:
    return topic.startswith("__")


def read_topic_config(zk, topic: str) -> dict[str, str] | None:
    """``/config/topics/{t}`` straight from ZooKeeper (None if the topic has no config znode).  Errors propagate:
    a failed read must never be mistaken for an empty config."""
    try:
        data, _ = read_retrying(zk.get, paths.topic_config(topic))
    except NoNodeError:
        return None
    return dict(codecs.EntityConfig.decode(data, paths.topic_config(topic)).config)


def disablement_kind(log_config: Any) -> str:
    """What the topic's (current) config asks of its replicas: ``delete``, ``read-only`` or ``enabled``."""
    if not log_config.remote_storage_enable:
        return DELETE
    return READ_ONLY if log_config.remote_log_copy_disable else ENABLED


def disable_remote_partition_hook(server, rlm: RemoteLogManager) -> Callable[[str, int], Errors]:
    """``ReplicaManager.disable_remote_partition`` (see the module docstring)."""

    def disable(topic: str, partition: int) -> Errors:
        name = f"{topic}-{partition}"
        try:
            cfg = read_topic_config(server.zk, topic)
            if cfg is None:
                log.info(kv(event="disable_remote_partition_skipped", partition=name, reason="topic has no config"))
                return Errors.NONE
            if cfg != server._topic_config(topic):
                server.on_topic_config_change(topic, cfg)  # the notification has not arrived yet
            p = server.replica_manager.get_partition(topic, partition)
            if p is None or p.log.closed or _internal(topic):
                return Errors.NONE
            kind = disablement_kind(p.log.config)
            if kind == DELETE:
                marked = rlm.disable_with_delete(p)
                log.info(kv(event="remote_partition_disabled", partition=name, policy=kind, leader=p.is_leader,
                            log_start_offset=p.log.log_start_offset, segments_marked=marked))
            elif kind == READ_ONLY:
                cancelled = rlm.stop_copy(topic, partition)
                log.info(kv(event="remote_partition_disabled", partition=name, policy=kind, leader=p.is_leader,
                            copy_task_cancelled=cancelled))
            else:
                log.warning(kv(event="disable_remote_partition_ignored", partition=name,
                               reason="the topic config has tiering enabled with copying"))
            return Errors.NONE
        except KafkaError as e:
            log.warning(kv(event="disable_remote_partition_failed", partition=name, error=e.error.name,
                           message=e.message))
            return e.error
        except Exception as e:  # noqa: BLE001 - ZooKeeper or storage trouble: the controller retries
            log.exception(kv(event="disable_remote_partition_failed", partition=name, error=repr(e)))
            return Errors.UNKNOWN_SERVER_ERROR
    return disable


def config_change_hook(rlm: RemoteLogManager, rm, zk) -> Callable[[str, dict], None]:
    """Topic config listener (see the module docstring)."""

    def on_change(topic: str, cfg: dict) -> None:
        if _internal(topic):
            return
        parts = [p for (t, _), p in list(rm.partitions.items()) if t == topic and not p.log.closed]
        state: list = []  # read lazily, at most once

        def tiered_state() -> str | None:
            if not state:
                st = read_tiered_state(zk, topic)
                state.append(st.state if st is not None else None)
            return state[0]
        for p in parts:
            lc = p.log.config
            if not lc.remote_storage_enable or lc.compact:
                continue  # switching tiering off is StopReplica v5's work
            newly = not p.log.remote_log_enabled
            resume_copy = (not newly and p.is_leader and not lc.remote_log_copy_disable
                           and "copy" not in rlm.tasks(p.topic, p.partition))
            if not (newly or resume_copy):
                continue
            st = tiered_state()
            if st == codecs.TIERED_DISABLING or (not lc.remote_log_copy_disable
                                                 and st not in (None, codecs.TIERED_ENABLED)):
                log.info(kv(event="tiering_tasks_not_started", partition=f"{p.topic}-{p.partition}", state=st))
                continue
            if newly:
                p.log.remote_log_enabled = True
                log.info(kv(event="tiering_enabled_for_partition", partition=f"{p.topic}-{p.partition}",
                            log_start_offset=p.log.log_start_offset, state=st))
            else:
                log.info(kv(event="copying_resumed_for_partition", partition=f"{p.topic}-{p.partition}"))
            if p.is_leader:
                rlm.on_leadership_change([p], [])
            elif p.leader_id >= 0:
                rlm.on_leadership_change([], [p])
    return on_change


def become_leader_hook(rlm: RemoteLogManager) -> Callable[[PartitionLike], None]:
    """``ReplicaManager.on_become_leader``: a leader of a topic whose tiering was switched off with deletion
    (``remote.log.delete.on.disable=true``, log not tiered) schedules the cleanup pass.  A topic that never had
    remote data costs one metadata listing."""

    def on_leader(p: PartitionLike) -> None:
        lc = p.log.config
        if (_internal(p.topic) or is_tiered(p) or not p.topic_id or p.log.closed
                or not getattr(lc, "remote_log_delete_on_disable", False) or lc.remote_storage_enable):
            return
        rlm.schedule_cleanup(p)
    return on_leader
