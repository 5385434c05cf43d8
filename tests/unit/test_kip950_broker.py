"""KIP-950 on a broker, without processes: the remote log manager's read-only and delete disablements (tasks,
log start offset, DELETE_SEGMENT_STARTED marks, the cleanup task, a copy in flight), tiered-epoch isolation of
old segments after a re-enable, read-only retention across both tiers, and the config rules (INVALID_REQUEST for
an unsupported policy value, which changes are disablements)."""
from __future__ import annotations

import threading

import pytest

from kafkatier.common.structs import TopicIdPartition
from kafkatier.log import log_config as lc
from kafkatier.log.log import Log
from kafkatier.log.log_config import LogConfig
from kafkatier.log.remote.config import RemoteLogManagerConfig
from kafkatier.log.remote.remote_log_manager import (DELETE, NOT_DISABLED, READ_ONLY, CleanupTask, CopyTask,
                                                     RemoteLogManager, disablement_kind)
from kafkatier.log.remote.remote_log_metadata_manager import InMemoryRemoteLogMetadataManager
from kafkatier.log.remote.remote_log_segment_metadata import RemoteLogSegmentState
from kafkatier.log.remote.remote_storage_manager import LocalTieredStorage
from kafkatier.zk.tiered_state import classify_transition
from kafkatier.protocol.errors import Errors, InvalidConfigurationError, KafkaError, OffsetOutOfRangeError
from kafkatier.waiting import wait_for
from fakes import NOW, TOPIC_ID, FakePartition, record_batch, tiered_log

S = RemoteLogSegmentState
TIP = TopicIdPartition(TOPIC_ID, "orders", 0)
WAIT_S = 10.0




def blob(n: int) -> bytes:
    return record_batch(n)


make_log = tiered_log


def fill(lg: Log, batches: int) -> None:
    for _ in range(batches):
        lg.append_as_leader(blob(2), 0)          # two records per batch, two batches per segment
    lg.update_high_watermark(lg.log_end_offset)


def set_config(lg: Log, **props) -> None:
    lg.update_config(lg.config.with_overrides({k.replace("_", "."): str(v) for k, v in props.items()}))


@pytest.fixture
def stores(tmp_path):
    return InMemoryRemoteLogMetadataManager(), LocalTieredStorage(str(tmp_path / "remote"), broker_id=1)


@pytest.fixture
def rlm_factory(stores):
    made = []

    def make(broker_id=1, started=True, tiered_epoch=lambda: 0) -> RemoteLogManager:
        rlmm, rsm = stores
        cfg = RemoteLogManagerConfig.from_props({"remote.log.storage.system.enable": "true",
                                                 "remote.log.manager.thread.pool.size": "2",
                                                 "remote.log.manager.task.interval.ms": "20"})
        rlm = RemoteLogManager(cfg, broker_id, rsm, rlmm, tiered_epoch_of=lambda topic: tiered_epoch(),
                               clock=lambda: NOW)
        if started:
            rlm.startup()
            made.append(rlm)
        return rlm
    yield make
    for rlm in made:
        rlm.rsm.close = lambda: None  # the storage is shared by the test's managers
        rlm.shutdown()


def states(rlmm) -> list[tuple[int, S, int]]:
    return [(m.start_offset, m.state, m.tiered_epoch) for m in rlmm.list_remote_log_segments(TIP)]


def tiered_log_with_remote_data(tmp_path, rlm, batches=6) -> tuple[FakePartition, Log]:
    """Segments [0,4) [4,8) uploaded, [8,12) active; local retention left only [8, 12) locally."""
    lg = make_log(tmp_path)
    fill(lg, batches)
    p = FakePartition(lg)
    CopyTask(rlm, p, TIP).run()
    lg.delete_old_segments()
    assert [s.base_offset for s in lg.log_segments()] == [8]
    assert (lg.log_start_offset, lg.local_log_start_offset) == (0, 8)
    return p, lg


# ------------------------------------------------------------------------------------------- read-only

def test_read_only_disablement_cancels_only_the_leaders_copy_task(tmp_path, rlm_factory):
    rlm = rlm_factory()
    p, lg = tiered_log_with_remote_data(tmp_path, rlm)
    rlm.on_leadership_change([p], [])
    assert sorted(rlm.tasks("orders", 0)) == ["copy", "expiration"]
    set_config(lg, remote_log_copy_disable="true", local_retention_bytes="-2")
    assert rlm.stop_copy("orders", 0) is True
    assert sorted(rlm.tasks("orders", 0)) == ["expiration"]
    assert rlm.stop_copy("orders", 0) is False           # a repeat is a no-op
    assert lg.remote_log_enabled and lg.log_start_offset == 0   # remote data still part of the log
    assert disablement_kind(lg.config) == READ_ONLY


def test_copy_task_uploads_nothing_once_the_config_disables_copying(tmp_path, stores, rlm_factory):
    rlm = rlm_factory(started=False)
    lg = make_log(tmp_path)
    fill(lg, 6)
    set_config(lg, remote_log_copy_disable="true", local_retention_bytes="-2")
    CopyTask(rlm, FakePartition(lg), TIP).run()
    assert stores[0].list_remote_log_segments(TIP) == []


# ---------------------------------------------------------------------------------------------- delete

def test_delete_disablement_on_the_leader(tmp_path, stores, rlm_factory):
    rlmm, rsm = stores
    rlm = rlm_factory()
    p, lg = tiered_log_with_remote_data(tmp_path, rlm)
    rlm.on_leadership_change([p], [])
    set_config(lg, remote_storage_enable="false", remote_log_delete_on_disable="true")
    assert disablement_kind(lg.config) == DELETE
    assert rlm.disable_with_delete(p) == 2
    assert (lg.log_start_offset, lg.local_log_start_offset) == (8, 8)
    assert not lg.remote_log_enabled
    assert {st for _, st, _ in states(rlmm)} <= {S.DELETE_SEGMENT_STARTED}   # what the broker answers on
    wait_for(lambda: rlmm.list_remote_log_segments(TIP) == [] and rlm.tasks("orders", 0) == {}, WAIT_S,
             message="the cleanup task deleted everything and unregistered")
    assert rsm.segment_stems(TIP) == []
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 1 << 20)                               # older offsets are gone for good
    assert rlm.disable_with_delete(p) == 0                # a repeat after completion succeeds
    assert lg.log_start_offset == 8


def test_delete_disablement_on_a_follower_only_stops_its_task(tmp_path, stores, rlm_factory):
    rlmm, _ = stores
    leader_rlm = rlm_factory(started=False)
    tiered_log_with_remote_data(tmp_path, leader_rlm)
    rlm = rlm_factory(broker_id=2)
    lg = make_log(tmp_path, "b2/orders-0")
    fill(lg, 6)
    lg.update_highest_offset_in_remote_storage(7)
    lg.delete_old_segments()
    follower = FakePartition(lg, broker_id=2, leader_id=1)
    rlm.on_leadership_change([], [follower])
    assert sorted(rlm.tasks("orders", 0)) == ["follower"]
    set_config(lg, remote_storage_enable="false", remote_log_delete_on_disable="true")
    assert rlm.disable_with_delete(follower) == 0
    assert rlm.tasks("orders", 0) == {} and not lg.remote_log_enabled and lg.log_start_offset == 8
    assert [st for _, st, _ in states(rlmm)] == [S.COPY_SEGMENT_FINISHED] * 2   # only the leader deletes


def test_a_new_leader_of_a_formerly_tiered_topic_removes_leftovers(tmp_path, stores, rlm_factory):
    """The old leader died before marking anything: whoever leads next cleans up."""
    rlmm, rsm = stores
    tiered_log_with_remote_data(tmp_path, rlm_factory(started=False))
    rlm = rlm_factory(broker_id=2)
    lg = make_log(tmp_path, "b2/orders-0", remote_storage_enable="false", remote_log_delete_on_disable="true")
    lg.remote_log_enabled = False                            # loaded with tiering off
    p = FakePartition(lg, broker_id=2, leader_id=2, leader_epoch=1)
    rlm.on_leadership_change([p], [])                       # becomes leader
    wait_for(lambda: rlmm.list_remote_log_segments(TIP) == [] and rsm.segment_stems(TIP) == []
             and rlm.tasks("orders", 0) == {}, WAIT_S, message="leftovers deleted by the new leader")
    plain = FakePartition(make_log(tmp_path, "b3/plain-0", remote_storage_enable="false"), topic="plain")
    plain.log.remote_log_enabled = False
    rlm.on_leadership_change([plain], [])                   # never tiered: nothing scheduled
    assert rlm.tasks("plain", 0) == {}


class SlowStorage(LocalTieredStorage):
    """Blocks every copy after its ``.log`` file until released."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.started, self.release = threading.Event(), threading.Event()

    def copy_log_segment_data(self, metadata, data):
        self.started.set()
        self.release.wait(WAIT_S)
        return super().copy_log_segment_data(metadata, data)


def test_a_copy_in_flight_never_finishes_and_its_files_are_removed(tmp_path):
    rlmm, rsm = InMemoryRemoteLogMetadataManager(), SlowStorage(str(tmp_path / "remote"), broker_id=1)
    cfg = RemoteLogManagerConfig.from_props({"remote.log.storage.system.enable": "true",
                                             "remote.log.manager.task.interval.ms": "20"})
    rlm = RemoteLogManager(cfg, 1, rsm, rlmm, clock=lambda: NOW)
    rlm.startup()
    try:
        lg = make_log(tmp_path)
        fill(lg, 4)
        p = FakePartition(lg)
        rlm.on_leadership_change([p], [])
        assert rsm.started.wait(WAIT_S)
        assert states(rlmm) == [(0, S.COPY_SEGMENT_STARTED, 0)]
        set_config(lg, remote_storage_enable="false", remote_log_delete_on_disable="true")
        assert rlm.disable_with_delete(p) == 1
        assert states(rlmm) == [(0, S.DELETE_SEGMENT_STARTED, 0)]
        assert not any(isinstance(t, CleanupTask) and t.cancelled for t in rlm.tasks("orders", 0).values())
        rsm.release.set()                                  # the upload completes, but may not publish
        wait_for(lambda: rlmm.list_remote_log_segments(TIP) == [] and rsm.segment_stems(TIP) == []
                 and rlm.tasks("orders", 0) == {}, WAIT_S, message="the in-flight copy cleaned up")
    finally:
        rsm.release.set()
        rlm.shutdown()


# ------------------------------------------------------------------------------------ tiered-epoch isolation

def test_re_enable_ignores_old_epoch_segments_still_being_deleted(tmp_path, stores, rlm_factory):
    """Remote data overlapping the local log (nothing deleted locally yet) is disabled with delete; the old
    segments are still DELETE_SEGMENT_STARTED when tiering comes back.  The new copies start at the log start
    offset, and the old segments count for neither the copier's position nor size retention."""
    rlmm, _ = stores
    epoch = [0]
    rlm = rlm_factory(started=False, tiered_epoch=lambda: epoch[0])
    lg = make_log(tmp_path, local_retention_bytes="-2")
    fill(lg, 6)
    p = FakePartition(lg)
    CopyTask(rlm, p, TIP).run()
    assert [(s, e) for s, _, e in states(rlmm)] == [(0, 0), (4, 0)]
    epoch[0] = 1                                             # the disablement bumped the tiered epoch
    set_config(lg, remote_storage_enable="false", remote_log_delete_on_disable="true")
    assert rlm.disable_with_delete(p) == 2                   # (not started: no cleanup task runs)
    assert lg.log_start_offset == 0
    set_config(lg, remote_storage_enable="true")            # re-enable: same tiered epoch
    lg.remote_log_enabled = True
    copier = CopyTask(rlm, p, TIP)
    copier.run()
    assert sorted(states(rlmm)) == [(0, S.COPY_SEGMENT_FINISHED, 1), (0, S.DELETE_SEGMENT_STARTED, 0),
                                    (4, S.COPY_SEGMENT_FINISHED, 1), (4, S.DELETE_SEGMENT_STARTED, 0)]
    new_size = sum(m.segment_size_in_bytes for m in rlmm.list_remote_log_segments(TIP) if m.tiered_epoch == 1)
    local_only = sum(s.size for s in lg.log_segments() if s.base_offset > 7)
    set_config(lg, retention_bytes=str(new_size + local_only))
    assert rlm.expire(p, TIP) == 2                           # only the old ones
    assert states(rlmm) == [(0, S.COPY_SEGMENT_FINISHED, 1), (4, S.COPY_SEGMENT_FINISHED, 1)]
    assert lg.log_start_offset == 0


# ---------------------------------------------------------------------------------- read-only retention

def test_read_only_retention_expires_local_segments_only_after_the_remote_tier(tmp_path):
    lg = make_log(tmp_path)
    fill(lg, 10)                                             # [0,4) .. [16,20)
    lg.update_highest_offset_in_remote_storage(7)                  # [0,8) uploaded
    lg.delete_old_segments()
    assert (lg.log_start_offset, lg.local_log_start_offset) == (0, 8)
    seg = lg.log_segments()[0].size
    set_config(lg, remote_log_copy_disable="true", local_retention_bytes="-2", retention_bytes=str(seg))
    assert lg.delete_old_segments() == 0                     # remote data below: local waits
    lg.maybe_increment_log_start_offset(8)                   # the remote tier expired (expiration task)
    assert lg.delete_old_segments() == 2                     # no upload gate, retention.bytes, oldest first
    assert [s.base_offset for s in lg.log_segments()] == [16]
    assert lg.log_start_offset == lg.local_log_start_offset == 16


# ------------------------------------------------------------------------------------------------ configs

BROKER = {"remote.log.storage.system.enable": "true"}


@pytest.mark.parametrize("name", ["remote.log.copy.disable", "remote.log.delete.on.disable"])
def test_an_unsupported_policy_value_is_an_invalid_request(name):
    with pytest.raises(KafkaError) as e:
        lc.validate_topic_config({"remote.storage.enable": "true", name: "maybe"}, broker_config=BROKER)
    assert e.value.error == Errors.INVALID_REQUEST
    assert e.value.message == f"Invalid value maybe for configuration {name}: Expected value to be either true or false"
    with pytest.raises(InvalidConfigurationError, match="Unknown topic config name: nope"):
        lc.validate_topic_config({"nope": "1", name: "maybe"}, broker_config=BROKER)
    with pytest.raises(InvalidConfigurationError):                # KIP-405's own switch stays INVALID_CONFIG
        lc.validate_topic_config({"remote.storage.enable": "maybe"}, broker_config=BROKER)
    lc.validate_topic_config({"remote.storage.enable": "true", name: " TRUE "}, broker_config=BROKER)


def test_disablement_rules_against_the_existing_config():
    on = {"remote.storage.enable": "true", "local.retention.ms": "100", "retention.ms": "1000"}
    with pytest.raises(InvalidConfigurationError, match="It is invalid to disable remote storage without deleting"):
        lc.validate_topic_config({**on, "remote.storage.enable": "false"}, existing=on, broker_config=BROKER)
    with pytest.raises(InvalidConfigurationError, match="the `local.retention.ms` and `retention.ms` must be set"):
        lc.validate_topic_config({**on, "remote.log.copy.disable": "true"}, existing=on, broker_config=BROKER)
    for ok in ({**on, "remote.log.copy.disable": "true", "local.retention.ms": "-2"},
               {**on, "remote.log.copy.disable": "true", "local.retention.ms": "1000"},
               {**on, "remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}):
        lc.validate_topic_config(ok, existing=on, broker_config=BROKER)


@pytest.mark.parametrize("state, old, new, kind", [
    (None, {}, {"remote.storage.enable": "true"}, "create"),
    ("ENABLED", {"remote.storage.enable": "true"}, {"remote.storage.enable": "true",
                                                    "remote.log.copy.disable": "true"}, "disable"),
    ("ENABLED", {"remote.storage.enable": "true"}, {"remote.storage.enable": "false",
                                                    "remote.log.delete.on.disable": "true"}, "disable"),
    ("ENABLED", {"remote.storage.enable": "true"}, {"remote.storage.enable": "true", "retention.ms": "5"}, None),
    ("DISABLED", {"remote.storage.enable": "true", "remote.log.copy.disable": "true"},
     {"remote.storage.enable": "true"}, "enable"),
    ("DISABLED", {"remote.storage.enable": "false"}, {"remote.storage.enable": "true"}, "enable"),
    ("DISABLED", {"remote.storage.enable": "true", "remote.log.copy.disable": "true"},
     {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}, "disable"),
    ("DISABLED", {"remote.storage.enable": "false"}, {"remote.storage.enable": "false", "retention.ms": "5"}, None),
])
def test_which_config_changes_are_tiering_transitions(state, old, new, kind):
    assert classify_transition(state, old, new) == kind


def test_disablement_kind_follows_the_config():
    assert disablement_kind(LogConfig.from_props({"remote.storage.enable": "true"})) == NOT_DISABLED


class RetentionRacingLog(Log):
    """A log whose local retention runs (on its own thread, as the log manager's would) the first time the local
    log start offset is read: the moment a delete disablement decides where the log will start."""

    armed = False
    retention: threading.Thread | None = None

    @property
    def local_log_start_offset(self) -> int:
        start = super().local_log_start_offset
        if self.armed and self.retention is None:
            self.retention = threading.Thread(target=self.delete_old_segments)
            self.retention.start()
            self.retention.join(timeout=1.0)  # done, or blocked on the log's lock until the disablement is over
        return start


def test_delete_disablement_racing_local_retention_keeps_the_log_start_offset_on_data(tmp_path, stores,
                                                                                     rlm_factory):
    # Seed 73 of nemesis-tiered-disable-cycle: local retention deleted uploaded segments between the
    # disablement's read of the local log start offset and tiering being switched off; the log start offset
    # stayed below data that was then neither local nor remote.
    rlm = rlm_factory(started=False)
    lg = make_log(tmp_path)
    lg.__class__ = RetentionRacingLog
    fill(lg, 6)
    p = FakePartition(lg)
    CopyTask(rlm, p, TIP).run()                           # [0,4) [4,8) uploaded, still local: retention not run
    assert [s.base_offset for s in lg.log_segments()] == [0, 4, 8]
    set_config(lg, remote_storage_enable="false", remote_log_delete_on_disable="true")
    lg.armed = True
    rlm.disable_with_delete(p)
    lg.retention.join(timeout=10)
    assert not lg.retention.is_alive()
    assert not lg.remote_log_enabled
    first_local = lg.log_segments()[0].base_offset
    assert lg.log_start_offset == first_local             # every offset from the log start is still local
    assert lg.read(lg.log_start_offset, 1 << 20).records[:8] != b""
