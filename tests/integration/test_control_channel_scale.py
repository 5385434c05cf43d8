"""Issue 15: a topic whose control requests exceed ZooKeeper's znode limit is created, served and led again
after the controller is killed, on real broker processes.

10,000 partitions (``KAFKATIER_SCALE_PARTITIONS`` overrides it), RF 2 on 3 brokers (~6,700 replicas each): the
topic is created, a kafka-python client sees every partition with a leader, a record is produced to and read
from a sample of partitions, no broker holds a file descriptor per replica; then the controller is killed
with kill -9, every partition is led again by the surviving brokers (a client sees it, and reads the sampled
records from the new leaders), and the killed broker restarts and loads its logs.  The test prints its timings.
"""
from __future__ import annotations

import json
import os
import random
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient

from kafkatier.server.broker_client import BrokerConnectionError
from kafkatier.waiting import wait_for
from kafkatier.zk.kafka_zk_client import KafkaZkClient
from kafkatier.zk.limits import MAX_ZNODE_BYTES

import partition_support

pytestmark = pytest.mark.integration

PARTITIONS = int(os.environ.get("KAFKATIER_SCALE_PARTITIONS", "10000"))
SAMPLE = 12


def _leaders(zk, topic: str, partitions: int) -> dict[int, int]:
    """Leader of every partition, read with pipelined async gets."""
    futures = [zk.get_async(f"/brokers/topics/{topic}/partitions/{p}/state") for p in range(partitions)]
    out = {}
    for p, f in enumerate(futures):
        try:
            out[p] = json.loads(f.get(timeout=30)[0])["leader"]
        except Exception:  # noqa: BLE001 - not created yet
            out[p] = -1
    return out


def _fully_replicated(zk, topic: str, partitions: int, rf: int) -> bool:
    """No under-replicated partition: every ISR has all ``rf`` replicas."""
    futures = [zk.get_async(f"/brokers/topics/{topic}/partitions/{p}/state") for p in range(partitions)]
    return all(len(json.loads(f.get(timeout=30)[0])["isr"]) == rf for f in futures)


def _all_led(zk, topic, partitions, alive) -> bool:
    return all(l in alive for l in _leaders(zk, topic, partitions).values())


def _client_partitions(bootstrap: str, topic: str) -> int:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=60000)
    try:
        md = admin.describe_topics([topic])
        return sum(1 for p in md[0]["partitions"] if p.get("leader_id", p.get("leader", -1)) >= 0)
    finally:
        admin.close()


def _every_broker_sees_all_led(c, topic: str, partitions: int, alive: set[int]) -> bool:
    """Every live broker's Metadata answer gives every partition a live leader and lists only live brokers."""
    for b in c.manager.state["brokers"]:
        if b["id"] not in alive:
            continue
        try:
            resp = partition_support.broker_metadata(c, b["id"], [topic], timeout_s=60.0)
        except (BrokerConnectionError, OSError):
            return False
        leaders = [p[2] for t in resp.topics for p in t[3]]
        if {br[0] for br in resp.brokers} != alive or len(leaders) != partitions or \
                any(l not in alive for l in leaders):
            return False
    return True


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _read_sample(bootstrap: str, topic: str, sample: list[int]) -> dict[int, bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=1000,
                             request_timeout_ms=60000)
    tps = [TopicPartition(topic, p) for p in sample]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    got: dict[int, bytes] = {}
    deadline = time.monotonic() + 60
    while len(got) < len(sample) and time.monotonic() < deadline:
        for tp, records in consumer.poll(timeout_ms=1000).items():
            for r in records:
                got[tp.partition] = r.value
    consumer.close()
    return got


def test_topic_with_control_requests_over_the_znode_limit(cluster_factory):
    c = cluster_factory(brokers=3, log_dirs=1)
    zk = c.zk
    brokers = sorted(c.broker_ids())
    topic = "big"
    t0 = time.monotonic()
    KafkaZkClient(zk).create_topic(topic, {p: [brokers[p % 3], brokers[(p + 1) % 3]] for p in range(PARTITIONS)},
                                   {})
    wait_for(lambda: _all_led(zk, topic, PARTITIONS, set(brokers)), 180, interval=1.0,
             message=f"all {PARTITIONS} partitions elected")
    created_s = time.monotonic() - t0
    wait_for(lambda: _client_partitions(c.bootstrap_servers, topic) == PARTITIONS, 300, interval=2.0,
             message="a client sees every partition with a leader")
    visible_s = time.monotonic() - t0
    # Some control request really was larger than one znode.
    ctrl_log = open(os.path.join(c.data_dir, "logs", f"broker-{c.controller_id()}.log")).read()
    assert "control request split" in ctrl_log, f"no request above {MAX_ZNODE_BYTES} bytes was sent"
    assert "request dropped" not in ctrl_log

    sample = random.Random(15).sample(range(PARTITIONS), SAMPLE)
    producer = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all", request_timeout_ms=60000,
                             max_block_ms=120000)
    for p in sample:
        producer.send(topic, key=b"k", value=f"record-{p}".encode(), partition=p).get(timeout=60)
    producer.close()
    expected = {p: f"record-{p}".encode() for p in sample}
    assert _read_sample(c.bootstrap_servers, topic, sample) == expected
    # Thousands of replicas per broker, a few descriptors: segments and indexes are opened on use.
    replicas_per_broker = PARTITIONS * 2 // 3
    for b in c.manager.state["brokers"]:
        assert _open_fds(b["pid"]) < replicas_per_broker // 4, f"broker {b['id']} holds a descriptor per replica"

    # Kill the controller of a healthy cluster: a follower that has not caught up yet (a broker creating
    # thousands of logs can take longer than replica.lag.time.max.ms) is out of the ISR and, without unclean
    # election, cannot take over.
    wait_for(lambda: _fully_replicated(zk, topic, PARTITIONS, 2), 240, interval=2.0,
             message="no under-replicated partition")
    old = c.controller_id()
    survivors = set(brokers) - {old}
    t1 = time.monotonic()
    c.manager.kill_broker(old)
    wait_for(lambda: c.controller_id() in survivors, 60, message="a new controller")
    wait_for(lambda: _all_led(zk, topic, PARTITIONS, survivors), 240, interval=1.0,
             message=f"all {PARTITIONS} partitions led again by the surviving brokers")
    wait_for(lambda: _every_broker_sees_all_led(c, topic, PARTITIONS, survivors), 120, interval=1.0,
             message="every surviving broker's metadata has every partition led by a survivor")
    assert _client_partitions(c.bootstrap_servers, topic) == PARTITIONS
    failover_s = time.monotonic() - t1
    assert _read_sample(c.bootstrap_servers, topic, sample) == expected

    t2 = time.monotonic()
    c.manager.start_broker(old, timeout=180)
    restart_s = time.monotonic() - t2
    wait_for(lambda: _all_led(zk, topic, PARTITIONS, set(brokers)), 120, interval=1.0,
             message="every partition still led after the restart")
    print(f"\nscale: partitions={PARTITIONS} rf=2 elected_in_zk_s={created_s:.1f} client_sees_all_s={visible_s:.1f} "
          f"kill9_controller_to_all_led_s={failover_s:.1f} broker_restart_s={restart_s:.1f}")
