"""``kafkatier reassign-partitions`` as a user runs it, against broker processes with data (issue 14 items 5-6):
--generate -> --execute --throttle -> --verify until done (throttles removed); --list and --cancel of a reassignment
held back by a throttle; scenario 42 of docs/acceptance.md with a replica moving between log dirs during a
reassignment."""
from __future__ import annotations

import json
import os
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from kafkatier.admin.client import AdminClient
from kafkatier.server.broker_client import BrokerConnectionError
from kafkatier.waiting import wait_for
from kafkatier.zk.kafka_zk_client import KafkaZkClient

import partition_support

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CONVERGE_S = 60.0


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    # Small replica fetches, so that one fetch overruns a throttle by little (as Kafka, a throttled fetch returns
    # up to replica.fetch.max.bytes before the quota is checked again).
    return module_cluster_factory(brokers=3, log_dirs=2, overrides={"replica.fetch.max.bytes": "65536"})


@pytest.fixture(scope="module")
def admin(cluster):
    a = AdminClient(cluster.bootstrap_servers.split(","))
    yield a
    a.close()


@pytest.fixture
def cli(cluster, kafkatier_cli):
    def run(*args: str):
        return kafkatier_cli.run("reassign-partitions", "--bootstrap-server", cluster.bootstrap_servers, *args)
    return run


def unique_topic(prefix: str = "reassign") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(cluster, topic: str, assignment: dict[int, list[int]]) -> None:
    KafkaZkClient(cluster.zk).create_topic(topic, assignment, {})
    wait_for(lambda: all(current_dir(cluster, b, topic, p) for p, rs in assignment.items() for b in rs),
             CONVERGE_S, message=f"{topic} created on every replica")


def dirs_of(cluster, broker_id: int) -> list[str]:
    return [os.path.abspath(d) for d in cluster.manager.broker(broker_id)["log_dirs"]]


def current_dir(cluster, broker_id: int, topic: str, partition: int = 0) -> str | None:
    for d in dirs_of(cluster, broker_id):
        if os.path.isdir(os.path.join(d, f"{topic}-{partition}")):
            return d
    return None


def produce(cluster, topic: str, partitions: int, n: int, value_size: int = 1000) -> list[bytes]:
    values = [b"%08d" % i + b"x" * (value_size - 8) for i in range(n)]
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=5)
    try:
        for i, v in enumerate(values):
            producer.send(topic, value=v, partition=i % partitions)
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=10)
    return values


def read_all(cluster, topic: str, partitions: int) -> list[bytes]:
    # A reassignment that moved a leader is done in ZooKeeper before every broker's metadata says so.  A client
    # that learns the old leader keeps asking it: kafka-python 3.0's ListOffsets retries NOT_LEADER_OR_FOLLOWER
    # without refreshing its metadata (until metadata.max.age.ms, 5 min), and end_offsets() times out after
    # request.timeout.ms.  So read once every broker knows the leaders, and let a stale view age out quickly.
    wait_for(lambda: partition_support.metadata_everywhere(cluster, topic, partitions, with_isr=False), CONVERGE_S,
             interval=0.2, ignore=(OSError, BrokerConnectionError),
             message=f"every broker's metadata to name {topic}'s leaders")
    c = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", consumer_timeout_ms=5000, metadata_max_age_ms=1000)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    try:
        c.assign(tps)
        end = c.end_offsets(tps)
        c.seek_to_beginning(*tps)
        out = []

        def caught_up() -> bool:
            for recs in c.poll(timeout_ms=2000).values():
                out.extend(r.value for r in recs)
            return all(c.position(tp) >= end[tp] for tp in tps)
        wait_for(caught_up, CONVERGE_S, interval=0, message=f"{topic} read to its end offsets {end}")
        return out
    finally:
        c.close()


def replicas_of(admin: AdminClient, topic: str) -> dict[int, list[int]]:
    return {p.partition: list(p.replicas) for t in admin.describe_topics([topic]) for p in t.partitions}


def dynamic_configs(admin: AdminClient, entity_type: str, name: str, names: tuple[str, ...]) -> dict[str, str]:
    entries = admin.describe_configs(entity_type, [name])[name]
    return {e.name: e.value for e in entries if e.name in names and e.source.startswith("DYNAMIC")}


THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
THROTTLED_REPLICAS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


def json_after(stdout: str, heading: str) -> dict:
    lines = stdout.splitlines()
    i = lines.index(heading)
    return json.loads(next(line for line in lines[i + 1:] if line.startswith("{")))


def test_generate_execute_with_throttle_then_verify_until_done(cluster, admin, cli, tmp_path):
    topic = unique_topic()
    create_topic(cluster, topic, {0: [1, 2], 1: [2, 1]})
    values = produce(cluster, topic, 2, 600)

    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"topics": [{"topic": topic}], "version": 1}))
    r = cli("--generate", "--topics-to-move-json-file", str(topics_file), "--broker-list", "2,3")
    assert r.returncode == 0, r.stderr
    current = json_after(r.stdout, "Current partition replica assignment")
    assert current == {"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]},
        {"topic": topic, "partition": 1, "replicas": [2, 1], "log_dirs": ["any", "any"]}]}
    proposed = json_after(r.stdout, "Proposed partition reassignment configuration")
    assert [sorted(p["replicas"]) for p in proposed["partitions"]] == [[2, 3], [2, 3]]
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(proposed))

    r = cli("--execute", "--reassignment-json-file", str(plan_file), "--throttle", "10000000")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("Current partition replica assignment\n\n")
    assert json.loads(out.splitlines()[2]) == current
    assert "Save this to use as the --reassignment-json-file option during rollback" in out
    assert "Warning: You must run --verify periodically, until the reassignment completes" in out
    assert "The inter-broker throttle limit was set to 10000000 B/s" in out
    assert f"Successfully started partition reassignments for {topic}-0,{topic}-1" in out
    # Kafka's throttles: the sources lead, the new replica follows; rates on every broker involved.
    assert dynamic_configs(admin, "topics", topic, THROTTLED_REPLICAS) == {
        "leader.replication.throttled.replicas": "0:1,0:2,1:1,1:2",
        "follower.replication.throttled.replicas": "0:3,1:3"}
    for b in (1, 2, 3):
        assert dynamic_configs(admin, "brokers", str(b), THROTTLE_RATES) == dict.fromkeys(THROTTLE_RATES, "10000000")

    def verified() -> str | None:
        v = cli("--verify", "--reassignment-json-file", str(plan_file))
        assert v.returncode == 0, v.stderr
        return v.stdout if "still in progress" not in v.stdout else None
    out = wait_for(verified, CONVERGE_S, interval=0.5, message="--verify to report completion")
    assert out.splitlines()[:3] == ["Status of partition reassignment:",
                                    f"Reassignment of partition {topic}-0 is completed.",
                                    f"Reassignment of partition {topic}-1 is completed."]
    assert "Clearing broker-level throttles on brokers 1,2,3" in out
    assert f"Clearing topic-level throttles on topic {topic}" in out
    assert dynamic_configs(admin, "topics", topic, THROTTLED_REPLICAS) == {}
    for b in (1, 2, 3):
        assert dynamic_configs(admin, "brokers", str(b), THROTTLE_RATES) == {}
    assert {p: sorted(rs) for p, rs in replicas_of(admin, topic).items()} == {0: [2, 3], 1: [2, 3]}
    wait_for(lambda: current_dir(cluster, 1, topic, 0) is None and current_dir(cluster, 1, topic, 1) is None,
             CONVERGE_S, message="broker 1's replicas deleted")
    assert sorted(read_all(cluster, topic, 2)) == sorted(values)
    assert cli("--list").stdout.strip() == "No partition reassignments found."


def test_list_and_cancel_a_throttled_reassignment(cluster, admin, cli, tmp_path):
    topic = unique_topic()
    create_topic(cluster, topic, {0: [1]})
    produce(cluster, topic, 1, 300)
    f = tmp_path / "move.json"
    f.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [2]}]}))
    r = cli("--execute", "--reassignment-json-file", str(f), "--throttle", "1024")  # 300 KB at 1 KB/s: minutes
    assert r.returncode == 0, r.stderr
    r = cli("--list")
    assert r.stdout.splitlines() == ["Current partition reassignments:",
                                     f"{topic}-0: replicas: 2,1. adding: 2. removing: 1."], r
    r = cli("--execute", "--reassignment-json-file", str(f))
    assert r.returncode == 1 and r.stderr.startswith("kafkatier reassign-partitions: Cannot execute because there "
                                                     "is an existing partition assignment.  Use --additional")
    v = cli("--verify", "--reassignment-json-file", str(f))
    assert f"Reassignment of partition {topic}-0 is still in progress." in v.stdout
    assert "Clearing" not in v.stdout                       # throttles stay while it runs
    r = cli("--cancel", "--reassignment-json-file", str(f))
    assert r.returncode == 0, r.stderr
    assert f"Successfully cancelled partition reassignment for: {topic}-0" in r.stdout
    assert "Clearing broker-level throttles" in r.stdout
    assert replicas_of(admin, topic) == {0: [1]}
    assert cli("--list").stdout.strip() == "No partition reassignments found."
    r = cli("--cancel", "--reassignment-json-file", str(f), "--preserve-throttles")
    assert "None of the specified partition reassignments are active." in r.stdout and "Clearing" not in r.stdout
    v = cli("--verify", "--reassignment-json-file", str(f))
    assert (f"There is no active reassignment of partition {topic}-0, but replica set is 1 rather than 2."
            in v.stdout)
    wait_for(lambda: current_dir(cluster, 2, topic) is None, CONVERGE_S, message="the cancelled replica deleted")


def test_s42_log_dir_moves_during_a_reassignment(cluster, admin, cli, kafkatier_cli, tmp_path):
    """Scenario 42: broker 3 gets a new replica in a chosen dir (retried until the reassignment creates it)
    while broker 1's replica moves to its other dir; verify until both are done; the znode never carries
    log_dirs; the log-dirs tool shows both replicas where asked."""
    topic = unique_topic("s42")
    create_topic(cluster, topic, {0: [1, 2]})
    values = produce(cluster, topic, 1, 300)
    dest1 = next(d for d in dirs_of(cluster, 1) if d != current_dir(cluster, 1, topic))
    dest3 = dirs_of(cluster, 3)[1]
    f = tmp_path / "s42.json"
    f.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [3, 1], "log_dirs": [dest3, dest1]}]}))
    r = cli("--execute", "--reassignment-json-file", str(f), "--throttle", "50000000",
            "--replica-alter-log-dirs-throttle", "50000000")
    assert r.returncode == 0, r.stderr
    assert f"Successfully started log directory move(s) for: {topic}-0-1,{topic}-0-3" in r.stdout
    assert "The replica-alter-dir throttle limit was set to 50000000 B/s" in r.stdout
    znode = cluster.zk.exists("/admin/reassign_partitions")
    assert znode is None or "log_dirs" not in cluster.zk.get("/admin/reassign_partitions")[0].decode()

    def verified() -> str | None:
        v = cli("--verify", "--reassignment-json-file", str(f))
        return v.stdout if "still in progress" not in v.stdout else None
    out = wait_for(verified, CONVERGE_S, interval=0.5, message="--verify to report completion")
    assert f"Reassignment of partition {topic}-0 is completed." in out
    assert f"Reassignment of replica {topic}-0-1 completed successfully." in out
    assert f"Reassignment of replica {topic}-0-3 completed successfully." in out
    assert "Clearing broker-level throttles on brokers 1,2,3" in out
    assert replicas_of(admin, topic) == {0: [3, 1]}
    for broker, dest in ((1, dest1), (3, dest3)):
        r = kafkatier_cli.run("log-dirs", "--bootstrap-server", cluster.bootstrap_servers, "--describe",
                              "--broker", str(broker), "--topics", topic, "--format", "kip113")
        doc = json.loads(r.stdout)
        assert [d["path"] for d in doc["log_dirs"] for p in d["partitions"] if p["topic"] == topic] == [dest]
    assert read_all(cluster, topic, 1) == values
