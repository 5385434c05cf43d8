"""Leader election and controlled shutdown end to end (issue 14, items 2 and 3) on clusters of broker processes:
preferred election after a bounce through ``/admin/preferred_replica_election``, ElectLeaders, the
``kafkatier leader-election`` tool and auto rebalance; unclean election (ElectLeaders and the topic config);
controlled shutdown on SIGTERM with a kafka-python producer and consumer; DeleteRecords pending in purgatory when
leadership moves (scenario 30 of docs/acceptance.md); the error paths of ControlledShutdown and ElectLeaders."""
from __future__ import annotations

import json
import os
import signal
import socket
import struct
import threading
import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from kafka.protocol.admin import DeleteRecordsRequest, ElectLeadersRequest, ElectLeadersResponse
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from kafkatier.cluster.manager import pid_alive
from kafkatier.protocol.control_requests import ControlledShutdownRequest, ControlledShutdownResponse
from kafkatier.protocol.errors import Errors
from kafkatier.server.broker_client import BrokerClient, _decode_response
from kafkatier.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CONVERGE_S = 30.0
ELECTION_ZNODE = "/admin/preferred_replica_election"


# ------------------------------------------------------------------------------------------------ helpers

def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def state(cluster, topic: str, partition: int = 0) -> dict:
    return json.loads(cluster.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")[0])


def leaders(cluster, topic: str, partitions: int) -> list[int]:
    return [state(cluster, topic, p)["leader"] for p in range(partitions)]


def create_topic(cluster, topic: str, assignment: dict[int, list[int]], configs: dict | None = None) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(topic, replica_assignments=assignment, topic_configs=configs or {})],
                            timeout_ms=30000)
    finally:
        admin.close()
    wait_full_isr(cluster, topic, assignment)


def wait_full_isr(cluster, topic: str, assignment: dict[int, list[int]]) -> None:
    def ready():
        return all(sorted(state(cluster, topic, p)["isr"]) == sorted(rs) for p, rs in assignment.items())
    wait_for(ready, CONVERGE_S, interval=0.1, ignore=(Exception,), message=f"{topic} with a full ISR")


def bounce(cluster, broker: int) -> None:
    """Controlled stop, start again; back once every broker's metadata shows the whole cluster."""
    cluster.manager.stop_broker(broker)
    ensure_running(cluster, broker)


def ensure_running(cluster, *brokers: int) -> None:
    for b in brokers:
        if not pid_alive(cluster.manager.broker(b).get("pid")):
            cluster.manager.start_broker(b)
    cluster.manager.wait_until_ready(timeout=CONVERGE_S)


def address(cluster, broker: int) -> str:
    return f"127.0.0.1:{cluster.manager.broker(broker)['port']}"


def send(cluster, request, node_id: int):
    """``request`` to broker ``node_id``, bootstrapping from that broker only (others may be paused)."""
    admin = KafkaAdminClient(bootstrap_servers=address(cluster, node_id), request_timeout_ms=30000)
    try:
        manager = admin._manager  # noqa: SLF001 - kafka-python's own send path, as the CLI does

        async def go():
            return await manager.send(request, node_id=node_id)
        return manager.run(go)
    finally:
        admin.close()


def earliest_offset(cluster, broker: int, topic: str, partition: int) -> int | None:
    """The broker's answer to ListOffsets(earliest) for one partition, on one connection to it only."""
    T = ListOffsetsRequest.ListOffsetsTopic
    client = BrokerClient("127.0.0.1", cluster.manager.broker(broker)["port"], client_id="test", timeout_s=10.0)
    try:
        resp = client.send(ListOffsetsRequest[1](replica_id=-1, topics=[T(version=1, name=topic, partitions=[
            T.ListOffsetsPartition(version=1, partition_index=partition, timestamp=-2)])]), ListOffsetsResponse, 1)
    finally:
        client.close()
    part = resp.topics[0].partitions[0]
    return part.offset if part.error_code == 0 else None


def elect(cluster, election_type: int, partitions: dict[str, list[int]] | None, node_id: int | None = None,
          timeout_ms: int = 20000) -> dict[tuple[str, int], int]:
    """One ElectLeaders (to the controller by default): {(topic, partition): error code}."""
    req = ElectLeadersRequest(election_type=election_type, timeout_ms=timeout_ms, topic_partitions=None
                              if partitions is None else [ElectLeadersRequest.TopicPartitions(topic=t, partitions=ps)
                                                          for t, ps in partitions.items()])
    resp = send(cluster, req, cluster.controller_id() if node_id is None else node_id)
    assert resp.error_code == 0
    return {(r.topic, p.partition_id): p.error_code for r in resp.replica_election_results for p in r.partition_result}


def controlled_shutdown(cluster, to_broker: int, broker_id: int, broker_epoch: int) -> tuple[int, list]:
    b = cluster.manager.broker(to_broker)
    client = BrokerClient("127.0.0.1", b["port"], client_id="test")
    try:
        resp = client.send(ControlledShutdownRequest[3](broker_id=broker_id, broker_epoch=broker_epoch),
                           ControlledShutdownResponse, 3)
    finally:
        client.close()
    return resp.error_code, [(p.topic_name, p.partition_index) for p in resp.remaining_partitions]


def broker_epoch(cluster, broker: int) -> int:
    return cluster.zk.get(f"/brokers/ids/{broker}")[1].czxid


def log_text(cluster, broker: int) -> str:
    with open(os.path.join(cluster.data_dir, "logs", f"broker-{broker}.log"), errors="replace") as f:
        return f.read()


@pytest.fixture(scope="module")
def ecluster(module_cluster_factory):
    """Three brokers, auto rebalance off (the tests move leaders themselves), quick controlled-shutdown
    retries (a broker that is the last in-sync replica of a partition cannot move it and retries)."""
    return module_cluster_factory(brokers=3, log_dirs=1, overrides={
        "auto.leader.rebalance.enable": "false", "controlled.shutdown.retry.backoff.ms": "200"})


# ------------------------------------------------------------------------------------------------ preferred

def test_preferred_election_after_a_bounce_via_the_znode_elect_leaders_and_the_tool(ecluster, kafkatier_cli):
    c = ecluster
    topic = unique_topic("pref")
    assignment = {p: [1 + (p + i) % 3 for i in range(3)] for p in range(6)}
    preferred = [rs[0] for rs in assignment.values()]
    create_topic(c, topic, assignment)
    assert leaders(c, topic, 6) == preferred
    bounce(c, 1)
    wait_full_isr(c, topic, assignment)
    moved = leaders(c, topic, 6)
    assert 1 not in moved  # its leaders went elsewhere and stay there (no auto rebalance here)

    # 1. the znode: partition 0 goes back to broker 1 and the znode is deleted.
    c.zk.create(ELECTION_ZNODE, json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0}]}).encode(),
                makepath=True)
    wait_for(lambda: not c.zk.exists(ELECTION_ZNODE), CONVERGE_S, message="election znode deleted")
    assert leaders(c, topic, 6) == [1] + moved[1:]
    # A malformed znode is logged and removed; the controller keeps working.
    c.zk.create(ELECTION_ZNODE, b"{not json", makepath=True)
    wait_for(lambda: not c.zk.exists(ELECTION_ZNODE), CONVERGE_S, message="garbage znode deleted")
    assert "ignoring preferred replica election due to invalid json" in log_text(c, c.controller_id())

    # 2. ElectLeaders: elected, not needed, unknown; the answer comes once the metadata shows the new leader.
    out = elect(c, 0, {topic: [3, 1], "no-such-topic": [0]})
    assert out == {(topic, 3): 0, (topic, 1): Errors.ELECTION_NOT_NEEDED,
                   ("no-such-topic", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}
    assert leaders(c, topic, 6) == [1, 2, 3, 1] + moved[4:]
    # A broker that is not the controller answers NOT_CONTROLLER.
    other = next(b for b in c.broker_ids() if b != c.controller_id())
    assert elect(c, 0, {topic: [0]}, node_id=other) == {(topic, 0): Errors.NOT_CONTROLLER}

    # 3. the tool, every partition, after another bounce.
    bounce(c, 1)
    wait_full_isr(c, topic, assignment)
    r = kafkatier_cli.run("leader-election", "--bootstrap-server", c.bootstrap_servers, "--election-type",
                          "preferred", "--all-topic-partitions")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"Successfully completed leader election (PREFERRED) for partitions {topic}-0, {topic}-3",
        "Valid replica already elected for partitions " + ", ".join(f"{topic}-{p}" for p in (1, 2, 4, 5))]
    assert leaders(c, topic, 6) == preferred
    r = kafkatier_cli.run("leader-election", "--bootstrap-server", c.bootstrap_servers, "--election-type",
                          "preferred", "--topic", topic, "--partition", "2")
    assert (r.returncode, r.stdout.strip()) == (0, f"Valid replica already elected for partitions {topic}-2")
    r = kafkatier_cli.run("leader-election", "--bootstrap-server", c.bootstrap_servers, "--election-type",
                          "preferred", "--topic", topic)
    assert (r.returncode, r.stderr.strip()) == (2, "kafkatier leader-election: Missing required option(s): partition")


def test_preferred_leader_not_available(ecluster):
    c = ecluster
    topic = unique_topic("pref-na")
    create_topic(c, topic, {0: [2, 3], 1: [3, 2]})
    c.manager.stop_broker(2)
    try:
        assert state(c, topic, 0)["leader"] == 3
        assert elect(c, 0, {topic: [0, 1]}) == {(topic, 0): Errors.PREFERRED_LEADER_NOT_AVAILABLE,
                                                 (topic, 1): Errors.ELECTION_NOT_NEEDED}
    finally:
        ensure_running(c, 2)


def test_auto_leader_rebalance_moves_leaders_back(cluster_factory):
    c = cluster_factory(brokers=3, log_dirs=1, overrides={"leader.imbalance.check.interval.seconds": "1"})
    topic = unique_topic("auto")
    assignment = {p: [1 + (p + i) % 3 for i in range(3)] for p in range(6)}
    create_topic(c, topic, assignment)
    bounce(c, 2)
    wait_for(lambda: leaders(c, topic, 6) == [rs[0] for rs in assignment.values()], CONVERGE_S, interval=0.2,
             message="leaders back on their preferred replicas")


# ------------------------------------------------------------------------------------------------ unclean

def test_unclean_election_by_request_and_by_topic_config(ecluster, kafkatier_cli):
    c = ecluster
    strict, lax = unique_topic("strict"), unique_topic("lax")
    create_topic(c, strict, {0: [2, 3]})
    create_topic(c, lax, {0: [2, 3]}, {"unclean.leader.election.enable": "true"})
    try:
        c.manager.stop_broker(2)   # leadership moves to 3, the ISR shrinks to [3]
        # Leadership moved to 3 with ISR [3]; broker 2, a follower until it exits, may be taken back into the ISR
        # by leader 3 meanwhile (ZooKeeper-mode ISR writes, as Kafka before AlterPartition), and is removed again
        # when the controller sees it gone: the ISR is [3] once that has happened.
        wait_for(lambda: [state(c, t)["isr"] for t in (strict, lax)] == [[3], [3]], CONVERGE_S, interval=0.1,
                 message="ISR [3] after broker 2 stopped")
        c.manager.stop_broker(3)   # the last in-sync replica: nowhere to move, it gives up and stops
        assert "all the controlled shutdown attempts failed" in log_text(c, 3)
        wait_for(lambda: all(state(c, t)["leader"] == -1 for t in (strict, lax)), CONVERGE_S, interval=0.1,
                 message="both partitions offline")
        assert elect(c, 1, {strict: [0]}) == {(strict, 0): Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE}

        c.manager.start_broker(2)  # out of sync: only the topic that allows it gets it as leader
        wait_for(lambda: state(c, lax)["leader"] == 2, CONVERGE_S, interval=0.1, message="unclean leader of lax")
        assert state(c, lax)["isr"] == [2]
        assert state(c, strict)["leader"] == -1
        r = kafkatier_cli.run("leader-election", "--bootstrap-server", c.bootstrap_servers, "--election-type",
                              "unclean", "--topic", strict, "--partition", "0")
        assert (r.returncode, r.stdout.strip()) == (
            0, f"Successfully completed leader election (UNCLEAN) for partitions {strict}-0"), r.stderr
        assert (state(c, strict)["leader"], state(c, strict)["isr"]) == (2, [2])
        assert elect(c, 1, {strict: [0]}) == {(strict, 0): Errors.ELECTION_NOT_NEEDED}
    finally:
        ensure_running(c, 2, 3)


def test_unclean_election_enabled_by_a_config_change_elects_at_once(ecluster, kafkatier_cli):
    """Kafka's TopicUncleanLeaderElectionEnable / UncleanLeaderElectionEnable: switching the topic config (or the
    brokers' dynamic default) on elects the live out-of-sync replica within seconds, without a broker change."""
    c = ecluster
    by_topic, by_default = unique_topic("by-topic"), unique_topic("by-default")
    for t in (by_topic, by_default):
        create_topic(c, t, {0: [2, 3]})
    try:
        c.manager.stop_broker(2)   # leadership moves to 3, the ISR shrinks to [3]
        c.manager.stop_broker(3)   # the last in-sync replica: the partitions go offline
        c.manager.start_broker(2)  # alive, out of sync: not a leader while unclean election is off
        wait_for(lambda: all(state(c, t)["leader"] == -1 for t in (by_topic, by_default)), CONVERGE_S,
                 interval=0.1, message="both partitions offline")

        def alter(*entity: str, config: str = "unclean.leader.election.enable=true", op: str = "--add-config"):
            r = kafkatier_cli.run("configs", "--bootstrap-server", c.bootstrap_servers, "--entity-type", *entity,
                                  "--alter", op, config)
            assert r.returncode == 0, r.stderr

        t0 = time.monotonic()
        alter("topics", "--entity-name", by_topic)
        wait_for(lambda: state(c, by_topic)["leader"] == 2, 10, interval=0.05, message="unclean leader by topic")
        print(f"topic config -> leader in {time.monotonic() - t0:.2f}s")
        assert state(c, by_topic)["isr"] == [2] and state(c, by_default)["leader"] == -1
        t0 = time.monotonic()
        alter("brokers", "--entity-default")
        try:
            wait_for(lambda: state(c, by_default)["leader"] == 2, 10, interval=0.05,
                     message="unclean leader by the broker default")
            print(f"broker default -> leader in {time.monotonic() - t0:.2f}s")
        finally:
            alter("brokers", "--entity-default", config="unclean.leader.election.enable", op="--delete-config")
    finally:
        ensure_running(c, 2, 3)


# ------------------------------------------------------------------------------------------------ controlled shutdown

def test_controlled_shutdown_moves_leaders_before_the_process_exits(ecluster):
    c = ecluster
    topic = unique_topic("cs")
    assignment = {p: [1 + (p + i) % 3 for i in range(3)] for p in range(6)}
    create_topic(c, topic, assignment, {"min.insync.replicas": "2"})
    victim = next(b for b in c.broker_ids() if b != c.controller_id())
    acked: list[bytes] = []
    stop = threading.Event()
    producer = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all", linger_ms=5, retries=50,
                             retry_backoff_ms=100, request_timeout_ms=15000, metadata_max_age_ms=1000)

    def produce():
        i = 0
        while not stop.is_set():
            value = b"v%d" % i
            producer.send(topic, value=value, partition=i % 6).add_callback(lambda md, v=value: acked.append(v))
            i += 1
            if i % 50 == 0:
                producer.flush(timeout=30)
        producer.flush(timeout=30)
    t = threading.Thread(target=produce, daemon=True)
    t.start()
    try:
        wait_for(lambda: len(acked) >= 200, CONVERGE_S, message="records acked before the shutdown")
        c.manager.stop_broker(victim)   # SIGTERM; returns once the process has exited
        assert "controlled shutdown succeeded" in log_text(c, victim)
        # Moved before the exit: no partition led by it.  It left every ISR too, though as a follower of the
        # new leaders until it exits it may be taken back in (as in Kafka before KIP-841): out again at once.
        assert all(state(c, topic, p)["leader"] != victim for p in range(6))
        wait_for(lambda: all(victim not in state(c, topic, p)["isr"] for p in range(6)), CONVERGE_S, interval=0.1,
                 message="the stopped broker out of every ISR")
        # A fresh producer that does not retry: every partition's leader, as the live brokers tell it, accepts.
        fresh = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all", retries=0,
                              request_timeout_ms=15000)
        try:
            for p in range(6):
                fresh.send(topic, value=b"after-%d" % p, partition=p).get(timeout=30)
        finally:
            fresh.close(timeout=10)
        n = len(acked)
        wait_for(lambda: len(acked) >= n + 100, CONVERGE_S, message="the old producer going on")
    finally:
        stop.set()
        t.join(60)
        producer.close(timeout=10)
        ensure_running(c, victim)
    consumer = KafkaConsumer(topic, bootstrap_servers=c.bootstrap_servers, group_id=None, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        seen = {m.value for m in consumer}
    finally:
        consumer.close()
    assert set(acked) <= seen and {b"after-%d" % p for p in range(6)} <= seen


def test_controlled_shutdown_error_paths(ecluster):
    c = ecluster
    cid = c.controller_id()
    other = next(b for b in c.broker_ids() if b != cid)
    epoch = broker_epoch(c, other)
    assert controlled_shutdown(c, cid, 99, -1) == (Errors.BROKER_NOT_AVAILABLE, [])
    assert controlled_shutdown(c, cid, other, epoch - 1) == (Errors.STALE_BROKER_EPOCH, [])
    assert controlled_shutdown(c, other, other, epoch) == (Errors.STALE_CONTROLLER_EPOCH, [])
    # None of them marked the broker as shutting down: it still leads what it led.
    topic = unique_topic("cs-err")
    create_topic(c, topic, {0: [other, cid]})
    assert state(c, topic)["leader"] == other


# ------------------------------------------------------------------------------------------------ scenario 30

def test_delete_records_pending_when_leadership_moves_completes_with_not_leader(cluster_factory):
    """C30: a DeleteRecords waiting in purgatory (a follower alive but not fetching, C29) completes at once with
    NOT_LEADER_OR_FOLLOWER when a preferred election moves leadership away from the broker holding it.

    Its own cluster with a 60 s ZooKeeper session: the paused (SIGSTOP) follower must stay registered, hence
    alive, until the election; with the usual 6 s its session could expire first under load, the leader would
    stop counting it and the request would complete with NONE before leadership moved."""
    c = cluster_factory(brokers=3, log_dirs=1, session_timeout_ms=60000, overrides={
        "auto.leader.rebalance.enable": "false", "controlled.shutdown.retry.backoff.ms": "200"})
    old_leader = c.controller_id()           # keeps running and stays the controller through the bounce
    preferred, paused = [x for x in c.broker_ids() if x != old_leader]
    topic = unique_topic("c30")
    create_topic(c, topic, {0: [preferred, old_leader, paused]})
    producer = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all")
    try:
        for i in range(10):
            producer.send(topic, value=b"%d" % i, partition=0)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)
    bounce(c, preferred)                     # leadership moves to old_leader; preferred comes back as a follower
    wait_full_isr(c, topic, {0: [preferred, old_leader, paused]})
    assert state(c, topic)["leader"] == old_leader
    answer: dict = {}

    def delete():
        t = DeleteRecordsRequest.DeleteRecordsTopic
        resp = send(c, DeleteRecordsRequest(topics=[t(name=topic, partitions=[t.DeleteRecordsPartition(
            partition_index=0, offset=5)])], timeout_ms=25000), old_leader)
        answer["error"] = resp.topics[0].partitions[0].error_code
        answer["at"] = time.monotonic()
    pid = c.manager.broker(paused)["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        pending = threading.Thread(target=delete, daemon=True)
        pending.start()
        # Asked of the leader on one raw connection: a client's metadata refresh could pick the paused broker.
        wait_for(lambda: earliest_offset(c, old_leader, topic, 0) == 5, CONVERGE_S, interval=0.05,
                 message="the leader's log start offset at 5 (the request is pending)")
        assert pending.is_alive()
        moved_at = time.monotonic()
        assert elect(c, 0, {topic: [0]}) == {(topic, 0): 0}
        pending.join(20)
        assert answer["error"] == Errors.NOT_LEADER_OR_FOLLOWER
        assert answer["at"] - moved_at < 5.0
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_controller_paused_past_its_session_answers_elections_not_controller(cluster_factory):
    """A controller SIGSTOPped past its ZooKeeper session (a zombie) believes it is active until the expiry reaches
    it.  An ElectLeaders waiting in its socket when it resumes is answered NOT_CONTROLLER, not from its stale view
    (a scenario saw an unclean election answered ELECTION_NOT_NEEDED by the resumed old controller, for a
    partition whose leader had died while it was paused); the client then asks the new controller."""
    c = cluster_factory(brokers=3, log_dirs=1, session_timeout_ms=4000)
    old = c.controller_id()
    topic = unique_topic("zombie")
    create_topic(c, topic, {0: [b for b in c.broker_ids() if b != old]})
    pid = c.manager.broker(old)["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: c.controller_id() not in (None, old), CONVERGE_S, interval=0.1, ignore=(Exception,),
                 message="a new controller elected while the old one is paused")
        # The kernel accepts the connection and buffers the request while the process is stopped.
        sock = socket.create_connection(("127.0.0.1", c.manager.broker(old)["port"]), timeout=60)
        req = ElectLeadersRequest[1](election_type=1, timeout_ms=20000, topic_partitions=[
            ElectLeadersRequest.TopicPartitions(topic=topic, partitions=[0])])
        req.with_header(correlation_id=7, client_id="test")
        sock.sendall(req.encode(version=1, header=True, framed=True))
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        frame = bytearray()
        while len(frame) < 4 or len(frame) < 4 + struct.unpack(">i", frame[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, "the resumed broker closed the connection without an answer"
            frame += chunk
    finally:
        sock.close()
    resp = _decode_response(ElectLeadersResponse, frame[4:], 1)
    errors = {(r.topic, p.partition_id): p.error_code for r in resp.replica_election_results
              for p in r.partition_result}
    assert errors == {(topic, 0): Errors.NOT_CONTROLLER}
    # The new controller answers it.
    assert elect(c, 1, {topic: [0]}) == {(topic, 0): Errors.ELECTION_NOT_NEEDED}
