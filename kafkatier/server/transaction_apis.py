"""The transaction APIs of KafkaApis: InitProducerId with a transactional id (22), AddPartitionsToTxn (24),
AddOffsetsToTxn (25), EndTxn (26), WriteTxnMarkers (27), TxnOffsetCommit (28), and FindCoordinator's TRANSACTION
key type -- Kafka's ``KafkaApis.handle*Request`` for them, translating wire messages to and from the
:class:`~kafkatier.coordinator.transaction.TransactionCoordinator` (and, for TxnOffsetCommit and the markers of
``__consumer_offsets`` partitions, the group coordinator).

FindCoordinator(TRANSACTION) creates ``__transaction_state`` on first use (``transaction.state.log.num.partitions``
partitions, replication ``min(transaction.state.log.replication.factor, live brokers)`` -- Kafka refuses with
fewer live brokers; a simulator with one broker should still work --, ``min.insync.replicas`` =
``min(transaction.state.log.min.isr, replication)``, compacted); until the id's partition has a leader it answers
COORDINATOR_NOT_AVAILABLE, which clients retry.

Also KIP-664's DescribeTransactions (65), ListTransactions (66) and DescribeProducers (61), for
``kafkatier transactions`` (kafka-transactions.sh).

Versions advertised are Kafka 3.9's: InitProducerId 0-5,
AddPartitionsToTxn 0-5 (v4+: the broker-to-broker verification of KIP-890 part 1, VerifyOnly only), AddOffsetsToTxn 0-4,
EndTxn 0-4, TxnOffsetCommit 0-4 (the top versions only say the client understands TRANSACTION_ABORTABLE, which these
APIs do not answer here), WriteTxnMarkers 1 (our message classes start at 1; Kafka 3.9 brokers send v1),
DescribeProducers 0, DescribeTransactions 0, ListTransactions 0-1.
Compatibility rewrites (Kafka's): PRODUCER_FENCED is answered INVALID_PRODUCER_EPOCH to InitProducerId < v4 and to
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn < v2; TxnOffsetCommit < v2 gets COORDINATOR_NOT_AVAILABLE for
COORDINATOR_LOAD_IN_PROGRESS.

Authorization (Kafka's): WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) for every client
API; AddPartitionsToTxn WRITE on each topic; AddOffsetsToTxn and TxnOffsetCommit READ on the group; TxnOffsetCommit
READ on each topic; WriteTxnMarkers CLUSTER_ACTION (or ALTER) on the cluster; DescribeTransactions DESCRIBE on
each id (its topics filtered by DESCRIBE on the topic); ListTransactions lists the ids the principal may DESCRIBE;
DescribeProducers READ on the topic.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Callable

from kafkatier.common.structs import TopicPartition
from kafkatier.coordinator.group.group_coordinator import GroupCoordinator
from kafkatier.coordinator.group.group_metadata_manager import OFFSETS_TOPIC
from kafkatier.coordinator.group.records import OffsetAndMetadata
from kafkatier.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from kafkatier.coordinator.transaction.transaction_log import TRANSACTION_STATE_TOPIC
from kafkatier.coordinator.transaction.transaction_state_manager import TRANSACTION_TOPIC_CONFIGS
from kafkatier.logsetup import get_logger
from kafkatier.protocol import codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.build import build
from kafkatier.protocol.errors import Errors, KafkaError
from kafkatier.server.auth_helper import AuthHelper
from kafkatier.server.group_apis import committable_offsets, partitions_by_topic
from kafkatier.server.internal_topics import (AutoTopicCreationManager, CoordinatorAnswer, InternalTopic,
                                              find_coordinator)
from kafkatier.server.replica_manager import ProducePartitionResult, ReplicaManager

log = get_logger("server.transaction-apis")
_TRANSACTION_STATE = InternalTopic(TRANSACTION_STATE_TOPIC, "transaction state topic", "transactional id")


VERSIONS: dict[int, tuple[int, int]] = {
    ApiKeys.ADD_PARTITIONS_TO_TXN: (0, 5), ApiKeys.ADD_OFFSETS_TO_TXN: (0, 4), ApiKeys.END_TXN: (0, 4),
    ApiKeys.WRITE_TXN_MARKERS: (0, 1),
    ApiKeys.TXN_OFFSET_COMMIT: (0, 4), ApiKeys.DESCRIBE_PRODUCERS: (0, 0), ApiKeys.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKeys.LIST_TRANSACTIONS: (0, 1),
}


def _resp(api_key: int, version: int, body: dict):
    return build(codec.response_class(api_key), version, body)


def _markers_body(m, errors: dict[tuple[str, int], int]) -> dict:
    """One producer's entry of a WriteTxnMarkers response: each partition's error code."""
    by_topic: dict[str, list] = {}
    for t in m.topics:
        for p in t.partition_indexes:
            by_topic.setdefault(t.name, []).append({"partition_index": p, "error_code": errors[(t.name, p)]})
    return {"producer_id": m.producer_id, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}


def _fenced_compat(error: Errors, version: int, first_version: int) -> Errors:
    return Errors.INVALID_PRODUCER_EPOCH if error == Errors.PRODUCER_FENCED and version < first_version else error


class TransactionApis:
    def __init__(self, coordinator: TransactionCoordinator, group_coordinator: GroupCoordinator,
                 replica_manager: ReplicaManager, metadata_cache, internal_topics: AutoTopicCreationManager,
                 request_timeout_ms: int = 30000, auth: AuthHelper | None = None):
        self.coordinator = coordinator
        self.group_coordinator = group_coordinator
        self.rm = replica_manager
        self.cache = metadata_cache
        self.internal_topics = internal_topics
        self.request_timeout_ms = request_timeout_ms
        self.auth = auth or AuthHelper(None)
        self._handlers = {ApiKeys.ADD_PARTITIONS_TO_TXN: self.handle_add_partitions_to_txn,
                          ApiKeys.ADD_OFFSETS_TO_TXN: self.handle_add_offsets_to_txn,
                          ApiKeys.END_TXN: self.handle_end_txn,
                          ApiKeys.WRITE_TXN_MARKERS: self.handle_write_txn_markers,
                          ApiKeys.TXN_OFFSET_COMMIT: self.handle_txn_offset_commit,
                          ApiKeys.DESCRIBE_PRODUCERS: self.handle_describe_producers,
                          ApiKeys.DESCRIBE_TRANSACTIONS: self.handle_describe_transactions,
                          ApiKeys.LIST_TRANSACTIONS: self.handle_list_transactions}

    def handlers(self) -> dict[int, tuple[tuple[int, int], Callable]]:
        return {k: (VERSIONS[k], fn) for k, fn in self._handlers.items()}

    # --- FindCoordinator(TRANSACTION) -------------------------------------------------------------------------
    def coordinator_for(self, transactional_id: str, listener: str = "PLAINTEXT") -> CoordinatorAnswer:
        """``(error, message, node id, host, port)`` of the id's coordinator on ``listener``."""
        return find_coordinator(self.cache, _TRANSACTION_STATE, transactional_id, self.coordinator.partition_for,
                                self._maybe_create_transaction_topic, listener)

    def _maybe_create_transaction_topic(self) -> None:
        cfg = self.coordinator.config
        rf = self.internal_topics.replication_factor(cfg.transaction_state_log_replication_factor)
        configs = dict(TRANSACTION_TOPIC_CONFIGS,
                       **{"min.insync.replicas": str(max(1, min(cfg.transaction_state_log_min_isr, rf))),
                          "segment.bytes": str(cfg.transaction_state_log_segment_bytes)})
        self.internal_topics.create(_TRANSACTION_STATE, cfg.transaction_state_log_num_partitions, rf, configs)

    # --- InitProducerId (called by KafkaApis for a transactional id) --------------------------------------------
    def handle_init_producer_id(self, header, req, ctx):
        v = header.request_api_version
        fut: Future = Future()

        def respond(error: Errors, pid: int, epoch: int) -> None:
            fut.set_result(_resp(ApiKeys.INIT_PRODUCER_ID, v, {"throttle_time_ms": 0, "error_code": int(
                _fenced_compat(error, v, 4)), "producer_id": pid, "producer_epoch": epoch}))
        pid, epoch = (req.producer_id, req.producer_epoch) if v >= 3 else (-1, -1)
        if (pid == -1) != (epoch == -1):
            respond(Errors.INVALID_REQUEST, -1, -1)
            return fut
        self.coordinator.handle_init_producer_id(req.transactional_id, req.transaction_timeout_ms,
                                                 None if pid == -1 else (pid, epoch), respond)
        return fut

    # --- AddPartitionsToTxn -------------------------------------------------------------------------------------
    def handle_add_partitions_to_txn(self, header, req, ctx):
        v = header.request_api_version
        if v >= 4:
            return self._verify_partitions(v, req, ctx)
        tid = req.v3_and_below_transactional_id
        wanted = [(t.name, p) for t in req.v3_and_below_topics for p in t.partitions]
        fut: Future = Future()

        def respond(errors: dict[tuple[str, int], int]) -> None:
            by_topic: dict[str, list] = {}
            for (t, p) in wanted:
                by_topic.setdefault(t, []).append({"partition_index": p, "partition_error_code": errors[(t, p)]})
            fut.set_result(_resp(ApiKeys.ADD_PARTITIONS_TO_TXN, v, {
                "throttle_time_ms": 0, "results_by_topic_v3_and_below": [
                {"name": t, "results_by_partition": ps} for t, ps in by_topic.items()]}))
        if not self.auth.authorize(ctx, "Write", "TransactionalId", tid):
            respond({tp: int(Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED) for tp in wanted})
            return fut
        writable = self.auth.filter_authorized(ctx, "Write", "Topic", {t for t, _ in wanted if not t.startswith("__")})
        failed: dict[tuple[str, int], int] = {}
        for t, p in wanted:
            if not t.startswith("__") and t not in writable:
                failed[(t, p)] = int(Errors.TOPIC_AUTHORIZATION_FAILED)
            elif self.cache.get_partition(t, p) is None:
                failed[(t, p)] = int(Errors.UNKNOWN_TOPIC_OR_PARTITION)
        if failed:
            respond({tp: failed.get(tp, int(Errors.OPERATION_NOT_ATTEMPTED)) for tp in wanted})
            return fut
        self.coordinator.handle_add_partitions(
            tid, req.v3_and_below_producer_id, req.v3_and_below_producer_epoch, wanted,
            lambda e: respond({tp: int(_fenced_compat(e, v, 2)) for tp in wanted}))
        return fut

    def _verify_partitions(self, v: int, req, ctx):
        """AddPartitionsToTxn v4+ (brokers only, KIP-890 part 1): each transaction's VerifyOnly check; CLUSTER_ACTION
        on the cluster, else the top-level CLUSTER_AUTHORIZATION_FAILED.  Adding partitions this way (transaction
        version 2, Kafka 4.0) is not served: INVALID_REQUEST."""
        if not self.auth.authorize_cluster(ctx, "ClusterAction"):
            return _resp(ApiKeys.ADD_PARTITIONS_TO_TXN, v, {"throttle_time_ms": 0, "results_by_transaction": [],
                                                    "error_code": int(Errors.CLUSTER_AUTHORIZATION_FAILED)})
        results = []
        for t in req.transactions:
            parts = [(tp.name, p) for tp in t.topics for p in tp.partitions]
            if t.verify_only:
                errors = self.coordinator.handle_verify_partitions(t.transactional_id, t.producer_id,
                                                                   t.producer_epoch, parts)
            else:
                errors = {tp: Errors.INVALID_REQUEST for tp in parts}
            by_topic: dict[str, list] = {}
            for (name, p) in parts:
                by_topic.setdefault(name, []).append({"partition_index": p,
                                                      "partition_error_code": int(errors[(name, p)])})
            results.append({"transactional_id": t.transactional_id, "topic_results": [
                {"name": name, "results_by_partition": ps} for name, ps in by_topic.items()]})
        return _resp(ApiKeys.ADD_PARTITIONS_TO_TXN, v, {"throttle_time_ms": 0, "error_code": 0,
                                                "results_by_transaction": results})

    # --- AddOffsetsToTxn ----------------------------------------------------------------------------------------
    def handle_add_offsets_to_txn(self, header, req, ctx):
        v = header.request_api_version
        fut: Future = Future()

        def respond(e: Errors) -> None:
            fut.set_result(_resp(ApiKeys.ADD_OFFSETS_TO_TXN, v, {"throttle_time_ms": 0,
                                                         "error_code": int(_fenced_compat(e, v, 2))}))
        if not self.auth.authorize(ctx, "Write", "TransactionalId", req.transactional_id):
            respond(Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        elif not self.auth.authorize(ctx, "Read", "Group", req.group_id):
            respond(Errors.GROUP_AUTHORIZATION_FAILED)
        else:
            partition = self.group_coordinator.partition_for(req.group_id)
            self.coordinator.handle_add_partitions(req.transactional_id, req.producer_id, req.producer_epoch,
                                                   [(OFFSETS_TOPIC, partition)], respond)
        return fut

    # --- EndTxn -------------------------------------------------------------------------------------------------
    def handle_end_txn(self, header, req, ctx):
        v = header.request_api_version
        fut: Future = Future()

        def respond(e: Errors) -> None:
            fut.set_result(_resp(ApiKeys.END_TXN, v,
                                 {"throttle_time_ms": 0, "error_code": int(_fenced_compat(e, v, 2))}))
        if not self.auth.authorize(ctx, "Write", "TransactionalId", req.transactional_id):
            respond(Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        else:
            self.coordinator.handle_end_transaction(req.transactional_id, req.producer_id, req.producer_epoch,
                                                    bool(req.committed), respond)
        return fut

    # --- TxnOffsetCommit ----------------------------------------------------------------------------------------
    def handle_txn_offset_commit(self, header, req, ctx):
        v = header.request_api_version
        now = self.group_coordinator.time_ms()
        offsets, order = {}, []
        for t in req.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                order.append(tp)
                offsets[tp] = OffsetAndMetadata(offset=p.committed_offset,
                                                leader_epoch=p.committed_leader_epoch if v >= 2 else -1,
                                                metadata=p.committed_metadata or "", commit_timestamp=now,
                                                expire_timestamp=None)
        fut: Future = Future()

        def respond(result: dict) -> None:
            def error_code(tp) -> int:
                code = int(result.get(tp, 0))
                if v < 2 and code == int(Errors.COORDINATOR_LOAD_IN_PROGRESS):
                    return int(Errors.COORDINATOR_NOT_AVAILABLE)   # TxnOffsetCommit < v2's clients
                return code
            fut.set_result(_resp(ApiKeys.TXN_OFFSET_COMMIT, v, {"throttle_time_ms": 0,
                                                                "topics": partitions_by_topic(order, error_code)}))
        if not self.auth.authorize(ctx, "Write", "TransactionalId", req.transactional_id):
            respond({tp: int(Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED) for tp in offsets})
            return fut
        known, errors = committable_offsets(self.auth, ctx, self.cache, req.group_id, offsets)
        if not known:
            respond(errors)
            return fut
        self.group_coordinator.handle_txn_commit_offsets(
            req.group_id, req.producer_id, req.producer_epoch, req.member_id if v >= 3 else "",
            req.group_instance_id if v >= 3 else None, req.generation_id if v >= 3 else -1, known,
            lambda result: respond({**errors, **result}), transactional_id=req.transactional_id)
        return fut

    # --- KIP-664: DescribeTransactions, ListTransactions, DescribeProducers ---------------------------------------
    def handle_describe_transactions(self, header, req, ctx):
        v = header.request_api_version
        states = []
        for tid in req.transactional_ids:
            entry = {"error_code": 0, "transactional_id": tid, "transaction_state": "", "transaction_timeout_ms": 0,
                     "transaction_start_time_ms": -1, "producer_id": -1, "producer_epoch": -1, "topics": []}
            if not self.auth.authorize(ctx, "Describe", "TransactionalId", tid):
                entry["error_code"] = int(Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                states.append(entry)
                continue
            err, m = self.coordinator.describe(tid)
            if err is not None:
                entry["error_code"] = int(err)
                states.append(entry)
                continue
            by_topic: dict[str, list[int]] = {}
            for t, p in sorted(m.topic_partitions):
                by_topic.setdefault(t, []).append(p)
            visible = self.auth.filter_authorized(ctx, "Describe", "Topic", by_topic)
            entry.update(transaction_state=m.state.state_name, transaction_timeout_ms=m.txn_timeout_ms,
                         transaction_start_time_ms=m.txn_start_timestamp, producer_id=m.producer_id,
                         producer_epoch=m.producer_epoch,
                         topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items() if t in visible])
            states.append(entry)
        return _resp(ApiKeys.DESCRIBE_TRANSACTIONS, v, {"throttle_time_ms": 0, "transaction_states": states})

    def handle_list_transactions(self, header, req, ctx):
        v = header.request_api_version
        err, found, unknown = self.coordinator.list_transactions(
            set(req.state_filters or []), set(req.producer_id_filters or []),
            req.duration_filter if v >= 1 else -1)
        shown = [m for m in found if self.auth.authorize(ctx, "Describe", "TransactionalId", m.transactional_id)]
        return _resp(ApiKeys.LIST_TRANSACTIONS, v, {"throttle_time_ms": 0, "error_code": int(err or 0),
                                            "unknown_state_filters": unknown, "transaction_states": [
                                                {"transactional_id": m.transactional_id, "producer_id": m.producer_id,
                                                 "transaction_state": m.state.state_name} for m in shown]})

    def handle_describe_producers(self, header, req, ctx):
        v = header.request_api_version
        readable = self.auth.filter_authorized(ctx, "Read", "Topic", (t.name for t in req.topics))
        topics = []
        for t in req.topics:
            parts = []
            for index in t.partition_indexes:
                entry = {"partition_index": index, "error_code": 0, "error_message": None, "active_producers": []}
                if t.name not in readable:
                    entry["error_code"] = int(Errors.TOPIC_AUTHORIZATION_FAILED)
                    parts.append(entry)
                    continue
                try:
                    p = self.rm.get_partition_or_error(t.name, index, leader_only=False)
                except KafkaError as e:
                    entry.update(error_code=int(e.error), error_message=e.message or None)
                    parts.append(entry)
                    continue
                entry["active_producers"] = [
                    {"producer_id": a.producer_id, "producer_epoch": a.producer_epoch, "last_sequence": a.last_sequence,
                     "last_timestamp": a.last_timestamp, "coordinator_epoch": a.coordinator_epoch,
                     "current_txn_start_offset": a.current_txn_start_offset}
                    for a in sorted(p.producer_state.active_producers().values(), key=lambda a: a.producer_id)]
                parts.append(entry)
            topics.append({"name": t.name, "partitions": parts})
        return _resp(ApiKeys.DESCRIBE_PRODUCERS, v, {"throttle_time_ms": 0, "topics": topics})

    # --- WriteTxnMarkers (from transaction coordinators) -----------------------------------------------------------
    def handle_write_txn_markers(self, header, req, ctx):
        v = header.request_api_version
        markers = list(req.markers)
        if not (self.auth.authorize_cluster(ctx, "ClusterAction") or self.auth.authorize_cluster(ctx, "Alter")):
            return _resp(ApiKeys.WRITE_TXN_MARKERS, v, {"markers": [
                _markers_body(m, {(t.name, p): int(Errors.CLUSTER_AUTHORIZATION_FAILED)
                                  for t in m.topics for p in t.partition_indexes}) for m in markers]})
        return self.write_markers(v, markers)

    def write_markers(self, version: int, markers: list) -> Future:
        """The markers of an authorized WriteTxnMarkers request appended on the partitions led here, acks=all
        (UNKNOWN_TOPIC_OR_PARTITION for the others); the response once every append is replicated."""
        fut: Future = Future()
        results: list[dict | None] = [None] * len(markers)
        if not markers:
            fut.set_result(_resp(ApiKeys.WRITE_TXN_MARKERS, version, {"markers": []}))
            return fut
        remaining = [len(markers)]
        lock = threading.Lock()

        def one_done(i: int, m, errors: dict) -> None:
            results[i] = _markers_body(m, errors)
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                fut.set_result(_resp(ApiKeys.WRITE_TXN_MARKERS, version, {"markers": results}))

        for i, m in enumerate(markers):
            tps = [TopicPartition(t.name, p) for t in m.topics for p in t.partition_indexes]
            hosted = [tp for tp in tps if self.rm.get_partition(*tp) is not None]
            errors = {tuple(tp): int(Errors.UNKNOWN_TOPIC_OR_PARTITION) for tp in tps if tp not in hosted}
            if not hosted:
                one_done(i, m, errors)
                continue

            def appended(res: dict[TopicPartition, ProducePartitionResult], i=i, m=m, errors=errors) -> None:
                for tp, r in res.items():
                    errors[(tp[0], tp[1])] = int(r.error)
                    if tp[0] == OFFSETS_TOPIC and r.error == Errors.NONE:
                        self.group_coordinator.on_transaction_completed(tp[1], m.producer_id,
                                                                        bool(m.transaction_result))
                one_done(i, m, errors)
            self.rm.append_txn_markers(self.request_timeout_ms, m.producer_id, m.producer_epoch, m.coordinator_epoch,
                                       bool(m.transaction_result), hosted, appended)
        return fut
