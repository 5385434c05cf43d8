"""AlterReplicaLogDirs / DescribeLogDirs handlers and ReplicaManager's order of checks
(docs/kip-113-jbod.md#alterreplicalogdirs), with real logs on disk and no ZooKeeper; plus the dynamic throttle's
precedence rules."""
from __future__ import annotations

import types

import pytest
from kafka.protocol.admin.cluster import (AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse,
                                          DescribeLogDirsRequest)

from kafkatier.log.log_manager import LogManager
from kafkatier.protocol.errors import Errors, KafkaError
from kafkatier.server.auth_helper import AuthHelper
from kafkatier.server.log_dirs import LogDirsApis
from kafkatier.server.replica_manager import ReplicaManager
from kafkatier.protocol.control_messages import LeaderAndIsrRequestData
from fakes import FakeZk

D = AlterReplicaLogDirsRequest.AlterReplicaLogDir
T = D.AlterReplicaLogDirTopic


@pytest.fixture
def rm(tmp_path):
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    lm = LogManager(dirs)
    lm.startup()
    r = ReplicaManager(1, lm, lambda t: {"file.delete.delay.ms": "0"})
    yield r
    r.shutdown()
    lm.shutdown()


def become_leader(rm: ReplicaManager, topic: str, partition: int = 0) -> None:
    rm.handle_leader_and_isr(LeaderAndIsrRequestData.from_json(7, {"controller_epoch": 1, "topic_states": [{"topic_name": topic, "partition_states": [
        {"partition_index": partition, "leader": 1, "leader_epoch": 0, "isr": [1], "replicas": [1],
         "is_new": True}]}]}))


def header(key: int, version: int):
    return types.SimpleNamespace(request_api_key=key, request_api_version=version)


def alter(apis: LogDirsApis, version: int, path: str, topic: str, partitions=(0,)):
    req = AlterReplicaLogDirsRequest(dirs=[D(path=path, topics=[T(name=topic, partitions=list(partitions))])])
    resp = apis.handle_alter_replica_log_dirs(header(34, version), req, None)
    data = resp.encode(version=version)  # the answer encodes at every version we advertise
    decoded = AlterReplicaLogDirsResponse.decode(data, version=version)
    return {(t.topic_name, p.partition_index): p.error_code for t in decoded.results for p in t.partitions}


def test_order_of_checks_and_codes_at_every_version(rm):
    apis = LogDirsApis(rm)
    d1, d2 = rm.log_manager.log_dirs
    become_leader(rm, "t")
    cur = rm.log_manager.get_log("t", 0).parent_dir
    other = d2 if cur == d1 else d1
    for v in (0, 1, 2):
        assert alter(apis, v, "/nowhere", "t") == {("t", 0): Errors.LOG_DIR_NOT_FOUND}
        assert alter(apis, v, "relative", "t") == {("t", 0): Errors.LOG_DIR_NOT_FOUND}
        assert alter(apis, v, "/nowhere", "unknown-topic") == {("unknown-topic", 0): Errors.LOG_DIR_NOT_FOUND}
        assert alter(apis, v, other, "unknown-topic") == {("unknown-topic", 0): Errors.REPLICA_NOT_AVAILABLE}
        assert alter(apis, v, other, "x" * 249) == {("x" * 249, 0): Errors.INVALID_TOPIC_EXCEPTION}
        assert alter(apis, v, cur, "t") == {("t", 0): Errors.NONE}  # already there: no-op
        assert alter(apis, v, "any", "t") == {("t", 0): Errors.NONE}
    assert rm.log_manager.get_future_log("t", 0) is None
    rm.log_manager.handle_log_dir_failure(other)
    assert alter(apis, 2, other, "t") == {("t", 0): Errors.KAFKA_STORAGE_ERROR}


def test_unknown_topic_is_remembered_and_created_there(rm):
    apis = LogDirsApis(rm)
    d2 = rm.log_manager.log_dirs[1]
    assert alter(apis, 2, d2, "later", partitions=(0, 1, 2)) == {("later", p): Errors.REPLICA_NOT_AVAILABLE
                                                                  for p in range(3)}
    for p in range(3):
        become_leader(rm, "later", p)
        assert rm.log_manager.get_log("later", p).parent_dir == d2


def test_describe_null_topics_is_all_and_filters_omit_empty_topics(rm):
    apis = LogDirsApis(rm)
    become_leader(rm, "a")
    become_leader(rm, "b")
    for v in range(5):
        resp = apis.handle_describe_log_dirs(header(35, v), DescribeLogDirsRequest(topics=None), None)
        resp.encode(version=v)
        assert {t.name for r in resp.results for t in r.topics} == {"a", "b"}
        req = DescribeLogDirsRequest(topics=[DescribeLogDirsRequest.DescribableLogDirTopic(topic="a", partitions=[0])])
        resp = apis.handle_describe_log_dirs(header(35, v), req, None)
        assert {t.name for r in resp.results for t in r.topics} == {"a"}
        if v >= 4:
            assert all(r.total_bytes > 0 and r.usable_bytes > 0 for r in resp.results)


class Deny:
    def __init__(self):
        self.asked = []

    def authorize(self, principal, host, operation, resource_type, name):
        self.asked.append((operation, resource_type, name))
        return False


def test_authorization_on_the_cluster_resource(rm):
    deny = Deny()
    apis = LogDirsApis(rm, AuthHelper(deny))
    ctx = types.SimpleNamespace(session={"principal": "User:bob"}, principal="User:bob", client_address=("1.2.3.4", 1))
    req = AlterReplicaLogDirsRequest(dirs=[D(path=rm.log_manager.log_dirs[1], topics=[T(name="t", partitions=[0])])])
    resp = apis.handle_alter_replica_log_dirs(header(34, 2), req, ctx)
    assert [p.error_code for t in resp.results for p in t.partitions] == [Errors.CLUSTER_AUTHORIZATION_FAILED]
    resp = apis.handle_describe_log_dirs(header(35, 4), DescribeLogDirsRequest(topics=None), ctx)
    assert resp.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED and resp.results == []
    assert deny.asked == [("Alter", "Cluster", "kafka-cluster"), ("Describe", "Cluster", "kafka-cluster")]


def test_v0_requests_decode():
    """kafka-python's schemas start at v1 (Kafka 4.0 dropped v0) but v0 is the same layout: our codec decodes it."""
    from kafkatier.protocol import codec
    req = AlterReplicaLogDirsRequest(dirs=[D(path="/d", topics=[T(name="t", partitions=[0, 1])])])
    back = codec.request_class(34).decode(req.encode(version=0), version=0)
    assert [(d.path, [(t.name, list(t.partitions)) for t in d.topics]) for d in back.dirs] == [("/d", [("t", [0, 1])])]
    back = codec.request_class(35).decode(DescribeLogDirsRequest(topics=None).encode(version=0), version=0)
    assert back.topics is None


def test_throttle_precedence_and_validation():
    """KIP-113's throttle: this broker's layer over the cluster default over the static properties; within one
    layer KIP-113's name over Kafka's."""
    from kafkatier.server.dynamic_broker_config import ALTER_LOG_DIRS_THROTTLE_NAMES, DynamicBrokerConfig
    kip113_name, alias = ALTER_LOG_DIRS_THROTTLE_NAMES

    class Store:
        def get_entity_config_and_version(self, entity_type, name):
            return {}, None

    def rate(static, default, own):
        d = DynamicBrokerConfig(1, static, Store())
        d.on_change("<default>", default)
        d.on_change("1", own)
        return d.synonym_value(ALTER_LOG_DIRS_THROTTLE_NAMES)
    assert rate({}, {}, {}) is None  # the default: unthrottled
    assert rate({alias: "10"}, {}, {}) == "10"
    assert rate({alias: "10"}, {kip113_name: "20"}, {}) == "20"
    assert rate({}, {kip113_name: "20"}, {alias: "30"}) == "30"
    assert rate({}, {}, {alias: "30", kip113_name: "40"}) == "40"  # the KIP-113 name wins
    d = DynamicBrokerConfig(1, {}, Store())
    for bad in ({kip113_name: "-1"}, {kip113_name: "abc"}, {"log.dirs": "/x"}):
        with pytest.raises(KafkaError) as e:
            d.alter("1", bad, [], replace=False, validate_only=True)
        assert e.value.error == Errors.INVALID_REQUEST  # Kafka's ZkAdminManager: "Invalid config value for resource"


def test_full_disk_takes_the_dir_offline_once_and_reports_it(tmp_path, monkeypatch):
    """ENOSPC on an append: KAFKA_STORAGE_ERROR to the producer, the dir offline, its partitions offline, one
    /log_dir_event_notification for the controller (which then elects another leader)."""
    import errno
    import json

    from kafka.record.memory_records import MemoryRecordsBuilder

    from kafkatier.log.segment import LogSegment
    from kafkatier.waiting import wait_for

    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    lm = LogManager(dirs)
    lm.startup()
    zk = FakeZk()
    r = ReplicaManager(1, lm, lambda t: {}, zk=zk)
    try:
        become_leader(r, "t")
        full = r.log_manager.get_log("t", 0).parent_dir

        def no_space(self, *a, **k):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(LogSegment, "append", no_space)
        b = MemoryRecordsBuilder(2, 0, 1 << 16)
        b.append(0, None, b"v")
        b.close()
        answers = []
        for _ in range(2):
            r.append_records(1000, 1, {("t", 0): bytes(b.buffer())}, answers.append)
        assert [a[("t", 0)].error for a in answers] == [Errors.KAFKA_STORAGE_ERROR, Errors.KAFKA_STORAGE_ERROR]
        wait_for(lambda: ("t", 0) in r.offline_partitions and zk.created, 5, message="the dir taken offline")
        assert full in lm.offline_dirs and len(zk.created) == 1
        path, data, seq = zk.created[0]
        assert path == "/log_dir_event_notification/log_dir_event_" and seq
        assert json.loads(data) == {"version": 1, "broker": 1, "event": 1}
        resp = r.handle_leader_and_isr(LeaderAndIsrRequestData.from_json(7, {"controller_epoch": 1, "topic_states": [{"topic_name": "t",
                                        "partition_states": [{"partition_index": 0, "leader": 1, "leader_epoch": 1,
                                                              "isr": [1], "replicas": [1]}]}]}))
        assert resp.topics[0].partition_errors[0].error_code == Errors.KAFKA_STORAGE_ERROR
    finally:
        r.shutdown()
        lm.shutdown()
