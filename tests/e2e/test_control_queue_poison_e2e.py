"""A control queue no bad znode can stop (issue #26): request znodes that are not control requests, or whose body
does not match its API's spec, are answered INVALID_REQUEST (or deleted when they cannot be answered), logged once,
and the requests behind them are applied: a topic created after the poison has its replicas on the broker."""
from __future__ import annotations

import json
import os

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from kafkatier.waiting import wait_for
from kafkatier.zk import paths

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

POISON = [
    b"{not json",
    b"",
    b"\xff\xfe\x00",
    json.dumps([1, 2, 3]).encode(),
    json.dumps({"version": 1, "api_key": 4}).encode(),                                    # missing fields
    json.dumps({"version": 1, "api_key": "four", "api_version": 5, "api_name": "LeaderAndIsr",
                "controller_id": 1, "controller_epoch": 1, "broker_epoch": -1, "body": {}}).encode(),
    json.dumps({"version": 1, "api_key": 4, "api_version": 5, "api_name": "LeaderAndIsr", "controller_id": 1,
                "controller_epoch": 1, "broker_epoch": -1, "body": {"topic_states": "not a list"}}).encode(),
    json.dumps({"version": 1, "api_key": 5, "api_version": 3, "api_name": "StopReplica", "controller_id": 1,
                "controller_epoch": 1, "broker_epoch": -1,
                "body": {"topic_states": [{"topic_name": 7, "partition_states": "x"}]}}).encode(),
    json.dumps({"version": 1, "api_key": 6, "api_version": 7, "api_name": "UpdateMetadata", "controller_id": 1,
                "controller_epoch": 1, "broker_epoch": -1, "body": {"live_brokers": {"a": 1}}}).encode(),
    json.dumps({"version": 1, "api_key": 4, "api_version": 5, "api_name": "LeaderAndIsr", "controller_id": 1,
                "controller_epoch": 1, "broker_epoch": -1,
                "body": {"topic_states": [{"topic_name": "t" * 200_000, "partition_states": [
                    {"partition_index": "zero"}] * 1000}]}}).encode(),                   # huge and wrong
    ("[" * 100_000 + "]" * 100_000).encode(),                                             # deeply nested
]


def test_poisoned_queue_drains_and_later_requests_apply(module_cluster_factory):
    c = module_cluster_factory(brokers=2)
    victim = 2
    queue = paths.control_requests(victim)
    for data in POISON:
        c.zk.create(queue + "/" + paths.REQUEST_PREFIX, data, sequence=True)
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic("after-poison", 2, 2)])
    finally:
        admin.close()
    dirs = c.manager.broker(victim)["log_dirs"]

    def hosted() -> bool:
        return all(any(os.path.isdir(os.path.join(d, f"after-poison-{p}")) for d in dirs) for p in (0, 1))

    wait_for(hosted, 60, message="broker 2 hosts both replicas of a topic created after the poison")
    # every poisoned znode was answered or deleted: none is left unanswered in the queue
    wait_for(lambda: not (set(c.zk.get_children(queue)) - set(c.zk.get_children(paths.control_responses(victim)))),
             30, message="no unanswered request left")
    log = open(os.path.join(c.data_dir, "logs", f"broker-{victim}.log"), errors="replace").read()
    assert log.count("malformed control request") + log.count("invalid control request body") <= 2 * len(POISON)
    assert "error draining the control queue" not in log
