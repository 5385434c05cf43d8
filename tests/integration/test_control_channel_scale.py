"""Issue 15 item 1: a topic whose control requests exceed ZooKeeper's znode limit is created, served and
led again after the controller is killed, on real broker processes.

The partition count defaults to 10,000 (RF 1 on 3 brokers); ``KAFKATIER_SCALE_PARTITIONS`` overrides it.  The
test prints its timings (creation to all-led, client metadata, failover).
"""
from __future__ import annotations

import json
import os
import random
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient

from kafkatier.waiting import wait_for
from kafkatier.zk.kafka_zk_client import KafkaZkClient
from kafkatier.zk.limits import MAX_ZNODE_BYTES

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


def _all_led(zk, topic, partitions, alive) -> bool:
    return all(l in alive for l in _leaders(zk, topic, partitions).values())


def _client_partitions(bootstrap: str, topic: str) -> int:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=60000)
    try:
        md = admin.describe_topics([topic])
        return sum(1 for p in md[0]["partitions"] if p.get("leader_id", p.get("leader", -1)) >= 0)
    finally:
        admin.close()


def test_topic_with_control_requests_over_the_znode_limit(cluster_factory):
    c = cluster_factory(brokers=3, log_dirs=1)
    zk = c.zk
    brokers = sorted(c.broker_ids())
    topic = "big"
    t0 = time.monotonic()
    KafkaZkClient(zk).create_topic(topic, {p: [brokers[p % 3]] for p in range(PARTITIONS)}, {})
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
    consumer = KafkaConsumer(bootstrap_servers=c.bootstrap_servers, enable_auto_commit=False,
                             consumer_timeout_ms=1000, request_timeout_ms=60000)
    tps = [TopicPartition(topic, p) for p in sample]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    got: dict[int, bytes] = {}
    deadline = time.monotonic() + 60
    while len(got) < SAMPLE and time.monotonic() < deadline:
        for tp, records in consumer.poll(timeout_ms=1000).items():
            for r in records:
                got[tp.partition] = r.value
    consumer.close()
    assert got == {p: f"record-{p}".encode() for p in sample}

    old = c.controller_id()
    t1 = time.monotonic()
    c.manager.kill_broker(old)
    wait_for(lambda: c.controller_id() not in (None, old), 30, message="a new controller")
    # RF 1: the killed broker's partitions come back with it.
    c.manager.start_broker(old, timeout=180)
    wait_for(lambda: _all_led(zk, topic, PARTITIONS, set(brokers)), 240, interval=1.0,
             message=f"all {PARTITIONS} partitions led again")
    wait_for(lambda: _client_partitions(c.bootstrap_servers, topic) == PARTITIONS, 120, interval=1.0,
             message="a client sees every partition led again")
    failover_s = time.monotonic() - t1
    print(f"\nscale: partitions={PARTITIONS} elected_in_zk_s={created_s:.1f} client_sees_all_s={visible_s:.1f} "
          f"kill9_controller_to_all_led_s={failover_s:.1f}")
