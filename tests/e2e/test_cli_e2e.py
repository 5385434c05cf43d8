"""The client commands against a running kafkatier cluster, each run as the ``kafkatier`` console script.

Needs the ``cluster`` fixture (``.bootstrap_servers``, ``.zookeeper``) from tests/conftest.py; until it exists
these tests skip.  Once it exists nothing here hides a failure: errors from the fixture itself propagate.
"""
from __future__ import annotations

import re
import uuid

import pytest

from kafkatier.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

DEADLINE_S = 60.0   # bound on every wait for the cluster to converge (leaders elected, deletion done)


@pytest.fixture
def kafka_cluster(request):
    """The ``cluster`` fixture, or a skip if no conftest provides one yet."""
    try:
        return request.getfixturevalue("cluster")
    except pytest.FixtureLookupError as e:
        if e.argname != "cluster":
            raise   # the fixture exists but something it needs does not: a real failure
        pytest.skip("no `cluster` fixture in tests/conftest.py yet")


@pytest.fixture
def kt(kafka_cluster, kafkatier_cli):
    """Run ``kafkatier <command> --bootstrap-server B ARGS...``; returns the CompletedProcess."""
    def run(command: str, *args: str, input: str | None = None, timeout: float = 120.0, connect: bool = True):
        conn = ("--bootstrap-server", kafka_cluster.bootstrap_servers) if connect else ()
        return kafkatier_cli.run(command, *conn, *args, input=input, timeout=timeout)
    return run


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def replication_factor(cluster) -> int:
    return min(3, len(cluster.bootstrap_servers.split(",")))


def partition_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("\tTopic: ")]


def wait_for_leaders(kt, topic: str, partitions: int) -> str:
    """Describe the topic until every partition has a leader; returns that output."""
    def ready():
        proc = kt("topics", "--describe", "--topic", topic)
        lines = partition_lines(proc.stdout)
        if proc.returncode == 0 and len(lines) == partitions and all("\tLeader: none" not in line for line in lines):
            return proc.stdout
        return None
    return wait_for(ready, DEADLINE_S, interval=0.5, message=f"leaders for every partition of {topic}")


def create_topic(kt, topic: str, partitions: int, rf: int, *extra: str) -> None:
    proc = kt("topics", "--create", "--topic", topic, "--partitions", str(partitions),
              "--replication-factor", str(rf), *extra)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"Created topic {topic}."
    wait_for_leaders(kt, topic, partitions)


# ------------------------------------------------------------------------------------------------ topics

def test_topic_create_list_describe_delete(kt, kafka_cluster):
    topic, rf = unique_topic("cli-topic"), replication_factor(kafka_cluster)
    create_topic(kt, topic, 2, rf, "--config", "retention.ms=3600000")

    assert topic in kt("topics", "--list").stdout.splitlines()

    described = wait_for_leaders(kt, topic, 2)
    head = described.splitlines()[0]
    assert re.fullmatch(rf"Topic: {topic}\tTopicId: [A-Za-z0-9_-]{{22}}\tPartitionCount: 2\t"
                        rf"ReplicationFactor: {rf}\tConfigs: .*", head), head
    assert "retention.ms=3600000" in head
    for i, line in enumerate(partition_lines(described)):
        m = re.fullmatch(rf"\tTopic: {topic}\tPartition: {i}\tLeader: (\d+)\tReplicas: ([\d,]+)\tIsr: ([\d,]*)", line)
        assert m, line
        replicas = m.group(2).split(",")
        assert len(replicas) == rf and m.group(1) in replicas

    again = kt("topics", "--create", "--topic", topic, "--partitions", "2", "--replication-factor", str(rf))
    assert again.returncode == 1
    assert "Error while executing topic command : TOPIC_ALREADY_EXISTS" in again.stderr
    quiet = kt("topics", "--create", "--topic", topic, "--partitions", "2", "--replication-factor", str(rf),
               "--if-not-exists")
    assert quiet.returncode == 0 and quiet.stdout == ""

    deleted = kt("topics", "--delete", "--topic", topic)
    assert deleted.returncode == 0, deleted.stderr
    wait_for(lambda: topic not in kt("topics", "--list").stdout.splitlines(), DEADLINE_S, interval=0.5,
             message=f"{topic} to disappear from --list")
    gone = kt("topics", "--describe", "--topic", topic)
    assert gone.returncode == 1 and f"Topic '{topic}' does not exist as expected" in gone.stderr
    assert kt("topics", "--delete", "--topic", topic, "--if-exists").returncode == 0


def test_topics_through_zookeeper_registrations(kt, kafka_cluster):
    topic = unique_topic("cli-zk")
    create_topic(kt, topic, 1, 1)
    proc = kt("topics", "--zookeeper", kafka_cluster.zookeeper, "--list", connect=False)
    assert proc.returncode == 0, proc.stderr
    assert topic in proc.stdout.splitlines()


# ------------------------------------------------------------------------------------------------ configs

def test_alter_and_describe_topic_config(kt, kafka_cluster):
    topic = unique_topic("cli-config")
    create_topic(kt, topic, 1, replication_factor(kafka_cluster))
    base = ("--entity-type", "topics", "--entity-name", topic)

    proc = kt("configs", *base, "--alter", "--add-config", "cleanup.policy=[compact,delete],retention.ms=123456")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"Completed updating config for topic {topic}."

    described = kt("configs", *base, "--describe")
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    assert lines[0] == f"Dynamic configs for topic {topic} are:"
    assert re.fullmatch(r"  cleanup\.policy=compact,delete sensitive=false "
                        r"synonyms=\{DYNAMIC_TOPIC_CONFIG:cleanup\.policy=compact,delete.*\}", lines[1]), lines
    assert re.fullmatch(r"  retention\.ms=123456 sensitive=false "
                        r"synonyms=\{DYNAMIC_TOPIC_CONFIG:retention\.ms=123456.*\}", lines[2]), lines

    proc = kt("configs", *base, "--alter", "--delete-config", "retention.ms")
    assert proc.returncode == 0, proc.stderr
    after = kt("configs", *base, "--describe").stdout
    assert "retention.ms=" not in after and "cleanup.policy=compact,delete" in after

    everything = kt("configs", *base, "--describe", "--all")
    assert everything.stdout.splitlines()[0] == f"All configs for topic {topic} are:"
    assert any(line.startswith("  retention.ms=") for line in everything.stdout.splitlines())

    bad = kt("configs", *base, "--alter", "--add-config", "no.such.config=1")
    assert bad.returncode == 1
    err = bad.stderr.splitlines()
    assert err[0].startswith("Error while executing config command with args '")
    assert err[1].startswith("INVALID_CONFIG: ")


# ------------------------------------------------------------------------------------------ produce/consume

def test_produce_lines_with_acks_all_and_consume_them_back(kt, kafka_cluster):
    topic = unique_topic("cli-records")
    create_topic(kt, topic, 1, replication_factor(kafka_cluster))
    lines = [f"key-{i}\tvalue-{i}" for i in range(1000)]

    produced = kt("produce", "--topic", topic, "--acks", "all", "--parse-key", input="\n".join(lines) + "\n")
    assert produced.returncode == 0, produced.stderr

    consumed = kt("consume", "--topic", topic, "--from-beginning", "--max-messages", "1000", "--timeout-ms", "30000",
                  "--print-key", "--no-progress")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == lines
    assert "Processed a total of 1000 messages" in consumed.stderr


def test_generated_records_summary_and_read_back(kt, kafka_cluster):
    topic = unique_topic("cli-perf")
    create_topic(kt, topic, 3, replication_factor(kafka_cluster))

    produced = kt("produce", "--topic", topic, "--num-records", "1000", "--record-size", "100", "--acks", "all",
                  "--no-progress")
    assert produced.returncode == 0, produced.stderr
    assert re.fullmatch(r"1000 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
                        r"[\d.]+ ms max latency, 0 failed sends\.", produced.stdout.strip()), produced.stdout

    consumed = kt("consume", "--topic", topic, "--from-beginning", "--max-messages", "1000", "--timeout-ms", "30000",
                  "--print-partition", "--print-offset", "--no-progress")
    assert consumed.returncode == 0, consumed.stderr
    rows = [re.fullmatch(r"Partition:(\d+)\tOffset:(\d+)\t(.*)", line) for line in consumed.stdout.splitlines()]
    assert len(rows) == 1000 and all(rows), consumed.stdout[:500]
    values = [m.group(3) for m in rows]
    assert all(len(v) == 100 for v in values)
    assert sorted(int(re.match(r"\d+", v).group()) for v in values) == list(range(1000))

    # one partition from an explicit offset: the same first record
    first = next(m for m in rows if m.group(2) == "0")
    one = kt("consume", "--topic", topic, "--partition", first.group(1), "--offset", "0", "--max-messages", "1",
             "--timeout-ms", "30000", "--print-offset")
    assert one.returncode == 0, one.stderr
    assert one.stdout == f"Offset:0\t{first.group(3)}\n"


# -------------------------------------------------------------------------------------------------- demo

def test_demo_runs_end_to_end(kafkatier_cli, tmp_path):
    """``make demo``: the core steps, then tiered offloading, a KIP-950 delete disablement finished by a new
    controller after the old one was killed while DISABLING, a re-enable and a DeleteRecords; cluster stopped."""
    import json
    import os

    from kafkatier.cluster.manager import pid_alive

    data_dir = tmp_path / "demo"
    r = kafkatier_cli.run("demo", "--data-dir", str(data_dir), timeout=240)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    out = r.stdout
    assert re.search(r"^demo completed in [\d.]+s$", out, re.M), out[-2000:]
    for expected in (
            "consumed 2000 distinct records; all acknowledged present: True",
            "waiting for segments 0-23 offloaded and deleted locally",
            "remote segment 18-23: COPY_SEGMENT_FINISHED tiered_epoch=0 size=1020",
            "tiered state now DISABLING (tiered_epoch 1)",
            "still DISABLING (tiered_epoch 1)",
            "while DISABLING",
            "tiered state DISABLING (tiered_epoch 1): brokers",
            "waiting for the controller to write DISABLED",
            "earliest offset 24; remote segments: 0; remote files: 0",
            "tiered state ENABLED (tiered_epoch 1)",
            "partition: tiered-0\tlow_watermark: 30",
            "remote segment 30-35: COPY_SEGMENT_FINISHED tiered_epoch=1 size=1020",
            "check: kafkatier tiered describe --topic tiered --data-dir D",
            "check: kafkatier zookeeper shell --zookeeper "):
        assert expected in out, f"{expected!r} missing from the demo output:\n{out[-4000:]}"
    after_delete_records = out.split("DeleteRecords: tiered-0 before offset 30")[1]
    assert "RemoteSegments: 1  RemoteBytes: 1020" in after_delete_records   # segment 24-29 deleted remotely
    state = json.loads((data_dir / "cluster.json").read_text())
    assert not any(pid_alive(p) for p in [state["zookeeper_pid"], *(b["pid"] for b in state["brokers"])])
    assert os.path.isdir(state["remote_storage_dir"]) and state["remote_storage_dir"].startswith(str(data_dir))
