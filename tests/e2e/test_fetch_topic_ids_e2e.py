"""Fetch v13-v17 on the wire (Kafka 3.9's top): topics named by the id Metadata returns (KIP-516), an unknown id
answered UNKNOWN_TOPIC_ID, an incremental session by id that forgets a topic by id and refuses a request naming
topics (FETCH_SESSION_TOPIC_ID_ERROR), v16's current leader and its endpoint on NOT_LEADER_OR_FOLLOWER (KIP-951),
and a confluent-kafka consumer (librdkafka takes the newest Fetch it knows) reading end to end."""
from __future__ import annotations

import logging
import re
import uuid

import confluent_kafka
import pytest

from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.errors import Errors
from kafkatier.server.broker_client import BrokerClient
from kafkatier.waiting import wait_for

import partition_support
import wire_support

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

ZERO = uuid.UUID(int=0)
IDS = partition_support.FollowedPartitions("ids", 30)   # one-partition topics on a chosen broker


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory(brokers=2, log_dirs=1)


def metadata(bootstrap: str, *topics: str):
    """Metadata v12 of ``topics``: ({broker id: "host:port"}, {topic: (topic id, leader, leader epoch)})."""
    resp = wire_support.send_once(bootstrap.split(",")[0], ApiKeys.METADATA, 12, {
        "topics": [{"name": t, "topic_id": ZERO} for t in topics], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False}, client_id="fetch-ids")
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in resp.brokers}
    return brokers, {t.name: (t.topic_id, t.partitions[0].leader_id, t.partitions[0].leader_epoch)
                     for t in resp.topics if t.error_code == 0 and t.partitions}


def one_topic(cluster, records: int) -> tuple[str, dict[int, str], tuple]:
    """A one-partition topic with ``records`` records: its name, the brokers' addresses and (topic id, leader,
    leader epoch) from Metadata."""
    (name,) = topics_ready(cluster, 1, records=records)
    brokers, topics = metadata(cluster.bootstrap_servers, name)
    return name, brokers, topics[name]


def topics_ready(cluster, n: int, records: int = 10, broker: int = 1) -> list[str]:
    """``n`` one-partition topics led by ``broker``, each with ``records`` records."""
    names = [IDS.create_topic(cluster, [broker]) for _ in range(n)]
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for name in names:
        for i in range(records):
            producer.produce(name, b"v%d" % i)
    assert producer.flush(30) == 0
    wait_for(lambda: len(metadata(cluster.bootstrap_servers, *names)[1]) == n, 30, interval=0.2,
             message="topics in every broker's metadata")
    return names


def fetch_body(version: int, topics, *, session_id=0, epoch=-1, forgotten=()):
    """``topics``: [(topic id, fetch offset)] (partition 0 each)."""
    return {"replica_id": -1, "replica_state": {"replica_id": -1, "replica_epoch": -1}, "max_wait_ms": 100,
            "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": session_id,
            "session_epoch": epoch, "rack_id": "",
            "topics": [{"topic_id": tid, "topic": "", "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20, "replica_directory_id": uuid.uuid4()}]}
                       for tid, offset in topics],
            "forgotten_topics_data": [{"topic_id": tid, "partitions": [0]} for tid in forgotten]}


def client_for(address: str) -> BrokerClient:
    host, port = address.rsplit(":", 1)
    return BrokerClient(host, int(port), client_id="fetch-ids", timeout_s=20)


def answers(resp) -> dict:
    return {(t.topic_id, p.partition_index): p for t in resp.responses for p in t.partitions}


def test_every_version_from_13_to_17_fetches_by_topic_id(cluster):
    name, brokers, (tid, leader, _) = one_topic(cluster, records=10)
    assert tid != ZERO
    client = client_for(brokers[leader])
    try:
        for v in range(13, 18):
            resp = wire_support.send(client, ApiKeys.FETCH, v, fetch_body(v, [(tid, 0)]))
            assert resp.error_code == 0 and [t.topic_id for t in resp.responses] == [tid]
            p = answers(resp)[(tid, 0)]
            assert (p.error_code, p.high_watermark) == (0, 10) and len(p.records) > 0, v
        unknown = uuid.uuid4()
        for v in (13, 17):
            resp = wire_support.send(client, ApiKeys.FETCH, v, fetch_body(v, [(unknown, 0), (tid, 10)]))
            got = answers(resp)
            assert got[(unknown, 0)].error_code == Errors.UNKNOWN_TOPIC_ID
            assert got[(unknown, 0)].high_watermark == -1
            assert got[(tid, 0)].error_code == 0
    finally:
        client.close()


def test_an_incremental_session_by_topic_id_forgets_a_topic_by_id(cluster):
    a, b = topics_ready(cluster, 2)
    brokers, topics = metadata(cluster.bootstrap_servers, a, b)
    client = client_for(brokers[topics[a][1]])
    ta, tb = topics[a][0], topics[b][0]
    try:
        full = wire_support.send(client, ApiKeys.FETCH, 13, fetch_body(13, [(ta, 0), (tb, 0)], epoch=0))
        sid = full.session_id
        assert full.error_code == 0 and sid > 0 and set(answers(full)) == {(ta, 0), (tb, 0)}
        # both caught up: an incremental fetch with news for neither answers no partition
        quiet = wire_support.send(client, ApiKeys.FETCH, 13, fetch_body(13, [(ta, 10), (tb, 10)], session_id=sid,
                                                                         epoch=1))
        assert (quiet.error_code, quiet.session_id, answers(quiet)) == (0, sid, {})
        # a request naming topics in an id session: error 106, the session kept
        wrong = wire_support.send(client, ApiKeys.FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": sid, "session_epoch": 2, "topics": [], "forgotten_topics_data": [], "rack_id": ""})
        assert wrong.error_code == Errors.FETCH_SESSION_TOPIC_ID_ERROR
        forget = wire_support.send(client, ApiKeys.FETCH, 17, fetch_body(17, [], session_id=sid, epoch=2,
                                                                          forgotten=[ta]))
        assert (forget.error_code, answers(forget)) == (0, {})
        for name in (a, b):   # both move; only b is still in the session
            producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers})
            producer.produce(name, b"more")
            assert producer.flush(30) == 0
        after = wire_support.send(client, ApiKeys.FETCH, 17, fetch_body(17, [], session_id=sid, epoch=3))
        assert after.error_code == 0 and list(answers(after)) == [(tb, 0)]
        assert answers(after)[(tb, 0)].high_watermark == 11
    finally:
        client.close()


def test_v16_names_the_current_leader_and_its_endpoint_on_not_leader(cluster):
    name, brokers, (tid, leader, epoch) = one_topic(cluster, records=1)
    other = next(b for b in brokers if b != leader)
    client = client_for(brokers[other])
    try:
        resp = wire_support.send(client, ApiKeys.FETCH, 16, fetch_body(16, [(tid, 0)]))
        p = answers(resp)[(tid, 0)]
        assert p.error_code == Errors.NOT_LEADER_OR_FOLLOWER
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (leader, epoch)
        assert [(n.node_id, f"{n.host}:{n.port}") for n in resp.node_endpoints] == [(leader, brokers[leader])]
        older = wire_support.send(client, ApiKeys.FETCH, 15, fetch_body(15, [(tid, 0)]))
        p = answers(older)[(tid, 0)]
        assert p.error_code == Errors.NOT_LEADER_OR_FOLLOWER and p.current_leader is None   # a v16 field
        assert not older.node_endpoints
    finally:
        client.close()


def test_an_injected_partition_fault_reaches_a_fetch_by_topic_id(cluster):
    name, brokers, (tid, leader, _) = one_topic(cluster, records=3)
    client = client_for(brokers[leader])
    try:
        cluster.inject_errors(leader, "Fetch", "KAFKA_STORAGE_ERROR", count=1, topic=name, partition=0)
        codes = [answers(wire_support.send(client, ApiKeys.FETCH, 17, fetch_body(17, [(tid, 0)])))[(tid, 0)].error_code
                 for _ in range(2)]
        assert codes == [Errors.KAFKA_STORAGE_ERROR, 0]
    finally:
        client.close()
        cluster.clear_faults(leader)


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_confluent_kafka_consumer_reads_with_the_newest_fetch(cluster):
    (name,) = topics_ready(cluster, 1, records=50)
    lines = _Lines()
    librdkafka_log = logging.getLogger(f"librdkafka-{name}")
    librdkafka_log.addHandler(lines)
    librdkafka_log.setLevel(logging.DEBUG)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"g-{name}",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                         "debug": "protocol"}, logger=librdkafka_log)
    got: list[bytes] = []
    try:
        consumer.subscribe([name])

        def read_all() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            return len(got) >= 50
        wait_for(read_all, 60, interval=0, message="50 records through confluent-kafka")
    finally:
        consumer.close()
    assert got == [b"v%d" % i for i in range(50)]
    versions = {int(m.group(1)) for m in map(re.compile(r"Sent FetchRequest \(v(\d+)").search, lines.lines) if m}
    assert versions and min(versions) >= 13, versions   # librdkafka fetched by topic id
