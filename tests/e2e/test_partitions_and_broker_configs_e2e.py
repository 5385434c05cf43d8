"""CreatePartitions and dynamic broker configs through the confluent-kafka and kafka-python admin clients
(issue 17): new partitions are led and usable, Kafka's refusals come back with Kafka's codes, broker config
changes are described with their sources and take effect without a restart.
"""
from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewPartitions, NewTopic, ResourceType)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import ConfigResourceType
from kafka.admin import NewPartitions as KNewPartitions
from kafka.errors import InvalidPartitionsError as KInvalidPartitions

from kafkatier.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

OVERRIDES = {"log.retention.check.interval.ms": "300", "log.initial.task.delay.ms": "0"}


@pytest.fixture(scope="module")
def admin_cluster(module_cluster_factory):
    return module_cluster_factory(brokers=3, log_dirs=1, overrides=OVERRIDES)


def _state(cluster, topic, p):
    return json.loads(cluster.zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")[0])


def _create(admin: AdminClient, cluster, topic: str, partitions: int, rf: int, config=None) -> None:
    admin.create_topics([NewTopic(topic, partitions, rf, config=config or {})])[topic].result(30)
    wait_for(lambda: all(_state(cluster, topic, p)["leader"] >= 0 and len(_state(cluster, topic, p)["isr"]) == rf
                         for p in range(partitions)), 30, interval=0.1, ignore=(Exception,), message=topic)


def _error_code(fn) -> str:
    try:
        fn()
    except KafkaException as e:
        return e.args[0].name()
    return "NONE"


def test_create_partitions_confluent_then_produce_to_new_partitions(admin_cluster):
    bs = admin_cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs})
    topic = f"cp-{uuid.uuid4().hex[:6]}"
    _create(admin, admin_cluster, topic, 2, 2)
    assert admin.create_partitions([NewPartitions(topic, 5)])[topic].result(30) is None
    # The answer waits for leaders: every new partition is led at once and takes records.
    md = admin.list_topics(topic, timeout=10).topics[topic]
    assert sorted(md.partitions) == [0, 1, 2, 3, 4] and all(p.leader >= 0 for p in md.partitions.values())
    assert json.loads(admin_cluster.zk.get(f"/brokers/topics/{topic}")[0])["partitions"].keys() == \
        {"0", "1", "2", "3", "4"}
    p = Producer({"bootstrap.servers": bs, "acks": "all"})
    # Like Kafka, the answer waits for the controller's metadata; the producer's broker may learn a moment later.
    wait_for(lambda: len(p.list_topics(topic, timeout=5).topics[topic].partitions) == 5, 10, interval=0.1,
             message="producer metadata with 5 partitions")
    delivered = []
    for part in range(5):
        p.produce(topic, b"v", partition=part, on_delivery=lambda err, m: delivered.append((err, m.partition())))
    p.flush(30)
    assert sorted(part for err, part in delivered if err is None) == [0, 1, 2, 3, 4]
    # manual assignment of the new partitions
    assert admin.create_partitions([NewPartitions(topic, 6, [[3, 1]])])[topic].result(30) is None
    assert _state(admin_cluster, topic, 5)["isr"] and set(
        json.loads(admin_cluster.zk.get(f"/brokers/topics/{topic}")[0])["partitions"]["5"]) == {3, 1}


def test_create_partitions_bad_input_gets_kafka_errors(admin_cluster):
    admin = AdminClient({"bootstrap.servers": admin_cluster.bootstrap_servers})
    topic = f"cpbad-{uuid.uuid4().hex[:6]}"
    _create(admin, admin_cluster, topic, 3, 2)

    def grow(count, assignment=None, name=topic):
        np = NewPartitions(name, count, assignment) if assignment else NewPartitions(name, count)
        return lambda: admin.create_partitions([np])[name].result(30)
    assert _error_code(grow(2)) == "INVALID_PARTITIONS"          # fewer than today
    assert _error_code(grow(3)) == "INVALID_PARTITIONS"          # the same
    assert _error_code(grow(100000)) == "INVALID_PARTITIONS"     # over the limit
    assert _error_code(grow(5, [[1, 2]])) == "INVALID_REPLICA_ASSIGNMENT"      # 2 new partitions, 1 assignment
    assert _error_code(grow(4, [[1, 2, 3]])) == "INVALID_REPLICA_ASSIGNMENT"   # replication factor differs
    assert _error_code(grow(4, [[1, 1]])) == "INVALID_REPLICA_ASSIGNMENT"      # duplicate broker
    assert _error_code(grow(4, [[1, 42]])) == "BROKER_NOT_AVAILABLE"           # unknown broker
    assert _error_code(grow(4, name="no-such-topic")) == "UNKNOWN_TOPIC_OR_PART"
    # nothing changed
    assert len(json.loads(admin_cluster.zk.get(f"/brokers/topics/{topic}")[0])["partitions"]) == 3


def test_create_partitions_kafka_python(admin_cluster):
    admin = AdminClient({"bootstrap.servers": admin_cluster.bootstrap_servers})
    topic = f"cpkp-{uuid.uuid4().hex[:6]}"
    _create(admin, admin_cluster, topic, 1, 3)
    k = KafkaAdminClient(bootstrap_servers=admin_cluster.bootstrap_servers)
    try:
        resp = k.create_partitions({topic: KNewPartitions(4)})
        assert [r.error_code for r in resp.results] == [0]
        assert all(_state(admin_cluster, topic, p)["leader"] >= 0 for p in range(4))
        with pytest.raises(KInvalidPartitions):
            k.create_partitions({topic: KNewPartitions(2)})
    finally:
        k.close()


def _broker_entry(admin: AdminClient, broker: int, name: str):
    r = ConfigResource(ResourceType.BROKER, str(broker))
    return admin.describe_configs([r])[r].result(10)[name]


def test_broker_configs_described_with_sources_and_changed_at_runtime(admin_cluster):
    bs = admin_cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs})
    r = ConfigResource(ResourceType.BROKER, "1")
    described = admin.describe_configs([r])[r].result(10)
    assert len(described) > 30                                   # every broker config, not a hard-coded few
    assert described["broker.id"].is_read_only and described["broker.id"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert described["log.retention.hours"].value == "168"
    assert described["log.retention.hours"].source == ConfigSource.DEFAULT_CONFIG.value

    topic = f"misr-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1]])])[topic].result(30)
    wait_for(lambda: _state(admin_cluster, topic, 0)["leader"] == 1, 30, ignore=(Exception,), message=topic)

    def produce_error() -> str | None:
        p = Producer({"bootstrap.servers": bs, "acks": "all", "retries": 0, "message.timeout.ms": 5000})
        out = []
        p.produce(topic, b"x", on_delivery=lambda err, m: out.append(err))
        p.flush(10)
        return out[0].name() if out and out[0] is not None else None
    assert produce_error() is None
    alter = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("min.insync.replicas", "2", incremental_operation=AlterConfigOpType.SET)])
    assert admin.incremental_alter_configs([alter])[alter].result(10) is None
    entry = wait_for(lambda: (lambda e: e if e.value == "2" else None)(_broker_entry(admin, 1, "min.insync.replicas")),
                     10, ignore=(Exception,), message="dynamic min.insync.replicas")
    assert entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    # confluent-kafka keys synonyms by name; kafkatier's own admin client shows every source, in order
    from kafkatier.admin.client import AdminClient as KafkatierAdmin
    with KafkatierAdmin(bs.split(",")) as ka:
        mir = next(e for e in ka.describe_configs("brokers", ["1"])["1"] if e.name == "min.insync.replicas")
    assert [(s.name, s.value, s.source) for s in mir.synonyms] == [
        ("min.insync.replicas", "2", "DYNAMIC_BROKER_CONFIG"), ("min.insync.replicas", "1", "STATIC_BROKER_CONFIG"),
        ("min.insync.replicas", "1", "DEFAULT_CONFIG")]
    # Takes effect without a restart: the single-replica topic on broker 1 now lacks in-sync replicas.
    wait_for(lambda: produce_error() == "NOT_ENOUGH_REPLICAS", 20, interval=0.2, message="NOT_ENOUGH_REPLICAS")
    assert json.loads(admin_cluster.zk.get("/config/brokers/1")[0])["config"] == {"min.insync.replicas": "2"}
    delete = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("min.insync.replicas", None, incremental_operation=AlterConfigOpType.DELETE)])
    assert admin.incremental_alter_configs([delete])[delete].result(10) is None
    wait_for(lambda: produce_error() is None, 20, interval=0.2, message="produce accepted again")


def test_dynamic_retention_deletes_old_segments_without_restart(admin_cluster):
    """``log.retention.ms`` set for the whole cluster (``<default>``, via kafkatier configs) applies to a topic
    without its own retention: its old segments go."""
    bs = admin_cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs})
    topic = f"ret-{uuid.uuid4().hex[:6]}"
    _create(admin, admin_cluster, topic, 1, 2, {"segment.bytes": "1024"})
    p = Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 0})
    for _ in range(20):     # one record per batch: a batch larger than segment.bytes would be refused
        p.produce(topic, b"x" * 200, partition=0)
        p.flush(30)
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bs)
    tp = TopicPartition(topic, 0)
    try:
        assert c.beginning_offsets([tp])[tp] == 0 and c.end_offsets([tp])[tp] == 20
        k = KafkaAdminClient(bootstrap_servers=bs)
        try:
            for b in (1, 2, 3):     # kafka-python cannot name the <default> entity: set it per broker
                k.alter_configs([KConfigResource(ConfigResourceType.BROKER, str(b), {"log.retention.ms": "1"})])
        finally:
            k.close()
        wait_for(lambda: c.beginning_offsets([tp])[tp] > 0, 30, interval=0.3, message="old segments deleted")
    finally:
        c.close()


def test_broker_config_bad_input(admin_cluster):
    admin = AdminClient({"bootstrap.servers": admin_cluster.bootstrap_servers})

    def change(name, value, broker="2"):
        r = ConfigResource(ResourceType.BROKER, broker, incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
        return lambda: admin.incremental_alter_configs([r])[r].result(10)
    before = _broker_entry(admin, 2, "broker.id").value
    assert _error_code(change("broker.id", "9")) == "INVALID_REQUEST"              # read-only
    assert _error_code(change("offsets.topic.num.partitions", "3")) == "INVALID_REQUEST"
    assert _error_code(change("min.insync.replicas", "two")) == "INVALID_REQUEST"  # not a number
    assert _error_code(change("min.insync.replicas", "0")) == "INVALID_REQUEST"    # below its minimum
    change("no.such.config", "1")()   # a name Kafka does not define: a custom config, stored (as Kafka)
    assert _broker_entry(admin, 2, "broker.id").value == before
    assert admin_cluster.zk.exists("/config/brokers/2") is None or json.loads(
        admin_cluster.zk.get("/config/brokers/2")[0])["config"].get("min.insync.replicas") is None
    # a broker id the cluster does not have: the client cannot route it, nothing is written
    with pytest.raises(Exception):
        change("log.retention.ms", "1000", broker="42")()
    assert admin_cluster.zk.exists("/config/brokers/42") is None
