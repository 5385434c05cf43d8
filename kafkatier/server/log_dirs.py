"""AlterReplicaLogDirs (apiKey 34, v0-2) and DescribeLogDirs (apiKey 35, v0-4): Kafka's
``KafkaApis.handleAlterReplicaLogDirsRequest`` / ``handleDescribeLogDirsRequest``
(docs/kip-113-jbod.md#alterreplicalogdirs, #describelogdirs).

The handlers only translate: the per-partition order of checks lives in ``ReplicaManager.alter_replica_log_dirs``
and the per-dir view in ``ReplicaManager.describe_log_dirs``.  kafka-python's message classes decode every
version we advertise (its schemas start at v1 because Kafka 4.0 removed v0, but v0 is byte-identical to v1 for
both APIs and its decoders accept it).

Authorization, when an authorizer is configured: ALTER on CLUSTER for AlterReplicaLogDirs (else every
partition gets CLUSTER_AUTHORIZATION_FAILED), DESCRIBE on CLUSTER for DescribeLogDirs (else no results and a
top-level CLUSTER_AUTHORIZATION_FAILED from v3, as Kafka).  Both requests are answered by the broker that hosts
the replica, never forwarded.
"""
from __future__ import annotations

from typing import Any, Callable

import attrs

from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol import codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.build import build
from kafkatier.protocol.errors import Errors
from kafkatier.server.auth_helper import AuthHelper

log = get_logger("server.log-dirs")

ALTER_VERSIONS, DESCRIBE_VERSIONS = (0, 2), (0, 4)
ANY_LOG_DIR = "any"  # seed: cancel a move / let the broker choose


@attrs.frozen(order=True)
class ReplicaLogDirInfo:
    """One current or future log in a dir (DescribeLogDirs' partition entry)."""

    topic: str
    partition: int
    size: int
    offset_lag: int
    is_future: bool


@attrs.frozen
class LogDirDescription:
    """One configured log dir (DescribeLogDirs' result entry); bytes are -1 for an offline dir."""

    path: str
    error: Errors
    replicas: tuple[ReplicaLogDirInfo, ...]
    total_bytes: int
    usable_bytes: int


class LogDirsApis:
    """The two request handlers, over the replica manager and an optional authorizer."""

    def __init__(self, replica_manager, auth: AuthHelper | None = None):
        self.rm = replica_manager
        self.auth = auth or AuthHelper()  # Kafka's ACL checks; allows all without an authorizer

    def handle_alter_replica_log_dirs(self, header, req, context) -> Any:
        v = header.request_api_version
        requested: dict[tuple[str, int], str] = {}
        for d in req.dirs or []:
            for t in d.topics or []:
                for p in t.partitions or []:
                    requested[(t.name, p)] = d.path
        if not self.auth.authorize_cluster(context, "Alter"):
            results = {tp: Errors.CLUSTER_AUTHORIZATION_FAILED for tp in requested}
        else:
            results = self.rm.alter_replica_log_dirs(requested)
        log.info("AlterReplicaLogDirs %s", kv(requested=len(requested), errors=",".join(
            f"{t}-{p}:{e.name}" for (t, p), e in sorted(results.items()) if e != Errors.NONE) or "-"))
        by_topic: dict[str, list[dict]] = {}
        for (topic, partition), err in results.items():
            by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": int(err)})
        return build(codec.response_class(ApiKeys.ALTER_REPLICA_LOG_DIRS), v, {
            "throttle_time_ms": 0,
            "results": [{"topic_name": t, "partitions": ps} for t, ps in by_topic.items()]})

    def handle_describe_log_dirs(self, header, req, context) -> Any:
        v = header.request_api_version
        cls = codec.response_class(ApiKeys.DESCRIBE_LOG_DIRS)
        if not self.auth.authorize_cluster(context, "Describe"):
            return build(cls, v, {"throttle_time_ms": 0, "error_code": int(Errors.CLUSTER_AUTHORIZATION_FAILED),
                                  "results": []})
        wanted = None
        if req.topics is not None:
            wanted = {(t.topic, p) for t in req.topics for p in (t.partitions or [])}
        results = []
        for d in self.rm.describe_log_dirs(wanted):
            topics: dict[str, list[dict]] = {}
            for r in d.replicas:
                topics.setdefault(r.topic, []).append({
                    "partition_index": r.partition, "partition_size": r.size, "offset_lag": r.offset_lag,
                    "is_future_key": r.is_future})
            results.append({"error_code": int(d.error), "log_dir": d.path, "total_bytes": d.total_bytes,
                            "usable_bytes": d.usable_bytes,
                            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
        return build(cls, v, {"throttle_time_ms": 0, "error_code": 0, "results": results})

    def handlers(self) -> dict[int, tuple[tuple[int, int], Callable]]:
        return {ApiKeys.ALTER_REPLICA_LOG_DIRS: (ALTER_VERSIONS, self.handle_alter_replica_log_dirs),
                ApiKeys.DESCRIBE_LOG_DIRS: (DESCRIBE_VERSIONS, self.handle_describe_log_dirs)}
