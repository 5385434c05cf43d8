"""Racks (KIP-36, KIP-392): ``broker.rack`` per broker from ``cluster up --rack``, in the registrations and in
Metadata; rack-aware replica assignment; a consumer with ``client.rack`` reads from the follower in its rack
(the follower's ``follower_fetching`` counters in ``cluster describe``'s status show it); a bad rack string is one
line, exit 2."""
from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafkatier.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

RACKS = {1: "rack-a", 2: "rack-b", 3: "rack-c"}
SELECTOR = {"replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"}


@pytest.fixture(scope="module")
def rack_cluster(zookeeper, _zk_session_client, tmp_path_factory):
    from kafkatier.testing.clusters import start_cluster, stop_cluster
    c = start_cluster(zookeeper.connect_string, _zk_session_client, tmp_path_factory.mktemp("racks"), brokers=3,
                      log_dirs=1, overrides=SELECTOR, racks=RACKS)
    yield c
    stop_cluster(c)


def test_racks_in_registrations_and_metadata(rack_cluster):
    for bid, rack in RACKS.items():
        assert json.loads(rack_cluster.zk.get(f"/brokers/ids/{bid}")[0])["rack"] == rack
    from kafka import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=rack_cluster.bootstrap_servers)
    try:
        brokers = {b.get("node_id", b.get("broker_id")): b["rack"] for b in admin.describe_cluster()["brokers"]}
    finally:
        admin.close()
    assert brokers == RACKS


def test_rack_aware_assignment_spreads_replicas_over_racks(rack_cluster):
    admin = AdminClient({"bootstrap.servers": rack_cluster.bootstrap_servers})
    topic = f"racks-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 6, 2)])[topic].result(30)
    assignment = json.loads(rack_cluster.zk.get(f"/brokers/topics/{topic}")[0])["partitions"]
    for replicas in assignment.values():
        assert len({RACKS[b] for b in replicas}) == 2


def test_consumer_reads_from_the_follower_in_its_rack(rack_cluster):
    bs = rack_cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs})
    topic = f"ff-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)

    def state():
        return json.loads(rack_cluster.zk.get(f"/brokers/topics/{topic}/partitions/0/state")[0])
    wait_for(lambda: state()["leader"] > 0 and len(state()["isr"]) == 3, 30, interval=0.1, ignore=(Exception,))
    leader = state()["leader"]
    follower = next(b for b in sorted(RACKS) if b != leader)
    producer = Producer({"bootstrap.servers": bs, "acks": "all"})
    for i in range(200):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bs, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "client.rack": RACKS[follower]})
    consumer.subscribe([topic])
    got = []

    def read_all() -> bool:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
        return len(got) >= 200
    try:
        wait_for(read_all, 60, interval=0, message="200 records through the follower")
    finally:
        consumer.close()

    def served(bid: int) -> dict:
        status = next(b for b in rack_cluster.manager.status()["brokers"] if b["id"] == bid)["status"] or {}
        return status.get("follower_fetching") or {}
    wait_for(lambda: served(follower).get("consumer_fetches_served_as_follower", 0) > 0, 30, interval=0.2,
             message="the follower's fetch counter")
    wait_for(lambda: served(leader).get("preferred_read_replica_answers", 0) > 0, 30, interval=0.2,
             message="the leader's preferred read replica answers")
    others = [b for b in RACKS if b not in (leader, follower)]
    assert all(served(b).get("consumer_fetches_served_as_follower", 0) == 0 for b in others)


def test_bad_rack_is_one_line_exit_2(kafkatier_cli, tmp_path):
    r = kafkatier_cli.run("cluster", "up", "--data-dir", str(tmp_path / "c"), "--brokers", "3",
                          "--rack", "1=a,2=b c,3=c")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "invalid rack" in r.stderr
