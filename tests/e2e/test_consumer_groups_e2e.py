"""Consumer groups through five clients nobody here wrote: kafka-python, confluent-kafka, kcat -G, aiokafka and
KafkaJS (issue 17).

Per client: three consumers of one group share a 6-partition topic; once they have consumed (and committed) a
first round of records, one is killed with SIGKILL; a second round is produced and the two others must take
over the dead one's partitions within its session timeout (plus one rebalance) and resume exactly at the
committed offsets: every record is consumed once, none twice, none lost.  A second scenario kills the group's
coordinator (the leader of its ``__consumer_offsets`` partition) mid-consumption.

The workers are the scripts in ``tests/e2e/group_workers/``; they print a record only once its offset is
committed (kcat auto-commits every 100 ms, so the test waits for the committed offsets before a kill).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkatier.coordinator.group.records import partition_for
from kafkatier.waiting import wait_for

import partition_support

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
WORKERS = Path(__file__).resolve().parent / "group_workers"
NODE_MODULES = REPO / ".node" / "node_modules"
KCAT = shutil.which("kcat") or "/usr/bin/kcat"
SESSION_MS = 6000            # group.min.session.timeout.ms: the fastest takeover Kafka allows
TAKEOVER_BOUND_S = SESSION_MS / 1000 + 12.0   # session expiry + one rebalance (heartbeats every second) + fetch
PARTITIONS, PER_PARTITION = 6, 10
OVERRIDES = {"group.initial.rebalance.delay.ms": "300", "offsets.topic.num.partitions": "5"}


def partition_state(zk, topic: str, partition: int) -> tuple[dict, object]:
    data, stat = zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
    return json.loads(data), stat


def create_topic(cluster, topic: str, partitions: int, rf: int) -> None:
    """CreateTopics, then wait until every partition has a leader and a full ISR, and every broker's metadata says
    so: a broker that has not yet applied the controller's UpdateMetadata answers UNKNOWN_TOPIC_OR_PARTITION (as
    Kafka's does), and kcat's balanced consumer exits on it ("Subscribed topic not available")."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    wait_for(lambda: admin.create_topics([NewTopic(topic, partitions, rf)])[topic].result(30) is None
             or True, 60, interval=0.5, ignore=(Exception,), message=f"create {topic}")

    def ready() -> bool:
        states = [partition_state(cluster.zk, topic, p)[0] for p in range(partitions)]
        return all(st["leader"] >= 0 and len(st["isr"]) == rf for st in states)
    wait_for(ready, 30, interval=0.1, ignore=(Exception,), message=f"{topic} online")
    wait_for(lambda: partition_support.metadata_everywhere(cluster, topic, partitions), 30, interval=0.1,
             ignore=(Exception,), message=f"every broker's metadata to name {topic}'s leaders")


def _node_missing() -> str | None:
    if shutil.which("node") is None:
        return "Node.js is not installed (KafkaJS needs it)"
    if not (NODE_MODULES / "kafkajs").is_dir():
        return "KafkaJS is not installed in .node/ (scripts/bootstrap.sh installs it when npm is present)"
    return None


def worker_argv(client: str, bootstrap: str, group: str, topic: str, client_id: str) -> list[str]:
    args = [bootstrap, group, topic, client_id, str(SESSION_MS)]
    if client == "kcat":
        return [KCAT, "-b", bootstrap, "-G", group, topic, "-X", f"client.id={client_id}",
                "-X", "auto.offset.reset=earliest", "-X", "enable.auto.commit=true",
                "-X", "auto.commit.interval.ms=100", "-X", f"session.timeout.ms={SESSION_MS}",
                "-X", "heartbeat.interval.ms=1000", "-u", "-q", "-f", '{"p": %p, "o": %o}\n']
    if client == "kafkajs":
        return ["node", str(WORKERS / "kafkajs_worker.js"), *args]
    return [sys.executable, str(WORKERS / f"{client}_worker.py"), *args]


class Worker:
    """One consumer process; its printed records are collected with the time they arrived."""

    def __init__(self, client: str, bootstrap: str, group: str, topic: str, client_id: str):
        env = dict(os.environ, NODE_PATH=str(NODE_MODULES), PYTHONPATH=str(REPO))
        self.client_id = client_id
        self.proc = subprocess.Popen(worker_argv(client, bootstrap, group, topic, client_id), env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.records: list[tuple[float, int, int]] = []
        self.stderr: list[str] = []
        self._threads = [threading.Thread(target=self._read, daemon=True),
                         threading.Thread(target=self._read_err, daemon=True)]
        for t in self._threads:
            t.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                r = json.loads(line)
                self.records.append((time.monotonic(), r["p"], r["o"]))

    def _read_err(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip())

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def produce(bootstrap: str, topic: str, start: int) -> None:
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=10)
    try:
        for i in range(PARTITIONS * PER_PARTITION):
            p.send(topic, f"{start + i}".encode(), partition=i % PARTITIONS)
        p.flush(30)
    finally:
        p.close()


def consumed(workers: list[Worker]) -> list[tuple[int, int]]:
    return [(p, o) for w in workers for (_, p, o) in list(w.records)]


def expected(rounds: int) -> set[tuple[int, int]]:
    return {(p, o) for p in range(PARTITIONS) for o in range(rounds * PER_PARTITION)}


def describe(admin: AdminClient, group: str):
    return admin.describe_consumer_groups([group])[group].result(timeout=10)


def committed(admin: AdminClient, group: str, topic: str) -> dict[int, int]:
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    res = admin.list_consumer_group_offsets([req])[group].result(timeout=10)
    return {tp.partition: tp.offset for tp in res.topic_partitions}


def wait_stable(admin: AdminClient, group: str, members: int, timeout: float = 60.0, workers=()):
    """Until the group is Stable with ``members`` members, each owning partitions.  On a timeout the error says
    what the group last looked like and how the workers are (alive, their last stderr lines)."""
    last = []

    def ok():
        d = describe(admin, group)
        last[:] = [str(d.state).split(".")[-1],
                   [(m.client_id, sorted(tp.partition for tp in m.assignment.topic_partitions)) for m in d.members]]
        if str(d.state).split(".")[-1] != "STABLE" or len(d.members) != members:
            return None
        if not all(m.assignment.topic_partitions for m in d.members):
            return None
        return d
    try:
        return wait_for(ok, timeout, interval=0.2, ignore=(Exception,),
                        message=f"{group} stable with {members} members")
    except TimeoutError as e:
        status = [(w.client_id, w.proc.poll(), w.stderr[-3:]) for w in workers]
        raise AssertionError(f"{e}; last described: {last}; workers (id, exit code, stderr): {status}") from None


def wait_consumed(workers, rounds: int, timeout: float) -> None:
    want = expected(rounds)
    wait_for(lambda: want <= set(consumed(workers)), timeout, interval=0.1,
             message=f"{len(want)} records consumed; stderr: {[w.stderr[-3:] for w in workers]}")


def wait_committed(admin, group, topic, rounds: int, timeout: float = 30.0) -> None:
    wait_for(lambda: committed(admin, group, topic) == {p: rounds * PER_PARTITION for p in range(PARTITIONS)},
             timeout, interval=0.2, ignore=(Exception,), message="committed offsets at the log end")


@pytest.fixture(scope="module")
def group_cluster(module_cluster_factory):
    return module_cluster_factory(brokers=3, log_dirs=1, overrides=OVERRIDES)


CLIENTS = ["kafka_python", "confluent_kafka", "kcat", "aiokafka", "kafkajs"]


@pytest.mark.parametrize("client", CLIENTS)
def test_three_consumers_share_partitions_and_survivors_resume_at_committed_offsets(group_cluster, client):
    if client == "kafkajs" and _node_missing():
        pytest.skip(_node_missing())
    if client == "kcat" and not Path(KCAT).exists():
        pytest.skip("kcat is not installed")
    if client == "aiokafka":
        pytest.importorskip("aiokafka")
    bs = group_cluster.bootstrap_servers
    topic, group = f"grp-{client}-{uuid.uuid4().hex[:6]}", f"g-{client}-{uuid.uuid4().hex[:6]}"
    create_topic(group_cluster, topic, PARTITIONS, 2)
    admin = AdminClient({"bootstrap.servers": bs})
    workers = [Worker(client, bs, group, topic, f"{client}-{i}") for i in range(3)]
    try:
        desc = wait_stable(admin, group, 3, workers=workers)
        produce(bs, topic, 0)
        wait_consumed(workers, 1, 60)
        wait_committed(admin, group, topic, 1)
        owned = {m.client_id: {tp.partition for tp in m.assignment.topic_partitions} for m in desc.members}
        victim = workers[0]
        victim_parts = owned[victim.client_id]
        assert victim_parts, owned

        killed_at = time.monotonic()
        victim.kill()
        produce(bs, topic, PARTITIONS * PER_PARTITION)
        survivors = workers[1:]
        wait_consumed(workers, 2, TAKEOVER_BOUND_S + 30)

        all_records = consumed(workers)
        assert len(all_records) == len(set(all_records)), "a record was consumed twice"
        assert set(all_records) == expected(2)
        takeover = min(t for w in survivors for (t, p, o) in w.records if p in victim_parts and o >= PER_PARTITION)
        assert takeover - killed_at <= TAKEOVER_BOUND_S, f"takeover took {takeover - killed_at:.1f}s"
        wait_committed(admin, group, topic, 2)
        d = wait_stable(admin, group, 2, workers=survivors)
        assert victim.client_id not in {m.client_id for m in d.members}
    finally:
        for w in workers:
            w.kill()


def test_coordinator_failover_keeps_every_committed_offset(cluster_factory):
    """kill -9 the leader of the group's ``__consumer_offsets`` partition while two confluent-kafka consumers
    consume: the group moves to the new leader, no committed offset goes back, no record is lost."""
    c = cluster_factory(brokers=3, log_dirs=1, overrides=OVERRIDES)
    bs = c.bootstrap_servers
    topic, group = f"fo-{uuid.uuid4().hex[:6]}", f"fo-{uuid.uuid4().hex[:6]}"
    create_topic(c, topic, PARTITIONS, 3)
    admin = AdminClient({"bootstrap.servers": bs})
    workers = [Worker("confluent_kafka", bs, group, topic, f"fo-{i}") for i in range(2)]
    try:
        wait_stable(admin, group, 2, workers=workers)
        produce(bs, topic, 0)
        wait_consumed(workers, 1, 60)
        wait_committed(admin, group, topic, 1)
        partition = partition_for(group, int(OVERRIDES["offsets.topic.num.partitions"]))
        coordinator = partition_state(c.zk, "__consumer_offsets", partition)[0]["leader"]
        before = committed(admin, group, topic)

        c.manager.stop_broker(coordinator, kill=True)
        produce(",".join(b for b in bs.split(",") if not b.endswith(f":{c.manager.broker(coordinator)['port']}")),
                topic, PARTITIONS * PER_PARTITION)
        wait_consumed(workers, 2, 90)
        all_records = consumed(workers)
        assert len(all_records) == len(set(all_records)) and set(all_records) == expected(2)
        new_leader = wait_for(lambda: (lambda s: s["leader"] if s["leader"] not in (-1, coordinator) else None)(
            partition_state(c.zk, "__consumer_offsets", partition)[0]), 30, message="new coordinator")
        assert new_leader != coordinator
        after = committed(admin, group, topic)
        assert all(after[p] >= before[p] for p in before), (before, after)
        wait_committed(admin, group, topic, 2, timeout=60)
    finally:
        for w in workers:
            w.kill()


def test_cli_consume_group_describe_reset_delete(group_cluster, kafkatier_cli):
    """``kafkatier consume --group`` then ``kafkatier consumer-groups`` as a Kafka user types them."""
    bs = group_cluster.bootstrap_servers
    topic, group = f"cli-{uuid.uuid4().hex[:6]}", f"cli-{uuid.uuid4().hex[:6]}"
    create_topic(group_cluster, topic, PARTITIONS, 2)
    produce(bs, topic, 0)
    out = kafkatier_cli.run("consume", "--bootstrap-server", bs, "--topic", topic, "--group", group,
                            "--from-beginning", "--max-messages", str(PARTITIONS * PER_PARTITION), "--no-progress")
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == PARTITIONS * PER_PARTITION

    cg = lambda *a: kafkatier_cli.run("consumer-groups", "--bootstrap-server", bs, *a)  # noqa: E731
    assert group in cg("--list").stdout.split()
    d = cg("--describe", "--group", group)
    assert d.returncode == 0, d.stderr
    lines = [line.split() for line in d.stdout.splitlines() if line.startswith(group)]
    header = next(line for line in d.stdout.splitlines() if line.startswith("GROUP")).split()
    assert header == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                      "HOST", "CLIENT-ID"]
    assert sorted(int(r[2]) for r in lines) == list(range(PARTITIONS))
    assert all(r[3] == r[4] == str(PER_PARTITION) and r[5] == "0" for r in lines), d.stdout

    dry = cg("--reset-offsets", "--group", group, "--topic", f"{topic}:0,1", "--to-earliest")
    assert dry.returncode == 0 and "NEW-OFFSET" in dry.stdout
    assert all(r[3] == "0" for r in (line.split() for line in dry.stdout.splitlines() if line.startswith(group)))
    assert "CURRENT-OFFSET" in cg("--describe", "--group", group).stdout      # a dry run changes nothing
    assert all(line.split()[5] == "0" for line in cg("--describe", "--group", group).stdout.splitlines()
               if line.startswith(group))
    ex = cg("--reset-offsets", "--group", group, "--topic", f"{topic}:0", "--shift-by", "-4", "--execute")
    assert ex.returncode == 0, ex.stderr
    row0 = next(line.split() for line in cg("--describe", "--group", group).stdout.splitlines()
                if line.startswith(group) and line.split()[2] == "0")
    assert row0[3:6] == [str(PER_PARTITION - 4), str(PER_PARTITION), "4"]

    bad = cg("--reset-offsets", "--group", group, "--all-topics")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    missing = cg("--describe", "--group", "no-such-group")
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    deleted = cg("--delete", "--group", group)
    assert deleted.returncode == 0 and "was successful" in deleted.stdout, deleted.stderr
    assert group not in cg("--list").stdout.split()
    again = cg("--delete", "--group", group)
    assert again.returncode == 1 and "GroupIdNotFoundError" in again.stderr


def test_group_requests_with_bad_input_get_kafka_error_codes(group_cluster):
    """Raw requests (kafkatier's BrokerClient) for the issue's bad-input list: unknown protocols, a fenced
    generation, an unknown member, oversized metadata, a bad session timeout, the wrong coordinator.  Every
    refused commit leaves the committed offsets as they were; nothing hangs."""
    from concurrent.futures import ThreadPoolExecutor

    from kafkatier.protocol import codec
    from kafkatier.protocol.errors import Errors
    from kafkatier.server.broker_client import BrokerClient

    (FindCoordinatorRequest, OffsetCommitRequest, OffsetFetchRequest, JoinGroupRequest, HeartbeatRequest,
     SyncGroupRequest, DeleteGroupsRequest, DescribeGroupsRequest) = (
        codec.request_class(k) for k in (10, 8, 9, 11, 12, 14, 42, 15))
    topic, group = f"bad-{uuid.uuid4().hex[:6]}", f"bad-{uuid.uuid4().hex[:6]}"
    create_topic(group_cluster, topic, 2, 2)
    ports = {b["id"]: b["port"] for b in group_cluster.manager.state["brokers"]}

    def call(broker: int, request, api_key: int, version: int):
        client = BrokerClient("127.0.0.1", ports[broker], "bad-input-test", timeout_s=30)
        try:
            return client.send(request, codec.response_class(api_key), version)
        finally:
            client.close()

    def find() -> int:
        r = call(1, FindCoordinatorRequest(key=group, key_type=0), 10, 3)
        return r.node_id if r.error_code == 0 else None
    coord = wait_for(find, 30, interval=0.2, ignore=(Exception,), message="coordinator")
    other = next(b for b in ports if b != coord)
    meta = b"\x00\x01\x00\x00\x00\x01" + len(topic).to_bytes(2, "big") + topic.encode() + b"\x00\x00\x00\x00"

    def join(member_id="", protocol_type="consumer", protocols=(("range", meta),), session=SESSION_MS, gid=group,
             broker=None):
        req = JoinGroupRequest(group_id=gid, session_timeout_ms=session, rebalance_timeout_ms=10000,
                               member_id=member_id, group_instance_id=None, protocol_type=protocol_type,
                               protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m)
                                          for n, m in protocols])
        return call(broker or coord, req, 11, 5)

    # A client retries NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS while the new coordinator loads.
    first = wait_for(lambda: (lambda r: r if r.error_code != Errors.NOT_COORDINATOR and
                              r.error_code != Errors.COORDINATOR_LOAD_IN_PROGRESS else None)(join()), 30,
                     interval=0.1, message="the coordinator to serve the group")
    assert first.error_code == Errors.MEMBER_ID_REQUIRED
    member = first.member_id
    with ThreadPoolExecutor(2) as pool:
        joined = pool.submit(join, member)
        wait_for(lambda: call(coord, DescribeGroupsRequest(groups=[group]), 15, 5).groups[0].members, 10,
                 interval=0.02, message="the first member waiting in JoinGroup")
        # While the first member waits in JoinGroup: a different protocol type, an unknown protocol.
        assert join(protocol_type="connect").error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
        pending = join().member_id
        assert join(pending, protocols=(("no-such-assignor", meta),)).error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
        joined = joined.result(30)
    assert joined.error_code == 0 and joined.leader == member
    gen = joined.generation_id
    sync = call(coord, SyncGroupRequest(group_id=group, generation_id=gen, member_id=member, group_instance_id=None,
                                        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                                            member_id=member, assignment=b"")]), 14, 3)
    assert sync.error_code == 0

    def commit(offset, generation=gen, member_id=member, metadata="", t=topic):
        req = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
                                  group_instance_id=None, topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
                                      name=t, partitions=[OffsetCommitRequest.OffsetCommitRequestTopic
                                                          .OffsetCommitRequestPartition(
                                                              partition_index=0, committed_offset=offset,
                                                              committed_leader_epoch=-1,
                                                              committed_metadata=metadata)])])
        return call(coord, req, 8, 7).topics[0].partitions[0].error_code

    def committed() -> int:
        req = OffsetFetchRequest(group_id=group, topics=[OffsetFetchRequest.OffsetFetchRequestTopic(
            name=topic, partition_indexes=[0])], require_stable=False)
        return call(coord, req, 9, 7).topics[0].partitions[0].committed_offset

    assert commit(5) == 0 and committed() == 5
    assert commit(6, generation=gen + 1) == Errors.ILLEGAL_GENERATION            # fenced generation
    assert commit(6, member_id="stranger") == Errors.UNKNOWN_MEMBER_ID
    assert commit(6, metadata="m" * 5000) == Errors.OFFSET_METADATA_TOO_LARGE      # oversized metadata
    assert commit(6, t="no-such-topic") == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert committed() == 5                                                          # nothing lost, nothing moved
    hb = lambda generation, broker=coord: call(broker, HeartbeatRequest(  # noqa: E731
        group_id=group, generation_id=generation, member_id=member, group_instance_id=None), 12, 4).error_code
    assert hb(gen) == 0 and hb(gen - 1) == Errors.ILLEGAL_GENERATION
    assert hb(gen, broker=other) == Errors.NOT_COORDINATOR
    assert join(session=1000).error_code == Errors.INVALID_SESSION_TIMEOUT
    assert join(gid="").error_code == Errors.INVALID_GROUP_ID
    deleted = call(coord, DeleteGroupsRequest(groups_names=[group]), 42, 2).results[0]
    assert deleted.error_code == Errors.NON_EMPTY_GROUP


def test_group_consumes_a_tiered_topic_across_read_only_and_re_enable(cluster_factory, kafkatier_cli):
    """Issue 17 item 5: a group reading a tiered topic from the beginning (the first records only in the remote
    tier) across a KIP-950 switch to read-only tiering and back sees every record once per committed position,
    and ``consumer-groups --describe`` computes the lag against the real log end offset."""
    from kafka import KafkaConsumer
    from kip950_support import (READ_ONLY, TIERED, TOPIC_CONFIG, alter, earliest, local_bases, produce as kproduce,
                                remote)
    from kip950_support import create_topic as kcreate_topic
    c = cluster_factory(brokers=3, log_dirs=1, overrides={**TIERED, "group.initial.rebalance.delay.ms": "0"})
    topic, group = f"tg-{uuid.uuid4().hex[:6]}", f"tg-{uuid.uuid4().hex[:6]}"
    kcreate_topic(c, topic, 1, 2, TOPIC_CONFIG)
    kproduce(c, topic, 30)
    leader = partition_state(c.zk, topic, 0)[0]["leader"]
    wait_for(lambda: remote(c.zk, topic) and min(local_bases(c, leader, topic)) > 0, 60, interval=0.2,
             ignore=(Exception,), message="the first segments only in the remote tier")
    assert earliest(c, topic) == 0

    def consume_some(n: int) -> list[int]:
        consumer = KafkaConsumer(topic, bootstrap_servers=c.bootstrap_servers, group_id=group,
                                 auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=1,
                                 session_timeout_ms=SESSION_MS, heartbeat_interval_ms=1000)
        got: list[int] = []
        try:
            def step():
                for recs in consumer.poll(timeout_ms=500).values():
                    for r in recs:
                        got.append(r.offset)
                        consumer.commit()
                return len(got) >= n
            wait_for(step, 60, interval=0, message=f"{n} records through the group")
        finally:
            consumer.close(autocommit=False)
        return got

    first = consume_some(15)
    assert first == list(range(15))
    assert alter(c, topic, READ_ONLY) is None             # KIP-950: read-only tiering
    second = consume_some(15)
    assert second == list(range(15, 30))                  # resumes at the committed offset, remote then local
    kproduce(c, topic, 10, first=30)
    assert alter(c, topic, {"remote.log.copy.disable": "false"}, delete=("local.retention.ms",)) is None
    third = consume_some(10)
    assert third == list(range(30, 40))
    kproduce(c, topic, 5, first=40)
    out = kafkatier_cli.run("consumer-groups", "--bootstrap-server", c.bootstrap_servers, "--describe",
                            "--group", group)
    row = next(line.split() for line in out.stdout.splitlines() if line.startswith(group))
    assert row[3:6] == ["40", "45", "5"], out.stdout
