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
    """IncrementalAlterConfigs on the BROKER resource (the project's admin client), then wait until the broker
    applied it (its DescribeConfigs shows the value: the change travels through a ZooKeeper notification)."""
    from kafkatier.admin.client import AdminClient
    with AdminClient(cluster.bootstrap_servers.split(",")) as a:
        a.alter_configs("brokers", str(broker_id), {name: str(rate)})
        wait_for(lambda: any(e.name == name and e.value == str(rate)
                             for e in a.describe_configs("brokers", [str(broker_id)])[str(broker_id)]),
                 CONVERGE_S, interval=0.1, message=f"broker {broker_id} applying {name}={rate}")


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
        c.zk.ensure_path("/log_dir_event_notification")
        before = c.zk.exists("/log_dir_event_notification").cversion
        c.manager.fail_log_dir(1, leader_dir)
        # the broker notices within a second (health check) or at its next roll; then the controller elects 2
        wait_for(lambda: state_of(c, topic)["leader"] == 2, CONVERGE_S, message="leader moved to broker 2")
        # a log_dir_event_ node was created and then deleted by the controller (both change the cversion; the
        # node's name and content are checked in tests/unit/test_log_dirs_apis.py)
        wait_for(lambda: not c.zk.get_children("/log_dir_event_notification")
                 and c.zk.exists("/log_dir_event_notification").cversion >= before + 2, CONVERGE_S,
                 message="the notification created and deleted by the controller")
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


# ------------------------------------------------------------------------------------------------ tools

def test_d42_reassignment_with_log_dirs(admin, cluster, kafkatier_cli, tmp_path):
    import json
    topic = unique_topic()
    create_topic(admin, cluster, topic, {0: [1, 2, 3]})
    produce(cluster, topic, 200)
    dest = other_dir(cluster, 1, topic)
    f = tmp_path / "reassign.json"
    f.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [1, 2, 3], "log_dirs": [dest, "any", "any"]}]}))
    boot = ("--bootstrap-server", cluster.bootstrap_servers)
    r = kafkatier_cli.run("reassign-partitions", *boot, "--execute", "--reassignment-json-file", str(f),
                          "--replica-alter-log-dirs-throttle", "100000000")
    assert r.returncode == 0, r.stderr
    assert f"Successfully started log directory move(s) for: {topic}-0-1" in r.stdout
    assert "The replica-alter-dir throttle limit was set to 100000000 B/s" in r.stdout
    assert cluster.zk.exists("/admin/reassign_partitions") is None  # log_dirs never reach the znode

    def verified() -> str | None:
        v = kafkatier_cli.run("reassign-partitions", *boot, "--verify", "--reassignment-json-file", str(f))
        return v.stdout if f"Reassignment of replica {topic}-0-1 completed successfully." in v.stdout else None
    out = wait_for(verified, 60, interval=0.5, message="--verify to report completion")
    assert out.startswith("Status of partition reassignment:")
    assert "Clearing broker-level throttles on brokers 1,2,3" in out
    r = kafkatier_cli.run("log-dirs", *boot, "--describe", "--broker", "1", "--topics", topic, "--format", "kip113")
    doc = json.loads(r.stdout)
    where = [d["path"] for d in doc["log_dirs"] for p in d["partitions"] if p["topic"] == topic]
    assert where == [dest]
    assert read_all(cluster, topic) == [b"%08d" % i + b"x" * 92 for i in range(200)]


def test_reassignment_file_errors_exit_2_and_send_nothing(cluster, kafkatier_cli, tmp_path):
    boot = ("--bootstrap-server", cluster.bootstrap_servers)
    cases = {
        "{nope": "The input string is not a valid JSON",
        '{"version":2,"partitions":[{"topic":"a","partition":0,"replicas":[1]}]}': "Not supported version field value 2",
        '{"partitions":[]}': "Partition reassignment list cannot be empty",
        '{"partitions":[{"topic":"a","partition":0,"replicas":[]}]}': "Partition replica list cannot be empty",
        '{"partitions":[{"topic":"a","partition":0,"replicas":[1,2],"log_dirs":["any"]}]}':
            "Size of replicas list List(1, 2) is different from size of log dirs list List(any) for partition a-0",
        '{"partitions":[{"topic":"a","partition":0,"replicas":[1]},{"topic":"a","partition":0,"replicas":[2]}]}':
            "Partition reassignment contains duplicate topic partitions: a-0",
        '{"partitions":[{"topic":"a","partition":0,"replicas":[1,1]}]}':
            "Partition replica lists may not contain duplicate entries: a-0 contains multiple entries for 1",
    }
    for i, (text, message) in enumerate(cases.items()):
        f = tmp_path / f"bad{i}.json"
        f.write_text(text)
        r = kafkatier_cli.run("reassign-partitions", *boot, "--execute", "--reassignment-json-file", str(f))
        assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, (text, r)


def test_reassignment_to_an_unknown_broker_is_refused_before_anything_is_sent(admin, cluster, kafkatier_cli,
                                                                             tmp_path):
    import json
    topic = unique_topic()
    create_topic(admin, cluster, topic, {0: [1]})
    f = tmp_path / "move.json"
    f.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "replicas": [9],
                                             "log_dirs": ["/x"]}]}))
    r = kafkatier_cli.run("reassign-partitions", "--bootstrap-server", cluster.bootstrap_servers, "--execute",
                          "--reassignment-json-file", str(f))
    assert r.returncode == 2 and r.stderr.strip() == "kafkatier reassign-partitions: Unknown broker id 9"
    assert current_dir(cluster, 1, topic) and current_dir(cluster, 2, topic) is None


def test_d44_log_dirs_tool_with_an_offline_dir(cluster_factory, kafkatier_cli):
    import json
    c = cluster_factory(brokers=1, log_dirs=2)
    a = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers, request_timeout_ms=30000)
    try:
        topic = unique_topic()
        create_topic(a, c, topic, {0: [1], 1: [1]})
        produce(c, topic, 20)
        good, bad = dirs_of(c, 1)
        moved_away = [p for p in (0, 1) if current_dir(c, 1, topic, p) == bad]
        r = kafkatier_cli.run("cluster", "fail-log-dir", "--data-dir", c.data_dir, "--broker", "1", "--dir", bad)
        assert r.returncode == 0, r.stderr
        wait_for(lambda: describe(a, 1)[bad]["error"] == 56, CONVERGE_S, message="the dir offline")
    finally:
        a.close()
    boot = ("--bootstrap-server", c.bootstrap_servers)
    r = kafkatier_cli.run("log-dirs", *boot, "--describe", "--broker", "1", "--format", "kip113")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    by_path = {d["path"]: d for d in doc["log_dirs"]}
    assert doc["version"] == 1 and by_path[good]["is_live"] is True and by_path[bad]["is_live"] is False
    assert by_path[bad]["partitions"] == []
    for p in by_path[good]["partitions"]:
        assert set(p) == {"topic", "partition", "size", "offset_lag", "is_temporary"} and p["size"] > 0
    if moved_away:
        assert {(p["topic"], p["partition"]) for p in by_path["*"]["partitions"]} == {(topic, p) for p in moved_away}
    r = kafkatier_cli.run("log-dirs", *boot, "--describe", "--format", "kafka")
    lines = r.stdout.splitlines()
    assert lines[:2] == ["Querying brokers for log directories information",
                         "Received log directory information from brokers 1"]
    k = json.loads(lines[2])
    dirs = {d["logDir"]: d for d in k["brokers"][0]["logDirs"]}
    assert dirs[bad]["error"] == "org.apache.kafka.common.errors.KafkaStorageException" and dirs[good]["error"] is None
    r = kafkatier_cli.run("log-dirs", *boot, "--describe", "--format", "kafka", "--broker-list", "1,7")
    assert r.returncode == 1
    assert r.stdout.strip() == ("ERROR: The given brokers do not exist from --broker-list: 7. "
                                "Current existent brokers: 1")
    wait_for(lambda: "OFFLINE" in kafkatier_cli.run("cluster", "describe", "--data-dir", c.data_dir).stdout, 15,
             interval=0.5, message="cluster describe to show the offline dir")


def test_move_throttle_through_kafkatier_configs(cluster, kafkatier_cli):
    boot = ("--bootstrap-server", cluster.bootstrap_servers)
    r = kafkatier_cli.run("configs", *boot, "--alter", "--entity-type", "brokers", "--entity-default",
                          "--add-config", "replica.alter.log.dirs.io.max.bytes.per.second=7000")
    assert r.returncode == 0 and "Completed updating default config for brokers in the cluster." in r.stdout, r
    r = kafkatier_cli.run("configs", *boot, "--alter", "--entity-type", "brokers", "--entity-name", "2",
                          "--add-config", "intra.broker.throttled.rate=5000")
    assert r.returncode == 0 and "Completed updating config for broker 2." in r.stdout, r
    import json
    assert json.loads(cluster.zk.get("/config/brokers/2")[0]) == {
        "version": 1, "config": {"intra.broker.throttled.rate": "5000"}}
    assert json.loads(cluster.zk.get("/config/brokers/<default>")[0])["config"] == {
        "replica.alter.log.dirs.io.max.bytes.per.second": "7000"}

    def status_rate(b: int):
        path = os.path.join(cluster.data_dir, "status", f"broker-{b}.json")
        try:
            with open(path) as f:
                return json.load(f)["log_dirs"]["throttle_bytes_per_s"]
        except (OSError, ValueError, KeyError):
            return None
    wait_for(lambda: status_rate(2) == 5000 and status_rate(1) == 7000, 20, interval=0.5,
             message="brokers applying the broker and default throttles")
    r = kafkatier_cli.run("configs", *boot, "--describe", "--entity-type", "brokers", "--entity-name", "2")
    assert "intra.broker.throttled.rate=5000" in r.stdout, r.stdout
    r = kafkatier_cli.run("configs", *boot, "--alter", "--entity-type", "brokers", "--entity-name", "2",
                          "--add-config", "log.dirs=/elsewhere")  # read-only: Kafka's ZkAdminManager refuses it
    assert r.returncode == 1 and "INVALID_REQUEST" in r.stderr and "Cannot update these configs dynamically" in r.stderr
    for args in (("--entity-name", "2", "--delete-config", "intra.broker.throttled.rate"),
                 ("--entity-default", "--delete-config", "replica.alter.log.dirs.io.max.bytes.per.second")):
        r = kafkatier_cli.run("configs", *boot, "--alter", "--entity-type", "brokers", *args)
        assert r.returncode == 0, r
    wait_for(lambda: status_rate(2) == status_rate(1) == (1 << 63) - 1, 20, interval=0.5,
             message="throttles removed")


# ------------------------------------------------------------------------------------------------ tiered topics

def test_moving_a_tiered_replica_keeps_remote_data_and_local_cleanup(cluster_factory):
    """A tiered replica moves with only its local tail; the remote segments are untouched, a consumer still reads
    the whole log, and after the move new segments are uploaded and deleted locally (KAFKA-16711: the moved log
    knows the highest offset in remote storage)."""
    from kafkatier.log.remote.remote_log_metadata_manager import ZkRemoteLogMetadataManager
    from kafkatier.log.remote.remote_log_segment_metadata import RemoteLogSegmentState, TopicIdPartition
    from kafkatier.zk import codecs, paths
    c = cluster_factory(brokers=2, log_dirs=2, overrides={
        "remote.log.storage.system.enable": "true", "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "500", "log.initial.task.delay.ms": "0"})
    a = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers, request_timeout_ms=30000)
    topic = unique_topic("jbod-tiered")
    try:
        create_topic(a, c, topic, {0: [1, 2]}, configs={"remote.storage.enable": "true", "segment.bytes": "1024",
                                                         "local.retention.bytes": "1", "file.delete.delay.ms": "0"})
        wait_for(lambda: len(state_of(c, topic)["isr"]) == 2, CONVERGE_S, message="ISR 2")
        producer = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all", linger_ms=0)
        for i in range(60):
            producer.send(topic, f"v{i}".encode().ljust(100, b"."), partition=0).get(timeout=60)
        tid = codecs.TopicAssignment.decode(c.zk.get(paths.topic(topic))[0]).topic_id
        rlmm = ZkRemoteLogMetadataManager(c.zk)

        def uploaded() -> list[tuple[int, int]]:
            return [(m.start_offset, m.end_offset) for m in rlmm.list_remote_log_segments(TopicIdPartition(tid, topic, 0))
                    if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]

        def local_bases(b: int) -> list[int]:
            d = current_dir(c, b, topic)
            return sorted(int(n[:20]) for n in os.listdir(os.path.join(d, f"{topic}-0")) if n.endswith(".log")) if d else []
        rolled = [(s, s + 5) for s in range(0, 54, 6)]
        wait_for(lambda: uploaded() == rolled and local_bases(1) == [54], 60, interval=0.2,
                 message="rolled segments offloaded, the tail left locally")
        leader = state_of(c, topic)["leader"]
        dest = other_dir(c, leader, topic)
        assert alter(a, {(topic, 0, leader): dest}) == {(topic, 0, leader): NoError}
        wait_moved(c, leader, topic, dest)
        assert uploaded() == rolled  # remote metadata untouched by the move
        assert [r.rstrip(b".") for r in read_all(c, topic)] == [f"v{i}".encode() for i in range(60)]
        for i in range(60, 90):
            producer.send(topic, f"v{i}".encode().ljust(100, b"."), partition=0).get(timeout=60)
        producer.close()
        wait_for(lambda: len(uploaded()) >= 14 and local_bases(leader)[0] >= 84, 60, interval=0.2,
                 message="the moved replica keeps offloading and cleaning up locally")
        assert [r.rstrip(b".") for r in read_all(c, topic)] == [f"v{i}".encode() for i in range(90)]
    finally:
        a.close()
