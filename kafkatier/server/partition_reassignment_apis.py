"""AlterPartitionReassignments (apiKey 45, v0) and ListPartitionReassignments (apiKey 46, v0): Kafka's
``KafkaApis.handleAlterPartitionReassignmentsRequest`` / ``handleListPartitionReassignmentsRequest`` in
ZooKeeper mode.

The handlers only translate: the controller's
:class:`kafkatier.controller.partition_reassignment.PartitionReassignmentManager` validates and runs each request
on the controller event thread and answers through a future.  A broker that is not the active controller
answers a top-level NOT_CONTROLLER, as Kafka's ZooKeeper-mode controller does (clients find the controller and
retry); so does a controller that resigns while the request is queued.

Authorization, when an authorizer is configured: ALTER on CLUSTER for AlterPartitionReassignments, DESCRIBE on
CLUSTER for ListPartitionReassignments; otherwise a top-level CLUSTER_AUTHORIZATION_FAILED, as Kafka.
"""
from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Callable, Iterable

from kafkatier.common.structs import TopicPartition
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol import codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.build import build
from kafkatier.protocol.errors import Errors, KafkaError
from kafkatier.server.auth_helper import AuthHelper

log = get_logger("server.partition-reassignment")

ALTER_VERSIONS, LIST_VERSIONS = (0, 0), (0, 0)


class PartitionReassignmentApis:
    """The two request handlers, over the controller's reassignment manager and an optional authorizer."""

    def __init__(self, reassignments, auth: AuthHelper | None = None):
        self.reassignments = reassignments
        self.auth = auth or AuthHelper()  # Kafka's ACL checks; allows all without an authorizer

    def handle_alter_partition_reassignments(self, header, req, context) -> Any:
        v = header.request_api_version
        cls = codec.response_class(ApiKeys.ALTER_PARTITION_REASSIGNMENTS)
        if not self.auth.authorize_cluster(context, "Alter"):
            return _top_level(cls, v, "responses", Errors.CLUSTER_AUTHORIZATION_FAILED, None)
        requested: dict[TopicPartition, tuple[int, ...] | None] = {}
        for t in req.topics or []:
            for p in t.partitions or []:
                requested[TopicPartition(t.name, p.partition_index)] = (
                    None if p.replicas is None else tuple(p.replicas))
        return _answer_by_topic(
            cls, v, "responses", self.reassignments.alter_partition_reassignments(requested),
            lambda result: ((tp.topic, {"partition_index": tp.partition, "error_code": int(r.error),
                                        "error_message": r.message}) for tp, r in sorted(result.items())))

    def handle_list_partition_reassignments(self, header, req, context) -> Any:
        v = header.request_api_version
        cls = codec.response_class(ApiKeys.LIST_PARTITION_REASSIGNMENTS)
        if not self.auth.authorize_cluster(context, "Describe"):
            return _top_level(cls, v, "topics", Errors.CLUSTER_AUTHORIZATION_FAILED, None)
        wanted = None
        if req.topics is not None:
            wanted = [TopicPartition(t.name, p) for t in req.topics for p in (t.partition_indexes or [])]
        return _answer_by_topic(
            cls, v, "topics", self.reassignments.list_partition_reassignments(wanted),
            lambda result: ((r.tp.topic, {"partition_index": r.tp.partition, "replicas": list(r.replicas),
                                          "adding_replicas": list(r.adding), "removing_replicas": list(r.removing)})
                            for r in result))

    def handlers(self) -> dict[int, tuple[tuple[int, int], Callable]]:
        return {ApiKeys.ALTER_PARTITION_REASSIGNMENTS: (ALTER_VERSIONS, self.handle_alter_partition_reassignments),
                ApiKeys.LIST_PARTITION_REASSIGNMENTS: (LIST_VERSIONS, self.handle_list_partition_reassignments)}


def _top_level(cls, v: int, list_field: str, error: Errors, message: str | None, topics: list | None = None) -> Any:
    return build(cls, v, {"throttle_time_ms": 0, "error_code": int(error), "error_message": message,
                          list_field: topics or []})


def _answer_by_topic(cls, v: int, list_field: str, request: Future,
                     partitions: Callable[[Any], Iterable[tuple[str, dict]]]) -> Future:
    """The response once ``request`` is done: its top-level error, or ``list_field`` with the (topic, partition
    entry) pairs of its result grouped by topic."""
    out: Future = Future()

    def answer(f: Future) -> None:
        error = _top_level_error(f)
        if error is not None:
            out.set_result(_top_level(cls, v, list_field, *error))
            return
        by_topic: dict[str, list[dict]] = {}
        for topic, entry in partitions(f.result()):
            by_topic.setdefault(topic, []).append(entry)
        out.set_result(_top_level(cls, v, list_field, Errors.NONE, None,
                                  [{"name": t, "partitions": ps} for t, ps in by_topic.items()]))
    request.add_done_callback(answer)
    return out


def _top_level_error(f: Future) -> tuple[Errors, str | None] | None:
    """The top-level answer for a failed future (NOT_CONTROLLER, or Kafka's code of a KafkaError)."""
    e = f.exception()
    if e is None:
        return None
    if isinstance(e, KafkaError):
        return e.error, e.message or None
    log.error("reassignment request failed %s", kv(reason=e))
    return Errors.UNKNOWN_SERVER_ERROR, str(e)
