"""Log compaction with real clients on a real broker (docs/log-compaction.md): the latest value of every key
survives the cleaner, a tombstone goes after ``delete.retention.ms``, a consumer reading while the cleaner swaps
segments never sees an offset go backwards, a keyless record is refused, and a broker killed in the middle of a
swap (crash point ``cleaner-after-swap-rename``) comes back with a consistent log."""
from __future__ import annotations

import os
import threading
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from kafkatier.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

KEYS = 20
CONVERGE_S = 45.0
TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01",
                 "delete.retention.ms": "2000", "segment.ms": "1000"}


def read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      request_timeout_ms=30000)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    end = c.end_offsets([tp])[tp]
    out = []
    try:
        wait_for(lambda: _drain(c, out) >= end, CONVERGE_S, interval=0, message=f"reading {topic} to {end}")
    finally:
        c.close()
    return out


def _drain(c, out) -> int:
    for recs in c.poll(timeout_ms=500).values():
        out.extend((r.offset, r.key, r.value) for r in recs)
    tp = next(iter(c.assignment()))
    return c.position(tp)


def latest(records):
    d = {}
    for _, k, v in records:
        d[k] = v
    return d


def test_compaction_with_real_clients(cluster_factory):
    c = cluster_factory(brokers=1, log_dirs=1, overrides={"log.cleaner.backoff.ms": "100"})
    topic = f"compacted-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers, request_timeout_ms=30000)
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs=dict(TOPIC_CONFIGS))])
    admin.close()
    p = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all", linger_ms=5, batch_size=1024)
    expected: dict[bytes, bytes | None] = {}
    for i in range(600):
        k, v = b"key-%02d" % (i % KEYS), b"value-%05d" % i + b"." * 40
        p.send(topic, key=k, value=v, partition=0)
        expected[k] = v
    p.send(topic, key=b"key-00", value=None, partition=0)  # a tombstone
    expected[b"key-00"] = None
    p.flush(30)

    # A consumer reading from the start over and over while the cleaner works: offsets only go forward.
    stop, backwards, passes = threading.Event(), [], [0]

    def reader():
        cons = KafkaConsumer(bootstrap_servers=c.bootstrap_servers, group_id=None, enable_auto_commit=False,
                             max_partition_fetch_bytes=2048, request_timeout_ms=30000)
        tp = TopicPartition(topic, 0)
        cons.assign([tp])
        try:
            while not stop.is_set():
                cons.seek_to_beginning(tp)
                last = -1
                end = cons.end_offsets([tp])[tp]
                while not stop.is_set() and cons.position(tp) < end:
                    for recs in cons.poll(timeout_ms=200).values():
                        for r in recs:
                            if r.offset <= last:
                                backwards.append((last, r.offset))
                            last = r.offset
                passes[0] += 1
        finally:
            cons.close()
    t = threading.Thread(target=reader, daemon=True)
    t.start()

    # The cleaner removes the superseded values; the latest value of every key (the tombstone too) survives.
    wait_for(lambda: len(read_all(c.bootstrap_servers, topic)) < 200, CONVERGE_S, interval=0.5,
             message="the cleaner to compact the topic")
    got = read_all(c.bootstrap_servers, topic)
    assert latest(got) == expected
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets))

    # The tombstone goes once its cleaned segment is older than delete.retention.ms (new data keeps the
    # cleaner busy).
    def tombstone_gone() -> bool:
        p.send(topic, key=b"filler", value=b"x", partition=0)
        p.flush(10)
        return b"key-00" not in latest(read_all(c.bootstrap_servers, topic))
    wait_for(tombstone_gone, CONVERGE_S, interval=0.5, message="the tombstone to be removed")
    stop.set()
    t.join(30)
    assert passes[0] >= 1 and backwards == []
    expected.pop(b"key-00")
    expected[b"filler"] = b"x"
    assert latest(read_all(c.bootstrap_servers, topic)) == expected

    # A record without a key is refused (Kafka's INVALID_RECORD).
    p.close()
    keyless = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all", enable_idempotence=False)
    with pytest.raises(Exception) as err:
        keyless.send(topic, key=None, value=b"no key", partition=0).get(timeout=30)
    keyless.close()
    assert "InvalidRecord" in type(err.value).__name__ or "INVALID_RECORD" in str(err.value).upper()

    # A crash between the .swap rename and the removal of the old segments: completed at the next start.  A
    # second topic is filled while min.compaction.lag.ms keeps the cleaner off it, then the lag is lifted while
    # the broker is down and it restarts with the crash point armed.
    slow = f"compacted-slow-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers, request_timeout_ms=30000)
    admin.create_topics([NewTopic(slow, 1, 1, topic_configs=dict(TOPIC_CONFIGS, **{
        "min.compaction.lag.ms": "3600000"}))])
    admin.close()
    p = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all", linger_ms=5, batch_size=1024)
    expected = {}
    sent = []
    for i in range(300):
        k, v = b"key-%02d" % (i % KEYS), b"again-%05d" % i + b"." * 40
        sent.append(p.send(slow, key=k, value=v, partition=0))
        expected[k] = v
    p.flush(30)
    assert [f.get(timeout=30).offset for f in sent] == list(range(300))
    p.close()
    topic = slow
    from kafkatier.zk.kafka_zk_client import KafkaZkClient
    kzk = KafkaZkClient(c.zk)
    c.manager.stop_broker(1)
    cfg, version = kzk.get_entity_config_and_version("topics", topic)
    kzk.change_entity_config_conditionally("topics", topic, {**cfg, "min.compaction.lag.ms": "0"}, version)
    wait_for(lambda: c.zk.exists("/brokers/ids/1") is None, 30, message="broker 1 deregistered")
    c.manager.start_broker(1, wait=False, extra_env={"KAFKATIER_CRASH_AT": "cleaner-after-swap-rename"})
    proc = c.manager._procs[1]  # noqa: SLF001 - the broker process this cluster manager started
    wait_for(lambda: proc.poll() is not None, CONVERGE_S, message="broker 1 to crash in the swap")
    assert proc.returncode == 137
    log_dir = os.path.join(c.manager.broker(1)["log_dirs"][0], f"{topic}-0")
    assert any(n.endswith(".swap") for n in os.listdir(log_dir))
    c.manager.stop_broker(1)  # bookkeeping only: the process is gone
    wait_for(lambda: c.zk.exists("/brokers/ids/1") is None, 30, message="broker 1 deregistered")
    c.manager.start_broker(1)
    wait_for(lambda: latest(read_all(c.bootstrap_servers, topic)) == expected, CONVERGE_S, interval=0.5,
             message="every key's latest value after the crash")
    assert not any(n.endswith(".swap") for n in os.listdir(log_dir))   # the swap was completed at load
    # A .cleaned file may belong to a new cleaning still running (the restarted cleaner cleans the topic again).
    wait_for(lambda: not any(n.endswith((".swap", ".cleaned")) for n in os.listdir(log_dir)), CONVERGE_S,
             interval=0.1, message="no cleaning left half done")
