"""Follower truncation by leader epoch (KIP-101, KIP-279) on a cluster of broker processes: the failure cases
the two KIPs were written for.  Each partition has two replicas on the two brokers that are not the controller,
so stopping them never moves the controller.

(a) KIP-101 scenario 1: a follower restarts after kill -9 with its high watermark behind its log end offset,
    then the leader dies: it truncated nothing and serves every acknowledged record as the new leader.
(b) KIP-101 scenario 2: divergent logs after an unclean election, the old leader's high watermark above the
    point where they diverge: it truncates to that point and both replicas end byte-identical.
(c) KIP-279: three leader changes leave the follower with an epoch the leader never had and the leader with one
    the follower never had: two rounds of OffsetsForLeaderEpoch, byte-identical replicas.

Replicas are compared on disk: the batches of every segment (the follower appends the leader's batches as they
are, so equal logs are equal bytes) and the records they hold.
"""
from __future__ import annotations

import os
import re

import pytest
from kafka import KafkaProducer
from kafka.record.default_records import DefaultRecordBatch

from kafkatier.cluster.manager import pid_alive
from kafkatier.waiting import wait_for
import partition_support

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CONVERGE_S = 30.0
UNCLEAN = {"unclean.leader.election.enable": "true"}


@pytest.fixture(scope="module")
def tcluster(module_cluster_factory):
    """Three brokers; quick controlled-shutdown retries (the last in-sync replica of a partition cannot move it);
    the periodic high-watermark checkpoint off in practice (an hour), so a broker killed with -9 restarts with
    its checkpointed high watermark behind its log end, as KIP-101 describes (Kafka writes it every 5 s)."""
    return module_cluster_factory(brokers=3, log_dirs=1, overrides={
        "auto.leader.rebalance.enable": "false", "controlled.shutdown.retry.backoff.ms": "200",
        "replica.high.watermark.checkpoint.interval.ms": "3600000"})


# ------------------------------------------------------------------------------------------------ helpers

PARTITIONS = partition_support.FollowedPartitions("trunc", CONVERGE_S)
state, wait_state, create_topic = PARTITIONS.state, PARTITIONS.wait_state, PARTITIONS.create_topic


def produce(c, topic: str, values: list[bytes], leader: int) -> list[int]:
    """acks=all through ``leader`` (others may be down); the offsets the leader acknowledged."""
    wait_state(c, topic, f"leader {leader}", lambda s: s["leader"] == leader)
    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{c.manager.broker(leader)['port']}", acks="all",
                             retries=20, retry_backoff_ms=100, request_timeout_ms=15000)
    try:
        futures = [producer.send(topic, value=v, partition=0) for v in values]
        producer.flush(timeout=30)
        return [f.get(timeout=30).offset for f in futures]
    finally:
        producer.close(timeout=10)


def partition_dir(c, broker: int, topic: str) -> str:
    [d] = [os.path.join(d, f"{topic}-0") for d in c.manager.broker(broker)["log_dirs"]]
    return d


def batches(c, broker: int, topic: str) -> list[bytes]:
    """Every batch in the replica's segment files, in order."""
    d = partition_dir(c, broker, topic)
    out = []
    for name in sorted(n for n in os.listdir(d) if n.endswith(".log")):
        with open(os.path.join(d, name), "rb") as f:
            data = f.read()
        pos = 0
        while pos + 12 <= len(data):
            end = pos + 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
            out.append(data[pos:end])
            pos = end
    return out


def records(c, broker: int, topic: str) -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for b in batches(c, broker, topic) for r in DefaultRecordBatch(b)]


def checkpointed_high_watermark(c, broker: int, topic: str) -> int | None:
    path = os.path.join(c.manager.broker(broker)["log_dirs"][0], "replication-offset-checkpoint")
    with open(path) as f:
        for line in f.read().splitlines()[2:]:
            t, p, hw = line.split()
            if (t, p) == (topic, "0"):
                return int(hw)
    return None


def broker_log(c, broker: int) -> str:
    path = os.path.join(c.data_dir, "logs", f"broker-{broker}.log")
    with open(path, errors="replace") as f:
        return f.read()


def truncations(log_text: str, topic: str) -> list[str]:
    """The fetcher's truncation lines for the partition (``to=``, ``completed=``)."""
    return re.findall(rf"truncating by leader epoch partition={re.escape(topic)}-0 .*", log_text)


def removals(log_text: str, topic: str) -> list[str]:
    """The log's own lines for any truncation of the partition, whoever asked for it."""
    return re.findall(rf"event=truncat\w* partition={re.escape(topic)}-0 .*", log_text)


def ensure_running(c) -> None:
    for b in c.broker_ids():
        if not pid_alive(c.manager.broker(b).get("pid")):
            c.manager.start_broker(b)
    c.manager.wait_until_ready(timeout=CONVERGE_S)


def replicas(c) -> tuple[int, int]:
    """The two brokers that are not the controller: (first leader, follower)."""
    a, b = sorted(x for x in c.broker_ids() if x != c.controller_id())
    return a, b


# ------------------------------------------------------------------------------------------------ tests

def test_kip101_a_restarted_follower_keeps_the_records_above_its_high_watermark(tcluster):
    c = tcluster
    a, b = replicas(c)
    topic = create_topic(c, [a, b])
    try:
        acked = produce(c, topic, [b"m%d" % i for i in range(10)], leader=a)
        assert acked == list(range(10))
        wait_for(lambda: len(records(c, b, topic)) == 10, CONVERGE_S, interval=0.05, message="b has 0..9")
        c.manager.kill_broker(b)   # no clean shutdown: b's checkpointed high watermark stays behind its log
        assert (checkpointed_high_watermark(c, b, topic) or 0) < 10
        log_before = len(broker_log(c, b))
        c.manager.start_broker(b)  # returns once its old registration expired and it is registered again
        wait_state(c, topic, "b back in the ISR", lambda s: sorted(s["isr"]) == sorted([a, b]))
        assert removals(broker_log(c, b)[log_before:], topic) == []   # HW truncation would cut 0..9
        c.manager.kill_broker(a)   # the leader dies; b, in sync, takes over
        wait_state(c, topic, "b leads", lambda s: s["leader"] == b)
        assert produce(c, topic, [b"after"], leader=b) == [10]
        assert records(c, b, topic) == [(i, b"m%d" % i) for i in range(10)] + [(10, b"after")]
    finally:
        ensure_running(c)


def test_kip101_divergent_logs_after_an_unclean_election_end_byte_identical(tcluster):
    c = tcluster
    a, b = replicas(c)
    topic = create_topic(c, [a, b], UNCLEAN)
    try:
        produce(c, topic, [b"m%d" % i for i in range(10)], leader=a)
        c.manager.stop_broker(b)                     # a follower's controlled shutdown: the ISR shrinks to [a]
        wait_state(c, topic, "ISR [a]", lambda s: s["isr"] == [a])
        assert produce(c, topic, [b"old%d" % i for i in range(10, 20)], leader=a) == list(range(10, 20))
        c.manager.stop_broker(a)                     # the last in-sync replica: the partition goes offline
        assert checkpointed_high_watermark(c, a, topic) == 20   # above where the logs are about to diverge
        c.manager.start_broker(b)                    # elected uncleanly (topic config) with 0..9
        assert produce(c, topic, [b"new%d" % i for i in range(10, 15)], leader=b) == list(range(10, 15))
        log_before = len(broker_log(c, a))
        c.manager.start_broker(a)                    # a follows b: 10..19 of a diverge from b's 10..14
        wait_state(c, topic, "a back in the ISR", lambda s: sorted(s["isr"]) == sorted([a, b]))
        expected = [(i, b"m%d" % i) for i in range(10)] + [(i, b"new%d" % i) for i in range(10, 15)]
        assert records(c, b, topic) == expected
        wait_for(lambda: batches(c, a, topic) == batches(c, b, topic), CONVERGE_S, interval=0.05,
                 message="a's segments equal to b's")
        assert records(c, a, topic) == expected
        a_log = broker_log(c, a)[log_before:]
        [cut] = truncations(a_log, topic)
        assert " to=10 " in cut and "completed=True" in cut
        [removed] = removals(a_log, topic)          # only the divergent tail: 0..9 are not fetched again
        assert "target_offset=10 " in removed, removed
    finally:
        ensure_running(c)


def test_kip279_fast_leader_changes_need_two_rounds_and_end_byte_identical(tcluster):
    """KIP-279's example: a writes m0 with b, m1 alone (epoch E1); b leads alone and writes x1 (epoch E2, which a
    never has); a leads alone again and writes m2 (epoch E3, which b never has).  b asks where E2 ends: a
    answers with E1's end (2), past where b's own E1 ends (1); b cuts x1 and asks again about E1."""
    c = tcluster
    a, b = replicas(c)
    topic = create_topic(c, [a, b], UNCLEAN)
    try:
        produce(c, topic, [b"m0"], leader=a)
        c.manager.stop_broker(b)
        wait_state(c, topic, "ISR [a]", lambda s: s["isr"] == [a])
        assert produce(c, topic, [b"m1"], leader=a) == [1]
        c.manager.stop_broker(a)
        c.manager.start_broker(b)                    # unclean: b leads with m0 only
        assert produce(c, topic, [b"x1"], leader=b) == [1]
        c.manager.stop_broker(b)
        c.manager.start_broker(a)                    # unclean: a leads with m0, m1
        assert produce(c, topic, [b"m2"], leader=a) == [2]
        log_before = len(broker_log(c, b))
        c.manager.start_broker(b)                    # b: m0, x1 -- diverges at offset 1 below a's end of E1
        wait_state(c, topic, "b back in the ISR", lambda s: sorted(s["isr"]) == sorted([a, b]))
        wait_for(lambda: batches(c, b, topic) == batches(c, a, topic), CONVERGE_S, interval=0.05,
                 message="b's segments equal to a's")
        assert records(c, b, topic) == [(0, b"m0"), (1, b"m1"), (2, b"m2")]
        cuts = truncations(broker_log(c, b)[log_before:], topic)
        assert len(cuts) == 1 and " to=1 " in cuts[0] and "completed=False" in cuts[0], cuts
    finally:
        ensure_running(c)


def test_high_watermarks_are_checkpointed_while_the_broker_runs(cluster_factory):
    """Kafka's ``highwatermark-checkpoint`` task: ``replication-offset-checkpoint`` follows the high watermark
    while the broker runs, so a kill -9 leaves a recent one on disk (not only a clean shutdown writes it)."""
    c = cluster_factory(brokers=1, log_dirs=1, overrides={"replica.high.watermark.checkpoint.interval.ms": "300"})
    [only] = c.broker_ids()
    topic = create_topic(c, [only])
    assert produce(c, topic, [b"m%d" % i for i in range(10)], leader=only) == list(range(10))
    wait_for(lambda: checkpointed_high_watermark(c, only, topic) == 10, CONVERGE_S, interval=0.1,
             ignore=(OSError, ValueError), message="the checkpointed high watermark at 10")
    c.manager.kill_broker(only)
    assert checkpointed_high_watermark(c, only, topic) == 10
