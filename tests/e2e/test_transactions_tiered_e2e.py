"""read_committed from the remote tier: the segments of a tiered topic holding an aborted transaction are offloaded
and deleted locally; a read_committed consumer reading from offset 0 (served from remote storage) gets the aborted
transaction listed from the remote segments' transaction indexes and skips its records, while read_uncommitted
still sees them."""
from __future__ import annotations

import json
import os
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkatier.waiting import wait_for
from kafkatier.zk import paths

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

OVERRIDES = {"remote.log.storage.system.enable": "true", "remote.log.manager.task.interval.ms": "500",
             "log.retention.check.interval.ms": "500", "log.initial.task.delay.ms": "0",
             "transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3"}


def local_bases(cluster, broker_id: int, topic: str) -> list[int]:
    for d in cluster.manager.broker(broker_id)["log_dirs"]:
        pdir = os.path.join(d, f"{topic}-0")
        if os.path.isdir(pdir):
            return sorted(int(n[:20]) for n in os.listdir(pdir) if n.endswith(".log"))
    return []


def read_all(bootstrap: str, topic: str, isolation: str) -> list[str]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4()}", "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out: list[str] = []
    eof = []

    def done() -> bool:
        m = c.poll(0.2)
        if m is not None:
            if m.error() is None:
                out.append(m.value().decode())
            elif m.error().code() == KafkaError._PARTITION_EOF:
                eof.append(True)
        return bool(eof)
    try:
        wait_for(done, 60, interval=0, message=f"read {topic} ({isolation})")
    finally:
        c.close()
    return out


def test_read_committed_from_the_remote_tier_skips_aborted_transactions(module_cluster_factory):
    cluster = module_cluster_factory(brokers=3, log_dirs=1, overrides=OVERRIDES)
    bs = cluster.bootstrap_servers
    topic = f"txn-tiered-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 1, 2, config={"remote.storage.enable": "true", "segment.bytes": "200",
                                                       "local.retention.bytes": "1"})])[topic].result(30)
    wait_for(lambda: len(json.loads(cluster.zk.get(paths.partition_state(topic, 0))[0])["isr"]) == 2, 60,
             interval=0.2, ignore=(Exception,), message=f"{topic} online")
    p = Producer({"bootstrap.servers": bs, "transactional.id": f"tiered-{uuid.uuid4().hex[:8]}", "linger.ms": 0})
    p.init_transactions(60)
    plan = [("c0", True), ("a0", False), ("c1", True), ("a1", False), ("c2", True), ("c3", True), ("c4", True)]
    for value, commit in plan:
        p.begin_transaction()
        p.produce(topic, value=value.encode() * 20, partition=0)   # 40 bytes: a segment per batch or two
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)
    leader = json.loads(cluster.zk.get(paths.partition_state(topic, 0))[0])["leader"]
    # the records of both aborted transactions and their markers (offsets 0-7) only in remote storage
    wait_for(lambda: (local_bases(cluster, leader, topic) or [0])[0] > 7, 90, interval=0.3,
             message="the aborted transactions' segments offloaded and deleted locally")
    committed = [v.encode() * 20 for v, c in plan if c]
    assert read_all(bs, topic, "read_committed") == [v.decode() for v in committed]
    uncommitted = read_all(bs, topic, "read_uncommitted")
    assert [v[:2] for v in uncommitted] == [v for v, _ in plan]
