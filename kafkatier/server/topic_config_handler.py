"""TopicConfigHandler (Kafka's ``kafka.server.TopicConfigHandler``): what a topic config change means for this
broker -- the logs of hosted partitions and, with tiered storage, the remote log manager's tasks -- plus the
broker's cache of topic config overrides (:class:`TopicConfigCache`).

Changes arrive from the dynamic config listener (``DynamicConfigManager``, a ``config_change_`` notification)
and from StopReplica v5 (:meth:`TopicConfigHandler.refresh_for_disablement`: the broker re-reads the config of
each topic being disabled, once per request, because the notification may not have arrived yet).

Tiered storage reactions (KIP-405 / KIP-950): a topic switched to ``remote.storage.enable=true`` (first time, or
re-enabled after a delete disablement) starts tiering at once; copying switched back on for a read-only topic
schedules the leader's copy task.  Nothing starts while the topic's state is DISABLING, and no copy task unless
it is ENABLED.  Switching tiering off is StopReplica v5's work (``ReplicaManager``).

Reads follow ``zk/kafka_zk_client.read_entity_config``'s policy: a missing config means no overrides; a
malformed one is logged and skipped (the cache keeps what it had).
"""
from __future__ import annotations

import threading
from typing import Iterable, Mapping

from kafkatier.log.remote.remote_log_manager import RemoteLogManager
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import Errors
from kafkatier.zk import codecs
from kafkatier.zk.kafka_zk_client import read_topic_config
from kafkatier.zk.tiered_state import DISABLING, ENABLED, read_tiered_state

log = get_logger("server.topic-config")


class TopicConfigCache:
    """Topic config overrides as this broker applies them: read from ZooKeeper once, then kept current by
    :class:`TopicConfigHandler`.  Callable: ``cache(topic) -> overrides``."""

    def __init__(self, zk):
        self._zk = zk
        self._configs: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()

    def __call__(self, topic: str) -> dict[str, str]:
        cfg = self._configs.get(topic)
        if cfg is None:
            try:
                cfg = read_topic_config(self._zk, topic) or {}
            except codecs.MalformedZNodeError:
                cfg = {}  # logged by the reader; nothing was in effect: the defaults apply
            with self._lock:
                cfg = self._configs.setdefault(topic, cfg)
        return cfg

    def put(self, topic: str, config: Mapping[str, str]) -> None:
        with self._lock:
            self._configs[topic] = dict(config)


class TopicConfigHandler:
    def __init__(self, zk, cache: TopicConfigCache, log_manager, replica_manager,
                 remote_log_manager: RemoteLogManager | None = None):
        self._zk = zk
        self.cache = cache
        self.log_manager = log_manager
        self.replica_manager = replica_manager
        self.remote_log_manager = remote_log_manager
        # One change applied at a time, wholly: a StopReplica v5 that finds the cache current must also find the
        # logs' configs current (the listener thread may be half way through the same change).
        self._apply_lock = threading.RLock()

    def process_config_changes(self, topic: str, config: Mapping[str, str] | None = None) -> None:
        """Apply ``config`` (re-read when None) to the cache, the hosted logs and the tiering tasks."""
        if config is None:
            try:
                config = read_topic_config(self._zk, topic) or {}
            except codecs.MalformedZNodeError:
                return  # logged by the reader; the previous config stays
        cfg = dict(config)
        with self._apply_lock:
            self.cache.put(topic, cfg)
            log.info("topic config changed %s", kv(topic=topic, config=cfg))
            try:
                self.log_manager.update_topic_config(topic, cfg)
            except Exception:  # noqa: BLE001
                log.exception("applying the new config failed %s", kv(topic=topic))
            if self.remote_log_manager is not None:
                self._update_tiering(topic)

    def refresh_for_disablement(self, topics: Iterable[str]) -> dict[str, Errors]:
        """StopReplica v5: re-read each topic's config (once per request) and apply it if it changed.  Returns
        the topics whose disable entries are answered without acting: NONE for a topic without a config, an
        error (the controller retries) for one that could not be read."""
        answers: dict[str, Errors] = {}
        for topic in topics:
            try:
                cfg = read_topic_config(self._zk, topic)
            except codecs.MalformedZNodeError:
                answers[topic] = Errors.UNKNOWN_SERVER_ERROR
                continue
            except Exception as e:  # noqa: BLE001 - ZooKeeper trouble: the controller retries
                log.warning(kv(event="topic_config_unreadable", topic=topic, error=repr(e)))
                answers[topic] = Errors.UNKNOWN_SERVER_ERROR
                continue
            if cfg is None:
                log.info(kv(event="disable_remote_partition_skipped", topic=topic, reason="topic has no config"))
                answers[topic] = Errors.NONE
                continue
            with self._apply_lock:
                if cfg != self.cache(topic):
                    self.process_config_changes(topic, cfg)  # the notification has not arrived yet
        return answers

    # --- tiered storage -----------------------------------------------------------------------------------
    def _update_tiering(self, topic: str) -> None:
        if topic.startswith("__"):
            return
        rlm = self.remote_log_manager
        parts = [p for (t, _), p in list(self.replica_manager.partitions.items())
                 if t == topic and not p.log.closed]
        state: list = []  # read lazily, at most once

        def tiered_state() -> str | None:
            if not state:
                st = read_tiered_state(self._zk, topic)
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
            if st == DISABLING or (not lc.remote_log_copy_disable and st not in (None, ENABLED)):
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
