"""OffsetForLeaderEpoch (key 23) on one broker: the epoch lookup and Kafka's order of checks and error codes.

A real ReplicaManager and LogManager (tmp dirs, no ZooKeeper) host ``t-0`` (this broker leads it), ``f-0``
(this broker follows) and know ``elsewhere-0`` only from the metadata; requests go through the handler the broker
registers, as kafka-python's classes decode them."""
from __future__ import annotations

import time

import pytest
from kafka.protocol.consumer import OffsetForLeaderEpochRequest

from kafkatier.common.structs import TopicPartition
from kafkatier.log.log_manager import LogManager
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.errors import Errors
from kafkatier.server.auth_helper import AuthHelper
from kafkatier.server.metadata_cache import MetadataCache
from kafkatier.server.network import ConnectionContext
from kafkatier.server.offset_for_leader_epoch import OffsetForLeaderEpochApis
from kafkatier.server.replica_manager import ReplicaManager
from kafkatier.protocol.control_messages import LeaderAndIsrRequestData, UpdateMetadataRequestData

from tests.unit.fakes import record_batch


def records(n: int) -> bytes:
    """``n`` records stamped now."""
    return record_batch(n, ts=int(time.time() * 1000), value_size=0)


T = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
P = T.OffsetForLeaderPartition


def partition_state(topic: str, leader: int, epoch: int) -> dict:
    return {"partition_index": 0, "controller_epoch": 1, "leader": leader,
            "leader_epoch": epoch, "isr": [1, 2], "partition_epoch": epoch, "replicas": [1, 2],
            "adding_replicas": [], "removing_replicas": [], "is_new": True}


def metadata_state(*args, **kw) -> dict:
    """The UpdateMetadata form of :func:`partition_state`."""
    ps = partition_state(*args, **kw)
    return {**{k: ps[k] for k in ("partition_index", "controller_epoch", "leader", "leader_epoch", "isr", "replicas")},
            "zk_version": ps["partition_epoch"]}


class Header:
    def __init__(self, version: int):
        self.request_api_key = ApiKeys.OFFSET_FOR_LEADER_EPOCH
        self.request_api_version = version
        self.client_id = "test"


class Broker:
    def __init__(self, tmp_path, authorizer=None):
        self.cache = MetadataCache(1)
        self.cache.update(UpdateMetadataRequestData.from_json(8, {"controller_id": 1, "live_brokers": [
            {"id": b, "endpoints": [{"host": "127.0.0.1", "port": 1}]} for b in (1, 2)], "topic_states": [
            {"topic_name": t, "partition_states": [metadata_state(t, 1, 1)]} for t in ("t", "f", "elsewhere")]}))
        self.lm = LogManager([str(tmp_path / "d1")], broker_id=1, cluster_id="c", topic_configs=lambda t: {})
        self.rm = ReplicaManager(1, self.lm, lambda t: {}, zk=None, metadata_cache=self.cache,
                                 replica_lag_time_max_ms=30000)
        self.apis = OffsetForLeaderEpochApis(self.rm, AuthHelper(authorizer))
        self.rm.handle_leader_and_isr(LeaderAndIsrRequestData.from_json(7, {"controller_epoch": 1, "topic_states": [
            {"topic_name": "f", "partition_states": [partition_state("f", 2, 4)]}]}))

    def lead(self, epoch: int, produce: int) -> None:
        self.rm.handle_leader_and_isr(LeaderAndIsrRequestData.from_json(7, {"controller_epoch": 1, "topic_states": [
            {"topic_name": "t", "partition_states": [partition_state("t", 1, epoch)]}]}))
        if produce:
            self.rm.get_partition("t", 0).append_records_to_leader(records(produce), 1)

    def ask(self, asks: dict[str, list[tuple[int, int]]], version: int = 4, replica_id: int = -1,
            principal: str = "User:ANONYMOUS") -> dict[tuple[str, int], tuple[int, int, int]]:
        """{topic: [(current_leader_epoch, leader_epoch)]} for partition 0 -> {(topic, i): (error, epoch, offset)}."""
        body = {"topics": [T(topic=t, partitions=[P(partition=0, current_leader_epoch=c, leader_epoch=e)
                                                  for c, e in ps]) for t, ps in asks.items()]}
        if version >= 3:
            body["replica_id"] = replica_id
        req = OffsetForLeaderEpochRequest(version=version, **body)
        resp = self.apis.handlers()[ApiKeys.OFFSET_FOR_LEADER_EPOCH][1](
            Header(version), req, ConnectionContext("c1", ("127.0.0.1", 5555), principal=principal))
        resp = type(resp).decode(resp.encode(version=version), version=version)  # what the client reads
        out = {}
        for t in resp.topics:
            for i, p in enumerate(t.partitions):
                out[(t.topic, i)] = (p.error_code, p.leader_epoch, p.end_offset)
        return out

    def close(self) -> None:
        self.rm.shutdown()
        self.lm.shutdown()


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path)
    b.lead(1, 10)   # epoch 1: offsets 0-9
    b.lead(3, 5)    # epoch 3: offsets 10-14 (epoch 2 never led here)
    b.lead(5, 0)    # epoch 5: no records, so epoch 6 starting at the same offset replaces it (as in Kafka)
    b.lead(6, 2)    # epoch 6: offsets 15-16, the log end offset is 17
    yield b
    b.close()


def test_end_offset_of_the_largest_epoch_not_above_the_requested_one(broker):
    got = broker.ask({"t": [(-1, 6), (-1, 5), (-1, 4), (-1, 3), (-1, 2), (-1, 1), (-1, 0), (-1, 7), (-1, -1)]})
    assert [got[("t", i)] for i in range(9)] == [
        (0, 6, 17),    # the latest epoch ends at the log end offset
        (0, 3, 15),    # unknown epochs 5 and 4: the largest known below, ending where the next known starts
        (0, 3, 15),
        (0, 3, 15),
        (0, 1, 10),
        (0, 1, 10),
        (0, 0, 0),     # below the first known epoch: the requested epoch, ending where the first one starts
        (0, -1, -1),   # above the latest: undefined, no error
        (0, -1, -1)]   # undefined


@pytest.mark.parametrize("version", [2, 3, 4])
def test_every_version_kafka_python_decodes(broker, version):
    assert broker.ask({"t": [(6, 3)]}, version=version) == {("t", 0): (0, 3, 15)}


@pytest.mark.parametrize("version, answer", [(0, (0, -1, 15)), (1, (0, 3, 15))])
def test_versions_0_and_1_as_kafka_39_serves_them(broker, version, answer):
    """v0-1 (removed in Kafka 4.0, served by 3.9): no current leader epoch to check; v0 answers no epoch."""
    assert broker.ask({"t": [(-1, 3)]}, version=version) == {("t", 0): answer}


def test_errors_in_kafka_order(broker):
    E = Errors
    assert broker.ask({"t": [(5, 6)]}) == {("t", 0): (E.FENCED_LEADER_EPOCH, -1, -1)}
    assert broker.ask({"t": [(7, 6)]}) == {("t", 0): (E.UNKNOWN_LEADER_EPOCH, -1, -1)}
    # A follower answers NOT_LEADER_OR_FOLLOWER to consumers and replicas alike, once the epoch is current;
    # a stale epoch is reported first (Partition.getLocalLog checks it before leadership).
    assert broker.ask({"f": [(4, 4)]}) == {("f", 0): (E.NOT_LEADER_OR_FOLLOWER, -1, -1)}
    assert broker.ask({"f": [(-1, 4)]}, replica_id=2) == {("f", 0): (E.NOT_LEADER_OR_FOLLOWER, -1, -1)}
    assert broker.ask({"f": [(3, 4)]}) == {("f", 0): (E.FENCED_LEADER_EPOCH, -1, -1)}
    # Not hosted here: known to the metadata, or not at all.
    assert broker.ask({"elsewhere": [(-1, 1)], "nope": [(-1, 1)]}) == {
        ("elsewhere", 0): (E.NOT_LEADER_OR_FOLLOWER, -1, -1), ("nope", 0): (E.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)}


def test_offline_log_dir_answers_kafka_storage_error(broker):
    broker.rm.offline_partitions.add(TopicPartition("t", 0))  # what the log-dir failure handler records
    assert broker.ask({"t": [(6, 6)]}) == {("t", 0): (Errors.KAFKA_STORAGE_ERROR, -1, -1)}


class Grants:
    """An authorizer allowing exactly the listed (principal, operation, resource type, name)."""

    def __init__(self, *allowed: tuple[str, str, str, str]):
        self.allowed = set(allowed)

    def authorize(self, principal, host, operation, resource_type, name) -> bool:
        return (principal, operation, resource_type, name) in self.allowed


def test_cluster_action_or_describe_on_the_topic(tmp_path):
    b = Broker(tmp_path, authorizer=Grants(("User:alice", "Describe", "Topic", "t"),
                                           ("User:broker", "ClusterAction", "Cluster", "kafka-cluster")))
    try:
        b.lead(1, 3)
        asks = {"t": [(-1, 1)], "f": [(-1, 4)]}
        assert b.ask(asks, principal="User:alice") == {
            ("t", 0): (0, 1, 3), ("f", 0): (Errors.TOPIC_AUTHORIZATION_FAILED, -1, -1)}
        denied = (Errors.TOPIC_AUTHORIZATION_FAILED, -1, -1)
        assert b.ask(asks, principal="User:bob") == {("t", 0): denied, ("f", 0): denied}
        assert b.ask(asks, principal="User:broker", replica_id=2) == {
            ("t", 0): (0, 1, 3), ("f", 0): (Errors.NOT_LEADER_OR_FOLLOWER, -1, -1)}
    finally:
        b.close()
