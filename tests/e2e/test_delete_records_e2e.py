"""DeleteRecords (KIP-107) end to end: kafka-python's ``delete_records``, raw DeleteRecords requests and the
``kafkatier delete-records`` tool against clusters of broker processes (acceptance scenarios C24-C29, C31-C33),
plus SASL/PLAIN + ACLs (DELETE on the topic).

Scenario C30 (leadership moves while a request is pending) is in tests/e2e/test_leader_election_e2e.py (a
preferred election moves the leader) and in the unit tests (tests/unit/test_delete_records_leader.py).
"""
from __future__ import annotations

import json
import os
import signal
import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import (NotLeaderForPartitionError, OffsetOutOfRangeError, PolicyViolationError,
                          TopicAuthorizationFailedError, UnknownTopicOrPartitionError)
from kafka.protocol.admin import DeleteRecordsRequest

from kafkatier.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CONVERGE_S = 30.0
T = DeleteRecordsRequest.DeleteRecordsTopic


# ------------------------------------------------------------------------------------------------ helpers

def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def state(cluster, topic: str, partition: int = 0) -> dict:
    return json.loads(cluster.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")[0])


def admin_for(cluster, **kw) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=30000, **kw)


def create_topic(cluster, topic: str, rf: int = 3, configs: dict | None = None, partitions: int = 1,
                 full_isr: bool = True, **client) -> None:
    admin = admin_for(cluster, **client)
    try:
        admin.create_topics([NewTopic(topic, partitions, rf, topic_configs=configs or {})], timeout_ms=30000)
    finally:
        admin.close()

    def ready() -> bool:
        st = [state(cluster, topic, p) for p in range(partitions)]
        return all(s["leader"] >= 0 and (not full_isr or len(s["isr"]) == rf) for s in st)
    wait_for(ready, CONVERGE_S, interval=0.1, ignore=(Exception,), message=f"{topic} online")


def produce(cluster, topic: str, n: int, start: int = 0, acks="all", **client) -> None:
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=acks, linger_ms=5,
                             request_timeout_ms=15000, **client)
    try:
        for i in range(start, start + n):
            producer.send(topic, key=b"k%d" % i, value=b"%d" % i, partition=0)  # keyed: compacted topics need keys
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)


def consumer_for(cluster, **kw) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", request_timeout_ms=30000, **kw)


def earliest(cluster, topic: str) -> int:
    c = consumer_for(cluster)
    try:
        tp = TopicPartition(topic, 0)
        return c.beginning_offsets([tp])[tp]
    finally:
        c.close()


def raw_delete(admin: KafkaAdminClient, broker: int, parts: dict, timeout_ms: int = 5000) -> dict:
    """Send one DeleteRecords request to ``broker``: {(topic, partition): (error_code, low_watermark)}."""
    topics: dict[str, list] = {}
    for (t, p), off in parts.items():
        topics.setdefault(t, []).append(T.DeleteRecordsPartition(partition_index=p, offset=off))
    req = DeleteRecordsRequest(topics=[T(name=t, partitions=ps) for t, ps in topics.items()], timeout_ms=timeout_ms)
    manager = admin._manager  # noqa: SLF001 - kafka-python's own send path

    async def send():
        return await manager.send(req, node_id=broker)
    resp = manager.run(send)
    return {(t.name, p.partition_index): (p.error_code, p.low_watermark) for t in resp.topics for p in t.partitions}


def broker_info(cluster, broker_id: int) -> dict:
    return cluster.manager.broker(broker_id)


def partition_dir(cluster, broker_id: int, topic: str, partition: int = 0) -> str | None:
    for d in broker_info(cluster, broker_id)["log_dirs"]:
        if os.path.isdir(os.path.join(d, f"{topic}-{partition}")):
            return d
    return None


def checkpointed_start(cluster, broker_id: int, topic: str, partition: int = 0) -> int | None:
    """The partition's entry in ``log-start-offset-checkpoint`` of its log dir on ``broker_id``."""
    d = partition_dir(cluster, broker_id, topic, partition)
    path = os.path.join(d, "log-start-offset-checkpoint") if d else None
    if not path or not os.path.exists(path):
        return None
    with open(path) as f:
        lines = f.read().splitlines()
    for line in lines[2:]:
        t, p, off = line.split()
        if (t, int(p)) == (topic, partition):
            return int(off)
    return None


def status_partition(cluster, broker_id: int, topic: str, partition: int = 0) -> dict | None:
    """The broker's own view of the replica, from its status file (rewritten every 5 s)."""
    path = os.path.join(cluster.data_dir, "status", f"broker-{broker_id}.json")
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    for p in doc.get("partitions", []):
        if p["partition"] == f"{topic}-{partition}":
            return p
    return None


# ------------------------------------------------------------------------------------------------ shared cluster

def test_happy_path_all_replicas_follow(cluster):
    """C24: RF 3, 10 records, delete before 2 with timeout 1000: NONE, low watermark 2, and when the answer
    arrives every replica has log start offset 2 (each follower checkpoints it before its next fetch)."""
    topic = unique_topic("dr-happy")
    create_topic(cluster, topic)
    produce(cluster, topic, 10)
    admin = admin_for(cluster)
    try:
        out = admin.delete_records({TopicPartition(topic, 0): 2}, timeout_ms=1000)
    finally:
        admin.close()
    assert out[TopicPartition(topic, 0)]["low_watermark"] == 2
    assert out[TopicPartition(topic, 0)]["error_code"] == 0
    replicas = state(cluster, topic)["isr"]
    assert sorted(checkpointed_start(cluster, b, topic) for b in replicas) == [2, 2, 2]
    assert earliest(cluster, topic) == 2


def test_offset_above_the_high_watermark(cluster):
    """C25: offset 15 on 10 records: OFFSET_OUT_OF_RANGE, low watermark -1, log start offset unchanged."""
    topic = unique_topic("dr-oor")
    create_topic(cluster, topic)
    produce(cluster, topic, 10)
    admin = admin_for(cluster)
    try:
        with pytest.raises(OffsetOutOfRangeError):
            admin.delete_records({TopicPartition(topic, 0): 15}, timeout_ms=1000)
        leader = state(cluster, topic)["leader"]
        assert raw_delete(admin, leader, {(topic, 0): 15}) == {(topic, 0): (1, -1)}
        assert raw_delete(admin, leader, {(topic, 0): -2}) == {(topic, 0): (1, -1)}
    finally:
        admin.close()
    assert earliest(cluster, topic) == 0


def test_delete_everything(cluster):
    """C26: offset -1 -> low watermark = HW (10); earliest is 10; a lookup for time 0 finds nothing; a consumer
    seeking to the beginning is at 10."""
    topic = unique_topic("dr-all")
    create_topic(cluster, topic)
    produce(cluster, topic, 10)
    admin = admin_for(cluster)
    try:
        out = admin.delete_records({TopicPartition(topic, 0): -1}, timeout_ms=5000)
    finally:
        admin.close()
    assert out[TopicPartition(topic, 0)]["low_watermark"] == 10
    tp = TopicPartition(topic, 0)
    c = consumer_for(cluster)
    try:
        assert c.beginning_offsets([tp])[tp] == 10
        assert c.offsets_for_times({tp: 0})[tp] is None
        c.assign([tp])
        c.seek_to_beginning(tp)
        assert c.position(tp) == 10
    finally:
        c.close()


def test_error_cases(cluster):
    """C27: unknown topic, cleanup.policy=compact, a follower, offset -2, an internal topic: each with its code
    and low watermark -1; compact,delete is allowed."""
    compact, both, topic = unique_topic("dr-compact"), unique_topic("dr-cd"), unique_topic("dr-err")
    create_topic(cluster, compact, configs={"cleanup.policy": "compact"})
    create_topic(cluster, both, configs={"cleanup.policy": "compact,delete"})
    create_topic(cluster, topic)
    for t in (compact, both, topic):
        produce(cluster, t, 3)
    admin = admin_for(cluster)
    try:
        with pytest.raises(PolicyViolationError):
            admin.delete_records({TopicPartition(compact, 0): 1}, timeout_ms=5000)
        assert admin.delete_records({TopicPartition(both, 0): 1}, timeout_ms=5000)[
            TopicPartition(both, 0)]["low_watermark"] == 1
        st = state(cluster, topic)
        follower = next(r for r in st["isr"] if r != st["leader"])
        with pytest.raises(NotLeaderForPartitionError):
            admin.delete_records({TopicPartition(topic, 0): 1}, timeout_ms=5000, partition_leader_id=follower)
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_records({TopicPartition("no-such-topic-xyz", 0): 1}, timeout_ms=5000,
                                 partition_leader_id=st["leader"])
        assert raw_delete(admin, st["leader"], {
            (compact, 0): 1, (topic, 0): -2, ("no-such-topic-xyz", 0): 1, (topic, 5): 1}) == {
            (compact, 0): (44, -1) if state(cluster, compact)["leader"] == st["leader"] else (6, -1),
            (topic, 0): (1, -1), ("no-such-topic-xyz", 0): (3, -1), (topic, 5): (3, -1)}
        assert raw_delete(admin, follower, {(topic, 0): 1}) == {(topic, 0): (6, -1)}
        # An internal topic present in the metadata: INVALID_TOPIC_EXCEPTION.
        admin.create_topics([NewTopic("__consumer_offsets", 1, 1)], timeout_ms=30000)
        wait_for(lambda: state(cluster, "__consumer_offsets")["leader"] >= 0, CONVERGE_S, interval=0.1,
                 ignore=(Exception,), message="__consumer_offsets online")
        leader = state(cluster, "__consumer_offsets")["leader"]
        # ZooKeeper names the leader before its UpdateMetadata lands; until then the leader rightly answers
        # UNKNOWN_TOPIC_OR_PARTITION (the metadata cache check comes before the internal-topic check).
        codes = wait_for(lambda: (r := raw_delete(admin, leader, {("__consumer_offsets", 0): 0}))[
                             ("__consumer_offsets", 0)][0] != 3 and r, CONVERGE_S, interval=0.1,
                         message="the leader's metadata cache knows __consumer_offsets")
        assert codes == {("__consumer_offsets", 0): (17, -1)}
    finally:
        admin.close()
    assert earliest(cluster, topic) == 0


def test_consumer_below_the_log_start_offset(cluster):
    """C32: 10 records consumed, delete before 3, seek to 1 with auto.offset.reset=earliest: exactly 3..9."""
    topic = unique_topic("dr-cons")
    create_topic(cluster, topic)
    produce(cluster, topic, 10)
    tp = TopicPartition(topic, 0)
    c = consumer_for(cluster)
    try:
        c.assign([tp])
        got: list[int] = []
        wait_for(lambda: got.extend(r.offset for r in c.poll(timeout_ms=200).get(tp, [])) or len(got) >= 10,
                 CONVERGE_S, interval=0, message="10 records")
        admin = admin_for(cluster)
        try:
            admin.delete_records({tp: 3}, timeout_ms=5000)
        finally:
            admin.close()
        c.seek(tp, 1)
        after: list = []
        wait_for(lambda: after.extend(c.poll(timeout_ms=200).get(tp, [])) or len(after) >= 7, CONVERGE_S,
                 interval=0, message="records after the reset")
        assert [r.offset for r in after] == list(range(3, 10))
        assert [r.value for r in after] == [b"%d" % i for i in range(3, 10)]
        assert c.poll(timeout_ms=300).get(tp, []) == []
    finally:
        c.close()


def test_cli(cluster, kafkatier_cli, tmp_path):
    """C33: the tool's output lines; duplicates and an unsupported version exit 2 without sending anything."""
    topic = unique_topic("dr-cli")
    create_topic(cluster, topic, partitions=2)
    produce(cluster, topic, 5)
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 1},
                                               {"topic": topic, "partition": 1, "offset": 7},
                                               {"topic": "no-such-topic-xyz", "partition": 0, "offset": 1}]}))
    proc = kafkatier_cli.run("delete-records", "--bootstrap-server", cluster.bootstrap_servers,
                             "--offset-json-file", str(good))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {topic}-0\tlow_watermark: 1",
        f"partition: {topic}-1\terror: OFFSET_OUT_OF_RANGE: The requested offset is outside the range of offsets "
        "maintained by the server for the given topic/partition.",
        "partition: no-such-topic-xyz-0\terror: UNKNOWN_TOPIC_OR_PARTITION: This request is for a topic or "
        "partition that does not exist on this broker.",
    ]
    dup = tmp_path / "dup.json"
    dup.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 4}] * 2}))
    proc = kafkatier_cli.run("delete-records", "--bootstrap-server", cluster.bootstrap_servers,
                             "--delete-offset-json-file", str(dup))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1].endswith(
        f"Offset json file contains duplicate topic partitions: {topic}-0")
    bad = tmp_path / "v2.json"
    bad.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 4}], "version": 2}))
    proc = kafkatier_cli.run("delete-records", "--bootstrap-server", cluster.bootstrap_servers,
                             "--offset-json-file", str(bad))
    assert proc.returncode == 2 and proc.stderr.strip().endswith("Not supported version field value 2")
    assert earliest(cluster, topic) == 1  # neither bad file sent anything


# ------------------------------------------------------------------------------------------------ own clusters

def test_follower_down_then_catching_up_and_restart_keeps_the_log_start_offset(cluster_factory):
    """C28 + C31: the request completes while a follower is down; on return the follower has log start offset 3
    and LEO 100; after a second deletion past its log end it truncates fully and starts at 117 (LEO 200); a
    restart of every broker keeps the low watermark (checkpoint file ``t 0 <lso>``)."""
    cluster = cluster_factory(brokers=3, log_dirs=1, overrides={"replica.lag.time.max.ms": "3000"})
    topic = unique_topic("dr-down")
    create_topic(cluster, topic)
    st = state(cluster, topic)
    leader = st["leader"]
    down = next(r for r in st["isr"] if r != leader)
    cluster.manager.stop_broker(down)
    produce(cluster, topic, 100, acks=1)
    admin = admin_for(cluster)
    try:
        t0 = time.monotonic()
        out = admin.delete_records({TopicPartition(topic, 0): 3}, timeout_ms=20000)
        assert out[TopicPartition(topic, 0)]["low_watermark"] == 3
        assert time.monotonic() - t0 < 15
    finally:
        admin.close()

    def follower_at(lso: int, leo: int):
        def check():
            s = status_partition(cluster, down, topic)
            return s is not None and s["log_start_offset"] == lso and s["log_end_offset"] == leo
        return check
    cluster.manager.start_broker(down)
    wait_for(follower_at(3, 100), 60, interval=0.5, message="the returning follower at lso 3 / LEO 100")
    assert checkpointed_start(cluster, down, topic) == 3

    cluster.manager.stop_broker(down)
    produce(cluster, topic, 100, start=100)  # acks=all: the deletion at 117 needs the HW past it
    admin = admin_for(cluster)
    try:
        out = admin.delete_records({TopicPartition(topic, 0): 117}, timeout_ms=20000)
        assert out[TopicPartition(topic, 0)]["low_watermark"] == 117
    finally:
        admin.close()
    cluster.manager.start_broker(down)
    wait_for(follower_at(117, 200), 60, interval=0.5, message="the follower restarted at 117 / LEO 200")
    seg_dir = os.path.join(partition_dir(cluster, down, topic), f"{topic}-0")
    bases = sorted(int(f[:-4]) for f in os.listdir(seg_dir) if f.endswith(".log"))
    # Truncated fully: its old records (0..99) are gone.  The first batch it fetched again may start below 117
    # (an append into an empty log only has to contain the log start offset), so a segment may start there.
    assert 100 <= bases[0] <= 117

    # C31: restart everything, then a deletion below the log start offset answers the kept low watermark.
    wait_for(lambda: len(state(cluster, topic)["isr"]) == 3, CONVERGE_S, interval=0.2, message="full ISR")
    leader = state(cluster, topic)["leader"]
    assert checkpointed_start(cluster, leader, topic) == 117
    for b in cluster.broker_ids():
        cluster.manager.stop_broker(b)
    for b in cluster.broker_ids():
        cluster.manager.start_broker(b, wait=False)
    cluster.manager.wait_until_ready(timeout=60)
    wait_for(lambda: len(state(cluster, topic)["isr"]) == 3 and state(cluster, topic)["leader"] >= 0, 60,
             interval=0.2, ignore=(Exception,), message="full ISR after the restart")
    admin = admin_for(cluster)
    try:
        out = wait_for(lambda: admin.delete_records({TopicPartition(topic, 0): 0}, timeout_ms=10000), 60,
                       interval=0.5, ignore=(Exception,), message="DeleteRecords after the restart")
    finally:
        admin.close()
    assert out[TopicPartition(topic, 0)]["low_watermark"] == 117
    assert earliest(cluster, topic) == 117
    for b in cluster.broker_ids():
        assert checkpointed_start(cluster, b, topic) == 117
        with open(os.path.join(partition_dir(cluster, b, topic), "log-start-offset-checkpoint")) as f:
            lines = f.read().splitlines()
        assert lines[0] == "0" and int(lines[1]) == len(lines) - 2 and f"{topic} 0 117" in lines[2:]


def test_paused_follower_times_out_with_the_request_time_low_watermark(cluster_factory):
    """C29: a follower alive (registered) but not fetching: REQUEST_TIMED_OUT after about the timeout, with the
    low watermark computed when the request arrived."""
    cluster = cluster_factory(brokers=3, log_dirs=1)
    topic = unique_topic("dr-pause")
    create_topic(cluster, topic)
    produce(cluster, topic, 10)
    st = state(cluster, topic)
    paused = next(r for r in st["isr"] if r != st["leader"])
    pid = broker_info(cluster, paused)["pid"]
    admin = admin_for(cluster)
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        out = raw_delete(admin, st["leader"], {(topic, 0): 5}, timeout_ms=1000)
        elapsed = time.monotonic() - t0
        assert out == {(topic, 0): (7, 0)}
        assert 0.9 <= elapsed < 4.0
    finally:
        os.kill(pid, signal.SIGCONT)
        admin.close()
    # Once the follower runs again, the same request completes.
    admin = admin_for(cluster)
    try:
        assert admin.delete_records({TopicPartition(topic, 0): 5}, timeout_ms=10000)[
            TopicPartition(topic, 0)]["low_watermark"] == 5
    finally:
        admin.close()


def test_sasl_plain_and_acls(cluster_factory, kafkatier_cli, tmp_path):
    """DELETE on the topic is required once an authorizer is configured (checked before existence); principals
    come from SASL/PLAIN; unauthenticated clients are refused; replication keeps working."""
    from kafka.errors import KafkaError as ClientError

    from kafkatier.server.acl import AclEntry, add_acls
    from kafkatier.server.sasl import set_user_password

    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            'password="admin-secret" user_admin="admin-secret";')  # username/password: the brokers' own login
    cluster = cluster_factory(brokers=2, log_dirs=1, overrides={
        "listener.security.protocol": "SASL_PLAINTEXT", "authorizer.class.name":
        "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas})
    for user in ("alice", "bob"):
        set_user_password(cluster.zk, user, f"{user}-secret")
    # The replica fetchers connect without credentials (until they authenticate: branch harden), so their
    # principal is User:ANONYMOUS, which needs CLUSTER_ACTION -- as in Kafka with a PLAINTEXT inter-broker listener.
    add_acls(cluster.zk, "Cluster", "kafka-cluster", [AclEntry("User:ANONYMOUS", "Allow", "ClusterAction", "*")])

    def creds(user: str) -> dict:
        return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": user,
                "sasl_plain_password": f"{user}-secret"}
    topic = unique_topic("dr-acl")
    create_topic(cluster, topic, rf=2, **creds("admin"))
    produce(cluster, topic, 10, **creds("admin"))
    add_acls(cluster.zk, "Topic", topic, [AclEntry("User:alice", "Allow", "Delete", "*"),
                                          AclEntry("User:bob", "Allow", "Describe", "*")])
    assert json.loads(cluster.zk.get(f"/kafka-acl/Topic/{topic}")[0])["acls"][0] == {
        "principal": "User:alice", "permissionType": "Allow", "operation": "Delete", "host": "*"}
    assert cluster.zk.get_children("/kafka-acl-changes")

    bob = admin_for(cluster, **creds("bob"))
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            bob.delete_records({TopicPartition(topic, 0): 2}, timeout_ms=5000)
        leader = state(cluster, topic)["leader"]
        assert raw_delete(bob, leader, {(topic, 0): 2, ("no-such-topic-xyz", 0): 1}) == {
            (topic, 0): (29, -1), ("no-such-topic-xyz", 0): (29, -1)}
    finally:
        bob.close()
    alice = admin_for(cluster, **creds("alice"))
    try:
        assert alice.delete_records({TopicPartition(topic, 0): 2}, timeout_ms=10000)[
            TopicPartition(topic, 0)]["low_watermark"] == 2  # the follower (fetching as User:admin) followed
    finally:
        alice.close()

    with pytest.raises(ClientError):  # wrong password
        KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=5000,
                         bootstrap_timeout_ms=2000, **{**creds("alice"), "sasl_plain_password": "nope"})
    with pytest.raises(ClientError):  # no SASL at all: the broker closes the connection
        KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=5000,
                         bootstrap_timeout_ms=2000).list_topics()

    props = tmp_path / "alice.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
                     "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"alice\" "
                     "password=\"alice-secret\";\n")
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 4}], "version": 1}))
    proc = kafkatier_cli.run("delete-records", "--bootstrap-server", cluster.bootstrap_servers,
                             "--offset-json-file", str(offsets), "--command-config", str(props))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == f"partition: {topic}-0\tlow_watermark: 4"
