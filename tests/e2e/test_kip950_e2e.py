"""KIP-950 end to end: a delete disablement driven with the ``kafkatier configs`` command while brokers die.

One 3-broker cluster, a tiered RF-3 topic.  A non-controller broker is killed (-9) before the disablement, so the
topic stays DISABLING (scenario 17 of docs/acceptance.md) while the live replicas finish: every further
tiered-storage change is refused with TIERED_STORAGE_DISABLEMENT_IN_PROGRESS and changes nothing (scenario 16), two
disablements sent at the same time to two brokers see exactly one win, and ``kafkatier tiered describe --data-dir``
names the pending replica.  Then the controller is killed (-9): the new one rebuilds the queue from ZooKeeper and
sends StopReplica v5 again, which the surviving broker answers (scenario 18).  When the killed brokers return they
get StopReplica v5 and the topic becomes DISABLED.  Finally tiering is re-enabled with kafka-python's admin
client and ``tiered describe`` shows the new tiered epoch's segments.
"""
from __future__ import annotations

import json
import threading

import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

from kafkatier.admin.client import AdminError
from kafkatier.waiting import wait_for
from kafkatier.zk import paths
from kip950_support import (DELETE, READ_ONLY, TIERED, TOPIC_CONFIG, WAIT_S, alter, broker_status, consume,
                           create_topic, disabled_events, earliest, finished_chain, partition_state, produce,
                           remote, remote_files, segments, snapshot, tiered, topic_config, topic_id, values,
                           wait_offloaded, wait_state)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def live(c) -> set[int]:
    return {int(b) for b in c.zk.get_children(paths.BROKER_IDS)}


def test_delete_disablement_survives_a_killed_broker_and_a_killed_controller(cluster_factory, kafkatier_cli):
    c = cluster_factory(brokers=3, log_dirs=1, overrides=TIERED, session_timeout_ms=3000)
    t, t2 = "orders", "audit"
    for topic in (t, t2):
        create_topic(c, topic, configs=TOPIC_CONFIG)
    tid = topic_id(c.zk, t)
    produce(c, t, 30)
    wait_offloaded(c, t, 24)
    controller = c.controller_id()
    down = next(b for b in (1, 2, 3) if b != controller)
    survivor = next(b for b in (1, 2, 3) if b not in (controller, down))
    c.manager.kill_broker(down)
    wait_for(lambda: down not in live(c), WAIT_S, message=f"broker {down} gone from ZooKeeper")

    # The disablement through the configs command: the live replicas finish, the topic stays DISABLING.
    r = kafkatier_cli.run("configs", "--bootstrap-server", c.bootstrap_servers, "--alter", "--entity-type",
                          "topics", "--entity-name", t, "--add-config",
                          "remote.storage.enable=false,remote.log.delete.on.disable=true")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"Completed updating config for topic {t}."
    assert tiered(c.zk, t) == (1, "DISABLING")
    wait_for(lambda: remote(c.zk, t) == [] and remote_files(c, t, tid=tid) == [], WAIT_S, interval=0.2,
             message="the live leader deleted the remote data")
    wait_for(lambda: all(disabled_events(c, b, t) == ["delete"] for b in (controller, survivor)), WAIT_S,
             message="the live replicas answered StopReplica v5")
    assert tiered(c.zk, t) == (1, "DISABLING")

    # Scenario 16: any further tiered-storage change is refused and changes nothing.
    before = snapshot(c.zk, t)
    r = kafkatier_cli.run("configs", "--bootstrap-server", c.bootstrap_servers, "--alter", "--entity-type",
                          "topics", "--entity-name", t, "--add-config", "remote.storage.enable=true")
    assert r.returncode == 1
    assert "TIERED_STORAGE_DISABLEMENT_IN_PROGRESS: Tiered storage disablement is in progress for topic " \
           f"{t} (tiered epoch 1)" in r.stderr
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers, request_timeout_ms=30000)
    try:
        out = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, t, configs={
            "remote.log.copy.disable": "true"})], raise_on_unknown=False, incremental=True)
        assert out["topic"][t].startswith("[Error 950] ")             # the raw code, unknown to kafka-python
    finally:
        admin.close()
    assert snapshot(c.zk, t) == before

    # Only the active controller knows the pending replicas: its status snapshot, with --data-dir.
    def describe_pending() -> bool:
        r = kafkatier_cli.run("tiered", "describe", "--topic", t, "--data-dir", c.data_dir)
        return r.returncode == 0 and f"\tPendingReplicas: {t}-0-{down}\t" in r.stdout.splitlines()[0] + "\t"
    wait_for(describe_pending, 30, interval=0.5, message="tiered describe names the pending replica")
    r = kafkatier_cli.run("tiered", "describe", "--topic", t, "--zookeeper", c.zookeeper)
    assert "\tTieredState: DISABLING\t" in r.stdout and "\tPendingReplicas: unknown (use --data-dir)" in r.stdout

    # Two disablements at once, through two brokers (one forwards to the controller): exactly one wins.
    barrier = threading.Barrier(2)
    results: dict[str, AdminError | None] = {}

    def send(name: str, configs: dict, via: int) -> None:
        barrier.wait()
        results[name] = alter(c, t2, configs, bootstrap=f"127.0.0.1:{c.manager.broker(via)['port']}")
    threads = [threading.Thread(target=send, args=("read-only", READ_ONLY, controller)),
               threading.Thread(target=send, args=("delete", DELETE, survivor))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    winners = [n for n, e in results.items() if e is None]
    losers = [e for e in results.values() if e is not None]
    assert len(winners) == 1 and [e.name for e in losers] == ["TIERED_STORAGE_DISABLEMENT_IN_PROGRESS"], results
    cfg = topic_config(c.zk, t2)
    assert (cfg.get("remote.storage.enable") == "false") == (winners == ["delete"])
    assert tiered(c.zk, t2) == (1, "DISABLING")

    # Scenario 18: kill the controller; the survivor takes over and repeats StopReplica v5 (answered NONE).
    c.manager.kill_broker(controller)
    wait_for(lambda: c.controller_id() == survivor, WAIT_S, interval=0.2, message="the survivor is controller")
    wait_for(lambda: disabled_events(c, survivor, t) == ["delete", "delete"], WAIT_S,
             message="the new controller sent StopReplica v5 again")
    assert tiered(c.zk, t) == (1, "DISABLING")

    # Scenario 17: the brokers come back, get StopReplica v5, and the disablements complete.
    c.manager.start_broker(down)
    wait_for(lambda: disabled_events(c, down, t) == ["delete"], WAIT_S, message="the returned broker disabled")
    assert tiered(c.zk, t) == (1, "DISABLING")                       # the old controller's replica is still down
    c.manager.start_broker(controller)
    wait_state(c.zk, t, "DISABLED", 1)
    wait_state(c.zk, t2, "DISABLED", 1)
    assert earliest(c, t) == 24 and consume(c, t) == values(24, 30)

    # Re-enable with kafka-python's IncrementalAlterConfigs; new copies carry the disablement's tiered epoch.
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers, request_timeout_ms=30000)
    try:
        out = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, t, configs={
            "remote.storage.enable": "true"})], raise_on_unknown=False, incremental=True)
        assert out["topic"][t] == "OK"
    finally:
        admin.close()
    assert tiered(c.zk, t) == (1, "ENABLED")
    produce(c, t, 12, first=30)
    wait_for(lambda: finished_chain(remote(c.zk, t)) == segments(24, 36), WAIT_S, interval=0.2,
             message="copying resumed at the local log start offset")

    def described() -> dict | None:   # the controller's status snapshot is rewritten every 5 s
        r = kafkatier_cli.run("tiered", "describe", "--topic", t, "--data-dir", c.data_dir, "--json")
        doc = json.loads(r.stdout)
        return doc if doc["disablement"]["last_duration_ms"] else None
    doc = wait_for(described, 30, interval=0.5, message="the disablement's duration in tiered describe")
    assert (doc["tiered_epoch"], doc["tiered_state"]) == (1, "ENABLED")
    assert doc["by_tiered_epoch"] == {"1": {"segments": 2, "bytes": 2 * 1020}}
    assert doc["disablement"]["pending_replicas"] == [] and doc["disablement"]["last_duration_ms"] > 0
    leader = partition_state(c.zk, t)["leader"]
    wait_for(lambda: broker_status(c, leader)["remote_log_manager"]["remote_bytes_by_tiered_epoch"].get(
        f"{t}-0") == {"1": 2 * 1020}, 30, interval=0.5, ignore=(OSError, ValueError, KeyError),
        message="remote bytes by tiered epoch in the leader's status")
    assert consume(c, t) == values(24, 42)
