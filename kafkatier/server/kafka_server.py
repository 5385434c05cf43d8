"""KafkaServer: one broker process.

Start-up order: ZooKeeper session -> persistent paths and cluster id -> log manager -> broker registration
(ephemeral ``/brokers/ids/{id}``, broker epoch = its czxid) -> control-request handler -> controller ->
Kafka-protocol socket server.  A lost ZooKeeper session makes the controller resign; when a new session is
established the broker re-registers (new, larger broker epoch) and takes part in a new election.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time

import attrs
from kazoo.client import KazooState
from kazoo.exceptions import NodeExistsError

from kafkatier.controller.kafka_controller import ControllerConfig, KafkaController
from kafkatier.logsetup import get_logger, kv
from kafkatier.server.config import BrokerConfig
from kafkatier.server.control_request_handler import ControlRequestHandler
from kafkatier.server.metadata_cache import MetadataCache
from kafkatier.server.replica_manager import ReplicaManager
from kafkatier.zk import codecs, paths
from kafkatier.zk.client import ensure_persistent_paths, start_client

log = get_logger("server")


class KafkaServer:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.broker_id = config.broker_id
        self.zk = None
        self.broker_epoch = -1
        self.cluster_id: str | None = None
        self.metadata_cache = MetadataCache(self.broker_id)
        self.log_manager = None
        self.replica_manager: ReplicaManager | None = None
        self.control_handler: ControlRequestHandler | None = None
        self.controller: KafkaController | None = None
        self.socket_server = None
        self.apis = None
        self.admin_zk = None
        self.dynamic_config = None
        self.remote_log_manager = None
        self.group_coordinator = None
        self.broker_configs = None
        self._topic_configs: dict[str, dict] = {}
        self.topic_config_listeners: list = []
        self.metadata_listeners: list = []  # called with no arguments after each UpdateMetadata
        self._shutdown = threading.Event()
        self._session_lost = False
        self._started_at = time.time()

    # --- start-up -------------------------------------------------------------------------------------------
    def startup(self) -> None:
        c = self.config
        self.zk = start_client(c.zookeeper_connect, timeout=c.zookeeper_session_timeout_ms / 1000.0,
                               connect_timeout=c.zookeeper_connection_timeout_ms / 1000.0)
        self.zk.add_listener(self._on_zk_state)
        ensure_persistent_paths(self.zk, paths.PERSISTENT_PATHS)
        self.cluster_id = self._get_or_create_cluster_id()
        self._start_dynamic_config()  # before any topic config is read, so no change is missed
        from kafkatier.log.remote import broker_integration as tiered_storage
        remote_log_config = tiered_storage.check_startup(self.zk, c)  # refuses bad tiered-storage configs
        self._start_log_manager()
        self.replica_manager = ReplicaManager(
            self.broker_id, self.log_manager, self._topic_config, zk=self.zk, metadata_cache=self.metadata_cache,
            min_insync_replicas_default=c.min_insync_replicas, replica_lag_time_max_ms=c.replica_lag_time_max_ms,
            replica_fetch_wait_max_ms=c.replica_fetch_wait_max_ms)
        self.remote_log_manager = tiered_storage.attach(self, remote_log_config)  # None unless the flag is on
        if self.remote_log_manager is not None:
            self.replica_manager.fetcher_manager.on_offset_moved_to_tiered_storage = \
                self.remote_log_manager.on_offset_moved_to_tiered_storage
        self._start_admin()
        if self.broker_configs is not None:
            self.broker_configs.load()  # dynamic broker configs over the static ones, now that all can react
        from kafkatier.server.producer_id_manager import ProducerIdManager
        self.producer_ids = ProducerIdManager(self.zk, self.broker_id)
        self._start_group_coordinator()
        self._start_socket_server()  # binds the port before we advertise it
        self._register_broker()
        self.control_handler = ControlRequestHandler(self.zk, self.broker_id, lambda: self.broker_epoch, self)
        self.control_handler.start()
        self.controller = KafkaController(self.broker_id, self.zk, ControllerConfig(
            delete_topic_enable=c.delete_topic_enable, request_timeout_s=c.request_timeout_ms / 1000.0,
            unclean_leader_election_enable=c.unclean_leader_election_enable), admin_factory=self._new_admin_zk)
        self._extend_controller(self.controller)
        self.controller.startup()
        log.info("started %s", kv(broker=self.broker_id, epoch=self.broker_epoch, listener=c.listener,
                                  log_dirs=",".join(c.log_dirs), cluster_id=self.cluster_id))

    def _extend_controller(self, controller: KafkaController) -> None:
        """Hook for features that add controller managers (e.g. KIP-950)."""

    def _start_admin(self) -> None:
        try:
            from kafkatier.admin.admin_zk_client import AdminZkClient
        except ImportError:
            self.admin_zk = None
            return
        self.admin_zk = self._new_admin_zk()

    def _new_admin_zk(self):
        from kafkatier.admin.admin_zk_client import AdminZkClient
        c = self.config
        broker_config = {"remote.log.storage.system.enable": str(c.remote_log_storage_system_enable).lower(),
                         "min.insync.replicas": str(c.min_insync_replicas), **c.overrides}
        admin = AdminZkClient(self.zk, broker_config=broker_config, default_num_partitions=c.num_partitions,
                              default_replication_factor=c.default_replication_factor)
        from kafkatier.admin import tiered_config
        tiered_config.install(admin)  # tiered-storage config rules and the tieredstorage znodes
        return admin

    def _start_log_manager(self) -> None:
        try:
            from kafkatier.log.log_manager import LogManager
        except ImportError:
            return
        self.log_manager = LogManager(list(self.config.log_dirs), broker_id=self.broker_id,
                                      cluster_id=self.cluster_id, topic_configs=self._topic_config,
                                      retention_check_interval_ms=self.config.log_retention_check_interval_ms,
                                      initial_task_delay_ms=int(self.config.overrides.get(
                                          "log.initial.task.delay.ms", 30000)),
                                      remote_log_system_enabled=self.config.remote_log_storage_system_enable)
        self.log_manager.startup()

    def _start_socket_server(self) -> None:
        try:
            from kafkatier.server.kafka_apis import KafkaApis
            from kafkatier.server.network import SocketServer
        except ImportError:
            return
        self.apis = KafkaApis(self)
        self.socket_server = SocketServer(self.config.host, self.config.port, self.apis)
        self._start_delete_records()  # before the port opens: the API, its authorizer, the SASL gate
        self._register_group_apis()
        self.socket_server.start()
        if self.config.port == 0:
            import attrs
            self.config = attrs.evolve(self.config, port=self.socket_server.port)

    def _start_delete_records(self) -> None:
        """KIP-107 DeleteRecords (API 21), the ACL authorizer and optional SASL/PLAIN
        (kafkatier/server/delete_records.py, acl.py, sasl.py)."""
        try:
            from kafkatier.server.delete_records import install
        except ImportError:
            return
        install(self)

    # --- dynamic broker configs (kafkatier/server/dynamic_broker_config.py) ---------------------------------
    def _new_dynamic_broker_config(self):
        from kafkatier.log.log_config import broker_topic_defaults
        from kafkatier.server.dynamic_broker_config import BROKER_CONFIGS, CLUSTER_WIDE, DynamicBrokerConfig
        from kafkatier.zk.kafka_zk_client import KafkaZkClient
        c = self.config
        static = {"broker.id": c.broker_id, "zookeeper.connect": c.zookeeper_connect, "log.dirs": ",".join(c.log_dirs),
                  "listeners": c.listener, "broker.rack": c.rack,
                  "zookeeper.session.timeout.ms": c.zookeeper_session_timeout_ms,
                  "delete.topic.enable": str(c.delete_topic_enable).lower(), "request.timeout.ms": c.request_timeout_ms,
                  "num.partitions": c.num_partitions, "default.replication.factor": c.default_replication_factor,
                  "min.insync.replicas": c.min_insync_replicas,
                  "unclean.leader.election.enable": str(c.unclean_leader_election_enable).lower(),
                  "replica.lag.time.max.ms": c.replica_lag_time_max_ms,
                  "replica.fetch.wait.max.ms": c.replica_fetch_wait_max_ms,
                  "replica.fetch.max.bytes": c.replica_fetch_max_bytes,
                  "log.retention.check.interval.ms": c.log_retention_check_interval_ms,
                  "remote.log.storage.system.enable": str(c.remote_log_storage_system_enable).lower(),
                  **c.overrides}
        log_names = frozenset(n for n, d in BROKER_CONFIGS.items() if d.mode == CLUSTER_WIDE)
        pool_names = frozenset(n for n in BROKER_CONFIGS if n.startswith("remote.log.manager.")
                               or n == "remote.log.reader.threads")

        def min_isr(eff: dict) -> None:
            if self.replica_manager is not None:
                self.replica_manager.min_insync_replicas_default = int(eff["min.insync.replicas"])

        def log_defaults(eff: dict) -> None:
            if self.log_manager is not None:
                from kafkatier.log.log_config import LogConfig
                self.log_manager.update_broker_defaults(LogConfig.from_props(broker_topic_defaults(eff)),
                                                        self._topic_config)

        def rlm_pools(eff: dict) -> None:
            if self.remote_log_manager is not None:
                size = int(eff["remote.log.manager.thread.pool.size"])
                copier, expiration = (int(eff["remote.log.manager.copier.thread.pool.size"]),
                                      int(eff["remote.log.manager.expiration.thread.pool.size"]))
                self.remote_log_manager.resize_thread_pools(size if copier == -1 else copier,
                                                            size if expiration == -1 else expiration, size)
        return DynamicBrokerConfig(self.broker_id, {k: str(v) for k, v in static.items() if v is not None},
                                   KafkaZkClient(self.zk), reconfigurables=[
                                       (frozenset({"min.insync.replicas"}), min_isr), (log_names, log_defaults),
                                       (pool_names, rlm_pools)])

    # --- group coordinator (kafkatier/coordinator/group) ------------------------------------------------------
    def _start_group_coordinator(self) -> None:
        from kafkatier.coordinator.group import GroupConfig, GroupCoordinator
        from kafkatier.coordinator.group.group_metadata_manager import OFFSETS_TOPIC
        from kafkatier.log.scheduler import Scheduler
        from kafkatier.server.offsets_topic_log import ReplicaManagerOffsetsLog
        config = GroupConfig.from_overrides(self.config.overrides)
        try:  # an existing offsets topic keeps its partition count whatever the config says (as in Kafka)
            data, _ = self.zk.get(paths.topic(OFFSETS_TOPIC))
            count = len(codecs.TopicAssignment.decode(data).partitions)
            if count:
                config = attrs.evolve(config, offsets_topic_num_partitions=count)
        except Exception:  # noqa: BLE001 - absent (created on first FindCoordinator) or unreadable: the config
            pass
        self.group_timer = Scheduler("group-coordinator")
        self.group_timer.startup()
        self.group_coordinator = GroupCoordinator(
            self.broker_id, config, ReplicaManagerOffsetsLog(self.replica_manager), self.group_timer)
        self.group_coordinator.startup()

    def _register_group_apis(self) -> None:
        from kafkatier.server.group_apis import GroupApis
        group_apis = GroupApis(
            self.group_coordinator, self.metadata_cache, self.broker_id,
            create_offsets_topic=lambda n, rf, cfg: self.admin_zk.create_topic(
                "__consumer_offsets", n, rf, cfg),
            live_brokers=lambda: len(self.metadata_cache.alive_brokers()) or 1)
        for key, (versions, handler) in group_apis.handlers().items():
            self.apis.register(key, versions, handler)

    def _offsets_topic_leadership(self, body: dict, stopped: bool) -> None:
        """Kafka's onLeadershipChange: the group coordinator loads the ``__consumer_offsets`` partitions this
        broker now leads and unloads those it follows or stopped."""
        if self.group_coordinator is None:
            return
        for ts in body.get("topic_states", []):
            if ts.get("topic_name") != "__consumer_offsets":
                continue
            for ps in ts.get("partition_states", []):
                p, epoch = ps["partition_index"], ps.get("leader_epoch", -1)
                part = self.replica_manager.get_partition("__consumer_offsets", p)
                if not stopped and part is not None and part.is_leader:
                    self.group_coordinator.on_election(p, part.leader_epoch)
                else:
                    self.group_coordinator.on_resignation(p, None if stopped else epoch)

    def _topic_config(self, topic: str) -> dict:
        """Topic config overrides, cached; refreshed by config change notifications."""
        cfg = self._topic_configs.get(topic)
        if cfg is None:
            cfg = self._read_topic_config(topic)
            self._topic_configs[topic] = cfg
        return cfg

    def _read_topic_config(self, topic: str) -> dict:
        try:
            data, _ = self.zk.get(paths.topic_config(topic))
            return dict(codecs.EntityConfig.decode(data).config)
        except Exception:  # noqa: BLE001 - absent or malformed: defaults
            return {}

    def on_topic_config_change(self, topic: str, config: dict | None = None) -> None:
        """DynamicConfigManager handler: refresh the cache and the logs of hosted partitions."""
        cfg = dict(config) if config is not None else self._read_topic_config(topic)
        self._topic_configs[topic] = cfg
        log.info("topic config changed %s", kv(topic=topic, config=cfg))
        if self.log_manager is not None:
            try:
                self.log_manager.update_topic_config(topic, cfg)
            except Exception:  # noqa: BLE001
                log.exception("applying the new config failed %s", kv(topic=topic))
        for hook in self.topic_config_listeners:
            hook(topic, cfg)

    def _start_dynamic_config(self) -> None:
        try:
            from kafkatier.server.dynamic_config_manager import DynamicConfigManager
        except ImportError:
            return
        self.broker_configs = self._new_dynamic_broker_config()
        self.dynamic_config = DynamicConfigManager(self.zk, {"topics": self.on_topic_config_change,
                                                             "brokers": self.broker_configs.on_change})
        self.dynamic_config.start()

    def _get_or_create_cluster_id(self) -> str:
        try:
            self.zk.create(paths.CLUSTER_ID, codecs.ClusterIdZNode(id=codecs.new_topic_id()).encode(),
                           makepath=True)
        except NodeExistsError:
            pass
        data, _ = self.zk.get(paths.CLUSTER_ID)
        return codecs.ClusterIdZNode.decode(data).id

    def _register_broker(self) -> None:
        c = self.config
        reg = codecs.BrokerRegistration.create(
            self.broker_id, endpoints=(c.listener,), listener_security_protocol_map={"PLAINTEXT": "PLAINTEXT"},
            timestamp_ms=int(time.time() * 1000), rack=c.rack)
        path = paths.broker(self.broker_id)
        t = self.zk.transaction()
        t.create(path, b"", ephemeral=True)
        t.set_data(path, reg.encode(), 0)
        results = t.commit()
        errs = [r for r in results if isinstance(r, Exception)]
        if errs:
            if any(isinstance(e, NodeExistsError) for e in errs):
                raise RuntimeError(f"broker id {self.broker_id} is already registered in ZooKeeper "
                                   f"({path} exists); is another broker with this id running?")
            raise errs[0]
        stat = self.zk.exists(path)
        self.broker_epoch = stat.czxid
        log.info("registered %s", kv(path=path, broker_epoch=self.broker_epoch))

    # --- ZooKeeper session --------------------------------------------------------------------------------------
    def _on_zk_state(self, state) -> None:
        # Runs on kazoo's session thread: never block or call ZooKeeper here.
        if state == KazooState.LOST:
            self._session_lost = True
            threading.Thread(target=self._handle_session_lost, name="zk-session-expired", daemon=True).start()
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            threading.Thread(target=self._handle_new_session, name="zk-new-session", daemon=True).start()

    def _handle_session_lost(self) -> None:
        log.warning("ZooKeeper session lost")
        if self.controller:
            self.controller.expire()

    def _handle_new_session(self) -> None:
        if self._shutdown.is_set():
            return
        log.info("new ZooKeeper session; re-registering")
        try:
            self._register_broker()
        except Exception:  # noqa: BLE001
            log.exception("re-registration failed")
            return
        if self.controller:
            self.controller.reelect()

    # --- control requests (called by ControlRequestHandler) --------------------------------------------------
    def handle_leader_and_isr(self, body: dict) -> dict:
        result = self.replica_manager.handle_leader_and_isr(body)
        self._offsets_topic_leadership(body, stopped=False)
        return result

    def handle_stop_replica(self, body: dict) -> dict:
        result = self.replica_manager.handle_stop_replica(body)
        self._offsets_topic_leadership(body, stopped=True)
        return result

    def handle_update_metadata(self, body: dict) -> dict:
        self.metadata_cache.update(body)
        for hook in self.metadata_listeners:
            try:
                hook()
            except Exception:  # noqa: BLE001
                log.exception("metadata listener failed")
        return {"error_code": 0}

    # --- shutdown -------------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        if self._shutdown.is_set():
            return
        self._shutdown.set()
        log.info("shutting down %s", kv(broker=self.broker_id))
        for step in (lambda: self.socket_server and self.socket_server.shutdown(),
                     lambda: self.dynamic_config and self.dynamic_config.stop(),
                     lambda: self.controller and self.controller.shutdown(),
                     lambda: self.group_coordinator and self.group_coordinator.shutdown(),
                     lambda: self.group_coordinator and self.group_timer.shutdown(),
                     lambda: self.control_handler and self.control_handler.stop(),
                     lambda: self.remote_log_manager and self.remote_log_manager.shutdown(),
                     lambda: self.replica_manager and self.replica_manager.shutdown(),
                     lambda: self.log_manager and self.log_manager.shutdown(self._high_watermarks())):
            try:
                step()
            except Exception:  # noqa: BLE001
                log.exception("error during shutdown")
        if self.zk is not None:
            try:
                self.zk.stop()
                self.zk.close()
            except Exception:  # noqa: BLE001
                pass
        log.info("shut down %s", kv(broker=self.broker_id))

    def _high_watermarks(self) -> dict:
        return self.replica_manager.high_watermarks() if self.replica_manager else {}

    def await_shutdown(self) -> None:
        self._shutdown.wait()

    def describe(self) -> dict:
        return {"broker_id": self.broker_id, "broker_epoch": self.broker_epoch, "listener": self.config.listener,
                "uptime_s": round(time.time() - self._started_at, 1),
                "controller": self.controller.describe() if self.controller else None,
                "partitions": self.replica_manager.describe() if self.replica_manager else [],
                "control_channel": self.control_handler.metrics if self.control_handler else {},
                "remote_log_manager": self.remote_log_manager.metrics() if self.remote_log_manager else None,
                "network": getattr(self.socket_server, "metrics", {}) if self.socket_server else {}}


def run_broker(config: BrokerConfig, status_file: str | None = None) -> int:
    """Run a broker in the foreground until SIGTERM/SIGINT."""
    server = KafkaServer(config)
    stop = threading.Event()

    def _signal(signum, frame):
        stop.set()
    signal.signal(signal.SIGTERM, _signal)
    signal.signal(signal.SIGINT, _signal)
    server.startup()
    if status_file:
        _write_status(server, status_file)
    last = time.monotonic()
    while not stop.wait(1.0):
        if status_file and time.monotonic() - last >= 5:
            _write_status(server, status_file)
            last = time.monotonic()
    server.shutdown()
    return 0


def _write_status(server: KafkaServer, path: str) -> None:
    """Metrics snapshot for ``kafkatier cluster describe`` (write-temp, fsync, rename)."""
    try:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump(server.describe(), f, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except Exception:  # noqa: BLE001
        log.warning("could not write status file", exc_info=True)
