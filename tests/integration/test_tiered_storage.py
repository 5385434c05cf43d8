"""Tiered storage (KIP-405 baseline with the KIP-950 tiered epoch) against a real ZooKeeper and broker processes.

The ZooKeeper metadata store (compare-and-set transitions, fencing, schemas), the admin hooks that create the
``tieredstorage`` znodes, and on clusters: leader failover in the middle of a copy (no segment lost or duplicated,
the new leader resumes, the old leader rebuilds as a follower), retention by size and by time, tiering switched on
for an existing topic, deletion of a tiered topic by the partition leaders (scenario 22 of docs/acceptance.md) and a
broker refusing to start with the cluster flag off (scenario 23).
"""
from __future__ import annotations

import os
import re
import time

import pytest
from kafka import KafkaAdminClient

from kafkatier.admin.admin_zk_client import AdminZkClient
from kafkatier.log.remote.remote_log_metadata_manager import (RemoteLogMetadataFencedError,
                                                              ZkRemoteLogMetadataManager)
from kafkatier.log.remote.remote_log_segment_metadata import (RemoteLogSegmentId, RemoteLogSegmentMetadataUpdate,
                                                              RemoteLogSegmentState, TopicIdPartition,
                                                              new_segment_metadata)
from kafkatier.log.remote.remote_storage_manager import LocalTieredStorage, RemoteResourceNotFoundError
from kafkatier.protocol.errors import InvalidConfigurationError
from kafkatier.waiting import wait_for
from kafkatier.zk import codecs, paths
from kafkatier.zk.fenced import Check
from kafkatier.zk.validate import validate_tree
from kip950_support import TIERED, consume_records, create_topic, earliest, partition_state, produce, unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

S = RemoteLogSegmentState
TOPIC_CONFIG = {"remote.storage.enable": "true", "segment.bytes": "1024", "local.retention.bytes": "1",
                "file.delete.delay.ms": "0"}
PER_SEGMENT = 6          # 100-byte values: six batches fill a 1024-byte segment
WAIT_S = 60.0


# ----------------------------------------------------------------------------------------- ZooKeeper store

TIP = TopicIdPartition("LWgrMmVrT0a__7a4SasuPA", "orders", 0)


def seg(start, end, tiered_epoch=0, epochs=None):
    return new_segment_metadata(RemoteLogSegmentId.generate(TIP), start, end, 1000 + end, 1, 100 * (end - start + 1),
                                epochs or {0: start}, tiered_epoch)


def upd(m, state):
    return RemoteLogSegmentMetadataUpdate(m.remote_log_segment_id, 5, state, 2)


def test_zk_store_transitions_lists_and_lookups(zk):
    store = ZkRemoteLogMetadataManager(zk)
    a, b, c = seg(0, 9), seg(10, 19, epochs={0: 10, 3: 15}), seg(20, 29, tiered_epoch=1)
    for m in (c, a, b):
        store.add_remote_log_segment_metadata(m)
    store.update_remote_log_segment_metadata(upd(a, S.COPY_SEGMENT_FINISHED))
    store.update_remote_log_segment_metadata(upd(b, S.COPY_SEGMENT_FINISHED))
    listed = store.list_remote_log_segments(TIP)
    assert [(m.start_offset, m.state) for m in listed] == [(0, S.COPY_SEGMENT_FINISHED),
                                                            (10, S.COPY_SEGMENT_FINISHED), (20, S.COPY_SEGMENT_STARTED)]
    assert listed[0].broker_id == 2 and listed[0].event_timestamp_ms == 5
    assert [m.start_offset for m in store.list_remote_log_segments(TIP, tiered_epoch=1)] == [20]
    assert [m.start_offset for m in store.list_remote_log_segments(TIP, leader_epoch=3)] == [10]
    assert store.remote_log_segment_metadata(TIP, 15).start_offset == 10
    assert store.remote_log_segment_metadata(TIP, 25) is None          # not finished: never served
    assert store.highest_offset_for_epoch(TIP) == 19
    assert store.remote_log_size(TIP) == 2000
    assert validate_tree(zk, "/kafkatier") == []
    names = zk.get_children(store.partition_path(TIP))
    assert sorted(names)[0] == f"00000000000000000000-{a.segment_id}"


def test_zk_store_drops_invalid_transitions_and_honours_fences(zk):
    store = ZkRemoteLogMetadataManager(zk)
    m = seg(0, 9)
    store.add_remote_log_segment_metadata(m)
    path = f"{store.partition_path(TIP)}/{zk.get_children(store.partition_path(TIP))[0]}"
    version = zk.exists(path).version
    assert store.update_remote_log_segment_metadata(upd(m, S.DELETE_SEGMENT_FINISHED)) is None
    assert store.update_remote_log_segment_metadata(upd(m, S.DELETE_SEGMENT_STARTED),
                                                    expected_state=S.COPY_SEGMENT_FINISHED) is None
    zk.create("/fence", b"x")
    zk.set("/fence", b"y")
    with pytest.raises(RemoteLogMetadataFencedError):
        store.update_remote_log_segment_metadata(upd(m, S.COPY_SEGMENT_FINISHED), fence=[Check("/fence", 0)])
    assert zk.exists(path).version == version                           # nothing written
    store.update_remote_log_segment_metadata(upd(m, S.COPY_SEGMENT_FINISHED), fence=[Check("/fence", 1)])
    store.update_remote_log_segment_metadata(upd(m, S.DELETE_SEGMENT_STARTED))
    store.update_remote_log_segment_metadata(upd(m, S.DELETE_SEGMENT_FINISHED))
    assert zk.exists(path) is None                                      # finished deletes are forgotten
    with pytest.raises(RemoteResourceNotFoundError, match="No remote log segment metadata found for :"):
        store.update_remote_log_segment_metadata(upd(m, S.DELETE_SEGMENT_FINISHED))
    assert store.list_partitions("orders") == [TIP]
    store.delete_partition_metadata(TIP)
    assert store.list_partitions() == []


def test_zk_store_skips_malformed_znodes(zk):
    store = ZkRemoteLogMetadataManager(zk)
    store.add_remote_log_segment_metadata(seg(0, 9))
    zk.create(f"{store.partition_path(TIP)}/00000000000000000010-AAAAAAAAAAAAAAAAAAAAAA", b"{broken")
    assert [m.start_offset for m in store.list_remote_log_segments(TIP)] == [0]


# ------------------------------------------------------------------------------------------------ admin

@pytest.fixture
def admin(zk):
    reg = codecs.BrokerRegistration.create(1, ["PLAINTEXT://127.0.0.1:9092"], {"PLAINTEXT": "PLAINTEXT"},
                                           1700000000000)
    zk.create(paths.broker(1), reg.encode(), ephemeral=True, makepath=True)
    yield AdminZkClient(zk, broker_config={"remote.log.storage.system.enable": "true"})


def tiered_nodes(zk, topic):
    return zk.get(paths.tiered_epoch(topic))[0], codecs.TieredState.decode(zk.get(paths.tiered_state(topic))[0]).state


def test_tieredstorage_znodes_come_with_the_first_enabling_write(admin, zk):
    admin.create_topic("born-tiered", 1, 1, {"remote.storage.enable": "true"})
    assert tiered_nodes(zk, "born-tiered") == (b"0", "ENABLED")
    admin.create_topic("read-only", 1, 1, {"remote.storage.enable": "true", "remote.log.copy.disable": "true"})
    assert tiered_nodes(zk, "read-only") == (b"0", "DISABLED")
    admin.create_topic("later", 1, 1, {"retention.ms": "100000"})
    assert zk.exists(paths.tiered_storage("later")) is None
    admin.alter_topic_config("later", {"remote.storage.enable": "true"})
    assert tiered_nodes(zk, "later") == (b"0", "ENABLED")
    admin.alter_topic_config("later", {"retention.ms": "200000"})  # znodes exist: left alone
    assert tiered_nodes(zk, "later") == (b"0", "ENABLED")
    assert validate_tree(zk, "/brokers") == []


def test_refused_tiered_configs_change_nothing(admin, zk):
    admin.create_topic("t", 1, 1, {"remote.storage.enable": "true"})
    before = (zk.get(paths.topic_config("t"))[0], tiered_nodes(zk, "t"), zk.get_children(paths.CONFIG_CHANGES))
    with pytest.raises(InvalidConfigurationError, match="It is invalid to disable remote storage without deleting"):
        admin.alter_topic_config("t", {"remote.storage.enable": "false"})
    with pytest.raises(InvalidConfigurationError, match="Remote log storage is unsupported for the compacted"):
        admin.alter_topic_config("t", {"cleanup.policy": "compact"})
    assert (zk.get(paths.topic_config("t"))[0], tiered_nodes(zk, "t"), zk.get_children(paths.CONFIG_CHANGES)) == before
    off = AdminZkClient(zk, broker_config={"remote.log.storage.system.enable": "false"})
    with pytest.raises(InvalidConfigurationError, match="Tiered Storage functionality is disabled in the broker"):
        off.create_topic("u", 1, 1, {"remote.storage.enable": "true"})
    assert zk.exists(paths.topic("u")) is None


# ---------------------------------------------------------------------------------------------- clusters

def topic_id(cluster, topic) -> str:
    return codecs.TopicAssignment.decode(cluster.zk.get(paths.topic(topic))[0]).topic_id


def remote(cluster, topic, partition=0, tid=None):
    tip = TopicIdPartition(tid or topic_id(cluster, topic), topic, partition)
    return ZkRemoteLogMetadataManager(cluster.zk).list_remote_log_segments(tip)


def finished_chain(segs) -> list[tuple[int, int]]:
    return [(m.start_offset, m.end_offset) for m in segs if m.state == S.COPY_SEGMENT_FINISHED]


def storage(cluster) -> LocalTieredStorage:
    return LocalTieredStorage(cluster.manager.state["remote_storage_dir"], broker_id=-1)


def local_bases(cluster, broker_id, topic, partition=0) -> list[int]:
    for d in cluster.manager.broker(broker_id)["log_dirs"]:
        pdir = os.path.join(d, f"{topic}-{partition}")
        if os.path.isdir(pdir):
            return sorted(int(n[:20]) for n in os.listdir(pdir) if n.endswith(".log"))
    return []


def segments(first, last_exclusive, size=PER_SEGMENT) -> list[tuple[int, int]]:
    return [(s, s + size - 1) for s in range(first, last_exclusive, size)]


def test_retention_by_size_deletes_oldest_remote_segments_and_moves_the_log_start_offset(tiered_cluster):
    c, t = tiered_cluster, unique("size")
    create_topic(c, t, configs={**TOPIC_CONFIG, "retention.bytes": str(3 * 1020)})
    produce(c, t, 60)                                                   # ten segments of six
    # Remote + not-yet-uploaded local bytes (the active segment [54, 60)) must fit in 3 segments: the oldest
    # remote segments go first.
    wait_for(lambda: finished_chain(remote(c, t)) == segments(42, 54), WAIT_S, interval=0.2,
             message="remote retention by size")
    assert earliest(c, t) == 42
    assert [r.offset for r in consume_records(c, t)] == list(range(42, 60))
    wait_for(lambda: len(storage(c).segment_stems(TopicIdPartition(topic_id(c, t), t, 0))) == 2, WAIT_S,
             message="remote files of expired segments deleted")


def test_retention_by_time_deletes_expired_remote_segments(tiered_cluster):
    c, t = tiered_cluster, unique("time")
    create_topic(c, t, configs={**TOPIC_CONFIG, "retention.ms": "3600000"})
    produce(c, t, 18, timestamp_ms=int(time.time() * 1000) - 7_200_000)  # three segments, two hours old
    produce(c, t, 18, first=18)
    wait_for(lambda: finished_chain(remote(c, t)) == segments(18, 30) and earliest(c, t) == 18, WAIT_S,
             interval=0.2, message="remote retention by time")
    assert [r.offset for r in consume_records(c, t)] == list(range(18, 36))


def test_enabling_tiering_on_an_existing_topic(tiered_cluster):
    from kafkatier.admin.client import AdminClient
    c, t = tiered_cluster, unique("later")
    create_topic(c, t, configs={"segment.bytes": "1024", "file.delete.delay.ms": "0"})
    produce(c, t, 30)
    assert c.zk.exists(paths.tiered_storage(t)) is None
    with AdminClient(c.bootstrap_servers.split(",")) as admin:
        admin.alter_configs("topics", t, {"remote.storage.enable": "true", "local.retention.bytes": "1"})
    assert tiered_nodes(c.zk, t) == (b"0", "ENABLED")
    wait_for(lambda: finished_chain(remote(c, t)) == segments(0, 24), WAIT_S, interval=0.2,
             message="segments of the existing topic offloaded")
    leader = partition_state(c.zk, t)["leader"]
    wait_for(lambda: local_bases(c, leader, t) == [24], WAIT_S, message="local retention on the leader")
    assert [r.offset for r in consume_records(c, t)] == list(range(30))


def test_deleting_a_tiered_topic_deletes_remote_data_by_the_leaders(tiered_cluster):
    c, t = tiered_cluster, unique("gone")
    create_topic(c, t, configs=TOPIC_CONFIG, assignment={0: [1, 2], 1: [2, 3]})
    tid = topic_id(c, t)
    produce(c, t, 12, partition=0)
    produce(c, t, 12, partition=1)
    for p in (0, 1):
        wait_for(lambda p=p: finished_chain(remote(c, t, p)) == segments(0, 6), WAIT_S, interval=0.2,
                 message=f"{t}-{p} offloaded")
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers)
    try:
        admin.delete_topics([t], timeout_ms=30000)
    finally:
        admin.close()
    store = ZkRemoteLogMetadataManager(c.zk)
    wait_for(lambda: c.zk.exists(paths.topic(t)) is None and store.list_partitions(t) == [], WAIT_S, interval=0.2,
             message="topic and remote metadata deleted")
    rsm = storage(c)
    for p in (0, 1):
        assert not os.path.exists(rsm.partition_dir(TopicIdPartition(tid, t, p)))
    for broker, mine in ((1, 0), (2, 1), (3, None)):
        with open(os.path.join(c.manager.data_dir, "logs", f"broker-{broker}.log")) as f:
            deleted = set(re.findall(rf"event=remote_partition_deleted partition={tid}:{t}-(\d)", f.read()))
        assert deleted == ({str(mine)} if mine is not None else set()), f"broker {broker} deleted {deleted}"


def test_leader_failover_mid_copy_loses_and_duplicates_nothing(cluster_factory):
    c = cluster_factory(brokers=3, log_dirs=1, overrides={**TIERED, "rsm.config.copy.delay.ms": "1000"},
                        session_timeout_ms=3000)
    t = "failover"
    create_topic(c, t, configs={**TOPIC_CONFIG, "min.insync.replicas": "2"})
    produce(c, t, 30)                                                   # rolled: [0,6) .. [18,24)

    def mid_copy():
        segs = remote(c, t)
        return finished_chain(segs) and any(m.state == S.COPY_SEGMENT_STARTED for m in segs)
    wait_for(mid_copy, WAIT_S, interval=0.05, message="a copy in progress after a finished one")
    old = partition_state(c.zk, t)
    c.manager.kill_broker(old["leader"])
    wait_for(lambda: partition_state(c.zk, t)["leader"] not in (-1, old["leader"]), WAIT_S, interval=0.1,
             message="a new leader")
    produce(c, t, 18, first=30)                                         # rolled now: up to [36,42)
    expected = segments(0, 42)

    def settled():
        segs = remote(c, t)
        return finished_chain(segs) == expected and len(segs) == len(expected)  # no dangling copy left
    wait_for(settled, WAIT_S, interval=0.2, message="every rolled segment copied exactly once")
    tip = TopicIdPartition(topic_id(c, t), t, 0)
    assert sorted(storage(c).segment_stems(tip)) == sorted(f"{m.start_offset:020d}-{m.segment_id}"
                                                            for m in remote(c, t))
    records = consume_records(c, t)
    assert [(r.offset, r.value.rstrip(b".")) for r in records] == [(i, f"v{i}".encode()) for i in range(48)]
    # The old leader comes back far behind the new leader's local log start: it rebuilds from the remote tier
    # (OFFSET_MOVED_TO_TIERED_STORAGE) and rejoins the ISR.
    c.manager.start_broker(old["leader"])
    wait_for(lambda: old["leader"] in partition_state(c.zk, t)["isr"], WAIT_S, interval=0.2,
             message="the old leader back in the ISR")
    assert local_bases(c, old["leader"], t)[0] >= 36


def test_broker_refuses_to_start_with_the_flag_off_while_a_tiered_topic_exists(cluster_factory):
    c = cluster_factory(brokers=1, log_dirs=1, overrides=TIERED)
    create_topic(c, "tiered", rf=1, configs={"remote.storage.enable": "true"})
    c.manager.stop_broker(1)
    b = c.manager.broker(1)
    b["args"] += ["--override", "remote.log.storage.system.enable=false"]   # wins over its server.properties
    c.manager.save()
    with pytest.raises(RuntimeError):
        c.manager.start_broker(1, timeout=60)
    assert ("You have to delete all topics with the property remote.storage.enable=true before disabling tiered "
            "storage cluster-wide") in c.manager.log_tail(1, 200)
