"""ElectLeaders (apiKey 43, v0-2): Kafka's ``KafkaApis.handleElectLeaders`` with ``ReplicaManager.electLeaders``
and ``DelayedElectLeader`` (ZooKeeper mode).

- Authorization, when an authorizer is configured: ALTER on CLUSTER, else every requested partition gets
  CLUSTER_AUTHORIZATION_FAILED and so does the top-level error (v1+).
- Null partitions = every partition in this broker's metadata cache.
- The election itself runs on the controller (``controller/replica_election_manager.py``).  As in Kafka's
  ZooKeeper mode the request must reach the active controller: any other broker answers NOT_CONTROLLER for every
  partition (clients look the controller up again and retry); nothing is forwarded.
- The answer waits until this broker's metadata shows every elected leader, at most ``timeout_ms``; partitions
  still not shown then get REQUEST_TIMED_OUT.
- v0 has no election type (preferred) and no top-level error.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any, Callable

from kafkatier.common.structs import TopicPartition
from kafkatier.controller.replica_election_manager import ElectionOutcome, ElectionType
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol import codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.build import build
from kafkatier.protocol.errors import Errors
from kafkatier.server.auth_helper import AuthHelper
from kafkatier.waiting import WaitTimeout, wait_for

log = get_logger("server.election-apis")

VERSIONS = (0, 2)


class ElectionApis:
    """The ElectLeaders handler, over the controller, the metadata cache and an optional authorizer."""

    def __init__(self, controller, metadata_cache, auth: AuthHelper | None = None):
        self.controller = controller
        self.cache = metadata_cache
        self.auth = auth or AuthHelper()  # Kafka's ACL checks; allows all without an authorizer

    def handlers(self) -> dict[int, tuple[tuple[int, int], Callable]]:
        return {ApiKeys.ELECT_LEADERS: (VERSIONS, self.handle_elect_leaders)}


    def handle_elect_leaders(self, header, req, context) -> Any:
        v = header.request_api_version
        election_type = ElectionType(req.election_type) if v >= 1 else ElectionType.PREFERRED
        requested = None if req.topic_partitions is None else sorted(
            {TopicPartition(t.topic, p) for t in req.topic_partitions for p in t.partitions or []})
        if not self.auth.authorize_cluster(context, "Alter"):
            outcomes = {tp: ElectionOutcome(Errors.CLUSTER_AUTHORIZATION_FAILED) for tp in requested or []}
            return self._response(v, Errors.CLUSTER_AUTHORIZATION_FAILED, outcomes)
        if requested is None:
            requested = [TopicPartition(t, pm.partition) for t in self.cache.topics()
                         for pm in self.cache.topic_partitions(t)]
        out: Future = Future()

        def answered(f: Future) -> None:
            exc = f.exception()
            if exc is not None:
                log.error("leader election failed %s", kv(error=repr(exc)))
                outcomes = {tp: ElectionOutcome(Errors.UNKNOWN_SERVER_ERROR, str(exc)) for tp in requested}
                out.set_result(self._response(v, Errors.NONE, outcomes))
                return
            outcomes = f.result()
            elected = {tp: o.leader for tp, o in outcomes.items() if o.error == Errors.NONE}
            if not elected:
                out.set_result(self._response(v, Errors.NONE, outcomes))
                return
            threading.Thread(target=self._await_leaders, args=(v, outcomes, elected, req.timeout_ms, out),
                             name="elect-leaders-wait", daemon=True).start()
        self.controller.elect_leaders(requested, election_type).add_done_callback(answered)
        return out

    def _await_leaders(self, v: int, outcomes: dict, elected: dict[TopicPartition, int], timeout_ms: int,
                       out: Future) -> None:
        """Kafka's DelayedElectLeader: done once the metadata cache shows the new leaders."""
        def shown(tp: TopicPartition) -> bool:
            pm = self.cache.get_partition(tp.topic, tp.partition)
            return pm is not None and pm.leader == elected[tp]
        try:
            wait_for(lambda: all(shown(tp) for tp in elected), max(timeout_ms, 0) / 1000.0, interval=0.02,
                     message="elected leaders in the metadata cache")
        except WaitTimeout:
            for tp in elected:
                if not shown(tp):
                    outcomes[tp] = ElectionOutcome(Errors.REQUEST_TIMED_OUT, "Election timed out")
        out.set_result(self._response(v, Errors.NONE, outcomes))

    @staticmethod
    def _response(v: int, error: Errors, outcomes: dict[TopicPartition, ElectionOutcome]):
        by_topic: dict[str, list[dict]] = {}
        for tp, o in sorted(outcomes.items()):
            by_topic.setdefault(tp.topic, []).append({"partition_id": tp.partition, "error_code": int(o.error),
                                                      "error_message": o.message})
        return build(codec.response_class(ApiKeys.ELECT_LEADERS), v, {
            "throttle_time_ms": 0, "error_code": int(error),
            "replica_election_results": [{"topic": t, "partition_result": ps} for t, ps in by_topic.items()]})
