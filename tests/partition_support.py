"""Helpers of the e2e tests that follow one partition (partition 0 of a topic) through faults: its state znode,
a wait on it and a topic created on chosen replicas (:class:`FollowedPartitions`, bound to a module's topic prefix
and time bound), a one-partition topic filled with records, and whether every broker's metadata agrees with
ZooKeeper on a topic's leaders."""
from __future__ import annotations

import json
import uuid

import attrs
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from kafkatier.server.broker_client import BrokerClient
from kafkatier.waiting import wait_for


def state(c, topic: str) -> dict:
    """Partition 0's state znode (leader, ISR, epochs)."""
    return json.loads(c.zk.get(f"/brokers/topics/{topic}/partitions/0/state")[0])


@attrs.frozen
class FollowedPartitions:
    """The helpers of one test module: its topics are named ``<prefix>-<random>`` and every wait on a partition's
    state is bounded by ``timeout`` seconds."""

    prefix: str
    timeout: float

    def state(self, c, topic: str) -> dict:
        return state(c, topic)

    def wait_state(self, c, topic: str, what: str, pred) -> dict:
        """Partition 0's state once ``pred`` holds for it (``what`` names the wait in its timeout message)."""
        return wait_for(lambda: (lambda s: s if pred(s) else None)(state(c, topic)), self.timeout, interval=0.1,
                        ignore=(Exception,), message=f"{topic}: {what}")

    def create_topic(self, c, assignment: list[int], configs: dict | None = None) -> str:
        """A new topic of one partition on ``assignment``, returned once its ISR is full."""
        topic = f"{self.prefix}-{uuid.uuid4().hex[:8]}"
        admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers, request_timeout_ms=30000)
        try:
            admin.create_topics([NewTopic(topic, replica_assignments={0: assignment}, topic_configs=configs or {})],
                                timeout_ms=30000)
        finally:
            admin.close()
        self.wait_state(c, topic, "full ISR", lambda s: sorted(s["isr"]) == sorted(assignment))
        return topic


def topic_with_records(bootstrap_servers: str, topic: str, values: list[bytes]) -> None:
    """``topic`` created with one partition and one replica, then ``values`` written to it (confluent-kafka,
    flushed)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic as CNewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})   # kept until the answer: the future needs it
    admin.create_topics([CNewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap_servers})
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(30) == 0


def broker_metadata(cluster, broker_id: int, topics: list[str], timeout_s: float = 5.0) -> MetadataResponse:
    """Broker ``broker_id``'s own Metadata v1 answer for ``topics`` (``[]``: none), on a connection of its own."""
    client = BrokerClient("127.0.0.1", cluster.manager.broker(broker_id)["port"], "e2e-test", timeout_s=timeout_s)
    try:
        return client.send(MetadataRequest[1](topics=topics), MetadataResponse, 1)
    finally:
        client.close()


def metadata_everywhere(cluster, topic: str, partitions: int, *, with_isr: bool = True) -> dict | None:
    """Partition -> (leader, sorted ISR) as ZooKeeper has them, once every broker's Metadata answer names the same
    (with ``with_isr`` False, the leaders only); None before that or while a partition has no leader (Kafka's
    ``TestUtils.waitForAllPartitionsMetadata``).  The controller writes a partition's state before its UpdateMetadata
    reaches the brokers: a client asking one in between is told LEADER_NOT_AVAILABLE or NOT_LEADER_OR_FOLLOWER."""
    def view(leader: int, isr) -> tuple:
        return (leader, sorted(isr) if with_isr else None)
    want = {}
    for p in range(partitions):
        st = json.loads(cluster.zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")[0])
        want[p] = view(st["leader"], st["isr"])
    for b in cluster.broker_ids():
        resp = broker_metadata(cluster, b, [topic])
        seen = {q.partition_index: view(q.leader_id, q.isr_nodes) for t in resp.topics if t.error_code == 0
                for q in t.partitions if q.error_code == 0}
        if seen != want:
            return None
    return want if all(leader >= 0 for leader, _ in want.values()) else None
