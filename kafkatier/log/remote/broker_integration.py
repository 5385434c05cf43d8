"""Wiring of tiered storage into a broker process (``KafkaServer``).

* :func:`check_startup` — before the log manager starts: parses the ``remote.log.*`` broker configs, refuses
  to start with ``remote.log.storage.system.enable=false`` while a tiered topic exists (KAFKA-15267), and with
  the flag on checks ``log.local.retention.*`` against ``log.retention.*``.
* :func:`attach` — after the replica manager exists: builds the storage and metadata managers and the
  :class:`RemoteLogManager`, and hooks it into leadership changes, StopReplica, consumer reads below the local
  log start offset (followers get OFFSET_MOVED_TO_TIERED_STORAGE), ListOffsets by timestamp, topic config
  changes (a topic switched to ``remote.storage.enable=true`` starts tiering at once) and the KIP-950
  disablement of a replica (StopReplica v5, :mod:`.disablement`).
"""
from __future__ import annotations

from typing import Any, Mapping

from kazoo.exceptions import NoNodeError

from kafkatier.admin import topic_config as tc
from kafkatier.log.remote import config as rc
from kafkatier.log.remote import disablement
from kafkatier.log.remote.remote_log_manager import (PartitionLike, RemoteLogManager, RemoteLogTaskFencedError,
                                                     is_tiered, offset_moved_to_tiered_storage)
from kafkatier.log.remote.remote_storage_manager import RemoteStorageError
from kafkatier.log.remote.tiered_znodes import read_tiered_state
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import Errors, InvalidConfigurationError, KafkaError
from kafkatier.zk import codecs, paths
from kafkatier.zk.fenced import Check, read_retrying

log = get_logger("remote.broker")

SYSTEM_DISABLED_WITH_TIERED_TOPICS = ("You have to delete all topics with the property remote.storage.enable=true "
                                      "before disabling tiered storage cluster-wide")
LIST_OFFSETS_VERSION = 4
EARLIEST_TIMESTAMP = -2
EARLIEST_LOCAL_TIMESTAMP = -4


def broker_props(config) -> dict[str, str]:
    """The broker's Kafka properties: ``--override`` values plus the typed flag."""
    return {rc.REMOTE_LOG_STORAGE_SYSTEM_ENABLE: str(config.remote_log_storage_system_enable).lower(),
            **{str(k): str(v) for k, v in config.overrides.items()}}


# ----------------------------------------------------------------------------------------------- start-up

def tiered_topics(zk) -> list[str]:
    """Existing topics (not marked for deletion) whose config has ``remote.storage.enable=true``."""
    try:
        topics = read_retrying(zk.get_children, paths.BROKER_TOPICS)
    except NoNodeError:
        return []
    try:
        deleting = set(read_retrying(zk.get_children, paths.DELETE_TOPICS))
    except NoNodeError:
        deleting = set()
    out = []
    for t in sorted(topics):
        if t in deleting:
            continue
        try:
            data, _ = read_retrying(zk.get, paths.topic_config(t))
            cfg = codecs.EntityConfig.decode(data, paths.topic_config(t)).config
        except NoNodeError:
            continue
        except codecs.MalformedZNodeError as e:
            log.warning(kv(event="topic_config_unreadable", topic=t, error=e.reason))
            continue
        if str(cfg.get("remote.storage.enable", "false")).strip().lower() == "true":
            out.append(t)
    return out


def validate_broker_local_retention(props: Mapping[str, Any]) -> None:
    """``log.local.retention.*`` against ``log.retention.*`` (same rules as the topic configs)."""
    defaults = tc.topic_defaults_from_broker({k: str(v) for k, v in props.items()})
    for kind, total_name in (("bytes", "log.retention.bytes"), ("ms", "log.retention.ms")):
        total = int(defaults[f"retention.{kind}"])
        local = int(defaults[f"local.retention.{kind}"])
        local_name = f"log.local.retention.{kind}"
        if total == -1 or local == -2:
            continue
        if local == -1:
            raise InvalidConfigurationError(f"Invalid value -1 for configuration {local_name}: Value must not be -1 "
                                            f"as {total_name} value is set as {total}.")
        if local > total:
            raise InvalidConfigurationError(f"Invalid value {local} for configuration {local_name}: Value must not "
                                            f"be more than {total_name} property value: {total}")


def check_startup(zk, config) -> rc.RemoteLogManagerConfig:
    """Refuse to start on bad tiered-storage configs (see the module docstring)."""
    props = broker_props(config)
    try:
        cfg = rc.RemoteLogManagerConfig.from_props(props)
        if cfg.remote_log_storage_system_enable:
            validate_broker_local_retention(props)
        else:
            tiered = tiered_topics(zk)
            if tiered:
                log.error(kv(event="startup_refused", tiered_topics=",".join(tiered)))
                raise InvalidConfigurationError(SYSTEM_DISABLED_WITH_TIERED_TOPICS)
    except InvalidConfigurationError as e:
        log.error(f"Broker refuses to start: {e.message}")
        raise
    return cfg


# ------------------------------------------------------------------------------------------------- wiring

def zk_fence(zk, broker_id: int):
    """Fence provider: checks on the partition state znode (this broker leads at the epoch) and, for a tiered
    epoch, on the topic's ``tiered_epoch`` znode."""
    def fence(p: PartitionLike, leader_epoch: int, tiered_epoch: int | None) -> list:
        path = paths.partition_state(p.topic, p.partition)
        try:
            data, stat = read_retrying(zk.get, path)
        except NoNodeError:
            raise RemoteLogTaskFencedError(f"partition {p.topic}-{p.partition} no longer exists") from None
        st = codecs.decode_partition_state(data, stat, path)
        if st.leader != broker_id or st.leader_epoch != leader_epoch:
            raise RemoteLogTaskFencedError(
                f"broker {broker_id} no longer leads {p.topic}-{p.partition} at leader epoch {leader_epoch} "
                f"(leader {st.leader}, leader epoch {st.leader_epoch})")
        checks = [Check(path, stat.version)]
        if tiered_epoch is not None:
            ts = read_tiered_state(zk, p.topic)
            if ts is not None:
                if ts.tiered_epoch != tiered_epoch:
                    raise RemoteLogTaskFencedError(f"tiered epoch of {p.topic} moved from {tiered_epoch} to "
                                                   f"{ts.tiered_epoch}")
                if ts.state != codecs.TIERED_ENABLED:  # KIP-950: read-only or being disabled: no more uploads
                    raise RemoteLogTaskFencedError(f"tiered storage of {p.topic} is {ts.state} at tiered epoch "
                                                   f"{tiered_epoch}")
                checks.append(ts.epoch_check(p.topic))
                checks.append(Check(paths.tiered_state(p.topic), ts.state_version))
        return checks
    return fence


def _leader_offsets(server):
    """(leader local log start offset, leader log start offset) by ListOffsets -4 / -2 to the leader."""
    from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

    from kafkatier.server.broker_client import BrokerClient, BrokerConnectionError

    def query(p: PartitionLike) -> tuple[int, int] | None:
        b = server.metadata_cache.broker(p.leader_id)
        if b is None:
            return None
        client = BrokerClient(b.host, b.port, client_id=f"broker-{server.broker_id}-tiered-rebuild", timeout_s=10.0)
        T = ListOffsetsRequest.ListOffsetsTopic
        v = LIST_OFFSETS_VERSION
        try:
            out = []
            for ts in (EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP):
                req = ListOffsetsRequest[v](replica_id=server.broker_id, isolation_level=0, topics=[T(
                    version=v, name=p.topic, partitions=[T.ListOffsetsPartition(
                        version=v, partition_index=p.partition, current_leader_epoch=p.leader_epoch, timestamp=ts)])])
                resp = client.send(req, ListOffsetsResponse, v)
                part = resp.topics[0].partitions[0]
                if part.error_code != 0:
                    log.info(kv(event="leader_offsets_unavailable", partition=f"{p.topic}-{p.partition}",
                                error=Errors(part.error_code).name))
                    return None
                out.append(part.offset)
            return out[0], out[1]
        except BrokerConnectionError as e:
            log.info(kv(event="leader_offsets_unavailable", partition=f"{p.topic}-{p.partition}", error=e))
            return None
        finally:
            client.close()
    return query


def attach(server, cfg: rc.RemoteLogManagerConfig | None = None) -> RemoteLogManager | None:
    """Create, start and hook the remote log manager; None when the system flag is off."""
    c = server.config
    cfg = cfg or rc.RemoteLogManagerConfig.from_props(broker_props(c))
    if not cfg.remote_log_storage_system_enable:
        return None
    rsm = rc.resolve_class(cfg.remote_storage_manager_class_name, rc.PROJECT_LOCAL_TIERED_STORAGE)()
    rsm_props = dict(cfg.remote_storage_manager_props)
    if c.remote_storage_dir:
        rsm_props.setdefault("dir", c.remote_storage_dir)
    rsm.configure({**rsm_props, "broker.id": server.broker_id})
    rlmm = rc.resolve_class(cfg.remote_log_metadata_manager_class_name, rc.PROJECT_ZK_RLMM)()
    rlmm.configure({**cfg.remote_log_metadata_manager_props, "broker.id": server.broker_id,
                    "zookeeper.client": server.zk, "zookeeper.connect": c.zookeeper_connect})
    rm = server.replica_manager
    zk = server.zk

    def tiered_epoch_of(topic: str) -> int:
        st = read_tiered_state(zk, topic)
        return 0 if st is None else st.tiered_epoch

    def restart_fetcher(p: PartitionLike) -> None:
        rm.fetcher_manager.add_fetcher(p.topic, p.partition, p.leader_id, p.log.log_end_offset, p.leader_epoch)

    rlm = RemoteLogManager(cfg, server.broker_id, rsm, rlmm, tiered_epoch_of=tiered_epoch_of,
                           fence=zk_fence(zk, server.broker_id), leader_offsets=_leader_offsets(server),
                           restart_fetcher=restart_fetcher)
    rlm.startup()
    rm.on_become_leader.append(lambda p: rlm.on_leadership_change([p], []))
    rm.on_become_follower.append(lambda p: rlm.on_leadership_change([], [p]))
    rm.on_stop.append(rlm.on_replica_stopped)
    rm.on_become_leader.append(disablement.become_leader_hook(rlm))
    rm.disable_remote_partition = disablement.disable_remote_partition_hook(server, rlm)  # KIP-950
    rm.remote_read = remote_read_hook(rlm)
    rm.remote_offset_for_timestamp = remote_offset_hook(rlm)
    server.topic_config_listeners.append(config_change_hook(rlm, rm, zk))
    return rlm


def remote_read_hook(rlm: RemoteLogManager):
    """``ReplicaManager.remote_read``: consumer reads in ``[log start, local log start)`` come from remote
    storage; followers get OFFSET_MOVED_TO_TIERED_STORAGE."""
    def read(p, replica_id: int, fp: dict, max_bytes: int) -> dict | None:
        plog = p.log
        offset = fp["fetch_offset"]
        if not is_tiered(p) or not plog.log_start_offset <= offset < plog.local_log_start_offset:
            return None
        if replica_id >= 0:
            raise offset_moved_to_tiered_storage(offset)
        try:
            records = rlm.read(p, offset, max_bytes, plog.high_watermark)
        except RemoteStorageError as e:
            log.warning(kv(event="remote_read_failed", partition=f"{p.topic}-{p.partition}", offset=offset, error=e))
            raise KafkaError(f"Error reading remote storage: {e}", Errors.UNKNOWN_SERVER_ERROR) from e
        return {"error": Errors.NONE, "high_watermark": plog.high_watermark,
                "log_start_offset": plog.log_start_offset, "records": records}
    return read


def remote_offset_hook(rlm: RemoteLogManager):
    """``ReplicaManager.remote_offset_for_timestamp``: search the remote tier first (Kafka's order)."""
    def find(p, timestamp: int) -> tuple[int, int] | None:
        if not is_tiered(p):
            return None
        try:
            found = rlm.find_offset_by_timestamp(p, timestamp)
        except RemoteStorageError as e:
            raise KafkaError(f"Error reading remote storage: {e}", Errors.UNKNOWN_SERVER_ERROR) from e
        return (found.offset, found.timestamp) if found is not None else None
    return find


def config_change_hook(rlm: RemoteLogManager, rm, zk):
    """Topic config listener: tiering switched on (or copying switched back on) schedules the tasks; turning
    tiering off is left to the KIP-950 disablement (StopReplica v5).  See :mod:`.disablement`."""
    return disablement.config_change_hook(rlm, rm, zk)
