"""Request faults and clock skew on real broker processes (server/fault_injection.py), seen by real clients:
injected codes exactly N times (a raw client, kafka-python's and confluent-kafka's idempotent producers retrying
with no duplicate), added latency within 10%, a dropped response as a client timeout, a closed connection on the
Nth request, a broker clock 10 minutes ahead (LogAppendTime, retention by time, ListOffsets by timestamp), and
a StopReplica v5 answered KAFKA_STORAGE_ERROR three times during a KIP-950 disablement (retried by the
controller), and the CLI's bad input.  More control channel faults run in the scenarios (scenarios/*disabl*)."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid

import confluent_kafka
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from kafkatier.admin.client import AdminClient
from kafkatier.protocol import codec
from kafkatier.protocol.build import build
from kafkatier.server.broker_client import BrokerClient, BrokerConnectionError
from kafkatier.waiting import wait_for
from kafkatier.zk import codecs, paths
from kafkatier.zk.validate import validate_tree

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

LIST_OFFSETS_REQUEST, LIST_OFFSETS_RESPONSE = codec.REGISTRY[2]
NLOF, KSE = 6, 56


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    c = module_cluster_factory(brokers=2, overrides={"log.retention.check.interval.ms": "500",
                                                     "log.initial.task.delay.ms": "0",
                                                     "remote.log.storage.system.enable": "true"})
    yield c
    c.clear_faults()


def create(cluster, name: str, broker: int, configs: dict | None = None) -> str:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(name, -1, replica_assignments={0: [broker]}, topic_configs=configs or {})])
    finally:
        admin.close()
    wait_for(lambda: json.loads(cluster.zk.get(f"/brokers/topics/{name}/partitions/0/state")[0])["leader"] == broker,
             30, ignore=(Exception,), message=f"{name} led by {broker}")
    return name


def client(cluster, broker: int, timeout_s: float = 10.0) -> BrokerClient:
    return BrokerClient("127.0.0.1", cluster.manager.broker(broker)["port"], "faults-test", timeout_s=timeout_s)


def list_offsets(c: BrokerClient, topic: str, partitions=(0,)) -> list[int]:
    req = build(LIST_OFFSETS_REQUEST, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                                       for p in partitions]}]})
    r = c.send(req, LIST_OFFSETS_RESPONSE, 5)
    return [p.error_code for t in r.topics for p in t.partitions]


def remaining(cluster, broker: int, fault_id: str):
    return next(f["remaining"] for f in cluster.request_faults(broker)["faults"] if f["id"] == fault_id)


def test_injected_codes_seen_exactly_n_times_whole_and_per_partition(cluster):
    topic = create(cluster, f"codes-{uuid.uuid4().hex[:6]}", 1)
    c = client(cluster, 1)
    try:
        [f] = cluster.inject_errors(1, "ListOffsets", "NOT_LEADER_OR_FOLLOWER,REQUEST_TIMED_OUT", count=2)
        seen = [list_offsets(c, topic)[0] for _ in range(6)]
        assert seen == [NLOF, 7, NLOF, 7, 0, 0]
        wait_for(lambda: remaining(cluster, 1, f.id) == 0, 10, message="consumption recorded")
        # One partition of the request: only its error field, the other partition answered for real.
        cluster.inject_errors(1, "ListOffsets", ["KAFKA_STORAGE_ERROR"], count=2, topic=topic, partition=1)
        seen = [list_offsets(c, topic, (0, 1)) for _ in range(3)]
        assert seen == [[0, KSE], [0, KSE], [0, 3]]     # t-1 does not exist: UNKNOWN_TOPIC_OR_PARTITION once healed
    finally:
        c.close()
        cluster.clear_faults(1)


def test_a_restarted_broker_does_not_replay_consumed_faults(cluster):
    topic = create(cluster, f"restart-{uuid.uuid4().hex[:6]}", 1)
    probe = create(cluster, f"probe-{uuid.uuid4().hex[:6]}", 1)
    [f] = cluster.inject_errors(1, "ListOffsets", ["NOT_LEADER_OR_FOLLOWER"], count=3, topic=topic, partition=0)
    c = client(cluster, 1)
    try:
        assert list_offsets(c, topic) == [NLOF]
    finally:
        c.close()
    wait_for(lambda: remaining(cluster, 1, f.id) == 2, 10, message="consumption recorded")
    cluster.manager.stop_broker(1)
    cluster.manager.start_broker(1)
    c = client(cluster, 1)
    try:
        # Leading again (the probe topic has no fault), then the fault's two remaining codes, then none.
        wait_for(lambda: list_offsets(c, probe) == [0], 30, interval=0.2, ignore=(BrokerConnectionError,),
                 message="broker 1 leads again")
        assert [list_offsets(c, topic)[0] for _ in range(3)] == [NLOF, NLOF, 0]
    finally:
        c.close()
        cluster.clear_faults(1)


def test_kafka_python_idempotent_producer_retries_not_leader_no_duplicate(cluster):
    topic = create(cluster, f"kp-{uuid.uuid4().hex[:6]}", 1)
    [f] = cluster.inject_errors(1, "Produce", ["NOT_LEADER_OR_FOLLOWER"], count=3, topic=topic, partition=0)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, enable_idempotence=True, acks="all",
                             retries=20, retry_backoff_ms=50, max_in_flight_requests_per_connection=1)
    try:
        futures = [producer.send(topic, f"v{i}".encode(), partition=0) for i in range(20)]
        offsets = [fut.get(timeout=60).offset for fut in futures]
    finally:
        producer.close(timeout=10)
    assert offsets == list(range(20))
    assert remaining(cluster, 1, f.id) == 0
    assert read_all(cluster, topic) == [f"v{i}".encode() for i in range(20)]
    cluster.clear_faults(1)


def test_confluent_idempotent_producer_through_errors_and_a_lost_response(cluster):
    topic = create(cluster, f"ck-{uuid.uuid4().hex[:6]}", 2)
    cluster.inject_errors(2, "Produce", ["NOT_LEADER_OR_FOLLOWER", "REQUEST_TIMED_OUT"])
    cluster.inject_errors(2, "Produce", drop_response_nth=3)
    p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True,
                                  "socket.timeout.ms": 3000, "message.timeout.ms": 30000, "linger.ms": 0})
    delivered, errors = [], []
    for i in range(10):
        p.produce(topic, f"c{i}".encode(), partition=0,
                  on_delivery=lambda err, msg: (errors if err else delivered).append(err or msg.value()))
        p.poll(0)
        time.sleep(0.05)
    assert p.flush(60) == 0
    assert errors == [] and sorted(delivered) == sorted(f"c{i}".encode() for i in range(10))
    faults = cluster.request_faults(2)["faults"]
    assert [f["remaining"] for f in faults] == [0, 0]
    values = read_all(cluster, topic)
    assert sorted(values) == sorted(f"c{i}".encode() for i in range(10)), values    # no duplicate
    cluster.clear_faults(2)


def test_latency_added_within_ten_percent(cluster):
    topic = create(cluster, f"lat-{uuid.uuid4().hex[:6]}", 1)
    c = client(cluster, 1)
    try:
        def rtts(n):
            out = []
            for _ in range(n):
                t0 = time.monotonic()
                list_offsets(c, topic)
                out.append((time.monotonic() - t0) * 1000)
            return out
        base = statistics.median(rtts(10))
        cluster.inject_errors(1, "ListOffsets", latency_ms=200, count=10)
        delayed = rtts(10)
        after = rtts(3)
    finally:
        c.close()
        cluster.clear_faults(1)
    added = statistics.median(delayed) - base     # the median: one request slowed by a loaded machine is not the fault
    print(f"latency asked 200 ms: added median {added:.1f} ms (min {min(delayed) - base:.1f}, max "
          f"{max(delayed) - base:.1f}), base median {base:.2f} ms")
    assert 180 <= added <= 220, (base, delayed)
    assert max(after) < 150, after      # the count is spent


def test_dropped_response_times_the_client_out_and_close_resets_the_nth(cluster):
    topic = create(cluster, f"drop-{uuid.uuid4().hex[:6]}", 1)
    cluster.inject_errors(1, "ListOffsets", drop_response_nth=2)
    c = client(cluster, 1, timeout_s=2.0)
    try:
        assert list_offsets(c, topic) == [0]
        t0 = time.monotonic()
        with pytest.raises(BrokerConnectionError, match="timed out"):
            list_offsets(c, topic)
        assert time.monotonic() - t0 >= 1.9
        assert list_offsets(c, topic) == [0]      # a new connection is served
        cluster.inject_errors(1, "ListOffsets", close_connection_nth=3)
        assert list_offsets(c, topic) == [0] and list_offsets(c, topic) == [0]
        with pytest.raises(BrokerConnectionError, match="closed by peer"):
            list_offsets(c, topic)
        assert list_offsets(c, topic) == [0]
    finally:
        c.close()
        cluster.clear_faults(1)


def test_stop_replica_answered_storage_error_three_times_is_retried(cluster):
    topic = create(cluster, f"tiered-{uuid.uuid4().hex[:6]}", 2, {"remote.storage.enable": "true"})
    [f] = cluster.inject_errors(2, "StopReplica", ["KAFKA_STORAGE_ERROR"], count=3)
    admin = AdminClient(cluster.bootstrap_servers.split(","), request_timeout_ms=30000)
    try:
        admin.alter_configs("topics", topic, {"remote.storage.enable": "false",
                                              "remote.log.delete.on.disable": "true"})
    finally:
        admin.close()

    def state():
        return codecs.TieredState.decode(cluster.zk.get(paths.tiered_state(topic))[0]).state
    wait_for(lambda: state() == "DISABLED", 60, interval=0.2, ignore=(Exception,), message=f"{topic} DISABLED")
    assert remaining(cluster, 2, f.id) == 0
    logs = "".join(open(os.path.join(cluster.data_dir, "logs", f"broker-{b}.log")).read() for b in (1, 2))
    retries = [line for line in logs.splitlines() if "disablement failed on a replica; retrying" in line
               and f"replica={topic}-0-2" in line]
    assert len(retries) == 3 and all("error=KAFKA_STORAGE_ERROR" in line for line in retries), retries
    cluster.clear_faults(2)


def read_all(cluster, topic: str) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest",
                             consumer_timeout_ms=3000, enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        return [r.value for r in consumer]
    finally:
        consumer.close()


def test_clock_ten_minutes_ahead(cluster):
    stamped = create(cluster, f"lat-{uuid.uuid4().hex[:6]}", 1, {"message.timestamp.type": "LogAppendTime"})
    skewed = create(cluster, f"ret-{uuid.uuid4().hex[:6]}", 1, {"retention.ms": "300000", "segment.bytes": "1024"})
    plain = create(cluster, f"ret-{uuid.uuid4().hex[:6]}", 2, {"retention.ms": "300000", "segment.bytes": "1024"})
    cluster.set_clock(1, offset_ms=600_000)
    try:
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
        now = time.time() * 1000
        futures = [producer.send(stamped, b"x", partition=0) for _ in range(3)]
        for _ in range(30):
            futures += [producer.send(skewed, b"y" * 100, partition=0), producer.send(plain, b"y" * 100, partition=0)]
        [f.get(timeout=30) for f in futures]
        producer.close(timeout=10)
        consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest",
                                 consumer_timeout_ms=3000)
        consumer.assign([TopicPartition(stamped, 0)])
        ahead = [r.timestamp - now for r in consumer]
        assert len(ahead) == 3 and all(590_000 < a < 640_000 for a in ahead), ahead
        # Retention by time on the skewed broker: segments of records produced just now look 10 minutes old.
        tps = [TopicPartition(skewed, 0), TopicPartition(plain, 0)]
        wait_for(lambda: consumer.beginning_offsets(tps)[tps[0]] > 0, 30, message="skewed retention deleted")
        assert consumer.beginning_offsets(tps)[tps[1]] == 0
        # ListOffsets by timestamp follows the stamped times.
        tp = TopicPartition(stamped, 0)
        assert consumer.offsets_for_times({tp: int(now + 540_000)})[tp].offset == 0
        assert consumer.offsets_for_times({tp: int(now + 700_000)})[tp] is None
        consumer.close()
    finally:
        cluster.set_clock(1)
    assert cluster.request_faults(1)["clock"] == {"offset_ms": 0.0, "drift_ppm": 0.0}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkatier", "cluster", *args], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=os.getcwd()))


def test_cli_inject_describe_clear_and_bad_input(cluster):
    d = cluster.data_dir
    for args, message in (
            (["inject-errors", "--data-dir", d, "--broker", "9", "--api", "Produce", "--errors", "6"], "broker 9"),
            (["inject-errors", "--data-dir", d, "--broker", "1", "--api", "Prodooce", "--errors", "6"], "unknown API"),
            (["inject-errors", "--data-dir", d, "--broker", "1", "--api", "Produce", "--errors", "NOT_A_CODE"],
             "unknown error"),
            (["inject-errors", "--data-dir", d, "--broker", "1", "--api", "Produce", "--errors", "6", "--partition",
              "0"], "topic"),
            (["inject-errors", "--data-dir", d, "--broker", "1", "--api", "Metadata", "--latency-ms", "5",
              "--drop-response-nth", "1"], "not allowed"),
            (["clock", "--data-dir", d, "--broker", "9", "--offset-ms", "1"], "broker 9")):
        r = cli(*args)
        assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r)
    r = cli("inject-errors", "--data-dir", d, "--broker", "1", "--api", "Fetch", "--errors",
            "NOT_LEADER_OR_FOLLOWER", "--count", "1000000", "--topic", "nowhere", "--partition", "0")
    assert r.returncode == 0 and "Fetch nowhere-0 NOT_LEADER_OR_FOLLOWER x1000000" in r.stdout, r
    assert cli("clock", "--data-dir", d, "--broker", "1", "--offset-ms", "-5000").returncode == 0

    def described():
        out = cli("describe", "--data-dir", d).stdout
        return "request fault" in out and "clock skew: offset -5000 ms" in out and out
    out = wait_for(described, 30, interval=1, message="cluster describe lists the faults")
    assert "Fetch nowhere-0 NOT_LEADER_OR_FOLLOWER x1000000 remaining=1000000" in out
    assert validate_tree(cluster.zk, "/") == []     # the faults and fault state znodes match zk_schemas/
    assert cli("inject-errors", "--data-dir", d, "--broker", "1", "--clear").returncode == 0
    assert cli("clock", "--data-dir", d, "--broker", "1", "--reset").returncode == 0
    assert cluster.request_faults(1)["faults"] == []
