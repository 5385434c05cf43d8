"""Network faults on a cluster started with links (``cluster/links.py``), seen by real brokers, ZooKeeper and
kafka-python: a follower cut from its leader leaves the ISR and comes back after heal with nothing acknowledged
lost; a broker cut from ZooKeeper by a silent blackhole loses its registration and registers again after heal;
a killed link process cuts the paths and heal restores them."""
from __future__ import annotations

import json
import socket
import threading
import time

import confluent_kafka
import confluent_kafka.admin
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from kafkatier.cluster.link_faults import BLACKHOLE, LinkFault
from kafkatier.waiting import wait_for
import partition_support

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

CONVERGE_S = 45.0


@pytest.fixture(scope="module")
def lcluster(module_cluster_factory):
    """Three brokers behind links; a follower that stops fetching leaves the ISR after 3 s."""
    return module_cluster_factory(brokers=3, log_dirs=1, links=True, overrides={
        "replica.lag.time.max.ms": "3000", "auto.leader.rebalance.enable": "false"})


PARTITIONS = partition_support.FollowedPartitions("net", CONVERGE_S)
state, wait_state, create_topic = PARTITIONS.state, PARTITIONS.wait_state, PARTITIONS.create_topic


def consume_all(c, topic: str, expected: int) -> list[bytes]:
    return consume_all_from(c.bootstrap_servers, topic, expected)


def test_follower_cut_from_leader_leaves_isr_and_returns_with_nothing_lost(lcluster):
    c = lcluster
    topic = create_topic(c, [1, 2, 3], {"min.insync.replicas": "2"})
    leader = state(c, topic)["leader"]
    follower = [b for b in (1, 2, 3) if b != leader][0]
    producer = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all", retries=50, retry_backoff_ms=100,
                             request_timeout_ms=15000, linger_ms=5)
    acked: list[bytes] = []
    stop = threading.Event()

    def load():
        i = 0
        while not stop.is_set():
            v = f"v{i}".encode()
            producer.send(topic, value=v, partition=0).add_callback(lambda _m, v=v: acked.append(v))
            i += 1
            stop.wait(0.01)
    t = threading.Thread(target=load, daemon=True)
    t.start()
    try:
        wait_for(lambda: len(acked) > 50, CONVERGE_S, message="acknowledged records before the fault")
        plan = c.links.partition(sources=[leader], destinations=[follower])
        assert len(plan.faults) == 2  # leader -> follower and follower -> leader
        wait_state(c, topic, f"follower {follower} out of the ISR", lambda s: follower not in s["isr"])
        n = len(acked)
        wait_for(lambda: len(acked) > n + 50, CONVERGE_S, message="acks=all still acknowledged with 2 in the ISR")
        assert c.links.heal() == sorted(name for name, _ in plan.faults)
        wait_state(c, topic, f"follower {follower} back in the ISR", lambda s: follower in s["isr"])
    finally:
        stop.set()
        t.join(10)
        producer.flush(timeout=30)
        producer.close(timeout=10)
    got = set(consume_all(c, topic, len(acked)))
    assert not [v for v in acked if v not in got], "acknowledged records lost"


def test_broker_blackholed_from_zookeeper_loses_its_registration(lcluster):
    c = lcluster
    victim = next(b for b in c.broker_ids() if b != c.controller_id())
    czxid = c.zk.exists(f"/brokers/ids/{victim}").czxid
    c.links.partition("isolate-zookeeper", node=victim, blackhole=True)
    described = {li["name"]: li for li in c.links.describe()["links"]}
    assert described[f"broker:{victim}->zookeeper:1"]["fault_text"] == "blackhole"
    wait_for(lambda: c.zk.exists(f"/brokers/ids/{victim}") is None, CONVERGE_S, interval=0.2,
             message=f"broker {victim}'s registration to expire with its session")
    c.links.heal()
    wait_for(lambda: (s := c.zk.exists(f"/brokers/ids/{victim}")) is not None and s.czxid != czxid, CONVERGE_S,
             interval=0.2, message=f"broker {victim} to register again")
    c.manager.wait_until_ready(timeout=CONVERGE_S)


def test_killed_link_process_cuts_paths_and_heal_restores_them(lcluster):
    c = lcluster
    table = c.links.table()
    port = table.link("broker:1->broker:2").port
    c.links.stop(kill=True)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert not c.links.describe()["running"]
    assert c.links.heal() == []  # no fault to remove; the process starts again on the same ports
    assert c.links.table().link("broker:1->broker:2").port == port
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    c.manager.wait_until_ready(timeout=CONVERGE_S)
    topic = create_topic(c, [1, 2, 3], {"min.insync.replicas": "3"})  # needs every broker -> broker path
    producer = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all", request_timeout_ms=15000)
    try:
        producer.send(topic, value=b"after-heal", partition=0).get(timeout=30)
    finally:
        producer.close(timeout=10)
    assert consume_all(c, topic, 1) == [b"after-heal"]


def test_client_groups_cut_the_producers_but_not_the_consumers(cluster_factory):
    """Two client groups, each with its own listener advertised at its links: cutting the producers' links
    leaves the consumers reading; a producer times out (its requests are reset), then sends after heal."""
    c = cluster_factory(brokers=3, log_dirs=1, client_groups=("producers", "consumers"))
    producers, consumers = c.bootstrap_for("producers"), c.bootstrap_for("consumers")
    admin = KafkaAdminClient(bootstrap_servers=producers, request_timeout_ms=30000)
    try:
        brokers = {(b["host"], b["port"]) for b in admin.describe_cluster()["brokers"]}
    finally:
        admin.close()
    assert {f"{h}:{p}" for h, p in brokers} == set(producers.split(","))  # answered with link addresses
    topic = create_topic(c, [1, 2, 3])
    producer = KafkaProducer(bootstrap_servers=producers, acks="all", request_timeout_ms=3000, max_block_ms=4000,
                             retries=0, reconnect_backoff_max_ms=200)
    try:
        producer.send(topic, value=b"before", partition=0).get(timeout=30)
        c.links.partition(sources="client:producers", destinations="brokers")
        with pytest.raises(Exception):  # noqa: B017 - reset connections: a KafkaTimeoutError or a request failure
            producer.send(topic, value=b"cut", partition=0).get(timeout=10)
        assert consume_all_from(consumers, topic, 1)[:1] == [b"before"]  # the consumers' links still work
        c.links.heal()
        wait_for(lambda: _sent(producer, topic, b"after"), CONVERGE_S, interval=0.5, message="a send after heal")
    finally:
        producer.close(timeout=5)
    assert b"after" in consume_all_from(consumers, topic, 2)
    # A blackhole is silent: a client connects, its requests vanish, and it gives up on its own timeout.
    c.links.link_fault("client:consumers", "brokers", LinkFault(BLACKHOLE))
    t0 = time.monotonic()
    with pytest.raises(confluent_kafka.KafkaException):  # librdkafka gives up when its timeout runs out
        confluent_kafka.admin.AdminClient({"bootstrap.servers": consumers}).list_topics(timeout=3)
    assert time.monotonic() - t0 >= 2.8  # a timeout, not a refusal
    c.links.heal()


def _sent(producer, topic: str, value: bytes) -> bool:
    try:
        producer.send(topic, value=value, partition=0).get(timeout=5)
        return True
    except Exception:  # noqa: BLE001 - still reconnecting
        return False


def consume_all_from(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    out: list[bytes] = []
    try:
        def done():
            for batch in consumer.poll(timeout_ms=500).values():
                out.extend(r.value for r in batch)
            return len(out) >= expected
        wait_for(done, CONVERGE_S, interval=0, message=f"{expected} records of {topic}")
    finally:
        consumer.close()
    return out


def test_cli_partition_describe_and_heal(lcluster, kafkatier_cli):
    """The commands a user types: faults in force show in describe (text and JSON), heal removes them, bad input
    is one line and exit 2."""
    d = lcluster.data_dir
    r = kafkatier_cli.run("cluster", "partition", "--data-dir", d, "--from", "1", "--to", "2", "--one-way")
    assert r.returncode == 0, r.stderr
    r = kafkatier_cli.run("cluster", "link-fault", "--data-dir", d, "--from", "brokers", "--to", "zookeeper",
                          "--latency-ms", "5", "--jitter-ms", "1")
    assert r.returncode == 0, r.stderr
    described = json.loads(kafkatier_cli.run("cluster", "describe", "--data-dir", d, "--json").stdout)["links"]
    faults = {li["name"]: li["fault_text"] for li in described["links"] if li["faults"]}
    assert faults["broker:1->broker:2"] == "blackhole forward"
    assert faults["broker:2->broker:1"] == "blackhole backward"
    assert faults["broker:3->zookeeper:1"] == "latency 5±1ms"
    text = kafkatier_cli.run("cluster", "describe", "--data-dir", d).stdout
    assert "5 with faults" in text and "FAULT blackhole forward" in text
    for argv in (["partition", "--shape", "isolate", "--node", "7"], ["link-fault", "--from", "1", "--to", "2",
                                                                      "--bandwidth", "-3MB/s"]):
        bad = kafkatier_cli.run("cluster", *argv, "--data-dir", d)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    r = kafkatier_cli.run("cluster", "heal", "--data-dir", d)
    assert r.returncode == 0 and r.stdout.startswith("healed 5 links"), r.stdout
    assert kafkatier_cli.run("cluster", "heal", "--data-dir", d).stdout.startswith("healed 0 links")
    lcluster.manager.wait_until_ready(timeout=CONVERGE_S)
