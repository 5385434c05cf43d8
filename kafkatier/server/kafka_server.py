"""KafkaServer: one broker process, and the composition root of its parts.

Start-up order: ZooKeeper session -> persistent paths and cluster id -> dynamic broker configs, dynamic config
listener -> tiered storage start-up checks -> scheduler, log manager -> remote log manager (with tiered storage)
-> replica manager -> topic config handler -> dynamic broker configs loaded -> group coordinator -> admin
client, producer ids, transaction coordinator, controller object, DeleteRecords, authorizer, SASL -> request
handlers and Kafka-protocol socket server -> broker registration (ephemeral ``/brokers/ids/{id}``, broker epoch =
its czxid) -> control-request handler -> controller start-up.

Every collaborator is built here and passed to the constructors that use it (Kafka's ``KafkaServer.startup``):
nothing is attached to a part after it was built.  A lost ZooKeeper session makes the controller resign; when a
new session is established the broker re-registers (new, larger broker epoch) and takes part in a new election.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

import attrs
from kafkatier.zk.watchers import ZkState
from kafkatier.zk.errors import NodeExistsError

from kafkatier.admin.admin_zk_client import AdminZkClient
from kafkatier.common.scheduler import KafkaScheduler
from kafkatier.controller.kafka_controller import ControllerConfig, KafkaController
from kafkatier.controller.replica_election_manager import AutoRebalanceConfig
from kafkatier.coordinator.group import GroupConfig, GroupCoordinator
from kafkatier.coordinator.group.group_metadata_manager import OFFSETS_TOPIC
from kafkatier.coordinator.transaction import TransactionConfig, TransactionCoordinator
from kafkatier.coordinator.transaction.transaction_log import TRANSACTION_STATE_TOPIC
from kafkatier.coordinator.transaction.transaction_marker_channel_manager import TransactionMarkerChannelManager
from kafkatier.common.atomic_file import atomic_write
from kafkatier.log.log_config import LogConfig, broker_topic_defaults
from kafkatier.log.log_dir_failure_channel import LogDirFailureChannel
from kafkatier.log.log_cleaner import DUTY_CYCLE_CONFIG, CleanerConfig
from kafkatier.log.log_manager import LogManager
from kafkatier.log.remote.remote_log_manager import RemoteLogManager
from kafkatier.log.remote.zk_fence import zk_fence
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol import codec
from kafkatier.server import tiered_storage
from kafkatier.server.acl import authorizer_from_config
from kafkatier.server.acl_apis import AclApis
from kafkatier.server.add_partitions_to_txn_manager import AddPartitionsToTxnManager
from kafkatier.server.auth_helper import AuthHelper
from kafkatier.server.broker_client import BrokerClient, BrokerConnectionError, InterBrokerSecurity
from kafkatier.server.config import BrokerConfig, ListenerConfigError, extra_listeners, inter_broker_listener_name
from kafkatier.server.config import broker_setting, security_protocol_map, settings_config
from kafkatier.server.config_audit import log_unknown_overrides
from kafkatier.server.control_apis import ControlApis, internal_topic_coordinators
from kafkatier.server.control_request_handler import ControlRequestHandler
from kafkatier.server.controlled_shutdown import ControlledShutdown, ControlledShutdownApis, ControlledShutdownConfig
from kafkatier.server.delete_records import DeleteRecordsManager
from kafkatier.server.dynamic_broker_config import (ALTER_LOG_DIRS_THROTTLE_NAMES, BROKER_CONFIGS, CLUSTER_WIDE,
                                                     LONG_MAX, DynamicBrokerConfig)
from kafkatier.server.dynamic_config_manager import DynamicConfigManager
from kafkatier.server.election_apis import ElectionApis
from kafkatier.server.offset_for_leader_epoch import OffsetForLeaderEpochApis
from kafkatier.server.group_apis import GroupApis
from kafkatier.server.internal_topics import AutoTopicCreationManager
from kafkatier.server.kafka_apis import KafkaApis
from kafkatier.server.log_dirs import LogDirsApis
from kafkatier.server.partition_reassignment_apis import PartitionReassignmentApis
from kafkatier.common.time import SkewedTime
from kafkatier.server.fault_injection import FaultInjectingHandler, FaultRegistry
from kafkatier.server.faults_watcher import FaultsWatcher
from kafkatier.server.metadata_cache import LINK_ENDPOINTS_CONFIG, MetadataCache, parse_link_endpoints
from kafkatier.server.network import MemoryPool, SocketServer
from kafkatier.server.offsets_topic_log import ReplicaManagerOffsetsLog
from kafkatier.server.fetch_session import FetchManager, FetchSessionCache
from kafkatier.server.gc_tuning import BrokerGc
from kafkatier.server.malloc_tuning import tune_malloc
from kafkatier.server.producer_id_manager import ProducerIdManager
from kafkatier.server.replica_manager import ReplicaManager
from kafkatier.server.replication_quota_manager import ReplicationQuotaManager, ReplicationQuotas
from kafkatier.server.sasl import inter_broker_login, sasl_enabled, sasl_server_from_config
from kafkatier.server.ssl_transport import ListenerTls, client_context, listener_ssl_config, uses_sasl, uses_tls
from kafkatier.server.transaction_apis import TransactionApis
from kafkatier.server.transaction_topic_log import ReplicaManagerTransactionLog
from kafkatier.server.user_scram_apis import UserScramApis
from kafkatier.server.client_quota_apis import ClientQuotaApis
from kafkatier.server.quota_factory import ClientQuotas
from kafkatier.server.topic_config_handler import TopicConfigCache, TopicConfigHandler
from kafkatier.zk import broker_registration, codecs, paths
from kafkatier.zk.client import ensure_persistent_paths, start_client
from kafkatier.zk.security import secure_root, zk_security
from kafkatier.zk.kafka_zk_client import KafkaZkClient
from kafkatier.zk.tiered_state import read_tiered_epoch

log = get_logger("server")
UNCLEAN = "unclean.leader.election.enable"



def cleaner_config(c: BrokerConfig) -> CleanerConfig:
    """Kafka's ``LogCleaner.cleanerConfig``: the cleaner's settings, read through their definitions.  Kafka's
    default I/O rate (``Double.MAX_VALUE``) means unthrottled."""
    rate = c.setting("log.cleaner.io.max.bytes.per.second")
    return CleanerConfig(num_threads=c.setting("log.cleaner.threads"),
                         dedupe_buffer_size=c.setting("log.cleaner.dedupe.buffer.size"),
                         dedupe_buffer_load_factor=c.setting("log.cleaner.io.buffer.load.factor"),
                         io_buffer_size=c.setting("log.cleaner.io.buffer.size"),
                         max_io_bytes_per_second=float("inf") if rate >= sys.float_info.max else rate,
                         backoff_ms=c.setting("log.cleaner.backoff.ms"), enable_cleaner=c.setting("log.cleaner.enable"),
                         duty_cycle=min(1.0, max(0.01, c.setting(DUTY_CYCLE_CONFIG))))

class KafkaServer:
    def __init__(self, config: BrokerConfig, broker_gc: BrokerGc | None = None):
        """``broker_gc``: the process's garbage collector (pauses and freezes), shown by :meth:`describe`."""
        self.config = config
        self.broker_gc = broker_gc
        self.broker_id = config.broker_id
        self.zk = None
        self.broker_epoch = -1
        self.cluster_id: str | None = None
        self.metadata_cache = MetadataCache(
            self.broker_id, parse_link_endpoints(config.setting(LINK_ENDPOINTS_CONFIG)),
            inter_broker_listener=inter_broker_listener_name(config.overrides))
        self.scheduler: KafkaScheduler | None = None
        self.topic_configs: TopicConfigCache | None = None
        self.topic_config_handler: TopicConfigHandler | None = None
        self.log_manager: LogManager | None = None
        self.remote_log_manager: RemoteLogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.control_handler: ControlRequestHandler | None = None
        self.controller: KafkaController | None = None
        self.socket_server: SocketServer | None = None
        self.extra_socket_servers: list[SocketServer] = []   # listeners beyond PLAINTEXT (client groups)
        self.apis: KafkaApis | None = None
        self.admin_zk: AdminZkClient | None = None
        self.dynamic_config: DynamicConfigManager | None = None
        self.delete_records: DeleteRecordsManager | None = None
        self.broker_configs: DynamicBrokerConfig | None = None
        self.alter_log_dirs_quota = ReplicationQuotaManager()  # the KIP-113 move throttle, shared by move threads
        self.log_dir_failure_channel = LogDirFailureChannel()
        self.group_coordinator: GroupCoordinator | None = None
        self.transaction_coordinator: TransactionCoordinator | None = None
        self.txn_verification: AddPartitionsToTxnManager | None = None
        # Connections to other brokers (and this one) for transaction markers and verifications, one per broker
        # and channel (see _send_to_broker), each used by one request at a time.
        self._broker_clients: dict[tuple[int, str], tuple[BrokerClient, threading.Lock]] = {}
        self._broker_clients_lock = threading.Lock()
        # The broker's one clock (common/time.py): milliseconds() stamps and ages data and can be skewed at run time
        # (kafkatier cluster clock); nanoseconds() times waits and is never skewed.
        self.time = SkewedTime()
        self.faults_watcher: FaultsWatcher | None = None
        self.request_faults = FaultRegistry(on_change=lambda: self.faults_watcher and self.faults_watcher.mark_dirty())
        self._shutdown = threading.Event()
        self._session_lost = False
        self._started_at = time.time()
        self.login = inter_broker_login(config.overrides)  # the brokers' own SASL login, when SASL is on
        self.request_memory_pool = request_memory_pool(config.overrides)  # queued.max.request.bytes, all listeners
        # TLS listeners' contexts, made before anything starts: a bad keystore stops the broker with one line.
        self.listener_tls = {e.name: ListenerTls.from_props(config.overrides, e.name)
                             for e in extra_listeners(config.overrides) if uses_tls(e.security_protocol)}
        inter = self.metadata_cache.inter_broker_listener
        if inter is not None and inter in self.listener_tls:
            # Kafka's inter-broker channel: the listener's own ssl.* settings as a client (its keystore is the
            # client certificate); SASL_SSL adds the SASL login.
            sasl_ssl = security_protocol_map(config.overrides).get(inter) == "SASL_SSL"
            self.login = InterBrokerSecurity(client_context(listener_ssl_config(config.overrides, inter)),
                                             inter_broker_login(config.overrides, sasl_ssl=True) if sasl_ssl
                                             else None)

    # --- start-up -------------------------------------------------------------------------------------------
    def startup(self) -> None:
        c = self.config
        log_unknown_overrides(c.overrides)  # named, never with their values
        self.zk = start_client(c.zookeeper_connect, timeout=c.zookeeper_session_timeout_ms / 1000.0,
                               connect_timeout=c.zookeeper_connection_timeout_ms / 1000.0,
                               security=zk_security(c.overrides))
        self.zk.add_listener(self._on_zk_state)
        ensure_persistent_paths(self.zk, paths.PERSISTENT_PATHS)
        if self.zk.secure_acls:
            secure_root(self.zk)
        self.cluster_id = self._get_or_create_cluster_id()
        self.topic_configs = TopicConfigCache(self.zk)
        self.replication_quotas = ReplicationQuotas(self.broker_id, self.topic_configs)
        # Before any topic config is read, so no change is missed; changes are applied once the handler exists.
        self.broker_configs = self._new_dynamic_broker_config()
        self.client_quotas = ClientQuotas.from_props(c.overrides)
        self.dynamic_config = DynamicConfigManager(self.zk, {"topics": self._on_topic_config_change,
                                                             "brokers": self.broker_configs.on_change,
                                                             "users": self.client_quotas.on_user_change,
                                                             "clients": self.client_quotas.on_client_change})
        self.dynamic_config.start()
        self.client_quotas.load(self.zk)   # after the listener started: a change in between is seen either way
        remote_log_config = tiered_storage.check_startup(self.zk, c)  # refuses bad tiered-storage configs
        self.scheduler = KafkaScheduler(1, "kafka-scheduler-", clock=lambda: self.time.nanoseconds() / 1e9).startup()
        self.log_manager = LogManager(
            list(c.log_dirs), broker_id=self.broker_id, cluster_id=self.cluster_id, topic_configs=self.topic_configs,
            retention_check_interval_ms=c.log_retention_check_interval_ms,
            initial_task_delay_ms=c.setting("log.initial.task.delay.ms"),
            num_recovery_threads_per_data_dir=c.setting("num.recovery.threads.per.data.dir"),
            remote_log_system_enabled=c.remote_log_storage_system_enable, scheduler=self.scheduler,
            log_dir_failure_channel=self.log_dir_failure_channel, clock=self.time.milliseconds,
            cleaner_config=cleaner_config(c))
        self.log_manager.startup()
        if remote_log_config.remote_log_storage_system_enable:
            rsm, rlmm = tiered_storage.storage_managers(remote_log_config, c, self.zk)
            self.remote_log_manager = RemoteLogManager(
                remote_log_config, self.broker_id, rsm, rlmm,
                tiered_epoch_of=lambda topic: read_tiered_epoch(self.zk, topic),
                fence=zk_fence(self.zk, self.broker_id),
                leader_offsets=tiered_storage.leader_offsets(self.broker_id, self.metadata_cache, self.login),
                restart_fetcher=self._restart_fetcher, clock=self.time.milliseconds)
            self.remote_log_manager.startup()
        self.replica_manager = ReplicaManager(
            self.broker_id, self.log_manager, self.topic_configs, zk=self.zk, metadata_cache=self.metadata_cache,
            remote_log_manager=self.remote_log_manager, scheduler=self.scheduler,
            min_insync_replicas_default=c.min_insync_replicas, replica_lag_time_max_ms=c.replica_lag_time_max_ms,
            replica_fetch_wait_max_ms=c.replica_fetch_wait_max_ms, replica_fetch_max_bytes=c.replica_fetch_max_bytes,
            replica_fetch_min_bytes=c.replica_fetch_min_bytes,
            alter_log_dirs_quota=self.alter_log_dirs_quota, log_dir_failure_channel=self.log_dir_failure_channel,
            num_replica_alter_log_dirs_threads=c.setting("num.replica.alter.log.dirs.threads"),
            inter_broker_login=self.login, replica_selector_class=c.setting("replica.selector.class"),
            leader_replication_quota=self.replication_quotas.leader,
            follower_replication_quota=self.replication_quotas.follower,
            high_watermark_checkpoint_interval_ms=c.setting("replica.high.watermark.checkpoint.interval.ms"))
        self.topic_config_handler = TopicConfigHandler(self.zk, self.topic_configs, self.log_manager,
                                                       self.replica_manager, self.remote_log_manager)
        self.broker_configs.load()  # dynamic broker configs over the static ones, now that every part can react
        self._reconfigure_alter_log_dirs_throttle(self.broker_configs.effective())  # static or dynamic, at start
        self.replication_quotas.reconfigure(self.broker_configs.effective())
        if c.setting("transaction.partition.verification.enable"):
            self.txn_verification = AddPartitionsToTxnManager(
                self.metadata_cache, self._send_to_broker,
                local=lambda *a: self.transaction_coordinator.verify_if_coordinator(*a)
                if self.transaction_coordinator is not None else None)
        self.group_coordinator = GroupCoordinator(self.broker_id, self._group_config(), ReplicaManagerOffsetsLog(
            self.replica_manager, txn_verification=self.txn_verification), self.scheduler)
        self.group_coordinator.startup()
        self.admin_zk = self._new_admin_zk()
        self.producer_ids = ProducerIdManager(self.zk, self.broker_id)
        self.transaction_coordinator = TransactionCoordinator(
            self.broker_id, self._transaction_config(), ReplicaManagerTransactionLog(self.replica_manager),
            TransactionMarkerChannelManager(self.broker_id, self._partition_leader,
                                            lambda b, r, v: self._send_to_broker(b, r, v, "txn-markers")),
            self.producer_ids.generate_producer_id, self.scheduler)
        self.transaction_coordinator.startup()
        self.controller = KafkaController(self.broker_id, self.zk, ControllerConfig(
            delete_topic_enable=c.delete_topic_enable, request_timeout_s=c.request_timeout_ms / 1000.0,
            unclean_leader_election_enable=c.unclean_leader_election_enable,
            control_request_latency_s=c.setting("kafkatier.test.control.channel.latency.ms") / 1000,
            auto_rebalance=AutoRebalanceConfig.from_props(c.overrides)),
            admin_factory=self._new_admin_zk, scheduler=self.scheduler)
        authorizer = authorizer_from_config(self.zk, c.overrides)
        if authorizer is not None:
            authorizer.start()  # ACL cache + /kafka-acl-changes listener
        auth = AuthHelper(authorizer)
        sasl = sasl_server_from_config(self.zk, c.overrides, sasl_ssl_listener=any(
            e.security_protocol == "SASL_SSL" for e in extra_listeners(c.overrides)))
        self.delete_records = DeleteRecordsManager(self.broker_id, self.replica_manager, self.metadata_cache,
                                                   auth)
        internal_topics = AutoTopicCreationManager(
            self.admin_zk.create_topic, live_brokers=lambda: len(self.metadata_cache.alive_brokers()) or 1)
        transaction_apis = TransactionApis(self.transaction_coordinator, self.group_coordinator,
                                           self.replica_manager, self.metadata_cache, internal_topics,
                                           request_timeout_ms=c.request_timeout_ms, auth=auth)
        self.apis = KafkaApis(lambda: self.config, self.cluster_id, self.replica_manager, self.metadata_cache,
                              self.admin_zk, self.controller, self.zk, self.producer_ids,
                              delete_records=self.delete_records, sasl=sasl,
                              group_apis=GroupApis(self.group_coordinator, self.metadata_cache, internal_topics,
                                                   auth=auth,
                                                   transaction_coordinator_for=transaction_apis.coordinator_for),
                              transactions=transaction_apis, txn_verification=self.txn_verification,
                              client_quotas=self.client_quotas,
                              log_dirs=LogDirsApis(self.replica_manager, auth),
                              broker_configs=self.broker_configs, auth=auth, inter_broker_login=self.login,
                              fetch_manager=FetchManager(FetchSessionCache.from_props(c.overrides)),
                              extra_apis=[ElectionApis(self.controller, self.metadata_cache, auth),
                                          PartitionReassignmentApis(self.controller.partition_reassignment, auth),
                                          ControlledShutdownApis(self.controller, auth),
                                          AclApis(authorizer, auth), UserScramApis(self.zk, auth),
                                          ClientQuotaApis(self.zk, auth),
                                          OffsetForLeaderEpochApis(self.replica_manager, auth), transaction_apis])
        o = c.overrides
        self.faults_watcher = FaultsWatcher(self.zk, self.broker_id, self.request_faults,
                                            on_clock=lambda skew: self.time.set_skew(skew.offset_ms, skew.drift_ppm))
        self.faults_watcher.start()  # request faults and clock skew (server/fault_injection.py), before serving
        def socket_server(host: str, port: int, listener_name: str = "PLAINTEXT",
                          any_port_if_taken: bool = False, security_protocol: str = "PLAINTEXT") -> SocketServer:
            tls = self.listener_tls.get(listener_name)
            # SASL_SSL always authenticates with SASL; SSL never (the certificate does); PLAINTEXT listeners follow
            # the broker's listener.security.protocol switch (server/sasl.py).
            gated = uses_sasl(security_protocol) or (security_protocol == "PLAINTEXT" and sasl_enabled(o))
            return SocketServer(
                host, port, FaultInjectingHandler(self.apis, self.request_faults),
                request_gate=sasl.gate if sasl is not None and gated else None,
                ssl_context=tls.context if tls else None, ssl_principal=tls.principal if tls else None,
                max_request_bytes=c.setting("socket.request.max.bytes"),
                unauthenticated_max_request_bytes=c.setting("sasl.server.max.receive.size"),
                max_connections=c.setting("max.connections") if "max.connections" in o else None,
                max_connections_per_ip=c.setting("max.connections.per.ip") if "max.connections.per.ip" in o else None,
                on_fatal=self._on_network_failure, listener_name=listener_name, any_port_if_taken=any_port_if_taken,
                memory_pool=self.request_memory_pool,
                inline_max_bytes=c.setting("kafkatier.network.inline.max.bytes"),
                max_in_flight_per_connection=c.setting("kafkatier.network.max.in.flight.requests.per.connection"))
        self.socket_server = socket_server(c.host, c.port, any_port_if_taken=c.any_port_if_taken)
        self.socket_server.start()  # binds the port before we advertise it
        for extra in extra_listeners(o):
            self.extra_socket_servers.append(socket_server(extra.host, extra.port, extra.name,
                                                           security_protocol=extra.security_protocol).start())
        if self.socket_server.port != c.port:
            self.config = attrs.evolve(c, port=self.socket_server.port)
        if self.broker_gc is not None:
            self.broker_gc.startup_loaded()  # before registering: the freeze is off the first LeaderAndIsr's path
        self._register_broker()
        control_apis = ControlApis(self.replica_manager, self.metadata_cache, self.topic_config_handler,
                                   tiered=self.remote_log_manager is not None,
                                   coordinators=internal_topic_coordinators(self.group_coordinator,
                                                                            self.transaction_coordinator))
        self.control_handler = ControlRequestHandler(self.zk, self.broker_id, lambda: self.broker_epoch, control_apis,
                                                     faults=self.request_faults)
        self.control_handler.start()
        self.controller.startup()
        log.info("started %s", kv(broker=self.broker_id, epoch=self.broker_epoch, listener=self.config.listener,
                                  log_dirs=",".join(c.log_dirs), cluster_id=self.cluster_id))

    def _on_network_failure(self, error: BaseException) -> None:
        """The listener is gone for good: shut down (deregistering) rather than stay registered serving nothing."""
        log.error("network thread failed; shutting the broker down %s", kv(broker=self.broker_id,
                                                                          error=type(error).__name__))
        threading.Thread(target=self.shutdown, name="broker-shutdown-after-network-failure", daemon=True).start()

    def _new_admin_zk(self) -> AdminZkClient:
        c = self.config
        broker_config = {"remote.log.storage.system.enable": str(c.remote_log_storage_system_enable).lower(),
                         "min.insync.replicas": str(c.min_insync_replicas), **c.overrides}
        return AdminZkClient(self.zk, broker_config=broker_config, default_num_partitions=c.num_partitions,
                             default_replication_factor=c.default_replication_factor)

    # --- group coordinator (kafkatier/coordinator/group) ------------------------------------------------------
    def _group_config(self) -> GroupConfig:
        """The coordinator's settings; an existing offsets topic keeps its partition count (as in Kafka)."""
        config = settings_config(GroupConfig, self.config.overrides)
        count = self._existing_partition_count(OFFSETS_TOPIC)
        return attrs.evolve(config, offsets_topic_num_partitions=count) if count else config

    def _existing_partition_count(self, topic: str) -> int:
        """The partition count of an internal topic that exists, else 0 (absent: created on the first
        FindCoordinator; unreadable: the configured count is used)."""
        try:
            data, _ = self.zk.get(paths.topic(topic))
            return len(codecs.TopicAssignment.decode(data).partitions)
        except Exception:  # noqa: BLE001
            return 0

    # --- transaction coordinator (kafkatier/coordinator/transaction) -------------------------------------------
    def _transaction_config(self) -> TransactionConfig:
        """The coordinator's settings; an existing ``__transaction_state`` keeps its partition count."""
        config = attrs.evolve(settings_config(TransactionConfig, self.config.overrides),
                              request_timeout_ms=self.config.request_timeout_ms)
        count = self._existing_partition_count(TRANSACTION_STATE_TOPIC)
        return attrs.evolve(config, transaction_state_log_num_partitions=count) if count else config

    def _partition_leader(self, topic: str, partition: int) -> int | None:
        """For the marker sender: the partition's live leader, -1 when it has none now, None when the partition
        does not exist."""
        pm = self.metadata_cache.get_partition(topic, partition)
        if pm is None:
            return None
        alive = {b.id for b in self.metadata_cache.alive_brokers()}
        return pm.leader if pm.leader in alive else -1

    def _send_to_broker(self, broker_id: int, request, version: int, channel: str = "txn"):
        """One request to another broker (or this one) on a kept connection, one per (broker, ``channel``): the
        markers and each verification thread have their own, as Kafka's marker and verification senders have
        their own network clients; raises BrokerConnectionError."""
        with self._broker_clients_lock:
            entry = self._broker_clients.get((broker_id, channel))
            b = self.metadata_cache.inter_broker_endpoint(broker_id)  # its link when the cluster runs links
            if b is None:
                raise BrokerConnectionError(f"broker {broker_id} is not known")
            if entry is None or (entry[0].host, entry[0].port) != (b.host, b.port):
                if entry is not None:
                    entry[0].close()
                entry = self._broker_clients[(broker_id, channel)] = (BrokerClient(
                    b.host, b.port, client_id=f"broker-{self.broker_id}-txn",
                    timeout_s=self.config.request_timeout_ms / 1000.0, login=self.login), threading.Lock())
        client, lock = entry
        with lock:
            try:
                return client.send(request, codec.response_class(request.API_KEY), version)
            except BrokerConnectionError:
                client.close()
                raise

    def _close_broker_clients(self) -> None:
        with self._broker_clients_lock:
            clients, self._broker_clients = list(self._broker_clients.values()), {}
        for client, _lock in clients:
            client.close()

    # --- dynamic broker configs (kafkatier/server/dynamic_broker_config.py) ---------------------------------
    def _new_dynamic_broker_config(self) -> DynamicBrokerConfig:
        """The broker's configs with their sources; its reconfigurables act on the parts once they exist."""
        c = self.config
        static = {**c.static_props(), **c.overrides}
        log_names = frozenset(n for n, d in BROKER_CONFIGS.items() if d.mode == CLUSTER_WIDE)
        pool_names = frozenset(n for n in BROKER_CONFIGS
                               if n.startswith("remote.log.manager.") or n == "remote.log.reader.threads")
        return DynamicBrokerConfig(self.broker_id, {k: str(v) for k, v in static.items() if v is not None},
                                   KafkaZkClient(self.zk), reconfigurables=[
                                       (frozenset({"min.insync.replicas"}), self._reconfigure_min_isr),
                                       (frozenset({UNCLEAN}), self._reconfigure_unclean_leader_election),
                                       (log_names, self._reconfigure_log_defaults),
                                       (pool_names, self._reconfigure_remote_log_pools),
                                       (frozenset(ALTER_LOG_DIRS_THROTTLE_NAMES), self._reconfigure_alter_log_dirs_throttle),
                                       (ReplicationQuotas.RATE_CONFIGS, self.replication_quotas.reconfigure)])

    def _reconfigure_alter_log_dirs_throttle(self, effective: dict) -> None:
        """KIP-113's move throttle: KIP-113's name wins over Kafka's when both are set."""
        rate = self.broker_configs.synonym_value(ALTER_LOG_DIRS_THROTTLE_NAMES)
        self.alter_log_dirs_quota.set_rate(int(rate) if rate is not None else LONG_MAX)

    def _reconfigure_unclean_leader_election(self, effective: dict) -> None:
        """Kafka's DynamicLogConfig: the broker default switched to true elects offline partitions' leaders now."""
        if self.controller is not None and str(effective.get(UNCLEAN, "")).strip().lower() == "true":
            self.controller.enable_unclean_leader_election(None)

    def _reconfigure_min_isr(self, effective: dict) -> None:
        if self.replica_manager is not None:
            self.replica_manager.min_insync_replicas_default = int(effective["min.insync.replicas"])

    def _reconfigure_log_defaults(self, effective: dict) -> None:
        if self.log_manager is not None:
            self.log_manager.update_broker_defaults(LogConfig.from_props(broker_topic_defaults(effective)),
                                                    self.topic_configs)

    def _reconfigure_remote_log_pools(self, effective: dict) -> None:
        if self.remote_log_manager is not None:
            size = int(effective["remote.log.manager.thread.pool.size"])
            copier = int(effective["remote.log.manager.copier.thread.pool.size"])
            expiration = int(effective["remote.log.manager.expiration.thread.pool.size"])
            self.remote_log_manager.resize_thread_pools(size if copier == -1 else copier,
                                                        size if expiration == -1 else expiration, size)

    def _restart_fetcher(self, p) -> None:
        """The remote log manager rebuilt follower ``p`` from the remote tier: fetch again from its new end."""
        self.replica_manager.restart_fetcher(p)

    def _on_topic_config_change(self, topic: str, config: dict) -> None:
        """DynamicConfigManager handler (it may fire while the broker is still starting)."""
        if self.topic_config_handler is not None:
            self.topic_config_handler.process_config_changes(topic, config)
        else:
            self.topic_configs.put(topic, config)
        if self.controller is not None and str(config.get(UNCLEAN, "")).strip().lower() == "true":
            self.controller.enable_unclean_leader_election(topic)  # Kafka's TopicConfigHandler does the same

    def _get_or_create_cluster_id(self) -> str:
        try:
            self.zk.create(paths.CLUSTER_ID, codecs.ClusterIdZNode(id=codecs.new_topic_id()).encode(),
                           makepath=True)
        except NodeExistsError:
            pass
        data, _ = self.zk.get(paths.CLUSTER_ID)
        return codecs.ClusterIdZNode.decode(data).id

    def _register_broker(self) -> None:
        """``/brokers/ids/{id}``; waits (bounded) for a previous incarnation's node to expire with its session."""
        c = self.config
        extras = extra_listeners(c.overrides)
        bound = {ss.listener_name: ss.port for ss in self.extra_socket_servers}
        # a listener configured on port 0 (and not advertised elsewhere) is advertised on the port it bound
        extras = [attrs.evolve(e, advertised_port=bound.get(e.name, 0)) if e.advertised_port == 0 else e
                  for e in extras]
        reg = codecs.BrokerRegistration.create(
            self.broker_id, endpoints=(c.listener, *(e.advertised for e in extras)),
            listener_security_protocol_map={"PLAINTEXT": "PLAINTEXT", **{e.name: e.security_protocol for e in extras}},
            timestamp_ms=int(time.time() * 1000), rack=c.rack)
        self.broker_epoch = broker_registration.register_broker(
            self.zk, self.broker_id, reg.encode(),
            wait_s=broker_registration.stale_registration_wait_s(c.zookeeper_session_timeout_ms))

    # --- ZooKeeper session --------------------------------------------------------------------------------------
    def _on_zk_state(self, state) -> None:
        # Runs on kazoo's session thread: never block or call ZooKeeper here.
        if state == ZkState.LOST:
            self._session_lost = True
            threading.Thread(target=self._handle_session_lost, name="zk-session-expired", daemon=True).start()
        elif state == ZkState.CONNECTED and self._session_lost:
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
            self._register_broker()  # waits out the expired session's node (broker_registration)
        except Exception:  # noqa: BLE001
            log.exception("re-registration failed")
            return
        if self.controller:
            self.controller.reelect()

    # --- shutdown -------------------------------------------------------------------------------------------
    def controlled_shutdown(self) -> bool:
        """Ask the controller to move this broker's leaders away first (server/controlled_shutdown.py); True when
        it did.  Call before :meth:`shutdown`."""
        if self.socket_server is None or self._shutdown.is_set():
            return False
        c = self.config
        return ControlledShutdown(self.broker_id, lambda: self.broker_epoch, self._controller_endpoint,
                                  ControlledShutdownConfig.from_props(c.overrides, c.request_timeout_ms),
                                  login=self.login).run()

    def _controller_endpoint(self) -> tuple[int, str, int] | None:
        cid = KafkaZkClient(self.zk).get_controller_id()
        if cid is None:
            return None
        if cid == self.broker_id and self.metadata_cache.inter_broker_listener is None:
            return cid, self.config.host, self.config.port
        b = self.metadata_cache.inter_broker_endpoint(cid)
        return None if b is None else (cid, b.host, b.port)

    def shutdown(self) -> None:
        if self._shutdown.is_set():
            return
        self._shutdown.set()
        log.info("shutting down %s", kv(broker=self.broker_id))
        for step in (lambda: self.socket_server and self.socket_server.shutdown(),
                     *(s.shutdown for s in self.extra_socket_servers),
                     lambda: self.dynamic_config and self.dynamic_config.stop(),
                     lambda: self.controller and self.controller.shutdown(),
                     lambda: self.group_coordinator and self.group_coordinator.shutdown(),
                     lambda: self.transaction_coordinator and self.transaction_coordinator.shutdown(),
                     lambda: self.txn_verification and self.txn_verification.shutdown(),
                     self._close_broker_clients,
                     lambda: self.control_handler and self.control_handler.stop(),
                     lambda: self.faults_watcher and self.faults_watcher.stop(),
                     lambda: self.remote_log_manager and self.remote_log_manager.shutdown(),
                     lambda: self.replica_manager and self.replica_manager.shutdown(),
                     lambda: self.log_manager and self.log_manager.shutdown(self._high_watermarks()),
                     lambda: self.scheduler and self.scheduler.shutdown()):
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

    def _describe_log_dirs(self) -> dict:
        """For ``kafkatier cluster describe``: per dir online/offline and free bytes, per move its progress."""
        import attrs
        rm = self.replica_manager
        if rm is None or self.log_manager is None:
            return {}
        return {"dirs": [{"path": d.path, "online": d.error == 0, "usable_bytes": d.usable_bytes,
                          "total_bytes": d.total_bytes, "replicas": len(d.replicas)} for d in rm.describe_log_dirs()],
                "moves": [attrs.asdict(m) for m in rm.alter_log_dirs_manager.describe()],
                "throttle_bytes_per_s": rm.alter_log_dirs_quota.rate}

    def describe(self) -> dict:
        return {"broker_id": self.broker_id, "broker_epoch": self.broker_epoch, "listener": self.config.listener,
                "uptime_s": round(time.time() - self._started_at, 1),
                "controller": self.controller.describe() if self.controller else None,
                "partitions": self.replica_manager.describe() if self.replica_manager else [],
                "control_channel": self.control_handler.metrics if self.control_handler else {},
                "remote_log_manager": self.remote_log_manager.metrics() if self.remote_log_manager else None,
                "log_dirs": self._describe_log_dirs(),
                "log_cleaner": self.log_manager.cleaner.describe() if getattr(self, "log_manager", None)
                and self.log_manager.cleaner else None,
                "network": getattr(self.socket_server, "metrics", {}) if self.socket_server else {},
                "request_faults": dict(self.request_faults.describe(), clock_skew_ms=round(self.time.skew_ms, 1)),
                "fetch_sessions": self.apis.fetch_manager.describe() if self.apis else None,
                "replica_fetchers": self.replica_manager.fetcher_manager.describe() if self.replica_manager else {},
                "follower_fetching": dict(self.replica_manager.follower_fetch_metrics) if self.replica_manager
                else {},
                "gc": self.broker_gc.describe() if self.broker_gc else None}


BROKER_SWITCH_INTERVAL_S = 0.001


def request_memory_pool(overrides) -> MemoryPool | None:
    """Kafka's ``queued.max.request.bytes`` (default -1: unbounded) as the pool the listeners share; smaller than
    ``socket.request.max.bytes`` is refused at start-up as Kafka refuses it."""
    try:
        queued = broker_setting(overrides, "queued.max.request.bytes")
        max_request = broker_setting(overrides, "socket.request.max.bytes")
    except ValueError as e:
        raise ListenerConfigError(f"queued.max.request.bytes / socket.request.max.bytes: {e}") from None
    if queued <= 0:
        return None
    if queued < max_request:
        raise ListenerConfigError(f"queued.max.request.bytes ({queued}) must be larger or equal to "
                                  f"socket.request.max.bytes ({max_request})")
    return MemoryPool(queued)


def run_broker(config: BrokerConfig, status_file: str | None = None, port_file: str | None = None) -> int:
    """Run a broker in the foreground until SIGTERM/SIGINT.  ``port_file``: once started, the port it listens on
    is written there (``{"port": N, "pid": PID}``, atomically), for whoever asked for any free port."""
    # I/O threads (kazoo's ZooKeeper connection above all) take the GIL once per message and, behind CPU-bound
    # threads, wait up to a switch interval each time (5 ms by default): a controller failover reading 20,000
    # znodes in a busy broker spent most of its time there (docs/architecture.md#at-scale-20000-partitions).
    sys.setswitchinterval(BROKER_SWITCH_INTERVAL_S)
    tune_malloc()   # record-sized buffers from the arenas, not a fresh mmap each (server/malloc_tuning.py)
    # The collector (server/gc_tuning.py): off while the logs load (millions of objects that live as long as
    # the broker: every full collection on the way would walk them all), then one collection and a freeze.
    broker_gc = BrokerGc(freeze=broker_setting(config.overrides, "kafkatier.gc.freeze.enable")).install()
    server = KafkaServer(config, broker_gc=broker_gc)
    stop = threading.Event()
    controlled = []

    def _signal(signum, frame):
        # SIGTERM: controlled shutdown first, as Kafka.  SIGINT (Ctrl-C, ``kafkatier cluster down``): stop at once.
        controlled.append(signum == signal.SIGTERM)
        stop.set()
    signal.signal(signal.SIGTERM, _signal)
    signal.signal(signal.SIGINT, _signal)
    broker_gc.pause_for_startup()
    try:
        server.startup()
    finally:
        broker_gc.startup_loaded()  # a start-up that failed before registering: the collector back on
    if port_file:
        write_port_file(port_file, server.config.port,
                        {ss.listener_name: ss.port for ss in server.extra_socket_servers})
    apply_test_memory_limit(config.overrides)
    interval = STATUS_INTERVAL_S
    if status_file:
        interval = _write_status(server, status_file)
    last = time.monotonic()
    while not stop.wait(1.0) and not server._shutdown.is_set():
        # Not while this broker's controller fails over: describing every partition holds the GIL for long.
        if status_file and time.monotonic() - last >= interval and not (
                server.controller and server.controller.in_failover):
            interval = _write_status(server, status_file)
            last = time.monotonic()
    if controlled and controlled[0]:
        server.controlled_shutdown()
    server.shutdown()
    return 0 if stop.is_set() else 1  # 1: the broker shut itself down (a failed network thread)


def write_port_file(path: str, port: int, listeners: dict[str, int] | None = None) -> None:
    """The port this process listens on, with its pid (a reader tells it from a previous incarnation's), and the
    ports of its other listeners by name (client groups' listeners, read by their links)."""
    atomic_write(path, json.dumps({"port": port, "pid": os.getpid(), "listeners": listeners or {}}).encode())


def apply_test_memory_limit(overrides) -> None:
    """Test-only ``kafkatier.test.memory.headroom.bytes``: cap the process's address space at its current size
    plus that much (frame-size tests under a memory limit)."""
    headroom = broker_setting(overrides, "kafkatier.test.memory.headroom.bytes")
    if headroom is None:
        return
    import resource
    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (size + int(headroom), resource.RLIM_INFINITY))
    log.warning("address space limited for a test %s", kv(limit_bytes=size + int(headroom)))


# The status file is written every STATUS_INTERVAL_S, or less often when describing takes long (every partition
# is described: ~0.1 s at 5,000 replicas), so that it costs at most 1/STATUS_COST_RATIO of the broker's time.
# The cost is the describing thread's CPU time, not the wall time: on a loaded machine the wall time of a small
# cluster's describe stretches with the wait for the CPU and the GIL, and the snapshot went 30 s stale for nothing.
STATUS_INTERVAL_S = 5.0
STATUS_COST_RATIO = 50


def _write_status(server: KafkaServer, path: str) -> float:
    """Metrics snapshot for ``kafkatier cluster describe`` (write-temp, fsync, rename); returns the seconds to
    wait before the next one."""
    t0 = time.thread_time()
    try:
        atomic_write(path, json.dumps(server.describe(), default=str).encode())
    except Exception:  # noqa: BLE001
        log.warning("could not write status file", exc_info=True)
    return max(STATUS_INTERVAL_S, (time.thread_time() - t0) * STATUS_COST_RATIO)
