"""The group APIs of KafkaApis: FindCoordinator (10), OffsetCommit (8), OffsetFetch (9), JoinGroup (11),
Heartbeat (12), LeaveGroup (13), SyncGroup (14), DescribeGroups (15), ListGroups (16), DeleteGroups (42) and
OffsetDelete (47) -- Kafka's ``KafkaApis.handle*Request`` for them, translating wire messages to and from the
:class:`~kafkatier.coordinator.group.GroupCoordinator`.

FindCoordinator creates ``__consumer_offsets`` on first use (Kafka's auto topic creation of internal topics,
``server/internal_topics.py``:
``offsets.topic.num.partitions`` partitions, replication ``min(offsets.topic.replication.factor, live
brokers)`` -- Kafka refuses with fewer live brokers; a simulator with one broker should still work -- and the
topic configs of :data:`OFFSETS_TOPIC_CONFIGS`); until the group's partition has a leader it answers
COORDINATOR_NOT_AVAILABLE, which clients retry.

Versions advertised are Kafka 3.6's for a ZooKeeper-mode broker.  OffsetCommit v0 is handled like v1 (Kafka
stored v0 commits in ZooKeeper).  FindCoordinator's TRANSACTION key type is answered by
``transaction_coordinator_for`` (``server/transaction_apis.py``), COORDINATOR_NOT_AVAILABLE without one.

Authorization (Kafka's checks, through :class:`~kafkatier.server.auth_helper.AuthHelper`): FindCoordinator
DESCRIBE on the group (or transactional id); JoinGroup, SyncGroup, Heartbeat and LeaveGroup READ on the group;
OffsetCommit READ on the group, then READ on each topic; OffsetFetch DESCRIBE on the group, then DESCRIBE on each
topic (unauthorized topics are left out of an all-partitions answer); DescribeGroups DESCRIBE and DeleteGroups
DELETE on each group; ListGroups every group with DESCRIBE on the cluster, else the groups the principal may
DESCRIBE; OffsetDelete DELETE on the group, then READ on each topic.
"""
from __future__ import annotations

from concurrent.futures import Future
from typing import Callable

from kafkatier.coordinator.group.group_coordinator import GroupCoordinator, OffsetFetchResult
from kafkatier.coordinator.group.group_metadata_manager import OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIGS
from kafkatier.coordinator.group.records import OffsetAndMetadata
from kafkatier.logsetup import get_logger
from kafkatier.protocol import codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.build import build
from kafkatier.protocol.coordinator_type import CoordinatorType
from kafkatier.protocol.errors import Errors
from kafkatier.server.auth_helper import AuthHelper
from kafkatier.server.internal_topics import (AutoTopicCreationManager, CoordinatorAnswer, InternalTopic,
                                              find_coordinator)

log = get_logger("server.group-apis")


#: Kafka 3.6 (ZooKeeper mode) ranges.
VERSIONS: dict[int, tuple[int, int]] = {
    ApiKeys.OFFSET_COMMIT: (0, 9), ApiKeys.OFFSET_FETCH: (0, 9), ApiKeys.FIND_COORDINATOR: (0, 6),
    ApiKeys.JOIN_GROUP: (0, 9), ApiKeys.HEARTBEAT: (0, 4),
    ApiKeys.LEAVE_GROUP: (0, 5), ApiKeys.SYNC_GROUP: (0, 5), ApiKeys.DESCRIBE_GROUPS: (0, 5),
    ApiKeys.LIST_GROUPS: (0, 5), ApiKeys.DELETE_GROUPS: (0, 2),
    ApiKeys.OFFSET_DELETE: (0, 0),
}

CLASSIC_GROUP_TYPE = "classic"   # ListGroups v5's group type (KIP-848's new groups are "consumer")
DENIED = int(Errors.GROUP_AUTHORIZATION_FAILED)
_OFFSETS = InternalTopic(OFFSETS_TOPIC, "offsets topic", "group id")


def _resp(api_key: int, version: int, body: dict):
    return build(codec.response_class(api_key), version, body)


def committable_offsets(auth: AuthHelper, ctx, cache, group_id: str, offsets: dict) -> tuple[dict, dict]:
    """Kafka's checks of an OffsetCommit's (or TxnOffsetCommit's) partitions: the offsets to commit, and the
    error code of each other partition -- all GROUP_AUTHORIZATION_FAILED without READ on the group, else
    TOPIC_AUTHORIZATION_FAILED without READ on its topic, else UNKNOWN_TOPIC_OR_PARTITION when the partition
    does not exist."""
    if not auth.authorize(ctx, "Read", "Group", group_id):
        return {}, {tp: DENIED for tp in offsets}
    readable = auth.filter_authorized(ctx, "Read", "Topic", {t for t, _ in offsets})
    denied = {tp for tp in offsets if tp[0] not in readable}
    unknown = {tp for tp in offsets if tp not in denied and cache.get_partition(*tp) is None}
    errors = {**{tp: int(Errors.UNKNOWN_TOPIC_OR_PARTITION) for tp in unknown},
              **{tp: int(Errors.TOPIC_AUTHORIZATION_FAILED) for tp in denied}}
    return {tp: o for tp, o in offsets.items() if tp not in errors}, errors


def partitions_by_topic(order: list[tuple[str, int]], error_code: Callable[[tuple[str, int]], int]) -> list[dict]:
    """An offset commit response's ``topics``: each partition of ``order`` with its error code, grouped by topic
    in request order."""
    by_topic: dict[str, list] = {}
    for tp in order:
        by_topic.setdefault(tp[0], []).append({"partition_index": tp[1], "error_code": error_code(tp)})
    return [{"name": t, "partitions": ps} for t, ps in by_topic.items()]


class GroupApis:
    def __init__(self, coordinator: GroupCoordinator, metadata_cache, internal_topics: AutoTopicCreationManager,
                 auth: AuthHelper | None = None,
                 transaction_coordinator_for: Callable[[str, str], CoordinatorAnswer] | None = None):
        self.coordinator = coordinator
        self.cache = metadata_cache
        self.internal_topics = internal_topics
        self.auth = auth or AuthHelper(None)
        self.transaction_coordinator_for = transaction_coordinator_for
        self._handlers = {
            ApiKeys.OFFSET_COMMIT: self.handle_offset_commit, ApiKeys.OFFSET_FETCH: self.handle_offset_fetch,
            ApiKeys.FIND_COORDINATOR: self.handle_find_coordinator, ApiKeys.JOIN_GROUP: self.handle_join_group,
            ApiKeys.HEARTBEAT: self.handle_heartbeat, ApiKeys.LEAVE_GROUP: self.handle_leave_group,
            ApiKeys.SYNC_GROUP: self.handle_sync_group, ApiKeys.DESCRIBE_GROUPS: self.handle_describe_groups,
            ApiKeys.LIST_GROUPS: self.handle_list_groups, ApiKeys.DELETE_GROUPS: self.handle_delete_groups,
            ApiKeys.OFFSET_DELETE: self.handle_offset_delete,
        }

    def handlers(self) -> dict[int, tuple[tuple[int, int], Callable]]:
        return {k: (VERSIONS[k], fn) for k, fn in self._handlers.items()}

    # --- FindCoordinator ------------------------------------------------------------------------------------
    def handle_find_coordinator(self, header, req, ctx):
        v = header.request_api_version
        if v >= 4:
            keys, key_type = list(req.coordinator_keys), req.key_type
        else:
            keys, key_type = [req.key], (req.key_type if v >= 1 else CoordinatorType.GROUP)
        answers = [self._coordinator_denied(ctx, k, key_type) or self._key_type_refused(key_type, v)
                   or self._coordinator_for(k, key_type, ctx.listener_name) for k in keys]
        if v >= 4:
            return _resp(ApiKeys.FIND_COORDINATOR, v, {"throttle_time_ms": 0, "coordinators": [
                {"key": k, "node_id": n, "host": h, "port": p, "error_code": e, "error_message": m}
                for k, (e, m, n, h, p) in zip(keys, answers)]})
        e, m, n, h, p = answers[0]
        return _resp(ApiKeys.FIND_COORDINATOR, v, {"throttle_time_ms": 0, "error_code": e, "error_message": m,
                                           "node_id": n, "host": h, "port": p})

    def _coordinator_denied(self, ctx, key: str, key_type: int) -> CoordinatorAnswer | None:
        if key_type == CoordinatorType.GROUP and not self.auth.authorize(ctx, "Describe", "Group", key):
            return (int(Errors.GROUP_AUTHORIZATION_FAILED), None, -1, "", -1)
        if key_type == CoordinatorType.TRANSACTION and not self.auth.authorize(ctx, "Describe", "TransactionalId", key):
            return (int(Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), None, -1, "", -1)
        return None

    @staticmethod
    def _key_type_refused(key_type: int, version: int) -> CoordinatorAnswer | None:
        """Kafka 3.9's ``getCoordinator``: a SHARE key below v6, a share coordinator (none in ZooKeeper mode) or a
        key type Kafka does not define is an INVALID_REQUEST."""
        if key_type == CoordinatorType.SHARE:
            why = ("the SHARE coordinator key type needs FindCoordinator v6" if version < 6
                   else "share groups (KIP-932) have no coordinator in ZooKeeper mode")
            return (int(Errors.INVALID_REQUEST), why, -1, "", -1)
        if key_type not in (CoordinatorType.GROUP, CoordinatorType.TRANSACTION):
            return (int(Errors.INVALID_REQUEST), f"unknown coordinator key type {key_type}", -1, "", -1)
        return None

    def _coordinator_for(self, key: str, key_type: int, listener: str = "PLAINTEXT") -> CoordinatorAnswer:
        if key_type != CoordinatorType.GROUP:
            if self.transaction_coordinator_for is not None:
                return self.transaction_coordinator_for(key, listener)
            return (int(Errors.COORDINATOR_NOT_AVAILABLE), "no transaction coordinator", -1, "", -1)
        return find_coordinator(self.cache, _OFFSETS, key, self.coordinator.partition_for,
                                self._maybe_create_offsets_topic, listener)

    def _maybe_create_offsets_topic(self) -> None:
        cfg, topics = self.coordinator.config, self.internal_topics
        topics.create(_OFFSETS, cfg.offsets_topic_num_partitions,
                      topics.replication_factor(cfg.offsets_topic_replication_factor), OFFSETS_TOPIC_CONFIGS)

    # --- membership -----------------------------------------------------------------------------------------
    def handle_join_group(self, header, req, ctx):
        v = header.request_api_version
        fut: Future = Future()

        def respond(r) -> None:
            fut.set_result(_resp(ApiKeys.JOIN_GROUP, v, {
                "throttle_time_ms": 0, "error_code": r.error, "generation_id": r.generation_id,
                "protocol_type": r.protocol_type, "protocol_name": r.protocol_name if v >= 7 else (r.protocol_name or ""),
                "leader": r.leader_id, "skip_assignment": False, "member_id": r.member_id,
                "members": [{"member_id": m, "group_instance_id": i, "metadata": md} for m, i, md in r.members]}))
        if not self.auth.authorize(ctx, "Read", "Group", req.group_id):
            return _resp(ApiKeys.JOIN_GROUP, v, {"throttle_time_ms": 0, "error_code": DENIED, "generation_id": -1,
                                         "protocol_type": None, "protocol_name": None if v >= 7 else "",
                                         "leader": "", "skip_assignment": False, "member_id": "", "members": []})
        rebalance_ms = req.rebalance_timeout_ms if v >= 1 else req.session_timeout_ms
        self.coordinator.handle_join_group(
            req.group_id, req.member_id or "", req.group_instance_id if v >= 5 else None, v >= 4,
            header.client_id or "", f"/{ctx.client_address[0]}", rebalance_ms, req.session_timeout_ms,
            req.protocol_type, [(p.name, p.metadata) for p in req.protocols], respond)
        return fut

    def handle_sync_group(self, header, req, ctx):
        v = header.request_api_version
        fut: Future = Future()

        def respond(r) -> None:
            fut.set_result(_resp(ApiKeys.SYNC_GROUP, v, {"throttle_time_ms": 0, "error_code": r.error,
                                                 "protocol_type": r.protocol_type, "protocol_name": r.protocol_name,
                                                 "assignment": r.assignment}))
        if not self.auth.authorize(ctx, "Read", "Group", req.group_id):
            return _resp(ApiKeys.SYNC_GROUP, v, {"throttle_time_ms": 0, "error_code": DENIED, "protocol_type": None,
                                         "protocol_name": None, "assignment": b""})
        self.coordinator.handle_sync_group(
            req.group_id, req.generation_id, req.member_id, req.group_instance_id if v >= 3 else None,
            req.protocol_type if v >= 5 else None, req.protocol_name if v >= 5 else None,
            {a.member_id: a.assignment for a in req.assignments}, respond)
        return fut

    def handle_heartbeat(self, header, req, ctx):
        v = header.request_api_version
        if not self.auth.authorize(ctx, "Read", "Group", req.group_id):
            return _resp(ApiKeys.HEARTBEAT, v, {"throttle_time_ms": 0, "error_code": DENIED})
        err = self.coordinator.handle_heartbeat(req.group_id, req.member_id,
                                                req.group_instance_id if v >= 3 else None, req.generation_id)
        return _resp(ApiKeys.HEARTBEAT, v, {"throttle_time_ms": 0, "error_code": err})

    def handle_leave_group(self, header, req, ctx):
        v = header.request_api_version
        leaving = ([(m.member_id, m.group_instance_id) for m in req.members] if v >= 3
                   else [(req.member_id, None)])
        if not self.auth.authorize(ctx, "Read", "Group", req.group_id):
            top, per_member = DENIED, [DENIED] * len(leaving)
        else:
            top, per_member = self.coordinator.handle_leave_group(req.group_id, leaving)
        if v < 3:
            return _resp(ApiKeys.LEAVE_GROUP, v, {"throttle_time_ms": 0, "error_code": top or per_member[0]})
        return _resp(ApiKeys.LEAVE_GROUP, v, {"throttle_time_ms": 0, "error_code": top, "members": [
            {"member_id": m, "group_instance_id": i, "error_code": e} for (m, i), e in zip(leaving, per_member)]})

    # --- offsets --------------------------------------------------------------------------------------------
    def handle_offset_commit(self, header, req, ctx):
        v = header.request_api_version
        now = self.coordinator.time_ms()
        retention = getattr(req, "retention_time_ms", -1) if 2 <= v <= 4 else -1
        offsets, order = {}, []
        for t in req.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                order.append(tp)
                ts = p.commit_timestamp if v == 1 and p.commit_timestamp >= 0 else now
                expire = (now + retention) if retention >= 0 else (
                    p.commit_timestamp + self.coordinator.config.offsets_retention_minutes * 60000
                    if v == 1 and p.commit_timestamp >= 0 else None)
                offsets[tp] = OffsetAndMetadata(
                    offset=p.committed_offset, leader_epoch=p.committed_leader_epoch if v >= 6 else -1,
                    metadata=p.committed_metadata or "", commit_timestamp=ts, expire_timestamp=expire)
        fut: Future = Future()

        def respond(result: dict) -> None:
            fut.set_result(_resp(ApiKeys.OFFSET_COMMIT, v, {"throttle_time_ms": 0, "topics": partitions_by_topic(
                order, lambda tp: int(result.get(tp, 0)))}))
        if not offsets:
            respond({})
            return fut
        known, errors = committable_offsets(self.auth, ctx, self.cache, req.group_id, offsets)
        if not known:
            respond(errors)
            return fut
        generation = req.generation_id_or_member_epoch if v >= 1 else -1
        self.coordinator.handle_commit_offsets(req.group_id, req.member_id if v >= 1 else "",
                                               req.group_instance_id if v >= 7 else None, generation, known,
                                               lambda result: respond({**errors, **result}))
        return fut

    def handle_offset_fetch(self, header, req, ctx):
        v = header.request_api_version
        if v >= 8:
            groups = []
            for g in req.groups:
                parts = None if g.topics is None else [(t.name, p) for t in g.topics for p in t.partition_indexes]
                r, denied = self._fetch_offsets(ctx, g.group_id, parts, bool(req.require_stable))
                groups.append({"group_id": g.group_id, "error_code": r.error,
                               "topics": self._offset_topics(r, parts, v, denied)})
            return _resp(ApiKeys.OFFSET_FETCH, v, {"throttle_time_ms": 0, "groups": groups})
        parts = None if req.topics is None else [(t.name, p) for t in req.topics for p in t.partition_indexes]
        r, denied = self._fetch_offsets(ctx, req.group_id, parts, bool(getattr(req, "require_stable", False))
                                        if v >= 7 else False)
        if v < 2 and r.error:    # no top-level error before v2: report it per partition
            return _resp(ApiKeys.OFFSET_FETCH, v, {"topics": [
                {"name": t, "partitions": [{"partition_index": p, "committed_offset": -1, "metadata": "",
                                            "error_code": r.error} for (tt, p) in parts or [] if tt == t]}
                for t in dict.fromkeys(t for t, _ in parts or [])]})
        return _resp(ApiKeys.OFFSET_FETCH, v, {"throttle_time_ms": 0, "error_code": r.error,
                                       "topics": self._offset_topics(r, parts, v, denied)})

    def _fetch_offsets(self, ctx, group_id: str, parts,
                       require_stable: bool = False) -> tuple[OffsetFetchResult, frozenset]:
        """The coordinator's answer under Kafka's checks (DESCRIBE on the group, then on each topic), and the
        asked-for partitions denied (unauthorized topics are simply left out of an all-partitions answer)."""
        if not self.auth.authorize(ctx, "Describe", "Group", group_id):
            return OffsetFetchResult(int(Errors.GROUP_AUTHORIZATION_FAILED), {}), frozenset()
        r = self.coordinator.handle_fetch_offsets(group_id, parts, require_stable)
        if r.error or not self.auth.enabled:
            return r, frozenset()
        ok = self.auth.filter_authorized(ctx, "Describe", "Topic", (t for t, _ in (parts or list(r.offsets))))
        denied = frozenset(tp for tp in parts or () if tp[0] not in ok)
        return OffsetFetchResult(r.error, {tp: o for tp, o in r.offsets.items() if tp[0] in ok},
                                 {tp: e for tp, e in r.partition_errors.items() if tp[0] in ok}), denied

    @staticmethod
    def _offset_topics(r, parts, v, denied: frozenset = frozenset()) -> list[dict]:
        if r.error:
            return []
        items = parts if parts is not None else sorted(r.offsets)
        by_topic: dict[str, list] = {}
        for tp in items:
            o = None if tp in r.partition_errors else r.offsets.get(tp)
            by_topic.setdefault(tp[0], []).append({
                "partition_index": tp[1], "committed_offset": o.offset if o else -1,
                "committed_leader_epoch": o.leader_epoch if o else -1, "metadata": o.metadata if o else "",
                "error_code": int(Errors.TOPIC_AUTHORIZATION_FAILED) if tp in denied
                else r.partition_errors.get(tp, 0)})
        return [{"name": t, "partitions": ps} for t, ps in by_topic.items()]

    # --- admin ------------------------------------------------------------------------------------------------
    def handle_describe_groups(self, header, req, ctx):
        v = header.request_api_version
        groups = []
        for gid in req.groups:
            if not self.auth.authorize(ctx, "Describe", "Group", gid):
                groups.append({"error_code": int(Errors.GROUP_AUTHORIZATION_FAILED), "error_message": None,
                               "group_id": gid, "group_state": "", "protocol_type": "", "protocol_data": "",
                               "members": []})
                continue
            s = self.coordinator.handle_describe_group(gid)
            groups.append({"error_code": s.error, "error_message": None, "group_id": gid, "group_state": s.state,
                           "protocol_type": s.protocol_type, "protocol_data": s.protocol,
                           "members": [
                               {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                                "client_id": m.client_id, "client_host": m.client_host,
                                "member_metadata": m.metadata, "member_assignment": m.assignment}
                               for m in s.members],
                           "authorized_operations": self.auth.authorized_operations(ctx, "Group", gid)
                           if getattr(req, "include_authorized_operations", False) else None})
        return _resp(ApiKeys.DESCRIBE_GROUPS, v, {"throttle_time_ms": 0, "groups": groups})

    def handle_list_groups(self, header, req, ctx):
        v = header.request_api_version
        states = set(req.states_filter or []) if v >= 4 else None
        err, groups = self.coordinator.handle_list_groups(states)
        # v5 (KIP-848): a types filter; every group of this coordinator is a classic group (Kafka's GroupType)
        if v >= 5 and req.types_filter and CLASSIC_GROUP_TYPE not in {t.lower() for t in req.types_filter}:
            groups = []
        if not self.auth.authorize_cluster(ctx, "Describe"):
            groups = [g for g in groups if self.auth.authorize(ctx, "Describe", "Group", g.group_id)]
        return _resp(ApiKeys.LIST_GROUPS, v, {"throttle_time_ms": 0, "error_code": err, "groups": [
            {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state,
             "group_type": CLASSIC_GROUP_TYPE} for g in groups]})

    def handle_delete_groups(self, header, req, ctx):
        v = header.request_api_version
        fut: Future = Future()
        names = list(req.groups_names)

        def respond(result: dict) -> None:
            fut.set_result(_resp(ApiKeys.DELETE_GROUPS, v, {"throttle_time_ms": 0, "results": [
                {"group_id": g, "error_code": result.get(g, 0)} for g in names]}))
        deletable = self.auth.filter_authorized(ctx, "Delete", "Group", names)
        denied = {g: int(Errors.GROUP_AUTHORIZATION_FAILED) for g in names if g not in deletable}
        self.coordinator.handle_delete_groups([g for g in dict.fromkeys(names) if g in deletable],
                                              lambda result: respond({**denied, **result}))
        return fut

    def handle_offset_delete(self, header, req, ctx):
        v = header.request_api_version
        fut: Future = Future()
        parts = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]
        readable = self.auth.filter_authorized(ctx, "Read", "Topic", (t for t, _ in parts))
        denied = {tp for tp in parts if tp[0] not in readable}
        unknown = {tp for tp in parts if tp not in denied and self.cache.get_partition(*tp) is None}

        def respond(err: int, result: dict) -> None:
            by_topic: dict[str, list] = {}
            for tp in parts:
                code = int(Errors.TOPIC_AUTHORIZATION_FAILED) if tp in denied else \
                    int(Errors.UNKNOWN_TOPIC_OR_PARTITION) if tp in unknown else result.get(tp, 0)
                by_topic.setdefault(tp[0], []).append({"partition_index": tp[1], "error_code": code})
            fut.set_result(_resp(ApiKeys.OFFSET_DELETE, v, {
                "error_code": err, "throttle_time_ms": 0,
                "topics": [] if err else [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}))
        if not self.auth.authorize(ctx, "Delete", "Group", req.group_id):
            respond(int(Errors.GROUP_AUTHORIZATION_FAILED), {})
            return fut
        self.coordinator.handle_delete_offsets(req.group_id, [tp for tp in parts if tp not in unknown | denied],
                                               respond)
        return fut
