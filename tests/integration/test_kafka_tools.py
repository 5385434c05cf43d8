"""The Kafka tools against one shared cluster: get-offsets, broker-api-versions, producer-perf-test and
consumer-perf-test, each output compared with the shape of Kafka 3.9's."""
from __future__ import annotations

import re

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafkatier.cli.main import main

TOPIC = "tools-t"


@pytest.fixture(scope="module")
def topic(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(TOPIC, 2, 2)])[TOPIC].result(60)
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(10):
        p.produce(TOPIC, b"v%d" % i, key=b"k", partition=i % 2, timestamp=1_700_000_000_000 + i)
    assert p.flush(60) == 0
    return TOPIC


def _run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out.splitlines(), out.err


def test_get_offsets_latest_earliest_and_timestamp(cluster, topic, capsys):
    bs = cluster.bootstrap_servers
    assert _run(capsys, "get-offsets", "--bootstrap-server", bs, "--topic", topic)[:2] == \
        (0, [f"{topic}:0:5", f"{topic}:1:5"])
    assert _run(capsys, "get-offsets", "--bootstrap-server", bs, "--topic", topic, "--time", "-2",
                "--partitions", "1")[:2] == (0, [f"{topic}:1:0"])
    assert _run(capsys, "get-offsets", "--bootstrap-server", bs, "--topic", topic, "--time",
                "1700000000004")[:2] == (0, [f"{topic}:0:2", f"{topic}:1:2"])
    assert _run(capsys, "get-offsets", "--bootstrap-server", bs, "--topic-partitions", f"{topic}:1-",
                "--time", "earliest")[:2] == (0, [f"{topic}:1:0"])
    # a timestamp after every record: no offset, so no line (Kafka leaves UNKNOWN_OFFSET out)
    assert _run(capsys, "get-offsets", "--bootstrap-server", bs, "--topic", topic, "--time",
                "1800000000000")[:2] == (0, [])
    rc, _, err = _run(capsys, "get-offsets", "--bootstrap-server", bs, "--topic", "no-such-.*")
    assert rc == 1 and err.strip().endswith("Could not match any topic-partitions with the specified filters")
    rc, _, err = _run(capsys, "get-offsets", "--bootstrap-server", bs, "--time", "yesterday")
    assert rc == 2 and len(err.strip().splitlines()) == 1


def test_broker_api_versions(cluster, capsys):
    rc, lines, _ = _run(capsys, "broker-api-versions", "--bootstrap-server", cluster.bootstrap_servers)
    assert rc == 0
    heads = [ln for ln in lines if " -> (" in ln]
    assert len(heads) == 3
    assert all(re.fullmatch(r"127\.0\.0\.1:\d+ \(id: \d+ rack: null\) -> \(", h) for h in heads)
    assert re.fullmatch(r"\tProduce\(0\): \d+ to \d+ \[usable: \d+\],", lines[1]), lines[1]
    assert any(re.fullmatch(r"\tApiVersions\(18\): 0 to \d+ \[usable: \d+\],", ln) for ln in lines)
    assert lines.count(")") == 3


def test_producer_and_consumer_perf_test(cluster, topic, capsys):
    bs = cluster.bootstrap_servers
    rc, lines, err = _run(capsys, "producer-perf-test", "--bootstrap-server", bs, "--topic", "perf-t",
                          "--num-records", "2000", "--record-size", "100", "--throughput", "-1",
                          "--producer-props", "acks=all", "linger.ms=5")
    assert rc == 0, err
    assert re.fullmatch(r"2000 records sent, \d+\.\d{6} records/sec \(\d+\.\d{2} MB/sec\), \d+\.\d{2} ms avg "
                        r"latency, \d+\.\d{2} ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, "
                        r"\d+ ms 99\.9th\.", lines[-1]), lines[-1]
    rc, lines, err = _run(capsys, "consumer-perf-test", "--bootstrap-server", bs, "--topic", "perf-t",
                          "--messages", "2000", "--timeout", "20000")
    assert rc == 0, err
    assert lines[0] == ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
    ts = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"
    assert re.fullmatch(rf"{ts}, {ts}, 0\.19\d\d, \d+\.\d{{4}}, 2000, \d+\.\d{{4}}, \d+, \d+, \d+\.\d{{4}}, "
                        r"\d+\.\d{4}", lines[1]), lines[1]
    rc, _, err = _run(capsys, "producer-perf-test", "--bootstrap-server", bs, "--topic", "perf-t",
                      "--num-records", "1", "--throughput", "-1")
    assert rc == 2 and len(err.strip().splitlines()) == 1


def test_consumer_groups_members_state_offsets(cluster, topic, capsys):
    import time

    from confluent_kafka import Consumer
    bs = cluster.bootstrap_servers
    c = Consumer({"bootstrap.servers": bs, "group.id": "tools-g", "client.id": "tools-client",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    try:
        deadline = time.monotonic() + 60
        while not c.assignment():
            assert time.monotonic() < deadline, "no assignment"
            c.poll(0.2)
        if c.consume(1, 5):
            c.commit(asynchronous=False)
        rc, lines, _ = _run(capsys, "consumer-groups", "--bootstrap-server", bs, "--describe", "--group", "tools-g",
                            "--members", "--verbose")
        assert rc == 0
        assert lines[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        row = lines[2].split()
        assert row[0] == "tools-g" and row[3] == "tools-client" and row[4] == "2" and row[5] == f"{topic}(0,1)"
        rc, lines, _ = _run(capsys, "consumer-groups", "--bootstrap-server", bs, "--describe", "--group", "tools-g",
                            "--state")
        assert rc == 0
        assert lines[1].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        assert re.fullmatch(r"tools-g\s+127\.0\.0\.1:\d+  \(\d+\)\s+range\S*\s+Stable\s+1", lines[2]), lines[2]
        rc, lines, _ = _run(capsys, "consumer-groups", "--bootstrap-server", bs, "--describe", "--group", "tools-g",
                            "--offsets")
        assert rc == 0 and lines[1].split()[:3] == ["GROUP", "TOPIC", "PARTITION"]
    finally:
        c.close()
    rc, _, err = _run(capsys, "consumer-groups", "--bootstrap-server", bs, "--list", "--members")
    assert rc == 2 and len(err.strip().splitlines()) == 1


def test_console_property_syntax(cluster, capsys, monkeypatch):
    import io
    import sys
    bs = cluster.bootstrap_servers
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"k1:v1\nk2:v2\n")))
    assert main(["produce", "--bootstrap-server", bs, "--topic", "props-t", "--no-progress", "--partition", "0",
                 "--property", "parse.key=true", "--property", "key.separator=:"]) == 0
    capsys.readouterr()
    rc, lines, _ = _run(capsys, "consume", "--bootstrap-server", bs, "--topic", "props-t", "--from-beginning",
                        "--max-messages", "2", "--no-progress", "--property", "print.key=true",
                        "--property", "key.separator=:", "--property", "print.offset=true")
    assert rc == 0
    assert lines == ["Offset:0:k1:v1", "Offset:1:k2:v2"]  # Kafka: key.separator between every column
    rc, _, err = _run(capsys, "consume", "--bootstrap-server", bs, "--topic", "props-t", "--property", "print.key")
    assert rc == 2 and len(err.strip().splitlines()) == 1
