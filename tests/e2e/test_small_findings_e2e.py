"""Issue #26's smaller findings on a real broker: ``produce`` to a missing topic (auto creation off) fails at once
with Kafka's error and exit 1; ``--record-size 1000000000000`` and ``sasl.mechanism=NOPE`` are one-line usage
errors (exit 2)."""
from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory(brokers=1, overrides={"auto.create.topics.enable": "false"})


def test_produce_to_missing_topic_fails_fast(cluster, kafkatier_cli):
    started = time.monotonic()
    r = kafkatier_cli.run("produce", "--bootstrap-server", cluster.bootstrap_servers, "--topic", "no-such-topic",
                          input="a\n", timeout=60)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "UNKNOWN_TOPIC_OR_PARTITION" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert time.monotonic() - started < 20


def test_record_size_and_sasl_mechanism_usage_errors(cluster, kafkatier_cli, tmp_path):
    r = kafkatier_cli.run("produce", "--bootstrap-server", cluster.bootstrap_servers, "--topic", "t",
                          "--num-records", "1", "--record-size", "1000000000000")
    assert r.returncode == 2 and "max.request.size" in r.stderr, r.stderr
    cfg = tmp_path / "client.properties"
    cfg.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=NOPE\n")
    r = kafkatier_cli.run("produce", "--bootstrap-server", cluster.bootstrap_servers, "--topic", "t",
                          "--command-config", str(cfg), input="a\n")
    assert r.returncode == 2 and "unsupported SASL mechanism 'NOPE'" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_foreign_broker_registration_does_not_block_start_broker(cluster):
    cluster.zk.create("/brokers/ids/99", b'{"not": "a registration"}')
    try:
        cluster.manager.stop_broker(1)
        started = time.monotonic()
        cluster.manager.start_broker(1, timeout=60)
        assert time.monotonic() - started < 45
    finally:
        cluster.zk.delete("/brokers/ids/99")


def test_delete_topic_with_malformed_assignment(module_cluster_factory):
    import json
    import os

    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    from kafkatier.waiting import wait_for
    c = module_cluster_factory(brokers=2)
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic("mal", 1, 2)])
        dirs = [d for b in c.broker_ids() for d in c.manager.broker(b)["log_dirs"]]

        def hosted() -> int:
            return sum(os.path.isdir(os.path.join(d, "mal-0")) for d in dirs)
        wait_for(lambda: hosted() == 2, 60, message="both replicas on disk")
        c.zk.set("/brokers/topics/mal", b"{not an assignment")
        old = json.loads(c.zk.get("/controller")[0])["brokerid"]
        epoch = int(c.zk.get("/controller_epoch")[0])
        c.zk.delete("/controller")  # a new controller loads a context without the unreadable topic
        wait_for(lambda: c.zk.exists("/controller") and int(c.zk.get("/controller_epoch")[0]) > epoch, 60,
                 ignore=(Exception,), message=f"a controller after {old}")
    finally:
        admin.close()
    from kafkatier.admin.client import AdminClient
    with AdminClient(c.bootstrap_servers.split(",")) as kt_admin:
        assert kt_admin.delete_topics(["mal"], timeout_ms=30000) == {"mal": None}
    wait_for(lambda: hosted() == 0 and not c.zk.exists("/brokers/topics/mal"), 60,
             message="mal-0 gone from every broker and from ZooKeeper")
