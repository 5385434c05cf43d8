"""JBOD replica movement (KIP-113) end to end against broker processes: kafka-python's
``alter_replica_log_dirs`` / ``describe_log_dirs`` (and raw requests where the admin client has no call),
acceptance scenarios D34-D44, and a move under load with kill -9 of the moving broker."""
from __future__ import annotations

import os
import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import (KafkaStorageError, LogDirNotFoundError, NoError, ReplicaNotAvailableError)
from kafka.protocol.admin.cluster import DescribeLogDirsRequest

from kafkatier.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CONVERGE_S = 30.0
DELETE_DELAY = {"file.delete.delay.ms": "1000"}


# ------------------------------------------------------------------------------------------------ helpers

def unique_topic(prefix: str = "jbod") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory(brokers=3, log_dirs=2)


@pytest.fixture(scope="module")
def admin(cluster):
    a = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=30000)
    yield a
    a.close()


def dirs_of(cluster, broker_id: int) -> list[str]:
    return [os.path.abspath(d) for d in cluster.manager.broker(broker_id)["log_dirs"]]


def create_topic(admin, cluster, topic: str, assignment: dict[int, list[int]], configs: dict | None = None) -> None:
    admin.create_topics([NewTopic(topic, -1, -1, replica_assignments=assignment,
                                  topic_configs={**DELETE_DELAY, **(configs or {})})], timeout_ms=30000)
    wait_for(lambda: all(current_dir(cluster, b, topic, p) for p, rs in assignment.items() for b in rs),
             CONVERGE_S, message=f"{topic} created on every replica")


def current_dir(cluster, broker_id: int, topic: str, partition: int = 0) -> str | None:
    for d in dirs_of(cluster, broker_id):
        if os.path.isdir(os.path.join(d, f"{topic}-{partition}")):
            return d
    return None


def other_dir(cluster, broker_id: int, topic: str, partition: int = 0) -> str:
    cur = current_dir(cluster, broker_id, topic, partition)
    return [d for d in dirs_of(cluster, broker_id) if d != cur][0]


def produce(cluster, topic: str, n: int, value_size: int = 100, partition: int = 0) -> None:
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=5,
                             batch_size=16384)
    try:
        for i in range(n):
            producer.send(topic, value=b"%08d" % i + b"x" * max(0, value_size - 8), partition=partition)
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=10)


def alter(admin, assignments: dict[tuple[str, int, int], str]) -> dict[tuple[str, int, int], type]:
    res = admin.alter_replica_log_dirs(assignments)
    return {(k.topic, k.partition, k.broker_id): v for k, v in res.items()}


def describe(admin, broker_id: int, topics=None) -> dict[str, dict]:
    """{log dir: {"error": code, "total": .., "usable": .., "replicas": {(topic, p, is_future): (size, lag)}}}"""
    out = {}
    for entry in admin.describe_log_dirs(topic_partitions=topics, brokers=[broker_id]):
        for d in entry["log_dirs"]:
            out[d["log_dir"]] = {
                "error": d["error_code"], "total": d.get("total_bytes"), "usable": d.get("usable_bytes"),
                "replicas": {(t["name"], p["partition_index"], p["is_future_key"]): (p["partition_size"],
                                                                                      p["offset_lag"])
                             for t in d["topics"] for p in t["partitions"]}}
    return out


def set_broker_throttle(cluster, broker_id: int, rate: int, name: str = "intra.broker.throttled.rate") -> None:
    """IncrementalAlterConfigs on the BROKER resource (the project's admin client)."""
    from kafkatier.admin.client import AdminClient
    with AdminClient(cluster.bootstrap_servers.split(",")) as a:
        a.alter_configs("brokers", str(broker_id), {name: str(rate)})


def wait_moved(cluster, broker_id: int, topic: str, dest: str, partition: int = 0, timeout: float = 60) -> None:
    wait_for(lambda: current_dir(cluster, broker_id, topic, partition) == dest
             and not os.path.exists(os.path.join(dest, f"{topic}-{partition}.move")),
             timeout, message=f"{topic}-{partition} moved to {dest} on broker {broker_id}")


def read_all(cluster, topic: str, partition: int = 0) -> list[bytes]:
    c = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", consumer_timeout_ms=5000)
    tp = TopicPartition(topic, partition)
    try:
        c.assign([tp])
        end = c.end_offsets([tp])[tp]
        c.seek_to_beginning(tp)
        out = []
        while c.position(tp) < end:
            for recs in c.poll(timeout_ms=2000).values():
                out.extend(r.value for r in recs)
        return out
    finally:
        c.close()


# ------------------------------------------------------------------------------------------------ scenarios

def test_d34_invalid_destinations(admin, cluster):
    topic = unique_topic()
    create_topic(admin, cluster, topic, {0: [1]})
    res = alter(admin, {(topic, 0, 1): "/not/a/configured/dir", })
    assert res == {(topic, 0, 1): LogDirNotFoundError}
    res = alter(admin, {(topic, 0, 1): "relative/dir"})
    assert res == {(topic, 0, 1): LogDirNotFoundError}
    assert current_dir(cluster, 1, topic) is not None  # nothing moved, nothing lost


def test_d35_destination_remembered_before_creation(admin, cluster):
    topic = unique_topic()
    d2 = dirs_of(cluster, 2)[1]
    res = alter(admin, {(topic, p, 2): d2 for p in range(5)})
    assert set(res.values()) == {ReplicaNotAvailableError}
    create_topic(admin, cluster, topic, {p: [2] for p in range(5)})
    assert [current_dir(cluster, 2, topic, p) for p in range(5)] == [d2] * 5


def test_d40_cancel_with_any_and_with_current_dir(admin, cluster):
    topic = unique_topic()
    create_topic(admin, cluster, topic, {0: [3]})
    produce(cluster, topic, 300, value_size=1000)
    src, dest = current_dir(cluster, 3, topic), other_dir(cluster, 3, topic)
    set_broker_throttle(cluster, 3, 1)
    try:
        for cancel_with in ("any", src):
            assert alter(admin, {(topic, 0, 3): dest}) == {(topic, 0, 3): NoError}
            wait_for(lambda: os.path.isdir(os.path.join(dest, f"{topic}-0.move")), CONVERGE_S, message=".move")
            view = describe(admin, 3, {topic: [0]})
            assert (topic, 0, True) in view[dest]["replicas"]
            assert alter(admin, {(topic, 0, 3): cancel_with}) == {(topic, 0, 3): NoError}
            assert not os.path.exists(os.path.join(dest, f"{topic}-0.move"))
            view = describe(admin, 3, {topic: [0]})
            assert (topic, 0, True) not in view[dest]["replicas"] and (topic, 0, False) in view[src]["replicas"]
            assert current_dir(cluster, 3, topic) == src
    finally:
        set_broker_throttle(cluster, 3, (1 << 63) - 1)
    assert len(read_all(cluster, topic)) == 300


def test_d37_throttle_then_raise(admin, cluster):
    topic = unique_topic()
    create_topic(admin, cluster, topic, {0: [1]})
    produce(cluster, topic, 300, value_size=1000)
    dest = other_dir(cluster, 1, topic)
    set_broker_throttle(cluster, 1, 1, name="replica.alter.log.dirs.io.max.bytes.per.second")
    try:
        assert alter(admin, {(topic, 0, 1): dest}) == {(topic, 0, 1): NoError}
        wait_for(lambda: describe(admin, 1, {topic: [0]})[dest]["replicas"].get((topic, 0, True)), CONVERGE_S,
                 message="the future log listed")
        time.sleep(1.0)  # observe that a 1 B/s move does not finish
        lag = describe(admin, 1, {topic: [0]})[dest]["replicas"][(topic, 0, True)][1]
        assert lag > 0 and os.path.isdir(os.path.join(dest, f"{topic}-0.move"))
        set_broker_throttle(cluster, 1, 3000000)
        wait_moved(cluster, 1, topic, dest)
    finally:
        set_broker_throttle(cluster, 1, (1 << 63) - 1, name="replica.alter.log.dirs.io.max.bytes.per.second")
    assert len(read_all(cluster, topic)) == 300


def test_d43_delete_records_during_a_move(admin, cluster):
    from kafka.structs import TopicPartition as TP
    topic = unique_topic()
    create_topic(admin, cluster, topic, {0: [2, 3]})
    produce(cluster, topic, 100)
    admin.delete_records({TP(topic, 0): 3})
    dest = other_dir(cluster, 2, topic)
    assert alter(admin, {(topic, 0, 2): dest}) == {(topic, 0, 2): NoError}
    wait_moved(cluster, 2, topic, dest)
    values = read_all(cluster, topic)
    assert len(values) == 97 and values[0].startswith(b"00000003")
    c = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers)
    tp = TopicPartition(topic, 0)
    assert (c.beginning_offsets([tp])[tp], c.end_offsets([tp])[tp]) == (3, 100)
    c.close()


def test_describe_log_dirs_v0_to_v4_and_null_topics(admin, cluster):
    topic = unique_topic()
    create_topic(admin, cluster, topic, {0: [1]})
    manager = admin._manager  # noqa: SLF001 - kafka-python's own send path, for explicit versions
    for v in range(5):
        req = DescribeLogDirsRequest(topics=None)
        req.API_VERSION = v

        async def send():
            return await manager.send(req, node_id=1)
        resp = manager.run(send)
        assert sorted(r.log_dir for r in resp.results) == sorted(dirs_of(cluster, 1))
        names = {t.name for r in resp.results for t in r.topics}
        assert topic in names
        if v >= 4:
            assert all(r.total_bytes > 0 and r.usable_bytes > 0 for r in resp.results)


# ------------------------------------------------------------------------------------------------ log dir failure

def test_d41_log_dir_failure_moves_leadership_and_is_reported(cluster_factory):
    c = cluster_factory(brokers=2, log_dirs=3)
    a = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers, request_timeout_ms=30000)
    try:
        topic = unique_topic()
        create_topic(a, c, topic, {0: [1, 2]}, configs={"segment.bytes": "10000"})
        produce(c, topic, 50)
        leader_dir = current_dir(c, 1, topic)
        seen_notes: list[str] = []

        def note_watch(children):
            seen_notes.extend(ch for ch in children if ch not in seen_notes)
        c.zk.ChildrenWatch("/log_dir_event_notification", note_watch)
        c.manager.fail_log_dir(1, leader_dir)
        # the broker notices within a second (health check) or at its next roll; then the controller elects 2
        wait_for(lambda: state_of(c, topic)["leader"] == 2, CONVERGE_S, message="leader moved to broker 2")
        assert seen_notes and all(n.startswith("log_dir_event_") and len(n) == len("log_dir_event_") + 10
                                  for n in seen_notes)
        wait_for(lambda: not c.zk.get_children("/log_dir_event_notification"), CONVERGE_S,
                 message="notifications deleted by the controller")
        produce(c, topic, 50)
        assert len(read_all(c, topic)) == 100
        view = describe(a, 1)
        assert view[leader_dir]["error"] == 56 and view[leader_dir]["total"] == -1 and not view[leader_dir]["replicas"]
        assert all(v["error"] == 0 for d, v in view.items() if d != leader_dir)
        # D34 (second half): a move to the offline dir is refused with KAFKA_STORAGE_ERROR
        other = unique_topic()
        create_topic(a, c, other, {0: [1]})
        assert alter(a, {(other, 0, 1): leader_dir}) == {(other, 0, 1): KafkaStorageError}
    finally:
        a.close()


def state_of(cluster, topic: str, partition: int = 0) -> dict:
    import json
    return json.loads(cluster.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")[0])


def test_all_log_dirs_failed_halts_the_broker_with_kafkas_message(cluster_factory):
    c = cluster_factory(brokers=1, log_dirs=2)
    for d in dirs_of(c, 1):
        c.manager.fail_log_dir(1, d)
    proc = c.manager._procs[1]  # noqa: SLF001 - the broker process started by this cluster manager
    wait_for(lambda: proc.poll() is not None, CONVERGE_S, message="broker 1 to halt")
    assert proc.returncode == 1
    assert "Shutdown broker because all log dirs in " in c.manager.log_tail(1, 50)
    assert " have failed" in c.manager.log_tail(1, 50)
    for d in dirs_of(c, 1):  # nothing lost: the data is still there to restore
        c.manager.restore_log_dir(1, d)
        assert os.path.isdir(d)
