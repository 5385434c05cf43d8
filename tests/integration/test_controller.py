"""Controller election, failover, broker bounce, topic deletion and fencing on real broker processes."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

from kafkatier.waiting import wait_for
from kafkatier.zk import codecs
from kafkatier.zk.kafka_zk_client import KafkaZkClient
from kafkatier.zk.validate import validate_tree

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_S = 6.0


def state(zk, topic, p):
    data, stat = zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")
    return json.loads(data), stat


def wait_topic_online(zk, topic, partitions, timeout=30):
    def ok():
        try:
            return all(state(zk, topic, p)[0]["leader"] >= 0 for p in range(partitions))
        except Exception:  # noqa: BLE001
            return False
    wait_for(ok, timeout, message=f"{topic} online")


def test_election_and_registration(cluster_factory):
    c = cluster_factory(brokers=3)
    zk = c.zk
    data, stat = zk.get("/controller")
    ctrl = json.loads(data)
    assert ctrl["version"] == 2 and ctrl["brokerid"] in c.broker_ids() and ctrl["kraftControllerEpoch"] == -1
    assert isinstance(ctrl["timestamp"], str)
    assert stat.ephemeralOwner != 0
    assert zk.get("/controller_epoch")[0] == b"1"
    for b in c.broker_ids():
        data, stat = zk.get(f"/brokers/ids/{b}")
        reg = json.loads(data)
        assert stat.ephemeralOwner != 0
        assert reg["version"] == 5 and reg["endpoints"] == [f"PLAINTEXT://127.0.0.1:{reg['port']}"]
        # The broker epoch it uses is the znode's czxid (reported in its status snapshot).
        status = os.path.join(c.data_dir, "status", f"broker-{b}.json")
        wait_for(lambda: os.path.exists(status), 15, message="status file")
        assert json.load(open(status))["broker_epoch"] == stat.czxid
    assert validate_tree(zk, "/") == []


def test_controller_failover_after_kill_9(cluster_factory):
    c = cluster_factory(brokers=3)
    zk = c.zk
    KafkaZkClient(zk).create_topic("failover", {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}, {})
    wait_topic_online(zk, "failover", 3)
    old = c.controller_id()
    before = {p: state(zk, "failover", p)[0] for p in range(3)}
    t0 = time.monotonic()
    c.manager.kill_broker(old)
    new = wait_for(lambda: (c.controller_id() not in (None, old)) and c.controller_id(), SESSION_TIMEOUT_S + 2,
                   message="a new controller")
    assert time.monotonic() - t0 <= SESSION_TIMEOUT_S + 2
    assert new != old
    assert zk.get("/controller_epoch")[0] == b"2"

    def moved():
        for p in range(3):
            if old in state(zk, "failover", p)[0]["isr"]:
                return False
            if before[p]["leader"] == old:
                s = state(zk, "failover", p)[0]
                if s["leader"] in (old, -1) or s["leader_epoch"] != before[p]["leader_epoch"] + 1:
                    return False
        return True
    wait_for(moved, 15, message="new leaders for the dead broker's partitions")
    for p in range(3):
        s = state(zk, "failover", p)[0]
        assert old not in s["isr"]
        if before[p]["leader"] == old:
            assert s["leader"] in before[p]["isr"]
    assert validate_tree(zk, "/") == []


def test_bounced_broker_is_failure_then_startup(cluster_factory):
    c = cluster_factory(brokers=3)
    zk = c.zk
    ctrl = c.controller_id()
    victim = next(b for b in c.broker_ids() if b != ctrl)
    old_czxid = zk.exists(f"/brokers/ids/{victim}").czxid
    c.manager.stop_broker(victim)          # clean stop: its session closes at once
    c.manager.start_broker(victim)
    new_czxid = wait_for(lambda: (s := zk.exists(f"/brokers/ids/{victim}")) and s.czxid, 30, message="re-register")
    assert new_czxid > old_czxid
    log_path = os.path.join(c.data_dir, "logs", f"broker-{ctrl}.log")

    def seen():
        text = open(log_path).read()
        return (f"bounced=[{victim}]" in text) or (f"dead=[{victim}]" in text and f"new=[{victim}]" in text)
    wait_for(seen, 20, message="the controller to handle the bounce")
    # The restarted broker hears from the controller with its new epoch and leads / follows again.
    KafkaZkClient(zk).create_topic("after-bounce", {0: [victim]}, {})
    wait_topic_online(zk, "after-bounce", 1)
    assert state(zk, "after-bounce", 0)[0]["leader"] == victim


def test_topic_deletion_waits_for_dead_broker(cluster_factory):
    c = cluster_factory(brokers=3)
    zk = c.zk
    KafkaZkClient(zk).create_topic("doomed", {0: [1, 2, 3]}, {"retention.ms": "60000"})
    wait_topic_online(zk, "doomed", 1)
    ctrl = c.controller_id()
    down = next(b for b in c.broker_ids() if b != ctrl)
    c.manager.stop_broker(down)
    KafkaZkClient(zk).mark_topic_for_deletion("doomed")
    ctrl_log = os.path.join(c.data_dir, "logs", f"broker-{ctrl}.log")
    wait_for(lambda: "topic deletion waits for brokers" in open(ctrl_log).read(), 20, message="deletion to stall")
    assert zk.exists("/admin/delete_topics/doomed") is not None
    assert zk.exists("/brokers/topics/doomed") is not None
    c.manager.start_broker(down)
    wait_for(lambda: zk.exists("/admin/delete_topics/doomed") is None, 30, message="deletion to finish")
    assert zk.exists("/brokers/topics/doomed") is None
    assert zk.exists("/config/topics/doomed") is None
    # Every replica's log directory is gone, including the one on the broker that was down.
    for b in c.broker_ids():
        for d in c.manager.broker(b)["log_dirs"]:
            wait_for(lambda d=d: not any(n.startswith("doomed-0") and not n.endswith("-delete")
                                         for n in os.listdir(d)), 20, message=f"log dir cleanup in {d}")


def test_deletion_resumes_after_controller_failover(cluster_factory):
    c = cluster_factory(brokers=3)
    zk = c.zk
    KafkaZkClient(zk).create_topic("doomed2", {0: [1, 2, 3]}, {})
    wait_topic_online(zk, "doomed2", 1)
    ctrl = c.controller_id()
    down = next(b for b in c.broker_ids() if b != ctrl)
    c.manager.stop_broker(down)
    KafkaZkClient(zk).mark_topic_for_deletion("doomed2")
    ctrl_log = os.path.join(c.data_dir, "logs", f"broker-{ctrl}.log")
    wait_for(lambda: "topic deletion waits for brokers" in open(ctrl_log).read(), 20, message="deletion to stall")
    c.manager.kill_broker(ctrl)
    wait_for(lambda: c.controller_id() not in (None, ctrl), SESSION_TIMEOUT_S + 2, message="a new controller")
    c.manager.start_broker(down)
    c.manager.start_broker(ctrl)  # every replica must answer before the topic is gone, as in Kafka
    wait_for(lambda: zk.exists("/admin/delete_topics/doomed2") is None, 40, message="deletion after failover")
    assert zk.exists("/brokers/topics/doomed2") is None


def test_paused_controller_is_fenced_and_resigns(cluster_factory):
    c = cluster_factory(brokers=3)
    zk = c.zk
    old = c.controller_id()
    pid = c.manager.broker(old)["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: c.controller_id() not in (None, old), SESSION_TIMEOUT_S + 5, message="new controller")
        epoch = int(zk.get("/controller_epoch")[0])
        assert epoch == 2
    finally:
        os.kill(pid, signal.SIGCONT)
    log_path = os.path.join(c.data_dir, "logs", f"broker-{old}.log")
    wait_for(lambda: "resigning" in open(log_path).read(), 30, message="the old controller to resign")
    # The old controller's stale epoch zkVersion can no longer write anything.
    from kafkatier.zk.fenced import ControllerMovedError, FencedZkWriter
    with pytest.raises(ControllerMovedError):
        FencedZkWriter(zk, 1).create("/fenced-probe", b"x")
    assert zk.exists("/fenced-probe") is None
    assert int(zk.get("/controller_epoch")[0]) == epoch


def test_stale_epochs_are_rejected(cluster_factory):
    """Acceptance A5 (docs/acceptance.md): StopReplica with an old controller epoch, then an old broker epoch."""
    c = cluster_factory(brokers=1)
    zk = c.zk
    KafkaZkClient(zk).create_topic("epochs", {0: [1]}, {})
    wait_topic_online(zk, "epochs", 1)
    czxid = zk.exists("/brokers/ids/1").czxid
    epoch = int(zk.get("/controller_epoch")[0])

    def send(controller_epoch, broker_epoch):
        req = codecs.ControlRequest(api_key=5, api_version=5, api_name="StopReplica", controller_id=99,
                                    controller_epoch=controller_epoch, broker_epoch=broker_epoch,
                                    body={"controller_id": 99, "is_k_raft_controller": False,
                                          "controller_epoch": controller_epoch, "broker_epoch": broker_epoch,
                                          "topic_states": [{"topic_name": "epochs", "partition_states": [
                                              {"partition_index": 0, "leader_epoch": -1, "delete_partition": True,
                                               "disable_remote_partition": False}]}]})
        path = zk.create("/kafkatier/control/1/requests/request_", req.encode(), sequence=True)
        name = path.rsplit("/", 1)[1]
        resp_path = f"/kafkatier/control/1/responses/{name}"
        wait_for(lambda: zk.exists(resp_path), 10, message="response")
        resp = codecs.ControlResponse.decode(zk.get(resp_path)[0])
        zk.delete(resp_path)
        zk.delete(path)
        return resp
    r = send(epoch - 1, czxid)
    assert r.error_code == 11 and r.body["partition_errors"] == []
    r = send(epoch, czxid - 1)
    assert r.error_code == 77 and r.body["partition_errors"] == []
    # The replica is untouched.
    assert any(n.startswith("epochs-0") for d in c.manager.broker(1)["log_dirs"] for n in os.listdir(d))
