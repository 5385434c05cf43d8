"""Tiered storage through real Kafka clients and the ``kafkatier tiered`` command: offload and read back (scenarios
10 and 11 of docs/acceptance.md), a kafka-python consumer reading a whole log partly served from remote storage,
ListOffsets by timestamp into the remote tier, tiering refused (scenario 11), and ``tiered describe``."""
from __future__ import annotations

import json
import os
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from kafkatier.admin.client import AdminClient, NewTopicSpec
from kafkatier.log.remote.remote_log_metadata_manager import ZkRemoteLogMetadataManager
from kafkatier.log.remote.remote_log_segment_metadata import RemoteLogSegmentState, TopicIdPartition
from kafkatier.waiting import wait_for
from kafkatier.zk import codecs, paths
import kip950_support
from kip950_support import WAIT_S, unique

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def leader_of(cluster, topic, partition=0) -> dict:
    return json.loads(cluster.zk.get(paths.partition_state(topic, partition))[0])


def create_topic(cluster, topic, rf, configs):
    kip950_support.create_topic(cluster, topic, 1, rf, configs)


def produce(cluster, topic, values, timestamps=None):
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=0)
    try:
        for i, v in enumerate(values):
            producer.send(topic, v, timestamp_ms=timestamps[i] if timestamps else None).get(timeout=60)
    finally:
        producer.close()


def consumer(cluster) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", check_crcs=True, request_timeout_ms=30000)


def remote_segments(cluster, topic):
    tid = codecs.TopicAssignment.decode(cluster.zk.get(paths.topic(topic))[0]).topic_id
    return ZkRemoteLogMetadataManager(cluster.zk).list_remote_log_segments(TopicIdPartition(tid, topic, 0))


def finished(cluster, topic) -> list[tuple[int, int]]:
    return [(m.start_offset, m.end_offset) for m in remote_segments(cluster, topic)
            if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]


def local_bases(cluster, broker_id, topic) -> list[int]:
    for d in cluster.manager.broker(broker_id)["log_dirs"]:
        pdir = os.path.join(d, f"{topic}-0")
        if os.path.isdir(pdir):
            return sorted(int(n[:20]) for n in os.listdir(pdir) if n.endswith(".log"))
    return []


# ------------------------------------------------------------------------------------------------ tests

def test_offload_and_read_back(tiered_cluster):
    """Scenario 10: one batch per segment, local.retention.bytes=1, three records."""
    c, t = tiered_cluster, unique("offload")
    create_topic(c, t, 2, {"remote.storage.enable": "true", "segment.bytes": "100", "local.retention.bytes": "1",
                           "file.delete.delay.ms": "0"})
    produce(c, t, [b"r0", b"r1", b"r2"])
    leader = leader_of(c, t)["leader"]
    wait_for(lambda: finished(c, t) == [(0, 0), (1, 1)] and local_bases(c, leader, t) == [2], WAIT_S,
             interval=0.1, message="segments 0 and 1 offloaded and deleted locally")
    assert {m.broker_id for m in remote_segments(c, t)} == {leader}
    assert c.zk.get(paths.tiered_epoch(t))[0] == b"0"
    assert codecs.TieredState.decode(c.zk.get(paths.tiered_state(t))[0]).state == "ENABLED"
    records = kip950_support.consume_records(c, t)
    assert [(r.offset, r.value) for r in records] == [(0, b"r0"), (1, b"r1"), (2, b"r2")]


def test_consumer_reads_the_whole_log_partly_from_remote_storage(tiered_cluster):
    c, t = tiered_cluster, unique("whole")
    create_topic(c, t, 3, {"remote.storage.enable": "true", "segment.bytes": "1024", "local.retention.bytes": "1",
                           "file.delete.delay.ms": "0"})
    base_ts = int(time.time() * 1000) - 60_000
    produce(c, t, [f"v{i}".encode().ljust(100, b".") for i in range(60)], [base_ts + 1000 * i for i in range(60)])
    # Six batches per segment: [0,6) .. [48,54) rolled, [54,60) active.
    rolled = [(s, s + 5) for s in range(0, 54, 6)]
    wait_for(lambda: finished(c, t) == rolled, WAIT_S, interval=0.2, message="every rolled segment offloaded")
    wait_for(lambda: all(local_bases(c, b, t) == [54] for b in (1, 2, 3)), WAIT_S, interval=0.2,
             message="only the tail left locally on every replica")
    records = kip950_support.consume_records(c, t)
    assert [(r.offset, r.value.rstrip(b".")) for r in records] == [(i, f"v{i}".encode()) for i in range(60)]
    cons = consumer(c)
    try:
        tp = TopicPartition(t, 0)
        assert cons.beginning_offsets([tp])[tp] == 0
        found = cons.offsets_for_times({tp: base_ts + 20_500})[tp]     # in a remote segment
        assert (found.offset, found.timestamp) == (21, base_ts + 21_000)
        found = cons.offsets_for_times({tp: base_ts + 56_000})[tp]     # local
        assert found.offset == 56
    finally:
        cons.close()


def test_tiering_refused_for_compacted_topics_and_bad_local_retention(tiered_cluster):
    """Scenario 11 (b) and the local retention rules."""
    with AdminClient(tiered_cluster.bootstrap_servers.split(",")) as admin:
        cases = {
            unique("compact"): ({"cleanup.policy": "compact"}, "Remote log storage is unsupported for the "
                                                               "compacted topics"),
            unique("compactdelete"): ({"cleanup.policy": "compact,delete"},
                                      "Remote log storage is unsupported for the compacted topics"),
            unique("local"): ({"retention.bytes": "1000", "local.retention.bytes": "2000"},
                              "Invalid value 2000 for configuration local.retention.bytes: Value must not be more "
                              "than retention.bytes property value: 1000"),
        }
        results = admin.create_topics([NewTopicSpec(n, 1, 1, configs={"remote.storage.enable": "true", **cfg})
                                       for n, (cfg, _) in cases.items()])
    for name, (_, message) in cases.items():
        assert results[name] is not None and results[name].name == "INVALID_CONFIG"
        assert results[name].message == message
        assert tiered_cluster.zk.exists(paths.topic(name)) is None


def test_tiering_refused_when_the_cluster_flag_is_off(cluster_factory):
    """Scenario 11 (a)."""
    c = cluster_factory(brokers=1, log_dirs=1)
    with AdminClient(c.bootstrap_servers.split(",")) as admin:
        result = admin.create_topics([NewTopicSpec("t", 1, 1, configs={"remote.storage.enable": "true"})])["t"]
    assert result is not None and result.name == "INVALID_CONFIG"
    assert result.message == ("Tiered Storage functionality is disabled in the broker. Topic cannot be configured "
                              "with remote log storage.")


def test_tiered_describe(tiered_cluster, kafkatier_cli):
    c, t = tiered_cluster, unique("describe")
    create_topic(c, t, 2, {"remote.storage.enable": "true", "segment.bytes": "100", "local.retention.bytes": "1"})
    produce(c, t, [b"a", b"b", b"c"])
    wait_for(lambda: finished(c, t) == [(0, 0), (1, 1)], WAIT_S, interval=0.1, message="offloaded")
    tid = codecs.TopicAssignment.decode(c.zk.get(paths.topic(t))[0]).topic_id
    for where in (["--bootstrap-server", c.bootstrap_servers], ["--zookeeper", c.zookeeper],
                  ["--data-dir", c.data_dir]):
        r = kafkatier_cli.run("tiered", "describe", "--topic", t, *where)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0].startswith(f"Topic: {t}\tTopicId: {tid}\tTieredEpoch: 0\tTieredState: ENABLED\t"
                                   f"RemoteSegments: 2\t")
        assert lines[1].startswith("\tPartition: 0\tRemoteSegments: 2\t")
        assert "\tStartOffset: 0\tEndOffset: 0\t" in lines[2] and "State: COPY_SEGMENT_FINISHED" in lines[2]
        assert "\tStartOffset: 1\tEndOffset: 1\t" in lines[3] and "\tTieredEpoch: 0\t" in lines[3]
    r = kafkatier_cli.run("tiered", "describe", "--topic", t, "--zookeeper", c.zookeeper, "--json")
    doc = json.loads(r.stdout)
    assert doc["tiered_epoch"] == 0 and doc["tiered_state"] == "ENABLED"
    assert [(s["start_offset"], s["state"]) for s in doc["partitions"][0]["segments"]] == [
        (0, "COPY_SEGMENT_FINISHED"), (1, "COPY_SEGMENT_FINISHED")]
    r = kafkatier_cli.run("tiered", "describe", "--topic", "no-such-topic", "--zookeeper", c.zookeeper)
    assert r.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION: Topic 'no-such-topic' does not exist." in r.stderr
    r = kafkatier_cli.run("tiered", "describe", "--topic", t)
    assert r.returncode == 2
