"""Client quotas end to end (KIP-55, KIP-546): quotas set with ``kafkatier configs`` and the admin API reach the
broker through ``/config/changes``; a producer over its byte rate is slowed to the quota and reads
``throttle_time_ms`` (librdkafka's ``throttle`` statistics); bad input is refused with Kafka's message."""
from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafkatier.admin.client import AdminClient as TierAdmin
from kafkatier.admin.client import AdminError
from kafkatier.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

RATE = 1024 * 1024


@pytest.fixture(scope="module")
def quota_cluster(module_cluster_factory):
    # Kafka's quota window is quota.window.num samples of quota.window.size.seconds, at least num - 1 samples
    # long, so a fresh client first bursts (num - 1) seconds of its quota; with the default 11 samples the first
    # 10 MB at 1 MB/s are a burst.  Three samples keep the burst at 2 s of quota.
    return module_cluster_factory(brokers=1, log_dirs=1, overrides={"quota.window.num": "3"})


def test_quota_round_trip_and_znodes(quota_cluster, kafkatier_cli):
    bs = quota_cluster.bootstrap_servers
    r = kafkatier_cli.run("configs", "--bootstrap-server", bs, "--entity-type", "users", "--entity-name", "alice",
                          "--alter", "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Completed updating config for user alice."
    data = json.loads(quota_cluster.zk.get("/config/users/alice")[0])
    assert data == {"version": 1, "config": {"producer_byte_rate": "1048576", "consumer_byte_rate": "2097152"}}
    r = kafkatier_cli.run("configs", "--bootstrap-server", bs, "--entity-type", "users", "--entity-name", "alice",
                          "--describe")
    assert "Quota configs for user-principal 'alice' are consumer_byte_rate=2097152.0, " \
           "producer_byte_rate=1048576.0" in r.stdout, r.stdout + r.stderr
    with TierAdmin(bs) as admin:
        admin.alter_client_quotas({"user": "alice", "client-id": None}, {"request_percentage": 50.0})
        found = admin.describe_client_quotas([("user", 0, "alice"), ("client-id", 1, None)], strict=True)
        assert found == [({"user": "alice", "client-id": None}, {"request_percentage": 50.0})]
        note = sorted(quota_cluster.zk.get_children("/config/changes"))[-1]
        assert json.loads(quota_cluster.zk.get(f"/config/changes/{note}")[0]) == {
            "version": 2, "entity_path": "users/alice/clients/<default>"}
        with pytest.raises(AdminError) as err:
            admin.alter_client_quotas({"client-id": "x"}, {"bogus_rate": 1.0})
        assert "INVALID_REQUEST" in str(err.value) and "Invalid configuration key bogus_rate" in str(err.value)


def test_cli_unknown_quota_key_is_one_line_exit_2(quota_cluster, kafkatier_cli):
    r = kafkatier_cli.run("configs", "--bootstrap-server", quota_cluster.bootstrap_servers, "--entity-type",
                          "clients", "--entity-name", "app", "--alter", "--add-config", "producer_byte_rat=10")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "Invalid configuration key" in r.stderr


def test_producer_is_throttled_to_its_byte_rate(quota_cluster, kafkatier_cli):
    bs = quota_cluster.bootstrap_servers
    topic = f"quota-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    client_id = f"throttled-{uuid.uuid4().hex[:6]}"
    r = kafkatier_cli.run("configs", "--bootstrap-server", bs, "--entity-type", "clients", "--entity-name",
                          client_id, "--alter", "--add-config", f"producer_byte_rate={RATE}")
    assert r.returncode == 0, r.stderr
    throttles: list[int] = []

    def stats(js: str) -> None:
        for b in json.loads(js).get("brokers", {}).values():
            if b.get("nodeid", -1) >= 0:
                throttles.append(int(b.get("throttle", {}).get("max", 0)))
    producer = Producer({"bootstrap.servers": bs, "client.id": client_id, "linger.ms": 5,
                         "statistics.interval.ms": 200, "stats_cb": stats, "batch.size": 256 * 1024})
    acked: list[tuple[float, int]] = []
    payload = b"x" * 10_000
    total = 20 * RATE
    start = time.monotonic()
    sent = 0
    while sent < total:
        try:
            producer.produce(topic, payload, on_delivery=lambda e, m: acked.append((time.monotonic(), len(m))))
            sent += len(payload)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(120) == 0
    wait_for(lambda: producer.poll(0.3) is not None and max(throttles, default=0) > 0, 10,
             message="a non-zero throttle in the producer's statistics")
    elapsed = acked[-1][0] - start
    print(f"elapsed={elapsed:.1f}s for 20 MB max_throttle={max(throttles)}ms")
    # 20 MB less the 2 s burst at 1 MB/s: 18 s.  A pipelining client (librdkafka queues requests while its channel
    # is muted) runs somewhat ahead, as against Kafka, because samples expire before a backlog's throttle is
    # paid off; measured 15.9 s at load 11.
    assert 0.8 * 18 <= elapsed <= 1.1 * 18
