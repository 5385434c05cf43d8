"""Tiered storage on a broker: the start-up checks and the remote log manager's broker-side collaborators
(``KafkaServer`` builds the :class:`RemoteLogManager` with them).

* :func:`check_startup` -- before the log manager starts: parses the ``remote.log.*`` broker configs, refuses to
  start with ``remote.log.storage.system.enable=false`` while a tiered topic exists (KAFKA-15267), and with the
  flag on checks ``log.local.retention.*`` against ``log.retention.*``;
* :func:`storage_managers` -- the configured remote storage manager and remote log metadata manager;
* :func:`leader_offsets` -- ListOffsets EARLIEST_LOCAL (-4) and EARLIEST (-2) to a partition's leader, for a
  follower rebuilt from the remote tier (Kafka's ``RemoteLeaderEndPoint``).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from kafkatier.zk.errors import NoNodeError

from kafkatier.log.log_config import topic_defaults_from_broker
from kafkatier.log.remote import config as rc
from kafkatier.log.remote.remote_log_manager import PartitionLike
from kafkatier.log.remote.remote_log_metadata_manager import RemoteLogMetadataManager
from kafkatier.log.remote.remote_storage_manager import RemoteStorageManager
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import Errors, InvalidConfigurationError
from kafkatier.server.broker_client import BrokerClient, BrokerConnectionError
from kafkatier.server.config import BrokerConfig
from kafkatier.zk import codecs, paths
from kafkatier.zk.fenced import read_retrying
from kafkatier.zk.kafka_zk_client import read_topic_config
from kafkatier.zk.tiered_state import REMOTE_STORAGE_ENABLE, flag

log = get_logger("remote.broker")

SYSTEM_DISABLED_WITH_TIERED_TOPICS = ("You have to delete all topics with the property remote.storage.enable=true "
                                      "before disabling tiered storage cluster-wide")
LIST_OFFSETS_VERSION = 4
EARLIEST_TIMESTAMP = -2
EARLIEST_LOCAL_TIMESTAMP = -4


def broker_props(config: BrokerConfig) -> dict[str, str]:
    """The broker's Kafka properties: ``--override`` values plus the typed flag."""
    return {rc.REMOTE_LOG_STORAGE_SYSTEM_ENABLE: str(config.remote_log_storage_system_enable).lower(),
            **{str(k): str(v) for k, v in config.overrides.items()}}


# ----------------------------------------------------------------------------------------------- start-up

def tiered_topics(zk) -> list[str]:
    """Existing topics (not marked for deletion) whose config has ``remote.storage.enable=true`` (malformed
    configs are logged and skipped)."""
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
            cfg = read_topic_config(zk, t)
        except codecs.MalformedZNodeError:
            continue
        if cfg is not None and flag(cfg, REMOTE_STORAGE_ENABLE):
            out.append(t)
    return out


def validate_broker_local_retention(props: Mapping[str, Any]) -> None:
    """``log.local.retention.*`` against ``log.retention.*`` (same rules as the topic configs)."""
    defaults = topic_defaults_from_broker({k: str(v) for k, v in props.items()})
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


def check_startup(zk, config: BrokerConfig) -> rc.RemoteLogManagerConfig:
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


# ---------------------------------------------------------------------------------------------- collaborators

def storage_managers(cfg: rc.RemoteLogManagerConfig, config: BrokerConfig,
                     zk) -> tuple[RemoteStorageManager, RemoteLogMetadataManager]:
    """The configured storage and metadata managers, configured for this broker."""
    rsm = rc.resolve_class(cfg.remote_storage_manager_class_name, rc.PROJECT_LOCAL_TIERED_STORAGE)()
    rsm_props = dict(cfg.remote_storage_manager_props)
    if config.remote_storage_dir:
        rsm_props.setdefault("dir", config.remote_storage_dir)
    rsm.configure({**rsm_props, "broker.id": config.broker_id})
    rlmm = rc.resolve_class(cfg.remote_log_metadata_manager_class_name, rc.PROJECT_ZK_RLMM)()
    rlmm.configure({**cfg.remote_log_metadata_manager_props, "broker.id": config.broker_id,
                    "zookeeper.client": zk, "zookeeper.connect": config.zookeeper_connect})
    return rsm, rlmm


def leader_offsets(broker_id: int, metadata_cache, login=None) -> Callable[[PartitionLike], tuple[int, int] | None]:
    """(leader local log start offset, leader log start offset) by ListOffsets -4 / -2 to the leader; None when
    the leader is unknown or does not answer."""
    def query(p: PartitionLike) -> tuple[int, int] | None:
        b = metadata_cache.inter_broker_endpoint(p.leader_id)
        if b is None:
            return None
        client = BrokerClient(b.host, b.port, client_id=f"broker-{broker_id}-tiered-rebuild", timeout_s=10.0,
                              login=login)
        T = ListOffsetsRequest.ListOffsetsTopic
        v = LIST_OFFSETS_VERSION
        try:
            out = []
            for ts in (EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP):
                req = ListOffsetsRequest[v](replica_id=broker_id, isolation_level=0, topics=[T(
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
