"""Clients pinned to Kafka 0.9 / 0.10 protocol versions (Produce v0–v2, Fetch v0–v3, Metadata v0, message formats
v0/v1) against one shared single-broker cluster: produce, consume and consumer groups, as Kafka 3.9 serves them."""
from __future__ import annotations

import uuid

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from kafkatier.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

OVERRIDES = {"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1",
             "group.initial.rebalance.delay.ms": "0"}
N = 20


@pytest.fixture(scope="module")
def old_cluster(module_cluster_factory):
    return module_cluster_factory(brokers=1, log_dirs=1, overrides=OVERRIDES)


def new_topic(cluster) -> str:
    topic = f"old-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    return topic


def consume_all(consumer, want: int, timeout: float = 30.0) -> list:
    got = []

    def done() -> bool:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(records)
        return len(got) >= want
    wait_for(done, timeout, interval=0, message=f"{want} records consumed")
    return got


@pytest.mark.parametrize("api_version,compression", [((0, 9), None), ((0, 9), "gzip"), ((0, 10), None),
                                                     ((0, 10), "gzip")])
def test_kafka_python_pinned_old_version_produces_and_consumes_in_a_group(old_cluster, api_version, compression):
    bs = old_cluster.bootstrap_servers
    topic, group = new_topic(old_cluster), f"g-{uuid.uuid4().hex[:6]}"
    producer = KafkaProducer(bootstrap_servers=bs, api_version=api_version, compression_type=compression,
                             linger_ms=5)
    ts = 1_700_000_000_000
    try:
        for i in range(N):
            producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2, timestamp_ms=ts + i)
        producer.flush(30)
    finally:
        producer.close(5)
    consumer = KafkaConsumer(topic, bootstrap_servers=bs, api_version=api_version, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        got = consume_all(consumer, N)
        assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(N))
        for p in (0, 1):
            assert [r.offset for r in got if r.partition == p] == list(range(N // 2))
        if api_version >= (0, 10):   # magic 1 keeps the producer's timestamps
            assert {r.timestamp for r in got} == {ts + i for i in range(N)}
        else:                        # magic 0 has none
            assert {r.timestamp for r in got} <= {None, -1}
        consumer.commit()
        assert consumer.committed(TopicPartition(topic, 0)) == N // 2
    finally:
        consumer.close()
    # A current client reads the same records, stored as v2 batches.
    modern = KafkaConsumer(topic, bootstrap_servers=bs, auto_offset_reset="earliest")
    try:
        assert sorted(r.value for r in consume_all(modern, N)) == sorted(b"v%d" % i for i in range(N))
    finally:
        modern.close()


def test_librdkafka_without_api_version_request_produces_and_consumes(old_cluster):
    bs = old_cluster.bootstrap_servers
    topic, group = new_topic(old_cluster), f"g-{uuid.uuid4().hex[:6]}"
    old = {"bootstrap.servers": bs, "api.version.request": False, "broker.version.fallback": "0.9.0"}
    producer = confluent_kafka.Producer({**old, "linger.ms": 5})
    for i in range(N):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer({**old, "group.id": group, "auto.offset.reset": "earliest",
                                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = []
    try:
        def done() -> bool:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m)
            return len(got) >= N
        wait_for(done, 60, interval=0, message=f"{N} records consumed by librdkafka")
        assert sorted(m.value() for m in got) == sorted(b"v%d" % i for i in range(N))
        consumer.commit(asynchronous=False)
        committed = consumer.committed([confluent_kafka.TopicPartition(topic, p) for p in (0, 1)], timeout=10)
        assert sorted(tp.offset for tp in committed) == [N // 2, N // 2]
    finally:
        consumer.close()


def _broker_client(cluster):
    from kafkatier.server.broker_client import BrokerClient
    port = cluster.manager.broker(cluster.broker_ids()[0])["port"]
    return BrokerClient("127.0.0.1", port, "old-clients-test", timeout_s=10.0)


def test_api_versions_lists_the_old_versions(old_cluster):
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
    client = _broker_client(old_cluster)
    try:
        resp = client.send(ApiVersionsRequest[0](), ApiVersionsResponse, 0)
    finally:
        client.close()
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    for key in (0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 19, 20, 32):  # Produce .. DescribeConfigs
        assert ranges[key][0] == 0, (key, ranges[key])


def test_a_v0_message_set_with_a_bad_crc_is_corrupt_message(old_cluster):
    from kafka.protocol.producer import ProduceRequest, ProduceResponse
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    topic = new_topic(old_cluster)
    b = LegacyRecordBatchBuilder(0, 0, 1 << 20)
    b.append(0, None, b"k", b"value")
    data = bytearray(b.build())
    data[-1] ^= 0xFF
    T = ProduceRequest.TopicProduceData
    req = ProduceRequest[0](acks=1, timeout_ms=5000, topic_data=[T(name=topic, partition_data=[
        T.PartitionProduceData(index=0, records=bytes(data))])])
    client = _broker_client(old_cluster)
    try:
        resp = client.send(req, ProduceResponse, 0)
    finally:
        client.close()
    assert resp.responses[0].partition_responses[0].error_code == 2  # CORRUPT_MESSAGE


def test_incremental_alter_of_a_kafka_broker_config_kafkatier_does_not_act_on(old_cluster):
    """``sasl.kerberos.min.time.before.relogin`` (per-broker, inert here) is accepted, stored and described;
    DescribeConfigs of the broker lists every Kafka 3.9 broker config."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    from kafkatier.server.kafka_config_defs import KAFKA_BROKER_CONFIGS
    admin = AdminClient({"bootstrap.servers": old_cluster.bootstrap_servers})
    broker = str(old_cluster.broker_ids()[0])
    name = "sasl.kerberos.min.time.before.relogin"
    res = ConfigResource(ConfigResource.Type.BROKER, broker, incremental_configs=[
        ConfigEntry(name, "120000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)

    def described():
        r = ConfigResource(ConfigResource.Type.BROKER, broker)
        return admin.describe_configs([r])[r].result(30)
    wait_for(lambda: described()[name].value == "120000", 30, interval=0.2, message=f"{name} described as set")
    entries = described()
    assert {row[0] for row in KAFKA_BROKER_CONFIGS} <= set(entries)
    assert entries[name].source == confluent_kafka.admin.ConfigSource.DYNAMIC_BROKER_CONFIG.value


def test_produce_v2_may_carry_a_v2_batch_and_fetch_v3_reads_it_as_magic_1(old_cluster):
    from kafka.protocol.consumer import FetchRequest, FetchResponse
    from kafka.protocol.producer import ProduceRequest, ProduceResponse
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords
    topic = new_topic(old_cluster)
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i in range(3):
        b.append(i, 1_700_000_000_000 + i, None, b"v%d" % i, [])
    T = ProduceRequest.TopicProduceData
    req = ProduceRequest[2](acks=1, timeout_ms=5000, topic_data=[T(name=topic, partition_data=[
        T.PartitionProduceData(index=0, records=bytes(b.build()))])])
    client = _broker_client(old_cluster)
    try:
        resp = client.send(req, ProduceResponse, 2)
        assert resp.responses[0].partition_responses[0].error_code == 0
        F = FetchRequest.FetchTopic
        fetch = FetchRequest[3](replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, topics=[
            F(topic=topic, partitions=[F.FetchPartition(partition=0, fetch_offset=1, partition_max_bytes=1 << 20)])])
        part = client.send(fetch, FetchResponse, 3).responses[0].partitions[0]
    finally:
        client.close()
    assert part.error_code == 0
    batches = list(MemoryRecords(bytes(part.records)))
    assert {batch.magic for batch in batches} == {1}
    got = [(r.offset, r.timestamp, r.value) for batch in batches for r in batch]
    # down-converted from the fetch offset on (records before it in the stored batch dropped, as Kafka)
    assert got == [(i, 1_700_000_000_000 + i, b"v%d" % i) for i in (1, 2)]


def test_fetch_v3_of_a_topic_without_down_conversion_is_unsupported_version(old_cluster):
    from kafka.protocol.consumer import FetchRequest, FetchResponse
    topic = f"old-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": old_cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1, config={"message.downconversion.enable": "false"})])[topic].result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": old_cluster.bootstrap_servers})
    producer.produce(topic, b"v")
    assert producer.flush(30) == 0
    F = FetchRequest.FetchTopic
    fetch = FetchRequest[3](replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, topics=[
        F(topic=topic, partitions=[F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    client = _broker_client(old_cluster)
    try:
        part = client.send(fetch, FetchResponse, 3).responses[0].partitions[0]
    finally:
        client.close()
    assert part.error_code == 35  # UNSUPPORTED_VERSION


def test_delete_topics_v6_by_topic_id(old_cluster):
    from kafka.protocol.admin import DeleteTopicsRequest, DeleteTopicsResponse
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse
    topic = new_topic(old_cluster)
    client = _broker_client(old_cluster)
    try:
        md = client.send(MetadataRequest[12](topics=[MetadataRequest.MetadataRequestTopic(name=topic)]),
                         MetadataResponse, 12)
        tid = md.topics[0].topic_id
        S = DeleteTopicsRequest.DeleteTopicState
        bad = uuid.uuid4()
        resp = client.send(DeleteTopicsRequest[6](timeout_ms=30000, topics=[
            S(name=None, topic_id=tid), S(name=None, topic_id=bad), S(name=topic, topic_id=tid)]),
            DeleteTopicsResponse, 6)
    finally:
        client.close()
    got = [(r.name, r.topic_id, r.error_code) for r in resp.responses]
    assert got[0] == (topic, tid, 0)
    assert got[1][1:] == (bad, 100)      # UNKNOWN_TOPIC_ID
    assert got[2][2] == 42               # INVALID_REQUEST: both name and id
