"""KIP-950 tiered storage disablement in ZooKeeper mode on a 3-broker cluster, scenario by scenario (acceptance
scenarios B12–B15, B19, B21 of docs/acceptance.md): refused disablements, read-only disablement and resumed uploads,
delete disablement and re-enable, retention while read-only.  Also the fence a copy must pass to become
COPY_SEGMENT_FINISHED (the topic's tiered epoch unchanged and its state ENABLED).

Failure modes (a broker or the controller killed in DISABLING, a copy in flight, deletion still running at
re-enable, concurrent disablements) are in test_kip950_failures.py and tests/e2e/test_kip950_e2e.py.
"""
from __future__ import annotations

import uuid

import attrs
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import OffsetOutOfRangeError

from kafkatier.log.log_config import COPY_DISABLED_MS, DISABLE_WITHOUT_DELETE
from kafkatier.log.remote.remote_log_manager import RemoteLogTaskFencedError
from kafkatier.log.remote.zk_fence import zk_fence
from kafkatier.waiting import wait_for
from kafkatier.zk import codecs, paths
from kafkatier.zk.fenced import Check
from kip950_support import (DELETE, READ_ONLY, SEGMENT_BYTES, TIERED, TOPIC_CONFIG, WAIT_S, alter, broker_log,
                           consume, create_topic, disabled_events, earliest, finished_chain, local_bases,
                           partition_state, produce, remote, remote_files, segments, snapshot,
                           status_log_start_offset, tiered, topic_id, unique, values, wait_offloaded, wait_state)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


# ------------------------------------------------------------------------------------------------ fencing

@attrs.define
class P:
    topic: str = "orders"
    partition: int = 0


def test_a_copy_finishes_only_at_its_tiered_epoch_while_tiering_is_enabled(zk):
    zk.create(paths.partition_state("orders", 0), codecs.LeaderIsrAndControllerEpoch(
        leader=1, leader_epoch=3, isr=(1, 2), controller_epoch=1).encode(), makepath=True)
    zk.create(paths.tiered_epoch("orders"), b"0", makepath=True)
    zk.create(paths.tiered_state("orders"), codecs.TieredState("ENABLED").encode())
    fence = zk_fence(zk, 1)
    checks = fence(P(), 3, 0)
    assert [c.path for c in checks] == [paths.partition_state("orders", 0), paths.tiered_epoch("orders"),
                                        paths.tiered_state("orders")]
    assert all(isinstance(c, Check) for c in checks)
    assert [c.path for c in fence(P(), 3, None)] == [paths.partition_state("orders", 0)]  # not a FINISHED write
    zk.set(paths.tiered_state("orders"), codecs.TieredState("DISABLING").encode())
    with pytest.raises(RemoteLogTaskFencedError, match="tiered storage of orders is DISABLING"):
        fence(P(), 3, 0)
    zk.set(paths.tiered_epoch("orders"), b"1")
    with pytest.raises(RemoteLogTaskFencedError, match="tiered epoch of orders moved from 0 to 1"):
        fence(P(), 3, 0)
    with pytest.raises(RemoteLogTaskFencedError, match="no longer leads"):
        fence(P(), 2, 1)


def test_config_changes_start_tiering_tasks_only_when_the_state_allows(zk, tmp_path):
    """The broker's topic config listener: tiering switched on starts the tasks, copying switched back on
    starts the leader's copy task, but nothing while DISABLING and no copy task unless ENABLED."""
    from kafkatier.log.log import Log
    from kafkatier.log.log_config import LogConfig
    from kafkatier.log.remote.config import RemoteLogManagerConfig
    from kafkatier.server.topic_config_handler import TopicConfigCache, TopicConfigHandler
    from kafkatier.log.remote.remote_log_manager import RemoteLogManager
    from kafkatier.log.remote.remote_log_metadata_manager import InMemoryRemoteLogMetadataManager
    from kafkatier.log.remote.remote_storage_manager import LocalTieredStorage

    @attrs.define
    class Part:
        log: Log
        topic: str = "orders"
        partition: int = 0
        topic_id: str = "LWgrMmVrT0a__7a4SasuPA"
        leader_id: int = 1
        leader_epoch: int = 0
        is_leader: bool = True

    @attrs.define
    class RM:
        partitions: dict
    cfg = RemoteLogManagerConfig.from_props({"remote.log.storage.system.enable": "true",
                                             "remote.log.manager.task.interval.ms": "60000"})
    rlm = RemoteLogManager(cfg, 1, LocalTieredStorage(str(tmp_path / "remote"), broker_id=1),
                           InMemoryRemoteLogMetadataManager())
    rlm.startup()
    try:
        lg = Log(str(tmp_path / "orders-0"), LogConfig.from_props({"remote.storage.enable": "false"}))
        p = Part(lg)
        class LogManager:
            def update_topic_config(self, topic, cfg):
                pass
        handler = TopicConfigHandler(zk, TopicConfigCache(zk), LogManager(), RM({("orders", 0): p}), rlm)

        def change(state: str | None, **props) -> None:
            if state is not None:
                zk.ensure_path(paths.tiered_storage("orders"))
                for path, data in ((paths.tiered_epoch("orders"), b"1"),
                                   (paths.tiered_state("orders"), codecs.TieredState(state).encode())):
                    zk.set(path, data) if zk.exists(path) else zk.create(path, data)
            lg.update_config(lg.config.with_overrides({k.replace("_", "."): v for k, v in props.items()}))
            handler.process_config_changes("orders", {})
        change("DISABLING", remote_storage_enable="true")
        assert not lg.remote_log_enabled and rlm.tasks("orders", 0) == {}
        change("ENABLED")                                        # re-enable after a delete disablement
        assert lg.remote_log_enabled and sorted(rlm.tasks("orders", 0)) == ["copy", "expiration"]
        rlm.stop_copy("orders", 0)                               # a read-only disablement...
        change("DISABLED", remote_log_copy_disable="true")
        assert sorted(rlm.tasks("orders", 0)) == ["expiration"]
        change(None, remote_log_copy_disable="false")            # ...a config without the state change
        assert sorted(rlm.tasks("orders", 0)) == ["expiration"]
        change("ENABLED")                                        # re-enabled copying
        assert sorted(rlm.tasks("orders", 0)) == ["copy", "expiration"]
    finally:
        rlm.shutdown()


# ------------------------------------------------------------------------------------------------ cluster

@pytest.fixture(scope="module")
def c(zookeeper, _zk_session_client, tmp_path_factory):
    from kafkatier.cluster.manager import ClusterManager
    from kafkatier.zk.client import start_client
    root = f"/kip950-{uuid.uuid4().hex[:10]}"
    _zk_session_client.create(root)
    m = ClusterManager(str(tmp_path_factory.mktemp("kip950")))
    m.up(brokers=3, log_dirs_per_broker=1, zookeeper=zookeeper.connect_string + root, overrides=TIERED)

    @attrs.define
    class Cluster:
        manager: object
        zk: object
        bootstrap_servers: str
    cl = Cluster(m, start_client(zookeeper.connect_string + root), m.bootstrap_servers)
    yield cl
    cl.zk.stop()
    cl.zk.close()
    m.down()


def kafka_python_alter(c, topic: str, configs: dict, incremental: bool) -> str:
    """kafka-python's own answer ('OK' or the error text) for AlterConfigs or IncrementalAlterConfigs."""
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers, request_timeout_ms=30000)
    try:
        out = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=configs)],
                                  raise_on_unknown=False, incremental=incremental)
        return out["topic"][topic]
    finally:
        admin.close()


def test_invalid_disablements_are_refused_and_change_nothing(c):
    """Scenario 12, and an unsupported policy value (INVALID_REQUEST)."""
    t = unique("refused")
    create_topic(c, t, configs={"remote.storage.enable": "true", "local.retention.ms": "100",
                                "retention.ms": "1000"})
    before = snapshot(c.zk, t)
    e = alter(c, t, {"remote.storage.enable": "false"})
    assert (e.name, e.message) == ("INVALID_CONFIG", DISABLE_WITHOUT_DELETE)
    e = alter(c, t, {"remote.log.copy.disable": "true"})
    assert (e.name, e.message) == ("INVALID_CONFIG", COPY_DISABLED_MS)
    e = alter(c, t, {"remote.log.copy.disable": "maybe"})
    assert (e.code, e.message) == (42, "Invalid value maybe for configuration remote.log.copy.disable: Expected "
                                       "value to be either true or false")
    for incremental in (True, False):  # both APIs, through kafka-python's admin client
        assert kafka_python_alter(c, t, {"remote.storage.enable": "false"}, incremental).startswith(
            "[Error 40] InvalidConfigurationError: It is invalid to disable remote storage without deleting")
        assert kafka_python_alter(c, t, {"remote.log.delete.on.disable": "perhaps"}, incremental).startswith(
            "[Error 42] InvalidRequestError: Invalid value perhaps for configuration remote.log.delete.on.disable")
    assert snapshot(c.zk, t) == before
    assert tiered(c.zk, t) == (0, "ENABLED")
    assert alter(c, t, {"remote.log.copy.disable": "true", "local.retention.ms": "-2"}) is None
    wait_state(c.zk, t, "DISABLED", 1)


def test_read_only_disablement_then_uploads_resume(c):
    """Scenarios 13 and 14: offsets continue where the remote log ended."""
    t = unique("readonly")
    create_topic(c, t, configs=TOPIC_CONFIG)
    produce(c, t, 30)                                                # rolled: [0,6) .. [18,24)
    wait_for(lambda: finished_chain(remote(c.zk, t)) == segments(0, 24), WAIT_S, interval=0.2,
             message="offloaded")
    leader = partition_state(c.zk, t)["leader"]
    assert alter(c, t, READ_ONLY) is None
    assert tiered(c.zk, t)[0] == 1
    wait_state(c.zk, t, "DISABLED", 1)
    for b in (1, 2, 3):                                              # every replica got StopReplica v5
        assert disabled_events(c, b, t) == ["read-only"], f"broker {b}"
    assert "Cancelling the copy RLM task for tpId: " in broker_log(c, leader)
    produce(c, t, 12, first=30)                                      # rolls [24,30) and [30,36)
    wait_for(lambda: local_bases(c, leader, t)[-1] == 36, WAIT_S, message="new segments rolled")
    assert finished_chain(remote(c.zk, t)) == segments(0, 24)       # nothing more offloaded
    assert consume(c, t) == values(0, 42)                            # the old records from remote storage
    assert partition_state(c.zk, t)["isr"] != [] and len(partition_state(c.zk, t)["isr"]) == 3

    assert alter(c, t, {"remote.log.copy.disable": "false", "local.retention.bytes": "1"}) is None
    assert tiered(c.zk, t) == (1, "ENABLED")
    produce(c, t, 1, first=42)                                       # rolls [36,42): three segments to upload
    # Every rolled segment below the high watermark is uploaded: [24,30) and [30,36) may go before record 42 rolls
    # [36,42) or in the same round, so the only stable state to wait for is all three (segments(0, 36) is a
    # transient one, and asserting on it raced the copy task).
    wait_for(lambda: finished_chain(remote(c.zk, t)) == segments(0, 42), WAIT_S, interval=0.2,
             message="uploads resumed from the remote log end")
    assert finished_chain(remote(c.zk, t), tiered_epoch=1) == segments(24, 42)
    assert consume(c, t) == values(0, 43)


def test_delete_disablement_then_re_enable(c):
    """Scenarios 15 and 19 (deletion finished before the re-enable; see test_kip950_failures.py for one still
    running)."""
    t = unique("delete")
    create_topic(c, t, configs=TOPIC_CONFIG)
    tid = topic_id(c.zk, t)
    produce(c, t, 30)
    wait_offloaded(c, t, 24)
    assert alter(c, t, DELETE) is None
    wait_state(c.zk, t, "DISABLED", 1)
    for b in (1, 2, 3):
        assert disabled_events(c, b, t) == ["delete"], f"broker {b}"
    wait_for(lambda: remote(c.zk, t) == [] and remote_files(c, t, tid=tid) == [], WAIT_S, interval=0.2,
             message="remote storage empty")
    assert earliest(c, t) == 24
    wait_for(lambda: all(status_log_start_offset(c, b, t) == 24 for b in (1, 2, 3)), 30, interval=0.5,
             message="log start offset 24 on every replica")
    consumer = KafkaConsumer(bootstrap_servers=c.bootstrap_servers, group_id=None, auto_offset_reset="none",
                             request_timeout_ms=30000)
    try:
        tp = TopicPartition(t, 0)
        consumer.assign([tp])
        consumer.seek(tp, 10)
        with pytest.raises(OffsetOutOfRangeError):
            wait_for(lambda: consumer.poll(timeout_ms=500) and False, 20, message="OFFSET_OUT_OF_RANGE")
    finally:
        consumer.close()
    assert consume(c, t) == values(24, 30)

    assert alter(c, t, {"remote.storage.enable": "true"}) is None   # re-enable: same tiered epoch
    assert tiered(c.zk, t) == (1, "ENABLED")
    produce(c, t, 12, first=30)
    wait_for(lambda: finished_chain(remote(c.zk, t)) == segments(24, 36), WAIT_S, interval=0.2,
             message="copying restarted from the local log start offset")
    assert {m.tiered_epoch for m in remote(c.zk, t)} == {1}
    assert earliest(c, t) == 24 and consume(c, t) == values(24, 42)


def test_retention_while_read_only_expires_the_remote_tier_first(c):
    """Scenario 21: oldest remote segments go first and the log start offset follows; local segments only go
    once no remote segment lies below them, so offsets stay continuous."""
    t = unique("retention")
    create_topic(c, t, configs={**TOPIC_CONFIG, "local.retention.bytes": str(4 * SEGMENT_BYTES)})
    produce(c, t, 48)                                                # rolled [0,6) .. [36,42), active [42,48)
    leader = partition_state(c.zk, t)["leader"]
    wait_for(lambda: finished_chain(remote(c.zk, t)) == segments(0, 42) and local_bases(c, leader, t)[0] == 24,
             WAIT_S, interval=0.2, message="offloaded; local keeps [24, 48)")
    # Three segments' worth in total: remote [0,42) + local-only [42,48) breach by five segments.
    assert alter(c, t, {**READ_ONLY, "retention.bytes": str(3 * SEGMENT_BYTES)}) is None
    wait_state(c.zk, t, "DISABLED", 1)

    def continuous() -> bool:
        # The log start offset moves before the expired segments are deleted; what lies at or above it must
        # be continuous from remote into local.
        start = earliest(c, t)
        segs = [s for s in finished_chain(remote(c.zk, t)) if s[1] >= start]
        covered = start
        for first, last in segs:
            if first <= covered:
                covered = max(covered, last + 1)
        local = local_bases(c, leader, t)
        if earliest(c, t) != start:
            return False  # expiration moved on between the reads: not one state, look again
        assert local[0] <= covered, f"gap: log start {start}, remote {segs}, local {local}"
        return finished_chain(remote(c.zk, t)) == segments(30, 42) and start == 30
    wait_for(continuous, WAIT_S, interval=0.2, message="remote [0,30) expired, log start offset 30")
    wait_for(lambda: local_bases(c, leader, t) == [30, 36, 42], WAIT_S, message="local below 30 deleted")
    produce(c, t, 12, first=48)                                      # two more segments: the remote tier goes
    wait_for(lambda: remote(c.zk, t) == [] and earliest(c, t) == 42 and local_bases(c, leader, t) == [42, 48, 54],
             WAIT_S, interval=0.2, message="remote tier expired first, then local below 42")
    assert consume(c, t) == values(42, 60)


def test_a_read_only_topic_disabled_with_delete(c):
    """DISABLED (read-only) -> DISABLING -> DISABLED again: the remote data still readable while read-only is
    deleted and the log starts at the former local log start offset."""
    t = unique("ro-then-delete")
    create_topic(c, t, configs=TOPIC_CONFIG)
    tid = topic_id(c.zk, t)
    produce(c, t, 18)
    wait_offloaded(c, t, 12)
    assert alter(c, t, READ_ONLY) is None
    wait_state(c.zk, t, "DISABLED", 1)
    assert consume(c, t) == values(0, 18)
    assert alter(c, t, DELETE) is None
    wait_state(c.zk, t, "DISABLED", 2)
    wait_for(lambda: remote(c.zk, t) == [] and remote_files(c, t, tid=tid) == [], WAIT_S, interval=0.2,
             message="remote storage empty")
    assert earliest(c, t) == 12 and consume(c, t) == values(12, 18)
    for b in (1, 2, 3):
        assert disabled_events(c, b, t) == ["read-only", "delete"], f"broker {b}"
