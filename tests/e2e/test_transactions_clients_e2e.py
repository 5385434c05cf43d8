"""Transactions with aiokafka and KafkaJS (issue 23's client list): a transactional producer commits one
transaction and aborts another; a read_committed consumer of the same client library reads exactly the committed
values, and so does librdkafka.  KafkaJS runs in Node.js from the project-local ``.node/`` (scripts/bootstrap.sh
installs it; the test installs it there when it is missing and fails with the reason when it cannot)."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkatier.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
NODE_DIR = REPO / ".node"
WORKER = Path(__file__).resolve().parent / "txn_workers" / "kafkajs_txn.js"
COMMITTED = [f"c{i}" for i in range(5)]
OVERRIDES = {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3",
             "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory(brokers=3, log_dirs=1, overrides=OVERRIDES)


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 2)])[topic].result(30)
    wait_for(lambda: all(p.leader >= 0 and len(p.isrs) == 2 for p in
                         admin.list_topics(topic, timeout=5).topics[topic].partitions.values()),
             30, interval=0.2, ignore=(Exception,), message=f"{topic} online")


def committed_values(bootstrap: str, topic: str) -> list[str]:
    """librdkafka's read_committed view: every partition read to its end (the last stable offset)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(2)])
    out: list[str] = []
    eof: set[int] = set()

    def done() -> bool:
        msg = c.poll(0.2)
        if msg is not None:
            if msg.error() is None:
                out.append(msg.value().decode())
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                eof.add(msg.partition())
        return len(eof) == 2 and len(out) >= 5
    try:
        wait_for(done, 30, interval=0, message=f"read_committed {topic}")
    finally:
        c.close()
    return sorted(out)


def test_aiokafka_transactional_producer_and_read_committed_consumer(cluster):
    bs = cluster.bootstrap_servers
    topic = f"txn-aiokafka-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic)

    async def run() -> list[str]:
        producer = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=f"aiokafka-{uuid.uuid4().hex[:8]}")
        await producer.start()
        try:
            async with producer.transaction():
                for i, v in enumerate(COMMITTED):
                    await producer.send(topic, v.encode(), partition=i % 2)
            await producer.begin_transaction()
            for i in range(5):
                await producer.send(topic, f"a{i}".encode(), partition=i % 2)
            await producer.abort_transaction()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bs, isolation_level="read_committed",
                                    auto_offset_reset="earliest", group_id=f"aiokafka-{uuid.uuid4().hex[:8]}")
        await consumer.start()
        seen: list[str] = []
        try:
            async def until_committed() -> None:
                while sum(v.startswith("c") for v in seen) < 5:
                    batch = await consumer.getmany(timeout_ms=500)
                    seen.extend(m.value.decode() for msgs in batch.values() for m in msgs)
            await asyncio.wait_for(until_committed(), 60)
            # read past the abort marker too: nothing of the aborted transaction may follow
            batch = await consumer.getmany(timeout_ms=1000)
            seen.extend(m.value.decode() for msgs in batch.values() for m in msgs)
        finally:
            await consumer.stop()
        return seen

    seen = asyncio.run(run())
    assert sorted(seen) == COMMITTED
    assert committed_values(bs, topic) == COMMITTED


def _kafkajs() -> Path:
    """The project-local KafkaJS, installed into ``.node/`` if missing; a clear failure when it cannot be."""
    if shutil.which("node") is None:
        pytest.fail("Node.js is not installed: the KafkaJS transaction test needs node (and npm to install KafkaJS)")
    modules = NODE_DIR / "node_modules"
    if not (modules / "kafkajs").is_dir():
        if shutil.which("npm") is None:
            pytest.fail("KafkaJS is not in .node/ and npm is not installed to install it (scripts/bootstrap.sh)")
        r = subprocess.run(["npm", "install", "--prefix", str(NODE_DIR), "--no-audit", "--no-fund", "kafkajs@2"],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0 or not (modules / "kafkajs").is_dir():
            pytest.fail(f"could not install KafkaJS into {NODE_DIR} (npm install kafkajs@2): {r.stderr[-500:]}")
    return modules


def test_kafkajs_transactional_producer_and_read_committed_consumer(cluster):
    modules = _kafkajs()
    bs = cluster.bootstrap_servers
    topic = f"txn-kafkajs-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic)
    r = subprocess.run(["node", str(WORKER), bs, topic, f"kafkajs-{uuid.uuid4().hex[:8]}"],
                       env=dict(os.environ, NODE_PATH=str(modules)), capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr[-2000:]
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert sorted(seen) == COMMITTED
    assert committed_values(bs, topic) == COMMITTED


def test_read_committed_of_large_batches_around_an_aborted_transaction(cluster):
    """A read_committed fetch of more than 64 KiB is answered from the segment file (``sendfile``,
    docs/architecture.md#request-paths): the aborted transactions it lists are found up to the last offset of the
    range's last whole batch, so librdkafka drops exactly the aborted records between two committed transactions."""
    from confluent_kafka import Producer
    bs = cluster.bootstrap_servers
    topic = f"txn-large-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic)
    producer = Producer({"bootstrap.servers": bs, "transactional.id": f"large-{uuid.uuid4().hex[:8]}",
                         "linger.ms": 50, "batch.size": 256 * 1024})
    producer.init_transactions(30)
    expected = []
    for txn, commit in (("c", True), ("a", False), ("d", True)):
        producer.begin_transaction()
        for i in range(40):
            value = f"{txn}{i:03d}".encode() * 2048   # 8 KiB
            producer.produce(topic, value, partition=0)
            if commit:
                expected.append(value)
        producer.flush(30)
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    c = Consumer({"bootstrap.servers": bs, "group.id": f"reader-{uuid.uuid4()}", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    eof: list[bool] = []

    def done() -> bool:
        msg = c.poll(0.2)
        if msg is not None:
            if msg.error() is None:
                got.append(msg.value())
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                eof.append(True)
        return bool(eof) and len(got) >= len(expected)
    try:
        wait_for(done, 60, interval=0, message=f"read_committed {topic}")
    finally:
        c.close()
    assert [v[:4] for v in got] == [v[:4] for v in expected] and got == expected
