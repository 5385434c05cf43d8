"""KafkaApis: the broker's Kafka-protocol request handlers.

Responses are built as dicts and turned into kafka-python messages by :func:`kafkatier.protocol.build.build`.
Produce and Fetch may complete later (acks=all, long-poll fetch): they return a ``Future`` that the purgatory
completes.  Record batches are passed through as bytes.

Collaborators arrive through the constructor (``KafkaServer`` builds them): the replica manager, the metadata
cache, the admin client and the controller (topic and config changes), the producer id manager, the dynamic
broker configs (``server/dynamic_broker_config.py``: DescribeConfigs / AlterConfigs of BROKER resources), and the
optional features -- DeleteRecords (API 21, ``server/delete_records.py``), AlterReplicaLogDirs and
DescribeLogDirs (APIs 34 and 35, ``server/log_dirs.py``), SASL/PLAIN (APIs 17 and 36, ``server/sasl.py``) and the
group APIs (8-16, 42, 47, ``server/group_apis.py``), ElectLeaders (43, ``server/election_apis.py``),
ControlledShutdown (7, ``server/controlled_shutdown.py``) and the transaction APIs (22 with a transactional id,
24-28, 61, 65, 66, ``server/transaction_apis.py``), advertised only when given.  Fetch and ListOffsets honour
``isolation_level`` (read_committed: up to the last stable offset, with the aborted transactions); a
transactional Produce is verified with its coordinator first (KIP-890 part 1,
``server/add_partitions_to_txn_manager.py``).
"""
from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import Future
from typing import Any, Callable, Sequence

import attrs

from kafkatier.common.file_records import as_bytes
from kafkatier.common.structs import TopicPartition
from kafkatier.log import log_validator, message_format_conversion
from kafkatier.log.record_batch import iter_batches
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol import codec, fetch_codec, produce_codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.build import build
from kafkatier.protocol.errors import Errors, KafkaError
from kafkatier.server.auth_helper import AuthHelper
from kafkatier.server.broker_client import BrokerClient, BrokerConnectionError
from kafkatier.server.client_quota_manager import QuotaEntity
from kafkatier.server.quota_factory import ClientQuotas
from kafkatier.server.config import BrokerConfig
from kafkatier.server.delete_records import VERSIONS as DELETE_RECORDS_VERSIONS
from kafkatier.server.delete_records import DeleteRecordsManager
from kafkatier.server.dynamic_broker_config import DynamicBrokerConfig
from kafkatier.server.fetch_session import (TOPIC_IDS_VERSION, FetchManager, FetchSessionCache,
                                            IncrementalFetchContext, fetch_replica_id, fetch_request_data,
                                            session_key)
from kafkatier.server import incremental_alter_configs
from kafkatier.server.group_apis import GroupApis
from kafkatier.server.log_dirs import LogDirsApis
from kafkatier.server.network import Authenticated, CloseAfterResponse, CloseConnection, MuteAfterResponse
from kafkatier.server.producer_id_manager import ProducerIdsUnavailableError
from kafkatier.server.replica_manager import FetchPartitionResult, ProducePartitionResult, ReplicaManager
from kafkatier.server.sasl import AUTHENTICATE_VERSIONS, HANDSHAKE_VERSIONS, SaslPlainServer
from kafkatier.waiting import WaitTimeout, wait_for
from kafkatier.zk import codecs
from kafkatier.zk.kafka_zk_client import read_topic_config
from kafkatier.zk.tiered_state import TIERED_KEYS

log = get_logger("server.apis")


TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
AUTHORIZATION_ERRORS = (int(Errors.TOPIC_AUTHORIZATION_FAILED), int(Errors.CLUSTER_AUTHORIZATION_FAILED))
ZERO_UUID = uuid.UUID(int=0)


# KIP-124: requests never charged to a request-time quota (Kafka's sendResponseExemptThrottle): the controller's
# and other brokers' requests, and those around authentication.  Produce and Fetch charge themselves.
REQUEST_QUOTA_EXEMPT = frozenset((ApiKeys.LEADER_AND_ISR, ApiKeys.STOP_REPLICA, ApiKeys.UPDATE_METADATA,
                                  ApiKeys.CONTROLLED_SHUTDOWN, ApiKeys.WRITE_TXN_MARKERS, ApiKeys.ALTER_PARTITION,
                                  ApiKeys.API_VERSIONS, ApiKeys.SASL_HANDSHAKE, ApiKeys.SASL_AUTHENTICATE))


#: Fetch v16+ (KIP-951): a partition answered with one of these carries its current leader, and the response
#: that leader's endpoint.
LEADER_DISCOVERY_ERRORS = frozenset((Errors.NOT_LEADER_OR_FOLLOWER, Errors.FENCED_LEADER_EPOCH))


def quota_entity(ctx) -> QuotaEntity:
    """The client quota entity of a request: the principal's name (ANONYMOUS without authentication) and the
    client id."""
    principal = getattr(ctx, "principal", None) or "User:ANONYMOUS"
    return QuotaEntity(principal.partition(":")[2] or principal, getattr(ctx, "client_id", None) or "")


def topic_uuid(topic_id: str | None) -> uuid.UUID:
    if not topic_id:
        return ZERO_UUID
    try:
        return codecs.parse_topic_id(topic_id)
    except Exception:  # noqa: BLE001
        return ZERO_UUID


class _Reply:
    """A Produce or Fetch answer, which may be ready before the handler returns (acks 0 or 1, an ISR of one, a
    fetch with data at once): then :meth:`result_or_future` returns it and the network layer sends it without a
    Future and its callback; otherwise it returns a Future that :meth:`set` completes later, from any thread."""

    __slots__ = ("_lock", "_future", "_value", "_done")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._future: Future | None = None
        self._value: Any = None
        self._done = False

    def set(self, value: Any) -> None:
        with self._lock:
            fut = self._future
            if fut is None:
                self._value, self._done = value, True
                return
        fut.set_result(value)

    def result_or_future(self) -> Any:
        with self._lock:
            if self._done:
                return self._value
            self._future = Future()
            return self._future


class KafkaApis:
    # What we advertise in ApiVersions: exactly the handlers below.
    VERSIONS: dict[int, tuple[int, int]] = {
        ApiKeys.PRODUCE: (0, 11), ApiKeys.FETCH: (0, 17), ApiKeys.LIST_OFFSETS: (0, 9), ApiKeys.METADATA: (0, 12),
        ApiKeys.CREATE_TOPICS: (0, 7), ApiKeys.DELETE_TOPICS: (0, 6), ApiKeys.DESCRIBE_CONFIGS: (0, 4),
        ApiKeys.ALTER_CONFIGS: (0, 2),
        ApiKeys.INCREMENTAL_ALTER_CONFIGS: (0, 1), ApiKeys.DESCRIBE_CLUSTER: (0, 1), ApiKeys.INIT_PRODUCER_ID: (0, 5),
        ApiKeys.CREATE_PARTITIONS: (0, 3),
    }

    def __init__(self, config: Callable[[], BrokerConfig], cluster_id: str, replica_manager: ReplicaManager,
                 metadata_cache, admin_zk, controller, zk, producer_ids, *,
                 delete_records: DeleteRecordsManager | None = None, sasl: SaslPlainServer | None = None,
                 group_apis: GroupApis | None = None, log_dirs: LogDirsApis | None = None,
                 broker_configs: DynamicBrokerConfig, auth: AuthHelper | None = None,
                 inter_broker_login=None, extra_apis: Sequence = (), fetch_manager: FetchManager | None = None,
                 transactions=None, txn_verification=None, client_quotas: ClientQuotas | None = None):
        self._config = config  # the broker's config; its port is known once the socket server is bound
        self.cluster_id = cluster_id
        self.rm = replica_manager
        self.cache = metadata_cache
        self.admin_zk = admin_zk
        self.controller = controller
        self.zk = zk
        self.producer_ids = producer_ids
        self.delete_records = delete_records
        self.sasl = sasl
        self.broker_configs = broker_configs
        self.auth = auth or AuthHelper(None)  # Kafka's resource/operation checks (server/auth_helper.py)
        self.inter_broker_login = inter_broker_login  # forwarding to the controller logs in as a broker
        self.fetch_manager = fetch_manager or FetchManager(FetchSessionCache())  # KIP-227 (server/fetch_session.py)
        self.transactions = transactions  # InitProducerId with a transactional id (server/transaction_apis.py)
        # KIP-890 part 1: transactional produces verified with the coordinator (server/add_partitions_to_txn_manager)
        self.txn_verification = txn_verification
        self.client_quotas = client_quotas  # KIP-55 produce/fetch byte rates (server/client_quota_manager.py)
        self._handlers: dict[int, Callable] = {
            ApiKeys.PRODUCE: self.handle_produce, ApiKeys.FETCH: self.handle_fetch,
            ApiKeys.LIST_OFFSETS: self.handle_list_offsets,
            ApiKeys.METADATA: self.handle_metadata, ApiKeys.CREATE_TOPICS: self.handle_create_topics,
            ApiKeys.DELETE_TOPICS: self.handle_delete_topics, ApiKeys.DESCRIBE_CONFIGS: self.handle_describe_configs,
            ApiKeys.ALTER_CONFIGS: self.handle_alter_configs,
            ApiKeys.INCREMENTAL_ALTER_CONFIGS: self.handle_incremental_alter_configs,
            ApiKeys.DESCRIBE_CLUSTER: self.handle_describe_cluster,
            ApiKeys.INIT_PRODUCER_ID: self.handle_init_producer_id,
            ApiKeys.CREATE_PARTITIONS: self.handle_create_partitions}
        self._versions = dict(self.VERSIONS)
        for key, (versions, handler) in (group_apis.handlers() if group_apis is not None else {}).items():
            self._handlers[key] = handler
            self._versions[key] = versions
        if delete_records is not None:
            self._handlers[ApiKeys.DELETE_RECORDS] = delete_records.handle
            self._versions[ApiKeys.DELETE_RECORDS] = DELETE_RECORDS_VERSIONS
        if log_dirs is not None:  # KIP-113: AlterReplicaLogDirs (34), DescribeLogDirs (35)
            for key, (versions, handler) in log_dirs.handlers().items():
                self._handlers[key] = handler
                self._versions[key] = versions
        # ElectLeaders (43), Alter/ListPartitionReassignments (45-46), ControlledShutdown (7), ACLs (29-31), SCRAM users (50-51), ...
        for apis in extra_apis:  # handler classes with handlers() -> {api_key: (versions, handler)}
            for key, (versions, handler) in apis.handlers().items():
                self._handlers[key] = handler
                self._versions[key] = versions
        if sasl is not None:
            self._handlers[ApiKeys.SASL_HANDSHAKE] = sasl.handle_handshake
            self._handlers[ApiKeys.SASL_AUTHENTICATE] = sasl.handle_authenticate
            self._versions[ApiKeys.SASL_HANDSHAKE] = HANDSHAKE_VERSIONS
            self._versions[ApiKeys.SASL_AUTHENTICATE] = AUTHENTICATE_VERSIONS

    @property
    def config(self) -> BrokerConfig:
        return self._config()

    # --- dispatch -------------------------------------------------------------------------------------------
    def supported_versions(self) -> dict[int, tuple[int, int]]:
        return dict(self._versions)

    def handle(self, header, request, context) -> Any:
        quotas = self.client_quotas
        if quotas is None or not quotas.request.quotas_enabled or header.request_api_key in REQUEST_QUOTA_EXEMPT:
            return self._handlers[header.request_api_key](header, request, context)
        return self._handle_charged(header, request, context)

    # --- KIP-124 request-time quota ------------------------------------------------------------------------
    def _handle_charged(self, header, request, context) -> Any:
        """Run the handler and charge its time to the client's ``request_percentage`` quota; over the quota the
        answer carries ``throttle_time_ms`` and the channel is muted for it (Kafka's sendResponseMaybeThrottle).
        Produce and Fetch fold the request throttle into their own (the larger of it and the byte-rate one)."""
        key = header.request_api_key
        started = time.perf_counter_ns()
        result = self._handlers[key](header, request, context)
        nanos = time.perf_counter_ns() - started
        quota = self.client_quotas.request
        if key == ApiKeys.PRODUCE or key == ApiKeys.FETCH:
            if not (key == ApiKeys.FETCH and fetch_replica_id(request, header.request_api_version) >= 0):
                quota.record(quota_entity(context), nanos)
            return result
        throttle_ms = quota.record_and_get_throttle_time_ms(quota_entity(context), nanos)
        return self._throttled(result, throttle_ms) if throttle_ms > 0 else result

    def _throttled(self, result: Any, throttle_ms: int) -> Any:
        """``result`` answered with ``throttle_time_ms`` set (when its message has the field) and the channel muted.
        An answer still to come mutes the channel from now on (the throttle is charged now), and for the throttle
        from its completion (server/network.py)."""
        if isinstance(result, MuteAfterResponse):
            throttle_ms = max(throttle_ms, result.mute_ms)
            result = result.response
        if isinstance(result, Future):
            out: Future = Future()

            def done(fut: Future) -> None:
                try:
                    out.set_result(self._throttled(fut.result(), throttle_ms))
                except BaseException as e:  # noqa: BLE001 - handed on to the network layer as the handler's failure
                    out.set_exception(e)
            result.add_done_callback(done)
            return MuteAfterResponse(out, throttle_ms)
        if result is None or isinstance(result, (CloseConnection, CloseAfterResponse, Authenticated)):
            return result
        if not isinstance(result, codec.EncodedResponse) and hasattr(result, "throttle_time_ms"):
            result.throttle_time_ms = max(throttle_ms, result.throttle_time_ms or 0)
        return MuteAfterResponse(result, throttle_ms)

    def _request_throttle_ms(self, ctx) -> int:
        """Produce / Fetch: the request-time quota's throttle for the client now (0 without a quota)."""
        quotas = self.client_quotas
        if quotas is None or not quotas.request.quotas_enabled:
            return 0
        return quotas.request.throttle_time_ms(quota_entity(ctx))

    def error_response(self, header, request, code: int):
        """An answer carrying ``code`` for every partition / topic, for APIs without a top-level error."""
        key, v = header.request_api_key, header.request_api_version
        if request is None:
            return None
        if key == ApiKeys.PRODUCE:
            return self._resp(ApiKeys.PRODUCE, v, {"throttle_time_ms": 0, "responses": [
                {"name": td.name, "partition_responses": [
                    {"index": pd.index, "error_code": code, "base_offset": -1, "log_append_time_ms": -1,
                     "log_start_offset": -1, "record_errors": [], "error_message": None}
                    for pd in td.partition_data]} for td in request.topic_data]})
        if key == ApiKeys.FETCH:
            return self._resp(ApiKeys.FETCH, v, {
                "throttle_time_ms": 0, "error_code": code, "session_id": 0, "responses": [
                {"topic": getattr(t, "topic", ""), "topic_id": getattr(t, "topic_id", ZERO_UUID), "partitions": [
                    {"partition_index": p.partition, "error_code": code, "high_watermark": -1,
                     "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
                     "preferred_read_replica": -1, "records": b""} for p in t.partitions]} for t in request.topics]})
        if key == ApiKeys.LIST_OFFSETS:
            return self._resp(ApiKeys.LIST_OFFSETS, v, {"throttle_time_ms": 0, "topics": [
                {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code,
                                                 "timestamp": -1, "offset": -1, "leader_epoch": -1}
                                                for p in t.partitions]} for t in request.topics]})
        if key == ApiKeys.WRITE_TXN_MARKERS:   # the coordinator retries or drops per partition, as Kafka's handler does
            return self._resp(ApiKeys.WRITE_TXN_MARKERS, v, {"markers": [
                {"producer_id": m.producer_id, "topics": [
                    {"name": t.name, "partitions": [{"partition_index": i, "error_code": code}
                                                    for i in t.partition_indexes]} for t in m.topics]}
                for m in request.markers]})
        if key == ApiKeys.METADATA:
            names = [t.name for t in request.topics or [] if t.name is not None]
            return self._resp(ApiKeys.METADATA, v, {"throttle_time_ms": 0, "error_code": code,  # top level from v13
                                            "brokers": [], "cluster_id": self.cluster_id,
                                            "controller_id": -1, "topics": [
                                                {"error_code": code, "name": n, "topic_id": ZERO_UUID,
                                                 "is_internal": False, "partitions": []} for n in names]})
        return None

    @staticmethod
    def _resp(api_key: int, version: int, body: dict):
        return build(codec.response_class(api_key), version, body)

    # --- Metadata -------------------------------------------------------------------------------------------
    def handle_metadata(self, header, req, ctx):
        v = header.request_api_version
        cache = self.cache
        all_topics = req.topics is None or (v == 0 and not req.topics)  # v0: an empty list means every topic
        if all_topics:
            names = cache.topics()
        else:
            names = [t.name for t in req.topics if t.name is not None]
        auto_create = bool(getattr(req, "allow_auto_topic_creation", True)) if v >= 4 else True
        names, denied = self.auth.metadata_topics(
            ctx, names, all_topics, lambda n: not cache.topic_partitions(n), auto_create
            and self.config.setting("auto.create.topics.enable"))
        topics = [{"error_code": int(Errors.TOPIC_AUTHORIZATION_FAILED), "name": n, "topic_id": ZERO_UUID,
                   "is_internal": False, "partitions": []} for n in denied]
        want_ops = bool(getattr(req, "include_topic_authorized_operations", False)) if v >= 8 else False
        alive = {b.id for b in cache.alive_brokers(ctx.listener_name)}
        for name in names:
            parts = cache.topic_partitions(name)
            if not parts:
                err = self._maybe_auto_create(name) if (auto_create and req.topics is not None) else Errors.UNKNOWN_TOPIC_OR_PARTITION
                topics.append({"error_code": int(err), "name": name, "topic_id": ZERO_UUID, "is_internal": False,
                               "partitions": [], "authorized_operations": None})  # Kafka: not requested
                continue
            plist = []
            for pm in parts:
                # Kafka's ZkMetadataCache: a leader on a broker that is not alive is no leader (a client would
                # otherwise look for a broker missing from the brokers list).
                leader = pm.leader if pm.leader in alive else -1
                plist.append({"error_code": int(Errors.LEADER_NOT_AVAILABLE if leader < 0 else Errors.NONE),
                              "partition_index": pm.partition, "leader_id": leader,
                              "leader_epoch": pm.leader_epoch, "replica_nodes": list(pm.replicas),
                              "isr_nodes": list(pm.isr), "offline_replicas": list(pm.offline_replicas)})
            topics.append({"error_code": 0, "name": name, "topic_id": topic_uuid(cache.topic_ids.get(name)),
                           "is_internal": name in ("__consumer_offsets", "__transaction_state"), "partitions": plist,
                           "authorized_operations": self.auth.topic_operations(ctx, want_ops, name)})
        brokers = [{"node_id": b.id, "host": b.host, "port": b.port, "rack": b.rack}
                   for b in cache.alive_brokers(ctx.listener_name)]
        if not brokers and ctx.listener_name == "PLAINTEXT":  # not yet told by the controller: advertise ourselves
            c = self.config
            brokers = [{"node_id": c.broker_id, "host": c.host, "port": c.port, "rack": c.rack}]
        return self._resp(ApiKeys.METADATA, v, {
            "throttle_time_ms": 0, "brokers": brokers, "cluster_id": self.cluster_id,
            "controller_id": cache.advertised_controller_id(), "topics": topics,
            "authorized_operations": self.auth.cluster_operations(ctx, bool(
                getattr(req, "include_cluster_authorized_operations", False)))})

    def _maybe_auto_create(self, name: str) -> Errors:
        c = self.config
        if not c.setting("auto.create.topics.enable"):
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        try:
            self.admin_zk.create_topic(name, c.num_partitions, c.default_replication_factor, {})
            log.info("auto-created topic %s", kv(topic=name))
            return Errors.LEADER_NOT_AVAILABLE
        except KafkaError as e:
            if e.error == Errors.TOPIC_ALREADY_EXISTS:
                return Errors.LEADER_NOT_AVAILABLE
            return Errors.UNKNOWN_TOPIC_OR_PARTITION if e.error == Errors.INVALID_REPLICATION_FACTOR else e.error
        except Exception:  # noqa: BLE001
            log.exception("auto-create failed %s", kv(topic=name))
            return Errors.UNKNOWN_TOPIC_OR_PARTITION

    # --- Produce --------------------------------------------------------------------------------------------
    def handle_produce(self, header, req, ctx):
        v = header.request_api_version
        acks = req.acks
        entries, errors = {}, {}
        txn_id = getattr(req, "transactional_id", None)
        if acks not in (-1, 0, 1) or (txn_id is not None and not self.auth.authorize(
                ctx, "Write", "TransactionalId", txn_id)):
            # Kafka answers every partition: INVALID_REQUIRED_ACKS, or (a transactional produce without WRITE on
            # its transactional id) TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
            code = (Errors.INVALID_REQUIRED_ACKS if acks not in (-1, 0, 1)
                    else Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            for td in req.topic_data:
                for pd in td.partition_data:
                    errors[TopicPartition(td.name, pd.index)] = ProducePartitionResult(code)
        else:
            # without an authorizer every topic is writable: no per-request set of names (AuthHelper.authorize)
            writable = None if self.auth.authorizer is None else self.auth.filter_authorized(
                ctx, "Write", "Topic", (td.name for td in req.topic_data))
            for td in req.topic_data:
                for pd in td.partition_data:
                    if writable is not None and td.name not in writable:
                        errors[TopicPartition(td.name, pd.index)] = ProducePartitionResult(
                            Errors.TOPIC_AUTHORIZATION_FAILED)
                    elif pd.records is None:
                        errors[TopicPartition(td.name, pd.index)] = ProducePartitionResult(Errors.CORRUPT_MESSAGE,
                                                                                            error_message="no records")
                    else:
                        try:  # Kafka's ProduceRequest.validateRecords: one v2 batch per partition for v3+
                            records = pd.records
                            # v0-v2 may carry message format v0/v1, stored as v2 (log/message_format_conversion.py)
                            if v < 3 and message_format_conversion.magic_of(records) < 2:
                                records = message_format_conversion.up_convert(records)
                            log_validator.validate_produce_records(records, v)
                        except KafkaError as e:
                            errors[TopicPartition(td.name, pd.index)] = ProducePartitionResult(
                                e.error, error_message=e.message or None)
                            continue
                        entries[TopicPartition(td.name, pd.index)] = records
        reply = _Reply()
        throttle_ms = 0
        if self.client_quotas is not None and self.client_quotas.produce.quotas_enabled:
            throttle_ms = self.client_quotas.produce.record_and_get_throttle_time_ms(
                quota_entity(ctx), sum(len(r) for r in entries.values()))
        if acks != 0:   # Kafka: the larger of the byte-rate and the request-time throttle (none for acks=0)
            throttle_ms = max(throttle_ms, self._request_throttle_ms(ctx))

        def respond(results: dict[TopicPartition, ProducePartitionResult]) -> None:
            reply.set(build_response(results))

        def build_response(results: dict[TopicPartition, ProducePartitionResult]):
            results = {**errors, **results}
            if acks == 0:
                return None
            if produce_codec.supports(v):  # the hot path: straight to bytes (protocol/produce_codec.py)
                answers: dict[str, list] = {}
                for (t, p), r in sorted(results.items()):
                    answers.setdefault(t, []).append(
                        (p, int(r.error), r.base_offset, -1, r.log_start_offset,
                         [(e.batch_index, e.message) for e in r.record_errors], r.error_message))
                return codec.EncodedResponse(ApiKeys.PRODUCE, v, produce_codec.encode_produce_response(
                    v, answers.items(), throttle_time_ms=throttle_ms))
            by_topic: dict[str, list] = {}
            for (t, p), r in sorted(results.items()):
                by_topic.setdefault(t, []).append({"index": p, "error_code": int(r.error), "base_offset": r.base_offset,
                                                   "log_append_time_ms": -1, "log_start_offset": r.log_start_offset,
                                                   "record_errors": [
                                                       {"batch_index": e.batch_index,
                                                        "batch_index_error_message": e.message}
                                                       for e in r.record_errors],
                                                   "error_message": r.error_message})
            return self._resp(ApiKeys.PRODUCE, v, {
                "responses": [{"name": t, "partition_responses": ps} for t, ps in by_topic.items()],
                "throttle_time_ms": throttle_ms})
        if entries and txn_id is not None and self.txn_verification is not None:
            self._append_verified(txn_id, req.timeout_ms, acks, entries, respond)
        elif entries:
            self.rm.append_records(req.timeout_ms, acks, entries, respond)
        else:
            respond({})
        if throttle_ms > 0:
            # answered with the throttle, then the channel muted for it (Kafka 2.0+); an answer waiting for the
            # followers mutes it from now on, so the requests read behind this one wait too (server/network.py)
            return MuteAfterResponse(reply.result_or_future(), throttle_ms)
        return reply.result_or_future()

    def _append_verified(self, txn_id: str, timeout_ms: int, acks: int, entries: dict, respond) -> None:
        """KIP-890 part 1: partitions where the producer has no transaction open are verified with the
        coordinator first (``server/add_partitions_to_txn_manager.py``); refused ones answer the mapped error,
        the others are appended with their verification guards."""
        needs: dict[TopicPartition, tuple[int, int]] = {}
        for tp, records in entries.items():
            p = self.rm.get_partition(*tp)
            if p is None or not p.is_leader:
                continue     # the append answers the error
            for _, h in iter_batches(records):
                if h.is_transactional and h.producer_id >= 0 and \
                        p.producer_state.ongoing_first_offset(h.producer_id) is None:
                    needs[tp] = (h.producer_id, h.producer_epoch)
                break
        if not needs:
            self.rm.append_records(timeout_ms, acks, entries, respond, verification_guards={})
            return
        producers = set(needs.values())
        if len(producers) > 1:   # one transactional id, one producer (Kafka's check)
            respond({tp: ProducePartitionResult(Errors.INVALID_PRODUCER_ID_MAPPING) for tp in entries})
            return
        (pid, epoch), = producers
        guards = {tp: self.rm.get_partition(*tp).producer_state.start_verification(pid) for tp in needs}

        def verified(errors: dict) -> None:
            failed = {tp: ProducePartitionResult(e, error_message="Partition was not added to the transaction"
                                                 if e == Errors.INVALID_TXN_STATE else None)
                      for tp, e in errors.items() if e != Errors.NONE}
            rest = {tp: r for tp, r in entries.items() if tp not in failed}
            if not rest:
                respond(failed)
                return
            self.rm.append_records(timeout_ms, acks, rest, lambda res: respond({**failed, **res}),
                                   verification_guards=guards)
        self.txn_verification.verify(txn_id, pid, epoch, list(needs), verified)

    # --- Fetch ----------------------------------------------------------------------------------------------
    def _throttled_fetch_answer(self, answer, ctx):
        """Kafka's ``FetchContext.getThrottledResponse``: no partition at all (the session, if any, kept), and the
        bytes charged to the fetch byte-rate quota taken back (``unrecordQuotaSensor``)."""
        if self.client_quotas.fetch.quotas_enabled:
            self.client_quotas.fetch.unrecord(quota_entity(ctx), sum(len(r.records or b"")
                                                                     for r in answer.partitions.values()))
        return attrs.evolve(answer, partitions={})

    def handle_fetch(self, header, req, ctx):
        v = header.request_api_version
        replica_id = fetch_replica_id(req, v)
        by_id = v >= TOPIC_IDS_VERSION   # KIP-516: topics named by id, resolved with the metadata cache
        topic_name = self.cache.topic_name if by_id else None
        # KIP-227: the session decides which partitions are read and which the response carries.
        request = fetch_request_data(req, v, topic_name)
        context = self.fetch_manager.new_context(request, privileged=replica_id >= 0, topic_name=topic_name)
        reply = _Reply()
        quiet_seq = None
        if replica_id >= 0 and isinstance(context, IncrementalFetchContext) and not request.partitions \
                and not request.forgotten:
            # An idle follower (docs/leader-election.md#incremental-fetch-sessions): its request changes nothing,
            # and if nothing changed here since its session's last answer found nothing new, it waits without a
            # pass over the session's partitions.
            quiet_seq = self.rm.change_seq
            if context.quiet_at(quiet_seq):
                def quiet() -> None:
                    reply.set(self._empty_fetch_response(v, context.response({}, quiet_seq)))

                def busy(remaining_ms: int) -> None:
                    self._fetch_from_context(v, req, ctx, replica_id, by_id, context, reply,
                                             remaining_ms, quiet_seq)
                self.rm.wait_quiet_follower(replica_id, req.max_wait_ms, quiet_seq, quiet, busy)
                return reply.result_or_future()
        self._fetch_from_context(v, req, ctx, replica_id, by_id, context, reply, req.max_wait_ms,
                                 quiet_seq)
        return reply.result_or_future()

    def _empty_fetch_response(self, v: int, answer):
        """A Fetch response carrying no partition (a quiet follower session's answer)."""
        if fetch_codec.supports(v):
            return codec.EncodedResponse(ApiKeys.FETCH, v, fetch_codec.fetch_response_parts(
                v, int(answer.error), answer.session_id, [], throttle_time_ms=0, node_endpoints=[]),
                int(answer.error) if v >= 7 else 0)
        return self._resp(ApiKeys.FETCH, v, {"throttle_time_ms": 0, "error_code": int(answer.error),
                                             "session_id": answer.session_id, "responses": []})

    def _fetch_from_context(self, v: int, req, ctx, replica_id: int, by_id: bool, context, reply,
                            max_wait_ms: int, quiet_seq: int | None) -> None:
        """Read the partitions ``context`` names and answer through ``reply`` (at once or when the fetch's wait
        ends).  ``quiet_seq``: the replica manager's change number when an idle follower's request arrived; an
        answer with nothing in it marks its session quiet at that number."""
        wanted = context.partitions()
        errors: dict = {}   # session key -> the error it is answered with, nothing read (Kafka's ``erroneous``)
        if by_id:
            for fp in wanted:
                if fp.tp.topic is None:
                    errors[session_key(fp)] = Errors.UNKNOWN_TOPIC_ID
            named = [fp for fp in wanted if fp.tp.topic is not None] if errors else wanted
        else:
            named = wanted
        readable = self.auth.readable_topics(ctx, replica_id, {fp.tp.topic for fp in named})
        parts = []
        for fp in named:
            if fp.tp.topic in readable:
                parts.append(fp)
            else:
                errors[session_key(fp)] = Errors.TOPIC_AUTHORIZATION_FAILED
        fetch_offsets = {fp.tp: fp.fetch_offset for fp in wanted} if v < 4 else {}  # where down-conversion starts
        listener = getattr(ctx, "listener_name", "PLAINTEXT")

        def respond(results: dict[TopicPartition, FetchPartitionResult]) -> None:
            # session_key: the TopicPartition below v13, the topic id and partition from v13
            keyed = {session_key(fp): results.get(fp.tp) or FetchPartitionResult(Errors.UNKNOWN_SERVER_ERROR)
                     for fp in parts}
            for key, error in errors.items():
                keyed[key] = FetchPartitionResult(error)
            answer = context.response(keyed, quiet_seq, self.rm.quiet_refresh_s) if quiet_seq is not None \
                else context.response(keyed)
            throttle_ms = 0
            if replica_id < 0 and self.client_quotas is not None and self.client_quotas.fetch.quotas_enabled:
                throttle_ms = self.client_quotas.fetch.record_and_get_throttle_time_ms(
                    quota_entity(ctx), sum(len(r.records or b"") for r in answer.partitions.values()))
            if replica_id < 0:
                throttle_ms = max(throttle_ms, self._request_throttle_ms(ctx))
            if throttle_ms > 0:   # Kafka 2.0+: a throttled Fetch is answered at once without records
                answer = self._throttled_fetch_answer(answer, ctx)
            response = build_response(answer, throttle_ms)
            reply.set(MuteAfterResponse(response, throttle_ms) if throttle_ms > 0 else response)

        def build_response(answer, throttle_ms: int):
            if fetch_codec.supports(v):  # the hot path: straight to bytes (protocol/fetch_codec.py)
                answers: dict = {}
                nodes: dict[int, tuple] = {}
                for key, r in answer.partitions.items():
                    leader = None
                    if v >= fetch_codec.NODE_ENDPOINTS_FROM and r.error in LEADER_DISCOVERY_ERRORS \
                            and key not in errors:
                        leader, node = self._current_leader(names[key] if by_id else key, listener)   # KIP-951
                        if node is not None:
                            nodes[node[0]] = node
                    answers.setdefault(key.topic_id if by_id else key[0], []).append((
                        key.partition if by_id else key[1], int(r.error), r.high_watermark,
                        r.last_stable_offset if r.last_stable_offset >= 0 else r.high_watermark, r.log_start_offset,
                        None if r.error else r.aborted_transactions, r.records, r.preferred_read_replica, leader))
                topics = answers.items() if not by_id else [
                    (codecs.parse_topic_id(tid), ps) for tid, ps in answers.items()]
                return codec.EncodedResponse(ApiKeys.FETCH, v, fetch_codec.fetch_response_parts(
                    v, int(answer.error), answer.session_id, topics, throttle_time_ms=throttle_ms,
                    node_endpoints=list(nodes.values())), int(answer.error) if v >= 7 else 0)
            by_topic: dict[str, list] = {}
            for tp, r in answer.partitions.items():
                if v < 4 and r.error == Errors.NONE and not self._down_conversion_enabled(tp, replica_id):
                    r = attrs.evolve(r, error=Errors.UNSUPPORTED_VERSION, records=b"")
                by_topic.setdefault(tp[0], []).append({
                    "partition_index": tp[1], "error_code": int(r.error), "high_watermark": r.high_watermark,
                    "last_stable_offset": r.last_stable_offset if r.last_stable_offset >= 0 else r.high_watermark,
                    "log_start_offset": r.log_start_offset,
                    "aborted_transactions": None if r.error else [
                        {"producer_id": pid, "first_offset": first} for pid, first in r.aborted_transactions],
                    "preferred_read_replica": r.preferred_read_replica,
                    # fetchers below v4 read message format v0/v1 (log/message_format_conversion.py)
                    "records": as_bytes(r.records) if v >= 4 else message_format_conversion.down_convert(
                        as_bytes(r.records), message_format_conversion.fetch_magic(v), fetch_offsets.get(tp, 0))})
            return self._resp(ApiKeys.FETCH, v, {
                "throttle_time_ms": throttle_ms, "error_code": int(answer.error), "session_id": answer.session_id,
                "responses": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]})
        max_bytes = req.max_bytes if v >= 3 else 50 * 1024 * 1024
        if replica_id < 0 and self.client_quotas is not None and self.client_quotas.fetch.quotas_enabled:
            # Kafka: a consumer under a byte-rate quota reads at most what its quota window allows, so a fetch
            # that fits is not throttled into an empty answer again and again
            max_bytes = min(max_bytes, self.client_quotas.fetch.max_value_in_quota_window(quota_entity(ctx)))
        if by_id and parts:
            parts = self._consistent_topic_ids(parts, errors)
        names = {session_key(fp): fp.tp for fp in parts} if by_id else {}   # for KIP-951's leader look-up
        if not parts:  # nothing authorized (or a session error): answer at once, read nothing
            respond({})
            return
        # KIP-392: a consumer that sent its rack (v11+) is pointed at a replica in it, and may fetch from one
        client_rack = (getattr(req, "rack_id", None) or None) if v >= 11 and replica_id < 0 else None
        redirected: dict[TopicPartition, FetchPartitionResult] = {}
        if client_rack is not None:
            for fp in parts:
                preferred = self.rm.preferred_read_replica(fp.tp, client_rack, fp.fetch_offset)
                if preferred >= 0:
                    p = self.rm.get_partition(*fp.tp)
                    redirected[fp.tp] = FetchPartitionResult(
                        Errors.NONE, p.log.high_watermark, p.log.log_start_offset, b"",
                        preferred_read_replica=preferred)
        to_read = [fp for fp in parts if fp.tp not in redirected] if redirected else parts
        if not to_read:
            respond(redirected)
            return
        if redirected:
            respond_all = respond

            def respond(results, respond_all=respond_all):   # noqa: F811 - the redirected partitions added
                respond_all({**redirected, **results})
        self.rm.fetch_messages(replica_id, max_wait_ms, req.min_bytes, max_bytes, to_read, respond,
                               isolation_level=getattr(req, "isolation_level", 0) if v >= 4 else 0,
                               follower_read=client_rack is not None)

    def topic_name_for_id(self, topic_id: uuid.UUID | None) -> str | None:
        """The name of the topic with this id (a request's ``uuid`` field), None when unknown (fault injection
        matches Fetch v13+ partitions by name with it)."""
        if topic_id is None or topic_id == ZERO_UUID:
            return None
        return self.cache.topic_name(codecs.topic_id_str(topic_id))

    def topic_id_for_name(self, name: str) -> uuid.UUID | None:
        """The id of topic ``name`` as a ``uuid`` field carries it, None when unknown."""
        tid = self.cache.topic_ids.get(name)
        return codecs.parse_topic_id(tid) if tid else None

    def _consistent_topic_ids(self, parts: list, errors: dict) -> list:
        """Fetch v13+: the partitions whose hosted log has the topic id the request (or its session) named; the
        others are answered INCONSISTENT_TOPIC_ID, nothing read (Kafka's ``readFromLog`` check: a topic
        deleted and re-created under the same name while a fetcher still holds the old id)."""
        out = []
        for fp in parts:
            p = self.rm.get_partition(*fp.tp)
            local = p.topic_id if p is not None else None
            if local is not None and local != fp.topic_id:
                errors[session_key(fp)] = Errors.INCONSISTENT_TOPIC_ID
            else:
                out.append(fp)
        return out

    def _current_leader(self, tp: TopicPartition, listener: str) -> tuple[tuple[int, int], tuple | None]:
        """KIP-951 (Fetch v16+): the partition's leader and leader epoch as this broker knows them (its own
        replica's view, else the metadata cache's), and the leader's endpoint on ``listener`` when it is alive:
        ``((leader id, epoch), (id, host, port, rack) or None)`` (Kafka's ``getCurrentLeader``)."""
        p = self.rm.get_partition(*tp)
        if p is not None:
            leader_id, epoch = p.leader_id, p.leader_epoch
        else:
            pm = self.cache.get_partition(*tp)
            leader_id, epoch = (pm.leader, pm.leader_epoch) if pm is not None else (-1, -1)
        b = self.cache.broker(leader_id, listener) if leader_id >= 0 else None
        return (leader_id, epoch), ((b.id, b.host, b.port, b.rack) if b is not None else None)

    def _down_conversion_enabled(self, tp, replica_id: int) -> bool:
        """Kafka: a client's fetch below v4 of a partition with ``message.downconversion.enable=false`` is
        UNSUPPORTED_VERSION (followers are never refused)."""
        p = self.rm.get_partition(*tp)
        log_ = getattr(p, "log", None) if p is not None else None
        return replica_id >= 0 or log_ is None or log_.config.message_downconversion_enable

    # --- ListOffsets ----------------------------------------------------------------------------------------
    def handle_list_offsets(self, header, req, ctx):
        v = header.request_api_version
        topics = []
        describable = self.auth.filter_authorized(ctx, "Describe", "Topic", (t.name for t in req.topics))
        for t in req.topics:
            plist = []
            for p in t.partitions:
                try:
                    if t.name not in describable:
                        raise KafkaError("", Errors.TOPIC_AUTHORIZATION_FAILED)
                    off, ts = self.rm.fetch_offset_for_timestamp(
                        t.name, p.partition_index, p.timestamp,
                        getattr(p, "current_leader_epoch", -1) if v >= 4 else -1, req.replica_id,
                        isolation_level=getattr(req, "isolation_level", 0) if v >= 2 else 0)
                    part = self.rm.get_partition(t.name, p.partition_index)
                    plist.append({"partition_index": p.partition_index, "error_code": 0, "timestamp": ts,
                                  "offset": off, "leader_epoch": part.leader_epoch if part else -1,
                                  "old_style_offsets": [off] if off >= 0 else []})  # v0: an offsets list
                except KafkaError as e:
                    plist.append({"partition_index": p.partition_index, "error_code": int(e.error), "timestamp": -1,
                                  "offset": -1, "leader_epoch": -1, "old_style_offsets": []})
            topics.append({"name": t.name, "partitions": plist})
        return self._resp(ApiKeys.LIST_OFFSETS, v, {"throttle_time_ms": 0, "topics": topics})

    # --- topics ---------------------------------------------------------------------------------------------
    def _is_controller(self) -> bool:
        c = self.controller
        return c is not None and c.is_active

    def handle_create_topics(self, header, req, ctx):
        v = header.request_api_version
        results, created = [], []
        for t in req.topics:
            res = {"name": t.name, "topic_id": ZERO_UUID, "error_code": 0, "error_message": None,
                   "num_partitions": -1, "replication_factor": -1, "configs": None}
            if not self._is_controller():
                res.update(error_code=int(Errors.NOT_CONTROLLER), error_message="This is not the correct controller for this cluster.")
                results.append(res)
                continue
            if not self.auth.may_create_topic(ctx, t.name):
                res.update(error_code=int(Errors.TOPIC_AUTHORIZATION_FAILED), error_message="Authorization failed.")
                results.append(res)
                continue
            try:
                assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments} or None
                nulls = [c.name for c in t.configs if c.value is None]
                if nulls:
                    raise KafkaError(f"Null value not supported for topic configs: {','.join(nulls)}",
                                     Errors.INVALID_REQUEST)
                configs = {c.name: c.value for c in t.configs}
                out = self.admin_zk.create_topic(t.name, t.num_partitions, t.replication_factor, configs,
                                                        assignment=assignment, validate_only=req.validate_only)
                res["num_partitions"] = out.num_partitions
                res["replication_factor"] = out.replication_factor
                if out.topic_id:
                    res["topic_id"] = topic_uuid(out.topic_id)
                if not req.validate_only:
                    created.append(t.name)
            except KafkaError as e:
                res.update(error_code=int(e.error), error_message=e.message or None)
            except Exception as e:  # noqa: BLE001
                log.exception("create topic failed %s", kv(topic=t.name))
                res.update(error_code=int(Errors.UNKNOWN_SERVER_ERROR), error_message=str(e))
            results.append(res)
        return self._await_metadata(ApiKeys.CREATE_TOPICS, v, results, created, req.timeout_ms, present=True)

    def handle_delete_topics(self, header, req, ctx):
        v = header.request_api_version
        results, deleting = [], []
        for name, tid, error in self._delete_topics_targets(req, v):
            res = {"name": name, "topic_id": tid, "error_code": 0, "error_message": None}
            if error is not None:
                res.update(error_code=int(error.error), error_message=error.message or None)
            elif not self._is_controller():
                res["error_code"] = int(Errors.NOT_CONTROLLER)
            elif not self.auth.authorize(ctx, "Delete", "Topic", name):
                res["error_code"] = int(Errors.TOPIC_AUTHORIZATION_FAILED)
            else:
                try:
                    self.admin_zk.delete_topic(name)
                    deleting.append(name)
                except KafkaError as e:
                    res.update(error_code=int(e.error), error_message=e.message or None)
            results.append(res)
        return self._await_metadata(ApiKeys.DELETE_TOPICS, v, results, deleting, req.timeout_ms, present=False)

    def _delete_topics_targets(self, req, v: int) -> list[tuple[str | None, uuid.UUID, KafkaError | None]]:
        """DeleteTopics' topics as (name, id, error): v0-v5 name them; v6 names a topic or gives its id (both
        or neither: INVALID_REQUEST; an id the cluster does not have: UNKNOWN_TOPIC_ID), as Kafka."""
        if v <= 5:
            return [(name, ZERO_UUID, None) for name in req.topic_names]
        by_id = {topic_uuid(tid): name for name, tid in self.cache.topic_ids.items()}
        out = []
        for t in req.topics:
            tid = t.topic_id or ZERO_UUID
            if t.name is not None and tid != ZERO_UUID:
                out.append((t.name, tid, KafkaError("Topic name and topic id cannot both be specified.",
                                                    Errors.INVALID_REQUEST)))
            elif t.name is None and tid == ZERO_UUID:
                out.append((None, tid, KafkaError("Neither topic name nor id were specified.", Errors.INVALID_REQUEST)))
            elif t.name is None and tid not in by_id:
                out.append((None, tid, KafkaError("", Errors.UNKNOWN_TOPIC_ID)))
            else:
                name = t.name if t.name is not None else by_id[tid]
                out.append((name, topic_uuid(self.cache.topic_ids.get(name)), None))
        return out

    def handle_create_partitions(self, header, req, ctx):
        """Kafka's handleCreatePartitionsRequest (ZooKeeper mode): on the controller only; duplicate topics are
        INVALID_REQUEST; the answer waits (up to the request timeout) until the new partitions have leaders."""
        v = header.request_api_version
        counts: dict[str, int] = {}
        for t in req.topics:
            counts[t.name] = counts.get(t.name, 0) + 1
        results, growing = [], {}
        for t in req.topics:
            res = {"name": t.name, "error_code": 0, "error_message": None}
            results.append(res)
            if counts[t.name] > 1:
                res.update(error_code=int(Errors.INVALID_REQUEST), error_message="Duplicate topic in request.")
            elif not self._is_controller():
                res.update(error_code=int(Errors.NOT_CONTROLLER),
                           error_message="This is not the correct controller for this cluster.")
            elif not self.auth.authorize(ctx, "Alter", "Topic", t.name):
                res.update(error_code=int(Errors.TOPIC_AUTHORIZATION_FAILED),
                           error_message="The topic authorization is failed.")
            else:
                try:
                    assignment = [list(a.broker_ids) for a in t.assignments] if t.assignments is not None else None
                    self.admin_zk.add_partitions(t.name, t.count, assignment, validate_only=req.validate_only)
                    if not req.validate_only:
                        growing[t.name] = t.count
                except KafkaError as e:
                    res.update(error_code=int(e.error), error_message=e.message or None)
                except Exception as e:  # noqa: BLE001
                    log.exception("create partitions failed %s", kv(topic=t.name))
                    res.update(error_code=int(Errors.UNKNOWN_SERVER_ERROR), error_message=str(e))
        body = {"throttle_time_ms": 0, "results": results}
        if not growing or req.timeout_ms <= 0:
            return self._resp(ApiKeys.CREATE_PARTITIONS, v, body)
        fut: Future = Future()

        def led(topic: str) -> bool:
            parts = self.cache.topic_partitions(topic)
            return len(parts) >= growing[topic] and all(p.leader >= 0 for p in parts)

        def wait() -> None:
            from kafkatier.waiting import WaitTimeout, wait_for
            try:
                wait_for(lambda: all(led(t) for t in growing), req.timeout_ms / 1000.0, interval=0.05,
                         message="new partitions")
            except WaitTimeout:
                for r in results:
                    if r["name"] in growing and not led(r["name"]):
                        r["error_code"] = int(Errors.REQUEST_TIMED_OUT)
            fut.set_result(self._resp(ApiKeys.CREATE_PARTITIONS, v, body))
        threading.Thread(target=wait, name="create-partitions-wait", daemon=True).start()
        return fut

    def _await_metadata(self, api_key: int, version: int, results: list, names: list, timeout_ms: int,
                        present: bool):
        """Answer once the metadata cache shows the topics created (with leaders) or gone, or at the timeout
        with REQUEST_TIMED_OUT (Kafka's DelayedCreatePartitions / DelayedDeleteTopics)."""
        list_field = "topics" if api_key == ApiKeys.CREATE_TOPICS else "responses"
        if not names or timeout_ms <= 0:
            return self._resp(api_key, version, {"throttle_time_ms": 0, list_field: results})
        fut: Future = Future()

        def done(t: str) -> bool:
            parts = self.cache.topic_partitions(t)
            if present:
                return bool(parts) and all(p.leader >= 0 for p in parts)
            return not parts and not self.zk.exists(f"/brokers/topics/{t}")

        def wait() -> None:
            try:
                wait_for(lambda: all(done(t) for t in names), timeout_ms / 1000.0, interval=0.05,
                         message="topic metadata")
            except WaitTimeout:
                for r in results:
                    if r["name"] in names and not done(r["name"]):
                        r["error_code"] = int(Errors.REQUEST_TIMED_OUT)
            if api_key == ApiKeys.CREATE_TOPICS:
                for r in results:
                    if r["name"] in names and r["topic_id"] == ZERO_UUID:
                        r["topic_id"] = topic_uuid(self.cache.topic_ids.get(r["name"]))
            fut.set_result(self._resp(api_key, version, {"throttle_time_ms": 0, list_field: results}))
        threading.Thread(target=wait, name="topic-admin-wait", daemon=True).start()
        return fut

    # --- configs --------------------------------------------------------------------------------------------
    def handle_describe_configs(self, header, req, ctx):
        v = header.request_api_version
        results = []
        for r in req.resources:
            res = {"error_code": 0, "error_message": None, "resource_type": r.resource_type,
                   "resource_name": r.resource_name, "configs": []}
            try:
                self.auth.check_config_resource(ctx, r.resource_type, r.resource_name, alter=False)
                if r.resource_type == TOPIC_RESOURCE:
                    entries = self.admin_zk.describe_topic_config(r.resource_name)
                elif r.resource_type == BROKER_RESOURCE:
                    entries = self._broker_config_entries(r.resource_name)
                else:
                    raise KafkaError(f"unsupported resource type {r.resource_type}", Errors.INVALID_REQUEST)
                keys = set(r.configuration_keys) if r.configuration_keys else None
                for e in entries:
                    if keys is not None and e["name"] not in keys:
                        continue
                    secret = e.get("sensitive", False)  # never returned, whatever the source (Kafka's rule)
                    res["configs"].append({
                        "name": e["name"], "value": None if secret else e.get("value"),
                        "read_only": e.get("read_only", False),
                        "config_source": e.get("source", 5), "is_default": e.get("source", 5) == 5,
                        "is_sensitive": e.get("sensitive", False),
                        "synonyms": [{"name": s["name"], "value": None if secret else s.get("value"),
                                      "source": s["source"]}
                                     for s in e.get("synonyms", [])] if req.include_synonyms else [],
                        "config_type": e.get("type", 0), "documentation": None})
            except KafkaError as e:
                res.update(error_code=int(e.error), error_message=e.message or None)
            results.append(res)
        return self._resp(ApiKeys.DESCRIBE_CONFIGS, v, {"throttle_time_ms": 0, "results": results})

    def _broker_config_entries(self, name: str) -> list[dict]:
        return self.broker_configs.describe(name)

    def handle_alter_configs(self, header, req, ctx):
        def changes(r):
            full = {c.name: c.value for c in r.configs if c.value is not None}
            return (lambda admin, extra_ops=None: admin.change_topic_config(
                        r.resource_name, full, validate_only=req.validate_only, extra_ops=extra_ops), set(full))

        def broker_change(r):
            return {c.name: c.value for c in r.configs}, [], True
        return self._alter_configs(ApiKeys.ALTER_CONFIGS, header, req, changes, full_replace=True,
                                   broker_change=broker_change, ctx=ctx)

    def handle_incremental_alter_configs(self, header, req, ctx):
        def changes(r):
            sets, deletes = self._incremental_ops(r)
            return (lambda admin, extra_ops=None: admin.alter_topic_config(
                        r.resource_name, sets, deletes, validate_only=req.validate_only, extra_ops=extra_ops),
                    set(sets) | set(deletes))

        def broker_change(r):
            sets, deletes = self._incremental_ops(r)
            return sets, deletes, False
        return self._alter_configs(ApiKeys.INCREMENTAL_ALTER_CONFIGS, header, req, changes, full_replace=False,
                                   broker_change=broker_change, ctx=ctx)

    def _incremental_ops(self, r) -> tuple[dict[str, str | None], list[str]]:
        """SET / DELETE / APPEND / SUBTRACT of one resource (``server/incremental_alter_configs.py``)."""
        if all(c.config_operation in (0, 1) for c in r.configs):  # SET / DELETE: no need to read the current
            return incremental_alter_configs.resolve(r.configs, {}, lambda name: None)
        return incremental_alter_configs.resolve(r.configs, *incremental_alter_configs.current_and_list_defaults(
            self.zk, r.resource_type == TOPIC_RESOURCE, r.resource_name))

    def _touches_tiering(self, topic: str, keys: set, full_replace: bool) -> bool:
        if keys & set(TIERED_KEYS):
            return True
        if full_replace:  # dropping a tiered key is a tiering change too
            try:
                current = read_topic_config(self.zk, topic) or {}
            except codecs.MalformedZNodeError:
                current = {}  # logged by the reader; the change replaces it
            return bool(set(current) & set(TIERED_KEYS))
        return False

    def _alter_configs(self, api_key: int, header, req, changes, full_replace: bool, broker_change=None, ctx=None):
        """Topic config changes.  Those that touch tiering (KIP-950) are decided by the active controller: on
        the controller they run on its event thread; any other broker forwards the whole request to it."""
        v = header.request_api_version
        plans = []
        for r in req.resources:
            res = {"error_code": 0, "error_message": None, "resource_type": r.resource_type,
                   "resource_name": r.resource_name}
            plan = None
            try:
                self.auth.check_config_resource(ctx, r.resource_type, r.resource_name, alter=True)
                if r.resource_type == BROKER_RESOURCE:   # dynamic broker configs (DynamicBrokerConfig)
                    sets, deletes, replace = broker_change(r)
                    self.broker_configs.alter(r.resource_name, sets, deletes, replace,
                                                     validate_only=req.validate_only)
                    plans.append((r, res, None))
                    continue
                if r.resource_type != TOPIC_RESOURCE:
                    raise KafkaError("only topic and broker configs can be altered", Errors.INVALID_REQUEST)
                compute, keys = changes(r)
                plan = (compute, self._touches_tiering(r.resource_name, keys, full_replace))
            except KafkaError as e:
                res.update(error_code=int(e.error), error_message=e.message or None)
            plans.append((r, res, plan))
        if any(p and p[1] for _, _, p in plans) and not self._is_controller():
            denied = [res for _, res, _ in plans if res["error_code"] in AUTHORIZATION_ERRORS]
            if denied:  # the controller authorizes the forwarding broker: forward only what the client may do
                return self._forward_authorized(api_key, header, req, denied)
            return self._forward_to_controller(api_key, header, req)
        futures = []
        for r, res, plan in plans:
            if plan is None:
                continue
            compute, tiered = plan
            if tiered:
                futures.append((res, self.controller.submit_topic_config_change(
                    r.resource_name, compute, req.validate_only)))
            else:
                try:
                    compute(self.admin_zk)
                except KafkaError as e:
                    res.update(error_code=int(e.error), error_message=e.message or None)
        results = [res for _, res, _ in plans]
        if not futures:
            return self._resp(api_key, v, {"throttle_time_ms": 0, "responses": results})
        out: Future = Future()
        remaining = [len(futures)]
        lock = threading.Lock()

        def one_done(res, f):
            exc = f.exception()
            if isinstance(exc, KafkaError):
                res.update(error_code=int(exc.error), error_message=exc.message or None)
            elif exc is not None:
                log.error("config change failed %s", kv(resource=res["resource_name"], error=repr(exc)))
                res.update(error_code=int(Errors.UNKNOWN_SERVER_ERROR), error_message=str(exc))
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                out.set_result(self._resp(api_key, v, {"throttle_time_ms": 0, "responses": results}))
        for res, f in futures:
            f.add_done_callback(lambda f, res=res: one_done(res, f))
        return out

    def _forward_authorized(self, api_key: int, header, req, denied: list[dict]):
        """Forward the resources the client was not refused; answer the refused ones with their errors."""
        v = header.request_api_version
        refused = {(d["resource_type"], d["resource_name"]) for d in denied}
        allowed = codec.REGISTRY[api_key][0](version=v, validate_only=req.validate_only, resources=[
            r for r in req.resources if (r.resource_type, r.resource_name) not in refused])
        out: Future = Future()

        def merge(f: Future) -> None:
            out.set_result(self._resp(api_key, v, {"throttle_time_ms": 0, "responses": [
                {"error_code": r.error_code, "error_message": r.error_message, "resource_type": r.resource_type,
                 "resource_name": r.resource_name} for r in f.result().responses] + denied}))
        self._forward_to_controller(api_key, header, allowed).add_done_callback(merge)
        return out

    def _forward_to_controller(self, api_key: int, header, req):
        """Send the request on to the active controller and relay its answer (NOT_CONTROLLER per resource if
        the controller is unknown or unreachable; clients retry)."""
        v = header.request_api_version
        fut: Future = Future()

        def not_controller(reason: str):
            return self._resp(api_key, v, {"throttle_time_ms": 0, "responses": [
                {"error_code": int(Errors.NOT_CONTROLLER), "error_message": reason,
                 "resource_type": r.resource_type, "resource_name": r.resource_name} for r in req.resources]})

        def run():
            cid = self.cache.controller_id
            b = self.cache.inter_broker_endpoint(cid) if cid >= 0 else None
            if b is None or cid == self.config.broker_id:
                fut.set_result(not_controller("The controller is not known yet."))
                return
            client = BrokerClient(b.host, b.port, client_id=f"broker-{self.config.broker_id}-forwarder",
                                  login=self.inter_broker_login)
            try:
                resp = client.send(req, codec.response_class(api_key), v)
                resp._header = None
                fut.set_result(resp)
            except BrokerConnectionError as e:
                fut.set_result(not_controller(f"forwarding to controller {cid} failed: {e}"))
            finally:
                client.close()
        threading.Thread(target=run, name="forward-to-controller", daemon=True).start()
        return fut

    # --- InitProducerId (transactional ids: server/transaction_apis.py) ------------------------------------
    def handle_init_producer_id(self, header, req, ctx):
        v = header.request_api_version
        denied = self.auth.init_producer_id_error(ctx, req.transactional_id)
        if denied is not None:
            return self._resp(ApiKeys.INIT_PRODUCER_ID, v, {
                "throttle_time_ms": 0, "producer_id": -1, "producer_epoch": -1, "error_code": int(denied)})
        if req.transactional_id is not None and self.transactions is not None:
            return self.transactions.handle_init_producer_id(header, req, ctx)
        if req.transactional_id is not None:
            return self._resp(ApiKeys.INIT_PRODUCER_ID, v, {
                "throttle_time_ms": 0, "producer_id": -1, "producer_epoch": -1,
                "error_code": int(Errors.COORDINATOR_NOT_AVAILABLE)})
        try:
            pid = self.producer_ids.generate_producer_id()
        except ProducerIdsUnavailableError:
            # Kafka's answer when no producer id block is available yet (a retriable error for clients).
            return self._resp(ApiKeys.INIT_PRODUCER_ID, v, {
                "throttle_time_ms": 0, "producer_id": -1, "producer_epoch": -1,
                "error_code": int(Errors.COORDINATOR_LOAD_IN_PROGRESS)})
        return self._resp(ApiKeys.INIT_PRODUCER_ID, v, {"throttle_time_ms": 0, "error_code": 0, "producer_id": pid,
                                                        "producer_epoch": 0})

    # --- DescribeCluster ------------------------------------------------------------------------------------
    def handle_describe_cluster(self, header, req, ctx):
        v = header.request_api_version
        brokers = [{"broker_id": b.id, "host": b.host, "port": b.port, "rack": b.rack}
                   for b in self.cache.alive_brokers(ctx.listener_name)]
        return self._resp(ApiKeys.DESCRIBE_CLUSTER, v, {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                                                "endpoint_type": 1, "cluster_id": self.cluster_id or "",
                                                "controller_id": self.cache.advertised_controller_id(),
                                                "brokers": brokers,
                                                # kafka-python's name of cluster_authorized_operations
                                                "authorized_operations": self.auth.cluster_operations(
                                                    ctx, req.include_cluster_authorized_operations)})

