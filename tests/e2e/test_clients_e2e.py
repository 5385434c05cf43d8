"""Real Kafka clients (kafka-python, confluent-kafka, kcat) against a kafkatier cluster of broker processes.

Leader failover under acks=all (acceptance scenario A6), NOT_ENOUGH_REPLICAS once the ISR is below
``min.insync.replicas``, kcat metadata / consume / produce, and ListOffsets (earliest, latest, by timestamp).
"""
from __future__ import annotations

import json
import logging
import shutil
import subprocess
import time
import uuid

import confluent_kafka
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import NotEnoughReplicasError

from kafkatier.server.broker_client import BrokerConnectionError
from kafkatier.waiting import wait_for

import partition_support

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
log = logging.getLogger(__name__)

KCAT = "/usr/bin/kcat"
CONVERGE_S = 30.0        # bound on every wait for leaders / ISR to settle
FAILOVER_S = 60.0        # bound on producing through a leader failover (session timeout 6 s + election)


# ------------------------------------------------------------------------------------------------ helpers

def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def partition_state(zk, topic: str, partition: int) -> tuple[dict, object]:
    data, stat = zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
    return json.loads(data), stat


def wait_metadata_complete(cluster) -> None:
    """Until every broker's Metadata answer lists all brokers and the controller.  A cluster counts as up once
    the brokers are registered, a little before the controller's UpdateMetadata reaches them all; a client that
    bootstraps in between can be told of a controller it has no address for."""
    ids = set(cluster.broker_ids())

    def complete() -> bool:
        for b in ids:
            resp = partition_support.broker_metadata(cluster, b, [])
            if {x.node_id for x in resp.brokers} != ids or resp.controller_id not in ids:
                return False
        return True
    wait_for(complete, CONVERGE_S, interval=0.1, ignore=(Exception,), message="every broker to know the cluster")


def create_topic(cluster, topic: str, partitions: int, rf: int, configs: dict[str, str] | None = None) -> None:
    """Create through the CreateTopics API and wait until every partition has a leader and a full ISR, and every
    broker's metadata says so."""
    wait_metadata_complete(cluster)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(topic, partitions, rf, topic_configs=configs or {})], timeout_ms=30000)
    finally:
        admin.close()

    def ready() -> bool:
        for p in range(partitions):
            st, _ = partition_state(cluster.zk, topic, p)
            if st["leader"] < 0 or len(st["isr"]) != rf:
                return False
        return True
    wait_for(ready, CONVERGE_S, interval=0.1, ignore=(Exception,), message=f"{topic} online")
    wait_for(lambda: partition_support.metadata_everywhere(cluster, topic, partitions), CONVERGE_S, interval=0.1,
             ignore=(Exception,), message=f"every broker's metadata to name {topic}'s leaders")


def kp_consumer(cluster, **extra) -> KafkaConsumer:
    """A kafka-python consumer without a group (we assign partitions), CRC checks on."""
    return KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", check_crcs=True, request_timeout_ms=30000, **extra)


def consume_all(cluster, topic: str, partitions: int, timeout: float = 60.0) -> dict[int, list]:
    """Every record of every partition from the beginning up to the high watermark (kafka-python)."""
    consumer = kp_consumer(cluster)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        out: dict[int, list] = {p: [] for p in range(partitions)}

        def done() -> bool:
            for tp, recs in consumer.poll(timeout_ms=500).items():
                out[tp.partition].extend(recs)
            return all(consumer.position(tp) >= end[tp] for tp in tps)
        wait_for(done, timeout, interval=0, message=f"consuming {topic} up to {end}")
        return out
    finally:
        consumer.close()


def check_acknowledged(acked: dict[int, list[tuple[int, int]]], consumed: dict[int, list]) -> int:
    """In order, for acknowledged records: each one is in the log at the offset it was acknowledged with, and
    acknowledged records first appear in send order.  Returns how many records were in the log more than once
    (idempotent producers must see none: the broker answers a retried batch with its original offsets)."""
    duplicates = 0
    for p, acks in acked.items():
        offsets = [r.offset for r in consumed[p]]
        assert offsets == sorted(set(offsets)), f"partition {p}: offsets not strictly increasing"
        by_offset = {r.offset: int(r.value) for r in consumed[p]}
        lost = [(off, seq) for off, seq in acks if by_offset.get(off) != seq]
        assert not lost, f"partition {p}: acknowledged (offset, seq) not in the log: {lost[:5]}"
        acked_seqs = {seq for _, seq in acks}
        seen: set[int] = set()
        first_seen = []
        for r in consumed[p]:
            seq = int(r.value)
            if seq in seen:
                duplicates += 1
                continue
            seen.add(seq)
            if seq in acked_seqs:
                first_seen.append(seq)
        assert first_seen == sorted(acked_seqs), f"partition {p}: acknowledged records out of send order"
        in_offset_order = [seq for _, seq in sorted(acks)]
        assert in_offset_order == sorted(in_offset_order), f"partition {p}: acknowledged offsets out of send order"
    return duplicates


def wait_new_leader(cluster, topic: str, partition: int, before: dict, before_version: int) -> dict:
    """A6: the state znode names a new leader from the old ISR, with a higher leader epoch and znode version."""
    def moved():
        st, stat = partition_state(cluster.zk, topic, partition)
        return (st, stat) if st["leader"] not in (-1, before["leader"]) else None
    st, stat = wait_for(moved, FAILOVER_S, interval=0.1, message=f"a new leader for {topic}-{partition}")
    assert st["leader"] in before["isr"]
    assert st["leader_epoch"] > before["leader_epoch"]
    assert stat.version > before_version
    return st


# ------------------------------------------------------------------------------------ leader failover (A6)

N_RECORDS = 1500
WINDOW = 100            # at most this many sends outstanding: keeps the stream going across the failover


def _kill_leader_midway(cluster, topic: str) -> tuple[dict, int]:
    """SIGKILL the leader of partition 0; returns its state znode (and version) from before."""
    before, stat = partition_state(cluster.zk, topic, 0)
    cluster.manager.kill_broker(before["leader"])
    return before, stat.version


def test_kafka_python_acks_all_survives_leader_kill(cluster_factory):
    cluster = cluster_factory(brokers=3, log_dirs=1)
    topic = unique_topic("fo-kp")
    create_topic(cluster, topic, 3, 3, {"min.insync.replicas": "2"})
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", retries=1000,
                             max_in_flight_requests_per_connection=1, linger_ms=5, retry_backoff_ms=100,
                             request_timeout_ms=15000, delivery_timeout_ms=90000, metadata_max_age_ms=5000)
    futures = []
    killed = None
    try:
        for seq in range(N_RECORDS):
            if seq >= WINDOW:
                try:
                    futures[seq - WINDOW].get(timeout=FAILOVER_S)
                except Exception:  # noqa: BLE001 - an unacknowledged send; judged below
                    pass
            if seq == N_RECORDS // 2:
                killed = _kill_leader_midway(cluster, topic)
            futures.append(producer.send(topic, key=f"key-{seq}".encode(), value=str(seq).encode()))
        producer.flush(timeout=FAILOVER_S)
    finally:
        producer.close(timeout=10)

    before, version = killed
    wait_new_leader(cluster, topic, 0, before, version)
    acked: dict[int, list[tuple[int, int]]] = {p: [] for p in range(3)}
    failed = []
    for seq, f in enumerate(futures):
        assert f.is_done
        if f.succeeded():
            acked[f.value.partition].append((f.value.offset, seq))
        else:
            failed.append((seq, f.exception))
    assert sum(map(len, acked.values())) >= N_RECORDS * 0.9, f"too many failed sends: {failed[:5]}"
    assert any(seq > N_RECORDS // 2 for _, seq in acked[0]), "nothing acknowledged by partition 0's new leader"
    consumed = consume_all(cluster, topic, 3)
    duplicates = check_acknowledged(acked, consumed)
    log.info("kafka-python failover: %d acknowledged, %d failed, %d duplicated records in the log",
             N_RECORDS - len(failed), len(failed), duplicates)
    assert duplicates == 0, "the idempotent producer's retries were written twice"
    assert all(int(r.value) in range(N_RECORDS) for recs in consumed.values() for r in recs)


def test_confluent_kafka_acks_all_survives_leader_kill(cluster_factory):
    cluster = cluster_factory(brokers=3, log_dirs=1)
    topic = unique_topic("fo-ck")
    create_topic(cluster, topic, 3, 3, {"min.insync.replicas": "2"})
    producer = confluent_kafka.Producer({
        "bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "enable.idempotence": True,
        "retries": 1000, "max.in.flight.requests.per.connection": 1, "linger.ms": 5, "retry.backoff.ms": 100,
        "message.timeout.ms": 90000, "request.timeout.ms": 15000, "topic.metadata.refresh.interval.ms": 5000,
        "log_level": 3})
    results: dict[int, tuple[int, int] | Exception] = {}

    def delivered(seq):
        def cb(err, msg):
            results[seq] = err if err is not None else (msg.partition(), msg.offset())
        return cb

    def reported(seq: int) -> bool:
        producer.poll(0.05)
        return seq in results

    killed = None
    for seq in range(N_RECORDS):
        if seq >= WINDOW:
            wait_for(lambda: reported(seq - WINDOW), FAILOVER_S, interval=0,
                     message=f"delivery report for record {seq - WINDOW}")
        if seq == N_RECORDS // 2:
            killed = _kill_leader_midway(cluster, topic)
        producer.produce(topic, key=f"key-{seq}".encode(), value=str(seq).encode(), on_delivery=delivered(seq))
        producer.poll(0)
    assert producer.flush(FAILOVER_S) == 0

    before, version = killed
    wait_new_leader(cluster, topic, 0, before, version)
    acked: dict[int, list[tuple[int, int]]] = {p: [] for p in range(3)}
    failed = []
    for seq in range(N_RECORDS):
        r = results[seq]
        if isinstance(r, tuple):
            acked[r[0]].append((r[1], seq))
        else:
            failed.append((seq, r))
    assert sum(map(len, acked.values())) >= N_RECORDS * 0.9, f"too many failed sends: {failed[:5]}"
    assert any(seq > N_RECORDS // 2 for _, seq in acked[0]), "nothing acknowledged by partition 0's new leader"

    # Read back with confluent-kafka too: a group id is required by the client but no group is joined.
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap_servers, "group.id": f"unused-{topic}", "enable.auto.commit": False,
        "check.crcs": True, "enable.partition.eof": True, "log_level": 3})
    consumed: dict[int, list] = {p: [] for p in range(3)}
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(3)])
        at_eof: set[int] = set()

        def done() -> bool:
            msg = consumer.poll(0.5)
            if msg is None:
                return False
            if msg.error():
                assert msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, msg.error()
                at_eof.add(msg.partition())
            else:
                consumed[msg.partition()].append(_Rec(msg.offset(), msg.value()))
            return len(at_eof) == 3
        wait_for(done, 60, interval=0, message=f"confluent consumer to reach the end of {topic}")
    finally:
        consumer.close()
    duplicates = check_acknowledged(acked, consumed)
    log.info("confluent-kafka failover: %d acknowledged, %d failed, %d duplicated records in the log",
             N_RECORDS - len(failed), len(failed), duplicates)
    assert duplicates == 0, "the idempotent producer's retries were written twice"


class _Rec:
    __slots__ = ("offset", "value")

    def __init__(self, offset: int, value: bytes):
        self.offset, self.value = offset, value


# ------------------------------------------------------------------------------ ISR below min.insync (A6)

def leader_isr(cluster, leader: int, topic: str) -> list[int] | None:
    """Partition 0's ISR in the leader's own Metadata answer.  The leader applies the controller's LeaderAndIsr
    before the UpdateMetadata sent after it (its control requests run in order), and widens its ISR itself before
    the controller hears of it: once its answer names an ISR, its partition holds that ISR (sooner than its status
    file, written every 5 s at best)."""
    resp = partition_support.broker_metadata(cluster, leader, [topic])
    return next((sorted(p.isr_nodes) for t in resp.topics for p in t.partitions
                 if t.error_code == 0 and p.error_code == 0 and p.partition_index == 0 and p.leader_id == leader), None)


def test_acks_all_fails_with_not_enough_replicas_when_isr_is_one(cluster_factory):
    cluster = cluster_factory(brokers=3, log_dirs=1)
    topic = unique_topic("min-isr")
    create_topic(cluster, topic, 1, 3, {"min.insync.replicas": "2"})
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", retries=0,
                             enable_idempotence=False, max_in_flight_requests_per_connection=1,
                             request_timeout_ms=15000, metadata_max_age_ms=1000)
    try:
        for i in range(5):
            producer.send(topic, value=f"ok-{i}".encode()).get(timeout=30)
        leader = partition_state(cluster.zk, topic, 0)[0]["leader"]
        others = [b for b in cluster.broker_ids() if b != leader]
        for b in others:
            cluster.manager.stop_broker(b)
        wait_for(lambda: partition_state(cluster.zk, topic, 0)[0]["isr"] == [leader], CONVERGE_S, interval=0.1,
                 message="ISR to shrink to the leader alone")
        # The controller writes the shrunk ISR to ZooKeeper before its LeaderAndIsr reaches the leader, and the
        # leader decides NOT_ENOUGH_REPLICAS from its own ISR: wait for that.
        wait_for(lambda: leader_isr(cluster, leader, topic) == [leader], CONVERGE_S, interval=0.1,
                 ignore=(BrokerConnectionError, OSError), message="the leader's own ISR to shrink to itself")

        futures = [producer.send(topic, value=f"lost-{i}".encode()) for i in range(10)]
        producer.flush(timeout=30)
        errors = [f.exception for f in futures]
        assert not any(f.succeeded() for f in futures)
        assert all(isinstance(e, NotEnoughReplicasError) and e.errno == 19 for e in errors), errors

        # A replica back in the ISR makes acks=all succeed again; the refused records were never appended.  The
        # leader writes the larger ISR to ZooKeeper before it takes it as its own (as Kafka's leader applies an
        # AlterPartition's ISR only once the controller answers): wait for its own view, as above.
        cluster.manager.start_broker(others[0])
        wait_for(lambda: len(partition_state(cluster.zk, topic, 0)[0]["isr"]) >= 2, CONVERGE_S, interval=0.1,
                 message="a second replica back in the ISR")
        wait_for(lambda: len(leader_isr(cluster, leader, topic) or ()) >= 2, CONVERGE_S, interval=0.1,
                 ignore=(BrokerConnectionError, OSError), message="the leader's own ISR to take the replica back")
        md = producer.send(topic, value=b"ok-again").get(timeout=30)
        assert md.offset == 5
    finally:
        producer.close(timeout=10)
    consumed = consume_all(cluster, topic, 1)
    assert [r.value for r in consumed[0]] == [f"ok-{i}".encode() for i in range(5)] + [b"ok-again"]


# ------------------------------------------------------------------------------------------------------ kcat

def kcat(*args: str, input: str | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess:
    assert shutil.which(KCAT), f"{KCAT} is missing (scripts/bootstrap.sh installs it)"
    return subprocess.run([KCAT, *args], input=input, capture_output=True, text=True, timeout=timeout)


def test_kcat_metadata_lists_brokers_and_leaders(cluster):
    topic = unique_topic("kcat-md")
    create_topic(cluster, topic, 2, 3)
    proc = kcat("-b", cluster.bootstrap_servers, "-L", "-t", topic)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert " 3 brokers:" in out, out
    for b in cluster.broker_ids():
        assert f"broker {b} at 127.0.0.1:{cluster.manager.broker(b)['port']}" in out, out
    assert f'topic "{topic}" with 2 partitions:' in out, out
    for p in range(2):
        st, _ = partition_state(cluster.zk, topic, p)
        replicas = ",".join(map(str, json.loads(cluster.zk.get(f"/brokers/topics/{topic}")[0])
                                ["partitions"][str(p)]))
        assert f"partition {p}, leader {st['leader']}, replicas: {replicas}, isrs: " in out, out


def test_kcat_consumes_what_kafka_python_produced(cluster):
    topic = unique_topic("kcat-c")
    create_topic(cluster, topic, 2, 3)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    try:
        sent = {}
        for i in range(200):
            md = producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode()).get(timeout=30)
            sent[(md.partition, md.offset)] = (f"k{i}", f"v{i}")
    finally:
        producer.close(timeout=10)
    proc = kcat("-b", cluster.bootstrap_servers, "-C", "-t", topic, "-e", "-o", "beginning", "-q",
                "-f", "%p\t%o\t%k\t%s\n")
    assert proc.returncode == 0, proc.stderr
    got = {}
    for line in proc.stdout.splitlines():
        p, o, k, v = line.split("\t")
        got[(int(p), int(o))] = (k, v)
    assert got == sent


def test_kafka_python_reads_what_kcat_produced(cluster):
    topic = unique_topic("kcat-p")
    create_topic(cluster, topic, 1, 3)
    lines = [f"key-{i}:value-{i}" for i in range(300)]
    proc = kcat("-b", cluster.bootstrap_servers, "-P", "-t", topic, "-K", ":", "-X", "acks=all",
                input="\n".join(lines) + "\n")
    assert proc.returncode == 0, proc.stderr
    consumed = consume_all(cluster, topic, 1)
    assert [f"{r.key.decode()}:{r.value.decode()}" for r in consumed[0]] == lines
    assert [r.offset for r in consumed[0]] == list(range(300))


# ------------------------------------------------------------------------------------------------ ListOffsets

def test_list_offsets_earliest_latest_and_by_timestamp(cluster):
    topic = unique_topic("offsets")
    create_topic(cluster, topic, 1, 3)
    tp = TopicPartition(topic, 0)
    base = (int(time.time()) - 3600) * 1000
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=0)
    try:
        for i in range(10):   # one batch per record, timestamps one second apart
            producer.send(topic, value=f"r{i}".encode(), timestamp_ms=base + i * 1000).get(timeout=30)
    finally:
        producer.close(timeout=10)
    consumer = kp_consumer(cluster)
    try:
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 10}
        exact = consumer.offsets_for_times({tp: base + 4000})[tp]
        assert (exact.offset, exact.timestamp) == (4, base + 4000)
        between = consumer.offsets_for_times({tp: base + 6500})[tp]
        assert (between.offset, between.timestamp) == (7, base + 7000)
        first = consumer.offsets_for_times({tp: 0})[tp]
        assert (first.offset, first.timestamp) == (0, base)
        assert consumer.offsets_for_times({tp: base + 60_000})[tp] is None
    finally:
        consumer.close()
