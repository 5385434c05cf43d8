"""kill -9 during an acks=all produce stream: one leader, then every broker at once, each restarted.

Afterwards no acknowledged record is missing, every batch served and every batch on disk passes its CRC, the
three replicas of each partition hold the same batches, and the restarted brokers are back in every ISR.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import struct
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.record.default_records import DefaultRecordBatch

from kafkatier.waiting import wait_for
from kafkatier.zk.kafka_zk_client import KafkaZkClient

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
log = logging.getLogger(__name__)

PARTITIONS = 3
N_RECORDS = 2400
WINDOW = 100              # sends outstanding at most: the stream continues through each crash
KILL_ONE_AT = N_RECORDS // 4
RESTART_ONE_AT = N_RECORDS // 2
KILL_ALL_AT = 3 * N_RECORDS // 4
SEND_WAIT_S = 90.0        # one record may wait out a whole-cluster outage: session expiry 6 s + restart
CONVERGE_S = 60.0


def partition_state(zk, topic: str, partition: int) -> dict:
    return json.loads(zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")[0])


def registered(zk) -> set[int]:
    return {int(b) for b in zk.get_children("/brokers/ids")}


def restart_when_deregistered(cluster, ids: list[int]) -> None:
    """A killed broker's ephemeral registration lives until its ZooKeeper session expires; a new process with
    the same id cannot register before that (as in Kafka), so wait for it to go, then start the brokers."""
    wait_for(lambda: not (registered(cluster.zk) & set(ids)), CONVERGE_S, interval=0.1,
             message=f"the registrations of killed brokers {ids} to expire")
    for b in ids:
        cluster.manager.start_broker(b, wait=False)
    cluster.manager.wait_for_brokers(ids, timeout=CONVERGE_S)


def log_batches(path: str) -> list[bytes]:
    """The v2 batches of one segment file; asserts each one is whole and passes its CRC."""
    with open(path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos < len(data):
        assert len(data) - pos >= 12, f"{path}: torn batch header at byte {pos}"
        (length,) = struct.unpack_from(">i", data, pos + 8)
        end = pos + 12 + length
        assert end <= len(data), f"{path}: torn batch at byte {pos}"
        batch = data[pos:end]
        assert DefaultRecordBatch(batch).validate_crc(), f"{path}: bad CRC in the batch at byte {pos}"
        out.append(batch)
        pos = end
    return out


def replica_batches(cluster, broker_id: int, topic: str, partition: int) -> list[bytes]:
    dirs = [os.path.join(d, f"{topic}-{partition}") for d in cluster.manager.broker(broker_id)["log_dirs"]]
    found = [d for d in dirs if os.path.isdir(d)]
    assert len(found) == 1, f"broker {broker_id}: {topic}-{partition} in {found}"
    names = sorted(n for n in os.listdir(found[0]) if n.endswith(".log"))
    return [b for n in names for b in log_batches(os.path.join(found[0], n))]


def test_acknowledged_records_survive_kill_9_of_a_leader_and_of_every_broker(cluster_factory):
    cluster = cluster_factory(brokers=3, log_dirs=2)
    topic = f"crash-{uuid.uuid4().hex[:8]}"
    assignment = {p: [1 + (p + i) % 3 for i in range(3)] for p in range(PARTITIONS)}   # leaders 1, 2, 3
    KafkaZkClient(cluster.zk).create_topic(topic, assignment, {"min.insync.replicas": "2"})
    wait_for(lambda: all(len(partition_state(cluster.zk, topic, p)["isr"]) == 3 for p in range(PARTITIONS)),
             CONVERGE_S, interval=0.1, ignore=(Exception,), message=f"{topic} online")

    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", retries=10000,
                             max_in_flight_requests_per_connection=1, linger_ms=5, retry_backoff_ms=200,
                             request_timeout_ms=15000, delivery_timeout_ms=int(SEND_WAIT_S * 1000),
                             metadata_max_age_ms=5000, reconnect_backoff_max_ms=500)
    futures = []
    victim = None
    try:
        for seq in range(N_RECORDS):
            if seq >= WINDOW:
                try:
                    futures[seq - WINDOW].get(timeout=SEND_WAIT_S)
                except Exception:  # noqa: BLE001 - an unacknowledged send: allowed, judged below
                    pass
            if seq == KILL_ONE_AT:
                victim = partition_state(cluster.zk, topic, 0)["leader"]
                cluster.manager.kill_broker(victim)
            elif seq == RESTART_ONE_AT:
                restart_when_deregistered(cluster, [victim])
            elif seq == KILL_ALL_AT:
                for b in cluster.broker_ids():   # SIGKILL all three before waiting for any of them
                    os.kill(cluster.manager.broker(b)["pid"], signal.SIGKILL)
                for b in cluster.broker_ids():
                    cluster.manager.kill_broker(b)
                restart_when_deregistered(cluster, cluster.broker_ids())
            futures.append(producer.send(topic, key=f"key-{seq}".encode(), value=str(seq).encode()))
        producer.flush(timeout=SEND_WAIT_S)
    finally:
        producer.close(timeout=10)

    acked: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    failed = []
    for seq, f in enumerate(futures):
        if f.succeeded():
            acked[f.value.partition].append((f.value.offset, seq))
        else:
            failed.append((seq, repr(f.exception)))
    n_acked = sum(map(len, acked.values()))
    assert n_acked >= N_RECORDS * 0.9, f"{len(failed)} failed sends, e.g. {failed[:3]}"

    # The restarted brokers catch up and rejoin every ISR.
    wait_for(lambda: all(sorted(partition_state(cluster.zk, topic, p)["isr"]) == sorted(cluster.broker_ids())
                         for p in range(PARTITIONS)), CONVERGE_S, interval=0.2,
             message="every broker back in every ISR")

    # Consume everything with CRC checks on: a torn or corrupt batch raises in the client.
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=None, enable_auto_commit=False,
                             check_crcs=True, request_timeout_ms=30000)
    assert consumer.config["check_crcs"] is True
    consumed: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)

        def done() -> bool:
            for tp, recs in consumer.poll(timeout_ms=500).items():
                consumed[tp.partition].extend(recs)
            return all(consumer.position(tp) >= end[tp] for tp in tps)
        wait_for(done, CONVERGE_S, interval=0, message=f"consuming {topic} up to {end}")
    finally:
        consumer.close()

    # At least once, in order: each acknowledged record is at the offset it was acknowledged with, and
    # acknowledged records first appear in send order, exactly once: a batch appended before a crash and
    # retried by the idempotent producer is answered with its original offsets, not written again.
    duplicates = 0
    for p in range(PARTITIONS):
        offsets = [r.offset for r in consumed[p]]
        assert offsets == list(range(len(offsets))), f"partition {p}: offset gaps"
        by_offset = {r.offset: int(r.value) for r in consumed[p]}
        lost = [(off, seq) for off, seq in acked[p] if by_offset.get(off) != seq]
        assert not lost, f"partition {p}: acknowledged records lost or moved: {lost[:5]}"
        acked_seqs = {seq for _, seq in acked[p]}
        seen: set[int] = set()
        first_seen = []
        for r in consumed[p]:
            seq = int(r.value)
            if seq in seen:
                duplicates += 1
            elif seq in acked_seqs:
                first_seen.append(seq)
            seen.add(seq)
        assert first_seen == sorted(acked_seqs), f"partition {p}: acknowledged records out of send order"
    log.info("crash recovery: %d acknowledged, %d failed, %d duplicated records in the log", n_acked,
             len(failed), duplicates)
    assert duplicates == 0, "the idempotent producer's retries were written twice"

    # On disk: every replica's batches are whole, pass their CRC and are the same on all three brokers.
    for p in range(PARTITIONS):
        copies = {b: replica_batches(cluster, b, topic, p) for b in cluster.broker_ids()}
        leader = partition_state(cluster.zk, topic, p)["leader"]
        for b, batches in copies.items():
            assert batches == copies[leader], f"{topic}-{p}: broker {b}'s log differs from leader {leader}'s"
