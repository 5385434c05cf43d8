"""Restarts always work (issue 9 item 6), as a user does it: kill -9 every broker of a running cluster, then
``kafkatier cluster start-broker`` all of them at once.  Each new process finds its previous incarnation's
``/brokers/ids/{id}`` still there (the killed session has not expired yet), waits for it to go, registers, and
the command returns once the broker serves; a consumer then reads every record acknowledged before the kill.

Whether a new process finds the stale node when it registers depends on how fast it starts (under heavy load
it may arrive after the old session expired): the test asserts the stale nodes exist when the commands start,
and tests/integration/test_broker_registration.py checks the wait itself deterministically."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from kafkatier.cluster.manager import pid_alive
from kafkatier.waiting import wait_for
from kip950_support import create_topic

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

SESSION_TIMEOUT_MS = 6000  # the default; a new process usually reaches registration well before
PARTITIONS = 3
RECORDS = 300


def test_kill_all_brokers_and_start_them_all_at_once(cluster_factory, kafkatier_cli):
    c = cluster_factory(brokers=3, log_dirs=1, session_timeout_ms=SESSION_TIMEOUT_MS)
    create_topic(c, "orders", partitions=PARTITIONS, rf=3, configs={"min.insync.replicas": "2"})
    producer = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all", linger_ms=5, retries=5,
                             request_timeout_ms=30000)
    futures = [(f"r{i}".encode(), producer.send("orders", f"r{i}".encode(), partition=i % PARTITIONS))
               for i in range(RECORDS)]
    producer.flush(60)
    producer.close()
    acked = {value for value, f in futures if f.succeeded()}
    assert len(acked) == RECORDS

    old = {b["id"]: b["pid"] for b in c.manager.state["brokers"]}
    for pid in old.values():
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not any(pid_alive(p) for p in old.values()), 10, message="the killed brokers to exit")
    stale = {b: c.zk.exists(f"/brokers/ids/{b}") for b in old}
    assert all(stale.values()), "the killed brokers' registrations outlive them until their sessions expire"

    t0 = time.monotonic()
    starts = {b: kafkatier_cli.popen("cluster", "start-broker", "--id", str(b), "--data-dir", c.data_dir,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for b in old}
    outcomes = {b: p.communicate(timeout=90) + (p.returncode,) for b, p in starts.items()}
    restart_s = time.monotonic() - t0
    c.manager.load()  # the new pids, so that the fixture stops the new processes
    for b, (out, err, rc) in outcomes.items():
        assert rc == 0, f"broker {b}: {err}"
        assert out.startswith(f"broker {b} started (pid ") and "registered and serving" in out
    print(f"\nrestart of 3 brokers after kill -9 took {restart_s:.1f}s (session timeout {SESSION_TIMEOUT_MS} ms)")

    state = json.load(open(os.path.join(c.data_dir, "cluster.json")))
    new = {b["id"]: b["pid"] for b in state["brokers"]}
    assert all(pid_alive(p) and p != old[b] for b, p in new.items()), "every new pid recorded in cluster.json"
    for b in old:
        assert c.zk.exists(f"/brokers/ids/{b}").czxid > stale[b].czxid
    waited = [b for b in old if "waiting for it to expire" in _log(c, b)]
    print(f"brokers that waited for their predecessor's session to expire: {waited}")

    consumer = KafkaConsumer(bootstrap_servers=c.bootstrap_servers, enable_auto_commit=False, group_id=None,
                             auto_offset_reset="earliest", request_timeout_ms=30000)
    try:
        tps = [TopicPartition("orders", p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        seen: set[bytes] = set()

        def all_read() -> bool:
            for records in consumer.poll(timeout_ms=500).values():
                seen.update(r.value for r in records)
            return acked <= seen
        wait_for(all_read, 60, interval=0, message="every acknowledged record to be consumed")
    finally:
        consumer.close()


def _log(c, broker_id: int) -> str:
    with open(os.path.join(c.data_dir, "logs", f"broker-{broker_id}.log"), errors="replace") as f:
        return f.read()


def test_a_broker_whose_own_session_expired_registers_again_and_serves(cluster_factory):
    """Frozen (SIGSTOP) past its session timeout, the broker loses its session and /brokers/ids/1; continued,
    it registers again with a new broker epoch, is elected controller again and serves produce requests."""
    c = cluster_factory(brokers=1, log_dirs=1, session_timeout_ms=2000)
    before = c.zk.exists("/brokers/ids/1").czxid
    pid = c.manager.broker(1)["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: c.zk.exists("/brokers/ids/1") is None, 30, message="the frozen broker's session to expire")
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: (st := c.zk.exists("/brokers/ids/1")) is not None and st.czxid > before, 30,
             message="broker 1 to register again")
    wait_for(lambda: c.controller_id() == 1, 30, message="broker 1 to be controller again")
    assert "new ZooKeeper session; re-registering" in _log(c, 1)
    create_topic(c, "after-expiry", rf=1)
    producer = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all", retries=5, request_timeout_ms=30000)
    try:
        assert producer.send("after-expiry", b"x").get(timeout=60).offset == 0
    finally:
        producer.close()
