"""ZooKeeper-level faults under a running cluster: a 3-server ensemble in containers and, where the fault makes
sense for a single server, the embedded one too (``zookeeper_under_test``).

Every test checks what a user cares about: no acknowledged write lost, the cluster serving again, epochs that
moved forward and stale ones refused.  The fixtures come from kafkatier's pytest plugin
(kafkatier/testing/plugin.py); without Docker the ensemble cases are skipped (failed under CI).
"""
from __future__ import annotations

import json
import time

import pytest
from kafka import KafkaAdminClient, TopicPartition

from kafkatier.testing.zookeeper_faults import expire_session_id
from kafkatier.waiting import wait_for
from kafkatier.zk import codecs
from kafkatier.zk.errors import KazooException, KazooTimeoutError
from kip950_support import (DELETE, TIERED, TOPIC_CONFIG, WAIT_S, alter, consume, create_topic, earliest, produce,
                           remote, tiered, topic_id, values, wait_offloaded, wait_state)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SESSION_TIMEOUT_S = 6.0
ZK_ERRORS = (KazooException, KazooTimeoutError)
BOTH = ["embedded", pytest.param("ensemble", marks=pytest.mark.docker)]


def broker_epochs(c) -> dict[int, int]:
    """``{broker id: broker epoch}``: the czxid of each ``/brokers/ids/<id>``."""
    return {b: c.zk.exists(f"/brokers/ids/{b}").czxid for b in c.broker_ids()}


def controller_epoch(c) -> int:
    return int(c.zk.get("/controller_epoch")[0])


def hold(seconds: float) -> None:
    """Keep a fault in place for ``seconds``: the duration is the fault under test, not a synchronisation."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def wait_registered_again(c, old_epochs: dict[int, int], timeout: float = 60.0) -> dict[int, int]:
    """Until every broker has registered with a newer broker epoch than in ``old_epochs``."""
    def newer():
        now = broker_epochs(c)
        return now if all(now[b] > old_epochs[b] for b in old_epochs) else None
    return wait_for(newer, timeout, interval=0.2, ignore=(*ZK_ERRORS, AttributeError),
                    message="every broker re-registered with a new broker epoch")


def control_request(c, broker: int, controller_epoch_: int, broker_epoch: int, topic: str):
    """A StopReplica (no deletion) sent over the control channel with the given epochs; the response."""
    req = codecs.ControlRequest(
        api_key=5, api_version=5, api_name="StopReplica", controller_id=99, controller_epoch=controller_epoch_,
        broker_epoch=broker_epoch,
        body={"controller_id": 99, "is_k_raft_controller": False, "controller_epoch": controller_epoch_,
              "broker_epoch": broker_epoch,
              "topic_states": [{"topic_name": topic, "partition_states": [
                  {"partition_index": 0, "leader_epoch": -1, "delete_partition": False,
                   "disable_remote_partition": False}]}]})
    # A controller that has just been elected clears the queue it inherits ("cleared stale control queue"): a
    # request written in that instant is removed unanswered, as the old controller's were.  Write it again then.
    for _ in range(3):
        path = c.zk.create(f"/kafkatier/control/{broker}/requests/request_", req.encode(), sequence=True)
        resp_path = f"/kafkatier/control/{broker}/responses/{path.rsplit('/', 1)[1]}"
        if wait_for(lambda: "answered" if c.zk.exists(resp_path) else (None if c.zk.exists(path) else "removed"),
                    20, message="the control response") == "answered":
            break
    resp = codecs.ControlResponse.decode(c.zk.get(resp_path)[0])
    c.zk.delete(resp_path)
    c.zk.delete(path)
    return resp


def wait_serving_cluster(c, topic: str) -> None:
    """Until a controller is elected and the topic's partition has a leader again."""
    def ok():
        state = json.loads(c.zk.get(f"/brokers/topics/{topic}/partitions/0/state")[0])
        return c.controller_id() is not None and state["leader"] >= 0 and len(state["isr"]) == 3
    wait_for(ok, 60, interval=0.2, ignore=ZK_ERRORS, message=f"a controller and {topic}-0 fully in sync")


# --------------------------------------------------------------------------------------------- ensemble


@pytest.mark.docker
def test_controller_election_and_failover_on_an_ensemble(zookeeper_ensemble, kafkatier_cluster):
    c = kafkatier_cluster(zookeeper_ensemble, brokers=3, log_dirs=1)
    assert controller_epoch(c) == 1
    old = c.controller_id()
    c.manager.kill_broker(old)
    new = wait_for(lambda: c.controller_id() not in (None, old) and c.controller_id(), SESSION_TIMEOUT_S + 5,
                   message="a new controller")
    assert new != old and controller_epoch(c) == 2


@pytest.mark.docker
def test_zookeeper_leader_killed_quorum_survives(zookeeper_ensemble, kafkatier_cluster):
    c = kafkatier_cluster(zookeeper_ensemble, brokers=3, log_dirs=1)
    create_topic(c, "orders")
    produce(c, "orders", 20)
    epochs, ctrl_epoch = broker_epochs(c), controller_epoch(c)
    leader = zookeeper_ensemble.leader()
    leader.kill()
    zookeeper_ensemble.wait_quorum(servers=[s for s in zookeeper_ensemble.servers if s is not leader])
    produce(c, "orders", 20, first=20)                      # acknowledged by all replicas with 2 of 3 servers
    # A new ZooKeeper leader within the session timeout: no session lost, nothing re-elected.
    assert broker_epochs(c) == epochs and controller_epoch(c) == ctrl_epoch
    leader.restart()
    zookeeper_ensemble.wait_quorum()
    assert consume(c, "orders") == values(0, 40)


@pytest.mark.docker
def test_one_zookeeper_server_paused(zookeeper_ensemble, kafkatier_cluster):
    c = kafkatier_cluster(zookeeper_ensemble, brokers=3, log_dirs=1)
    create_topic(c, "orders")
    produce(c, "orders", 10)
    frozen = zookeeper_ensemble.leader()
    frozen.pause()
    try:
        others = [s for s in zookeeper_ensemble.servers if s is not frozen]
        zookeeper_ensemble.wait_quorum(servers=others)    # the two others elect a leader among themselves
        produce(c, "orders", 10, first=10)
        create_topic(c, "payments")                        # the controller still writes through the quorum
    finally:
        frozen.unpause()
    zookeeper_ensemble.wait_quorum()                       # rejoined: one leader, three serving
    wait_serving_cluster(c, "orders")
    produce(c, "orders", 10, first=20)
    assert consume(c, "orders") == values(0, 30)


# ------------------------------------------------------------------------------ embedded and ensemble


@pytest.mark.parametrize("zookeeper_under_test", BOTH, indirect=True)
def test_zookeeper_paused_longer_than_the_session_timeout(zookeeper_under_test, kafkatier_cluster):
    """ZooKeeper frozen for twice the session timeout, then the brokers' sessions expired.

    Whether a freeze alone expires a session is a race ZooKeeper decides on resume: the session tracker
    expires overdue sessions, but a reconnection that the frozen server had queued and processes first
    revalidates its session (and an ensemble that re-elects its leader gives every session a fresh timeout).
    So the freeze checks that the cluster recovers whichever way each session went, and the expiry is then made
    certain by closing every broker's session.  After it: new broker epochs, a controller re-elected with a new
    epoch, the old epochs refused, no acknowledged write lost.
    """
    c = kafkatier_cluster(zookeeper_under_test, brokers=3, log_dirs=1,
                          session_timeout_ms=int(SESSION_TIMEOUT_S * 1000))
    create_topic(c, "orders")
    produce(c, "orders", 20)
    old_epochs, old_ctrl_epoch = broker_epochs(c), controller_epoch(c)
    zookeeper_under_test.pause_all()
    try:
        hold(SESSION_TIMEOUT_S * 2)
    finally:
        zookeeper_under_test.unpause_all()
    wait_for(lambda: len(broker_epochs(c)) == 3 and c.controller_id() is not None, 60, interval=0.2,
             ignore=(*ZK_ERRORS, AttributeError), message="every broker registered and a controller")
    assert all(epoch >= old_epochs[b] for b, epoch in broker_epochs(c).items())
    wait_serving_cluster(c, "orders")
    produce(c, "orders", 10, first=20)

    paused_epochs, paused_ctrl_epoch = broker_epochs(c), controller_epoch(c)
    for b in c.broker_ids():
        expire_session_id(zookeeper_under_test.connect_string, c.zk.exists(f"/brokers/ids/{b}").ephemeralOwner)
    new_epochs = wait_registered_again(c, paused_epochs)
    wait_for(lambda: controller_epoch(c) > paused_ctrl_epoch and c.controller_id() is not None, 60,
             interval=0.2, ignore=ZK_ERRORS, message="a controller re-elected with a new epoch")
    wait_serving_cluster(c, "orders")
    broker = c.broker_ids()[0]
    # A broker refuses the old controller epoch once it has heard from the new controller (until then it accepts
    # it, as Kafka's does): ask until it refuses, about a partition nobody hosts, so an accepted ask changes
    # nothing.
    stale_controller = wait_for(lambda: (lambda r: r if r.error_code == 11 else None)(  # STALE_CONTROLLER_EPOCH
        control_request(c, broker, old_ctrl_epoch, new_epochs[broker], "no-such-topic")), 30, interval=0.2,
        message="the old controller epoch refused")
    assert stale_controller.error_code == 11
    stale_broker = control_request(c, broker, controller_epoch(c), old_epochs[broker], "orders")
    assert stale_broker.error_code == 77                    # STALE_BROKER_EPOCH
    produce(c, "orders", 10, first=30)
    assert consume(c, "orders") == values(0, 40)


@pytest.mark.parametrize("zookeeper_under_test", BOTH, indirect=True)
def test_zookeeper_restarted_from_its_data(zookeeper_under_test, kafkatier_cluster):
    c = kafkatier_cluster(zookeeper_under_test, brokers=3, log_dirs=1)
    create_topic(c, "orders", configs={"retention.ms": "86400000"})
    produce(c, "orders", 20)
    assignment = c.zk.get("/brokers/topics/orders")[0]
    zookeeper_under_test.restart_from_data()
    wait_serving_cluster(c, "orders")
    assert c.zk.retry(c.zk.get, "/brokers/topics/orders")[0] == assignment
    assert json.loads(c.zk.get("/config/topics/orders")[0])["config"]["retention.ms"] == "86400000"
    wait_for(lambda: sorted(c.zk.get_children("/brokers/ids")) == ["1", "2", "3"], 60, interval=0.2,
             ignore=ZK_ERRORS, message="every broker registered")
    produce(c, "orders", 10, first=20)
    assert consume(c, "orders") == values(0, 30)


@pytest.mark.parametrize("zookeeper_under_test", BOTH, indirect=True)
def test_kip950_delete_disablement_in_progress_across_a_zookeeper_restart(zookeeper_under_test,
                                                                          kafkatier_cluster):
    """A delete disablement whose remote deletions are still running when ZooKeeper goes down completes after
    it comes back: state DISABLED at tiered epoch 1, the remote tier empty, the local records readable."""
    c = kafkatier_cluster(zookeeper_under_test, brokers=3, log_dirs=1,
                          overrides={**TIERED, "rsm.config.delete.delay.ms": "1500"})
    t = "orders"
    create_topic(c, t, configs=TOPIC_CONFIG)
    tid = topic_id(c.zk, t)
    produce(c, t, 30)
    wait_offloaded(c, t, 24)
    assert alter(c, t, DELETE) is None
    wait_for(lambda: tiered(c.zk, t)[0] == 1, WAIT_S, interval=0.05, message="the disablement started")
    assert remote(c.zk, t, tid=tid) != []                   # deletions still in progress
    zookeeper_under_test.restart_from_data()
    wait_state(c.zk, t, "DISABLED", 1)
    wait_for(lambda: remote(c.zk, t, tid=tid) == [], WAIT_S, interval=0.2, ignore=ZK_ERRORS,
             message="remote tier empty")
    assert tiered(c.zk, t) == (1, "DISABLED")
    assert earliest(c, t) == 24
    assert consume(c, t) == values(24, 30)


@pytest.mark.parametrize("zookeeper_under_test", BOTH, indirect=True)
def test_delete_records_across_a_zookeeper_restart(zookeeper_under_test, kafkatier_cluster):
    """DeleteRecords answered while ZooKeeper is down (it needs only the replicas), and the new log start
    offset survives ZooKeeper coming back and the controller re-sending its state."""
    c = kafkatier_cluster(zookeeper_under_test, brokers=3, log_dirs=1)
    create_topic(c, "orders")
    produce(c, "orders", 10)
    zookeeper_under_test.stop()
    try:
        admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers, request_timeout_ms=30000)
        try:
            out = admin.delete_records({TopicPartition("orders", 0): 4}, timeout_ms=10000)
        finally:
            admin.close()
    finally:
        zookeeper_under_test.start()
    assert out[TopicPartition("orders", 0)]["error_code"] == 0
    assert out[TopicPartition("orders", 0)]["low_watermark"] == 4
    wait_serving_cluster(c, "orders")
    produce(c, "orders", 5, first=10)
    assert earliest(c, "orders") == 4
    assert consume(c, "orders") == values(4, 15)
