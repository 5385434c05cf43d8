"""KIP-320 consumers across leader changes (OffsetForLeaderEpoch, key 23) on a cluster of broker processes.

kafka-python's KafkaConsumer and confluent-kafka's Consumer validate their position with OffsetForLeaderEpoch
after each leader change; they must keep consuming and read every record exactly once through a failover
(controlled shutdown of the leader) and a preferred election (``kafkatier leader-election``).  Also the request
itself on the wire: what the leader, a follower and an unknown partition answer."""
from __future__ import annotations

import json
import uuid

import confluent_kafka
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import NewTopic
from kafka.protocol.consumer import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse

from kafkatier.cluster.manager import pid_alive
from kafkatier.protocol.errors import Errors
from kafkatier.server.broker_client import BrokerClient
from kafkatier.waiting import WaitTimeout, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

CONVERGE_S = 30.0
ASSIGNMENT = {0: [1, 2, 3]}
BATCH = 10
LAG = 50  # records the readers leave unread when the leader changes


def state(cluster, topic: str) -> dict:
    return json.loads(cluster.zk.get(f"/brokers/topics/{topic}/partitions/0/state")[0])


def wait_full_isr(cluster, topic: str) -> None:
    wait_for(lambda: sorted(state(cluster, topic)["isr"]) == [1, 2, 3], CONVERGE_S, interval=0.1,
             ignore=(Exception,), message=f"{topic} with a full ISR")


@pytest.fixture(scope="module")
def ocluster(module_cluster_factory):
    return module_cluster_factory(brokers=3, log_dirs=1, overrides={"auto.leader.rebalance.enable": "false"})


@pytest.fixture(scope="module")
def topic(ocluster):
    name = f"ofle-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=ocluster.bootstrap_servers, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(name, replica_assignments=ASSIGNMENT, topic_configs={})], timeout_ms=30000)
    finally:
        admin.close()
    wait_full_isr(ocluster, name)
    return name


class Readers:
    """A kafka-python and a confluent-kafka consumer reading partition 0 from the beginning, no group."""

    def __init__(self, cluster, topic: str):
        # One batch per fetch and per poll, so a reader stopped mid-log holds a position with its batch's leader
        # epoch: kafka-python validates only such positions (an empty fetch leaves the epoch unknown).
        self.kp = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest", metadata_max_age_ms=1000, request_timeout_ms=15000,
                                max_partition_fetch_bytes=64, max_poll_records=BATCH)
        self.kp.assign([KafkaTopicPartition(topic, 0)])
        self.ck = confluent_kafka.Consumer({
            "bootstrap.servers": cluster.bootstrap_servers, "group.id": f"unused-{topic}",
            "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 1000, "log_level": 3})
        self.ck.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        self.kp_values: list[bytes] = []
        self.ck_values: list[bytes] = []

    def read_up_to(self, n: int) -> None:
        def caught_up() -> bool:  # each stops polling at n: the leader changes under a position mid-log
            if len(self.kp_values) < n:
                for records in self.kp.poll(timeout_ms=100).values():
                    self.kp_values += [r.value for r in records]
            if len(self.ck_values) < n:
                msg = self.ck.poll(0.1)
                if msg is not None:
                    assert msg.error() is None, msg.error()
                    self.ck_values.append(msg.value())
            return len(self.kp_values) >= n and len(self.ck_values) >= n
        try:
            wait_for(caught_up, 60, interval=0, message=f"{n} records read by both consumers")
        except WaitTimeout as e:
            raise AssertionError(f"{e}: kafka-python read {len(self.kp_values)}, "
                                 f"confluent-kafka {len(self.ck_values)}") from None

    def close(self) -> None:
        self.kp.close()
        self.ck.close()


def test_consumers_read_every_record_once_across_failover_and_preferred_election(ocluster, topic, kafkatier_cli):
    c = ocluster
    producer = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all", retries=20, retry_backoff_ms=200,
                             request_timeout_ms=15000, metadata_max_age_ms=1000)
    readers = Readers(c, topic)
    sent: list[bytes] = []

    def produce(tag: str, n: int = 100) -> None:
        values = [f"{tag}-{i}".encode() for i in range(n)]
        for i, v in enumerate(values):
            producer.send(topic, value=v, partition=0)
            if i % BATCH == BATCH - 1:
                producer.flush(timeout=60)
        producer.flush(timeout=60)
        sent.extend(values)

    try:
        assert state(c, topic)["leader"] == 1
        produce("epoch-a")
        readers.read_up_to(len(sent) - LAG)  # mid-log: the next records come from the next leader

        # Failover: the leader shuts down (controlled), broker 2 leads with a new epoch.
        epoch = state(c, topic)["leader_epoch"]
        c.manager.stop_broker(1)
        assert state(c, topic)["leader"] == 2 and state(c, topic)["leader_epoch"] > epoch
        produce("epoch-b")
        readers.read_up_to(len(sent) - LAG)

        # Back, and the preferred replica elected again with the tool: another leader change.
        c.manager.start_broker(1)
        c.manager.wait_until_ready(timeout=CONVERGE_S)
        wait_full_isr(c, topic)
        epoch = state(c, topic)["leader_epoch"]
        r = kafkatier_cli.run("leader-election", "--bootstrap-server", c.bootstrap_servers, "--election-type",
                              "preferred", "--topic", topic, "--partition", "0")
        assert r.returncode == 0, r.stderr
        assert state(c, topic)["leader"] == 1 and state(c, topic)["leader_epoch"] > epoch
        produce("epoch-c")
        readers.read_up_to(len(sent))

        assert readers.kp_values == sent
        assert readers.ck_values == sent
    finally:
        readers.close()
        producer.close(timeout=10)
        if not pid_alive(c.manager.broker(1).get("pid")):
            c.manager.start_broker(1)


def ask(cluster, broker: int, topic: str, current_leader_epoch: int, leader_epoch: int) -> tuple[int, int, int]:
    b = cluster.manager.broker(broker)
    client = BrokerClient("127.0.0.1", b["port"], client_id="test")
    T = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    req = OffsetForLeaderEpochRequest(version=4, replica_id=-1, topics=[T(topic=topic, partitions=[
        T.OffsetForLeaderPartition(partition=0, current_leader_epoch=current_leader_epoch,
                                   leader_epoch=leader_epoch)])])
    try:
        resp = client.send(req, OffsetForLeaderEpochResponse, 4)
    finally:
        client.close()
    p = resp.topics[0].partitions[0]
    return p.error_code, p.leader_epoch, p.end_offset


def test_the_request_on_the_wire(ocluster, topic):
    c = ocluster
    c.manager.wait_until_ready(timeout=CONVERGE_S)
    wait_full_isr(c, topic)
    s = state(c, topic)
    leader, epoch = s["leader"], s["leader_epoch"]
    follower = next(b for b in ASSIGNMENT[0] if b != leader)
    # The leader's LeaderAndIsr may trail the znode: UNKNOWN_LEADER_EPOCH until it arrives.
    error, got_epoch, end = wait_for(lambda: (lambda a: a if a[0] != Errors.UNKNOWN_LEADER_EPOCH else None)(
        ask(c, leader, topic, epoch, epoch)), CONVERGE_S, message="the leader's answer")
    assert (error, got_epoch) == (0, epoch) and end >= 0
    assert ask(c, leader, topic, epoch, epoch + 1) == (0, -1, -1)
    assert ask(c, leader, topic, epoch - 1, epoch)[0] == Errors.FENCED_LEADER_EPOCH
    assert ask(c, leader, topic, epoch + 1, epoch)[0] == Errors.UNKNOWN_LEADER_EPOCH
    wait_for(lambda: ask(c, follower, topic, epoch, epoch)[0] == Errors.NOT_LEADER_OR_FOLLOWER, CONVERGE_S,
             message="the follower's answer")  # its LeaderAndIsr may trail the znode
    assert ask(c, leader, "no-such-topic", -1, 0)[0] == Errors.UNKNOWN_TOPIC_OR_PARTITION
