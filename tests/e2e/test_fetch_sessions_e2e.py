"""Incremental fetch sessions (KIP-227) on a 3-broker cluster of broker processes: replication under a producer
ends byte-identical on every replica while the followers fetch incrementally (each leader reports incremental
fetches served; an idle follower's fetch lists no partition), a kafka-python consumer (which asks for a
session) and a confluent-kafka consumer (which does not) read everything, before and after an idle spell."""
from __future__ import annotations

import json
import os
import uuid

import confluent_kafka
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from kafkatier.waiting import WaitTimeout, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

PARTITIONS = 6
CONVERGE_S = 45.0  # status files are written every 5 s


@pytest.fixture(scope="module")
def topic(cluster) -> str:
    name = f"sessions-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(name, PARTITIONS, 3)], timeout_ms=30000)
    finally:
        admin.close()
    wait_for(lambda: all(len(json.loads(cluster.zk.get(f"/brokers/topics/{name}/partitions/{p}/state")[0])["isr"]) == 3
                         for p in range(PARTITIONS)), CONVERGE_S, interval=0.2, ignore=(Exception,),
             message=f"{name}: full ISR")
    return name


def produce(cluster, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=5,
                             retries=10, request_timeout_ms=15000)
    try:
        for i, v in enumerate(values):
            producer.send(topic, value=v, partition=i % PARTITIONS)
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=10)


def replica_bytes(cluster, broker: int, topic: str, partition: int) -> bytes:
    """Every segment of the replica, in order."""
    for d in cluster.manager.broker(broker)["log_dirs"]:
        pdir = os.path.join(d, f"{topic}-{partition}")
        if os.path.isdir(pdir):
            out = b""
            for name in sorted(n for n in os.listdir(pdir) if n.endswith(".log")):
                with open(os.path.join(pdir, name), "rb") as f:
                    out += f.read()
            return out
    return b""


def statuses(cluster) -> dict[int, dict]:
    return {b["id"]: b["status"] or {} for b in cluster.manager.status()["brokers"]}


def values_of(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i}".encode() * 8 for i in range(n)]


def test_replicas_stay_byte_identical_while_followers_fetch_incrementally(cluster, topic):
    produce(cluster, topic, values_of(3000, "a"))

    def identical() -> bool:
        for p in range(PARTITIONS):
            copies = {replica_bytes(cluster, b, topic, p) for b in cluster.broker_ids()}
            if len(copies) != 1 or not next(iter(copies)):
                return False
        return True
    wait_for(identical, CONVERGE_S, interval=0.2, message="every replica byte-identical")

    def sessions_in_use() -> bool:
        st = statuses(cluster)
        for s in st.values():
            served = (s.get("fetch_sessions") or {}).get("fetches") or {}
            fetchers = (s.get("replica_fetchers") or {}).values()
            if not served.get("incremental") or not fetchers:
                return False
            # Idle now: each follower's fetches list no partition, in a session the leader gave it.
            if any(f["last_fetch_partitions"] != 0 or not f["session_id"] or not f["incremental_fetches"]
                   for f in fetchers):
                return False
        return True
    try:
        wait_for(sessions_in_use, CONVERGE_S, interval=0.5, message="incremental fetches, idle fetches listing nothing")
    except WaitTimeout:
        pytest.fail(f"fetch sessions not in use: {json.dumps({b: {k: s.get(k) for k in ('fetch_sessions', 'replica_fetchers')} for b, s in statuses(cluster).items()})}")


def test_kafka_python_consumer_reads_through_a_fetch_session(cluster, topic):
    first, second = values_of(200, "kp1"), values_of(200, "kp2")
    produce(cluster, topic, first)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest",
                             enable_auto_commit=False, fetch_max_wait_ms=100)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        seen: set[bytes] = set()

        def read(expected: list[bytes]) -> bool:
            for records in consumer.poll(timeout_ms=200).values():
                seen.update(r.value for r in records)
            return set(expected) <= seen
        wait_for(lambda: read(first), CONVERGE_S, message="kafka-python consumer read the first records")
        # The consumer holds a session with each leader (kafka-python's FetchSessionHandler), and its idle
        # incremental fetches still see records produced later.
        handlers = consumer._fetcher._session_handlers
        wait_for(lambda: read([]) and any(h.next_metadata.session_id != 0 for h in handlers.values()), CONVERGE_S,
                 message="kafka-python consumer in a fetch session")
        produce(cluster, topic, second)
        wait_for(lambda: read(second), CONVERGE_S, message="kafka-python consumer read the later records")
    finally:
        consumer.close()


def test_confluent_kafka_consumer_reads_without_a_session(cluster, topic):
    values = values_of(200, "ck")
    produce(cluster, topic, values)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
                                         "enable.auto.commit": False})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(PARTITIONS)])
        seen: set[bytes] = set()

        def read() -> bool:
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                assert m.error() is None, m.error()
                seen.add(m.value())
            return set(values) <= seen
        wait_for(read, CONVERGE_S, message="confluent-kafka consumer read every record")
    finally:
        consumer.close()
