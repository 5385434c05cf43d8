"""DeleteRecords on a leader (docs/kip-107-delete-records.md, from #order-of-checks to #checkpoint-files): order of
checks and errors, the purgatory completed by follower fetches, expiry, leadership changes, segment deletion and the
log start offset checkpoint.

A real ReplicaManager and LogManager (tmp dirs, no ZooKeeper) host ``t-0`` with replicas 1 (this broker, leader),
2 and 3; followers are simulated by Fetch calls with a replica id, as the real fetchers make them."""
from __future__ import annotations

import os
import time
from concurrent.futures import Future

import pytest
from kafka.protocol.admin import DeleteRecordsRequest

from kafkatier.common.structs import TopicPartition
from kafkatier.log.log_manager import LogManager
from kafkatier.protocol.errors import Errors
from kafkatier.server.auth_helper import AuthHelper
from kafkatier.server.delete_records import DeleteRecordsManager
from kafkatier.server.metadata_cache import MetadataCache
from kafkatier.server.network import ConnectionContext
from kafkatier.server.replica_manager import FetchPartitionData, ReplicaManager
from kafkatier.waiting import wait_for
from kafkatier.protocol.control_messages import LeaderAndIsrRequestData, StopReplicaRequestData, UpdateMetadataRequestData

from tests.unit.fakes import record_batch


def records(n: int) -> bytes:
    """``n`` keyed records (some topics are compacted) stamped now."""
    return record_batch(n, ts=int(time.time() * 1000), value_size=0, keyed=True)


T = DeleteRecordsRequest.DeleteRecordsTopic
P = T.DeleteRecordsPartition


def partition_state(topic: str, p: int, leader: int, epoch: int, replicas=(1, 2, 3), isr=None) -> dict:
    return {"partition_index": p, "controller_epoch": 1, "leader": leader,
            "leader_epoch": epoch, "isr": list(isr if isr is not None else replicas), "partition_epoch": epoch,
            "replicas": list(replicas), "adding_replicas": [], "removing_replicas": [], "is_new": True}


def metadata_state(*args, **kw) -> dict:
    """The UpdateMetadata form of :func:`partition_state`."""
    ps = partition_state(*args, **kw)
    return {**{k: ps[k] for k in ("partition_index", "controller_epoch", "leader", "leader_epoch", "isr", "replicas")},
            "zk_version": ps["partition_epoch"]}


class Header:
    def __init__(self, version: int = 2):
        self.request_api_key = 21
        self.request_api_version = version
        self.client_id = "test"


class Harness:
    def __init__(self, tmp_path, configs=None, alive=(1, 2, 3), authorizer=None, segment_bytes=None):
        self.configs = dict(configs or {})
        if segment_bytes:
            self.configs.setdefault("t", {})["segment.bytes"] = str(segment_bytes)
        self.cache = MetadataCache(1)
        self.lm = LogManager([str(tmp_path / "d1")], broker_id=1, cluster_id="c",
                             topic_configs=lambda t: self.configs.get(t, {}))
        self.rm = ReplicaManager(1, self.lm, lambda t: self.configs.get(t, {}), zk=None, metadata_cache=self.cache,
                                 replica_lag_time_max_ms=30000)
        self.mgr = DeleteRecordsManager(1, self.rm, self.cache, AuthHelper(authorizer))
        self.epoch = 0
        self.set_alive(alive)

    def set_alive(self, alive) -> None:
        self.cache.update(UpdateMetadataRequestData.from_json(8, {"controller_id": 1, "live_brokers": [
            {"id": b, "endpoints": [{"host": "127.0.0.1", "port": 1}]} for b in alive], "topic_states": [
            {"topic_name": t, "partition_states": [metadata_state(t, 0, 1, 1)]}
            for t in ("t", "c", "cd", "__consumer_offsets", "elsewhere")]}))

    def lead(self, topic: str = "t", leader: int = 1) -> None:
        self.epoch += 1
        self.rm.handle_leader_and_isr(LeaderAndIsrRequestData.from_json(7, {"controller_epoch": 1, "topic_states": [
            {"topic_name": topic, "partition_states": [partition_state(topic, 0, leader, self.epoch)]}]}))

    def partition(self, topic: str = "t"):
        return self.rm.get_partition(topic, 0)

    def produce(self, n: int, topic: str = "t") -> None:
        self.partition(topic).append_records_to_leader(records(n), 1)

    def follower_fetch(self, replica: int, log_start_offset: int, topic: str = "t", fetch_offset=None) -> None:
        p = self.partition(topic)
        off = p.log.log_end_offset if fetch_offset is None else fetch_offset
        self.rm.fetch_messages(replica, 0, 1, 1 << 20, [FetchPartitionData(
            TopicPartition(topic, 0), off, 1 << 20, log_start_offset=log_start_offset)], lambda _r: None)

    def catch_up(self, lso: int = 0, topic: str = "t") -> None:
        for r in (2, 3):
            self.follower_fetch(r, lso, topic)

    def delete(self, parts: dict, timeout_ms: int = 5000, principal: str = "User:ANONYMOUS",
               version: int = 2) -> Future:
        topics: dict[str, list] = {}
        for (t, p), off in parts:
            topics.setdefault(t, []).append(P(partition_index=p, offset=off))
        req = DeleteRecordsRequest(topics=[T(name=t, partitions=ps) for t, ps in topics.items()],
                                   timeout_ms=timeout_ms, version=version)
        ctx = ConnectionContext("c1", ("127.0.0.1", 5555), principal=principal)
        return self.mgr.handle(Header(version), req, ctx)

    def close(self) -> None:
        self.rm.shutdown()
        self.lm.shutdown()


def result(fut: Future, timeout: float = 5.0) -> dict:
    resp = fut.result(timeout)
    return {(t.name, p.partition_index): (p.error_code, p.low_watermark) for t in resp.topics for p in t.partitions}


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path, configs={"c": {"cleanup.policy": "compact"}, "cd": {"cleanup.policy": "compact,delete"}})
    harness.lead()
    harness.produce(10)
    harness.catch_up(0)
    assert harness.partition().high_watermark == 10
    yield harness
    harness.close()


# ------------------------------------------------------------------------------------------------ happy path

def test_waits_for_followers_then_answers_the_low_watermark(h):
    fut = h.delete([(("t", 0), 2)])
    assert not fut.done()  # followers still report log start offset 0
    assert h.partition().log.log_start_offset == 2
    h.follower_fetch(2, 2)
    assert not fut.done()
    h.follower_fetch(3, 2)
    assert result(fut) == {("t", 0): (0, 2)}


def test_minus_one_means_the_high_watermark(h):
    fut = h.delete([(("t", 0), -1)])
    h.catch_up(10)
    assert result(fut) == {("t", 0): (0, 10)}
    off = h.rm.fetch_offset_for_timestamp("t", 0, -2, -1)
    assert off[0] == 10


def test_offset_below_the_log_start_offset_is_a_no_op(h):
    fut = h.delete([(("t", 0), 5)])
    h.catch_up(5)
    assert result(fut) == {("t", 0): (0, 5)}
    assert result(h.delete([(("t", 0), 3)])) == {("t", 0): (0, 5)}  # answered at once, no error
    assert h.partition().log.log_start_offset == 5


def test_offset_equal_to_the_high_watermark_is_legal(h):
    fut = h.delete([(("t", 0), 10)])
    h.catch_up(10)
    assert result(fut) == {("t", 0): (0, 10)}


# ------------------------------------------------------------------------------------------------ errors

@pytest.mark.parametrize("offset", [11, 15, -2, -100])
def test_out_of_range_offsets(h, offset):
    assert result(h.delete([(("t", 0), offset)])) == {("t", 0): (Errors.OFFSET_OUT_OF_RANGE, -1)}
    assert h.partition().log.log_start_offset == 0


def test_error_cases_each_with_low_watermark_minus_one(h):
    for t in ("c", "cd", "__consumer_offsets"):
        h.lead(t)
        h.produce(3, t)
        h.catch_up(0, t)
    h.lead("f", leader=2)  # this broker follows f-0
    h.cache.update(UpdateMetadataRequestData.from_json(8, {"controller_id": 1, "live_brokers": [{"id": b, "endpoints": [{"host": "h", "port": 1}]}
                                                         for b in (1, 2, 3)],
                    "topic_states": [{"topic_name": "f", "partition_states": [metadata_state("f", 0, 2, 1)]}]}))
    fut = h.delete([(("nosuch", 0), 1), (("t", 7), 1), (("c", 0), 1), (("__consumer_offsets", 0), 1),
                    (("f", 0), 1), (("elsewhere", 0), 1), (("cd", 0), 1)])
    h.catch_up(1, "cd")
    assert result(fut) == {
        ("nosuch", 0): (Errors.UNKNOWN_TOPIC_OR_PARTITION, -1),
        ("t", 7): (Errors.UNKNOWN_TOPIC_OR_PARTITION, -1),
        ("c", 0): (Errors.POLICY_VIOLATION, -1),
        ("__consumer_offsets", 0): (Errors.INVALID_TOPIC_EXCEPTION, -1),
        ("f", 0): (Errors.NOT_LEADER_OR_FOLLOWER, -1),          # hosted here as a follower
        ("elsewhere", 0): (Errors.NOT_LEADER_OR_FOLLOWER, -1),  # known, not hosted here
        ("cd", 0): (Errors.NONE, 1),                            # compact,delete is allowed
    }


def test_offline_partition_is_a_storage_error(h):
    h.rm.offline_partitions.add(("t", 0))
    assert result(h.delete([(("t", 0), 1)])) == {("t", 0): (Errors.KAFKA_STORAGE_ERROR, -1)}


def test_policy_violation_message(h):
    from kafkatier.protocol.errors import PolicyViolationError
    h.lead("c")
    with pytest.raises(PolicyViolationError, match=r"^Records of partition c-0 can not be deleted due to the "
                                                    r"configured policy$"):
        h.mgr.delete_on_leader(("c", 0), 0)


class DenyAll:
    def __init__(self, allowed=()):
        self.allowed = set(allowed)
        self.calls = []

    def authorize(self, principal, host, operation, resource_type, name):
        self.calls.append((principal, host, operation, resource_type, name))
        return name in self.allowed


def test_authorization_runs_before_the_existence_check(tmp_path):
    auth = DenyAll(allowed={"t"})
    h = Harness(tmp_path, authorizer=auth)
    try:
        h.lead()
        h.produce(10)
        h.catch_up(0)
        fut = h.delete([(("nosuch", 0), 1), (("__consumer_offsets", 0), 1), (("t", 0), 1)], principal="User:bob")
        h.catch_up(1)
        assert result(fut) == {("nosuch", 0): (Errors.TOPIC_AUTHORIZATION_FAILED, -1),
                               ("__consumer_offsets", 0): (Errors.TOPIC_AUTHORIZATION_FAILED, -1),
                               ("t", 0): (Errors.NONE, 1)}
        assert ("User:bob", "127.0.0.1", "Delete", "Topic", "nosuch") in auth.calls
    finally:
        h.close()


def test_duplicate_partitions_answer_once_with_the_last_offset(h):
    fut = h.delete([(("t", 0), 2), (("t", 0), 4)])
    h.catch_up(4)
    assert result(fut) == {("t", 0): (0, 4)}


@pytest.mark.parametrize("version", [0, 1, 2])
def test_all_versions(h, version):
    fut = h.delete([(("t", 0), 1)], version=version)
    h.catch_up(1)
    assert fut.result(5).version == version
    assert result(fut) == {("t", 0): (0, 1)}


# ------------------------------------------------------------------------------------------------ purgatory

def test_expiry_answers_request_timed_out_with_the_request_time_low_watermark(h):
    h.follower_fetch(2, 0)
    t0 = time.monotonic()
    fut = h.delete([(("t", 0), 5)], timeout_ms=300)
    h.follower_fetch(3, 5)  # one follower follows, the other does not
    assert result(fut) == {("t", 0): (Errors.REQUEST_TIMED_OUT, 0)}
    assert time.monotonic() - t0 >= 0.25
    wait_for(lambda: h.rm.delete_records_purgatory.metrics["expired"] >= 1, 5, message="the expiry count")


def test_timeout_zero_checks_once_then_expires(h):
    assert result(h.delete([(("t", 0), 3)], timeout_ms=0)) == {("t", 0): (Errors.REQUEST_TIMED_OUT, 0)}
    h.catch_up(3)
    assert result(h.delete([(("t", 0), 3)], timeout_ms=0)) == {("t", 0): (Errors.NONE, 3)}


def test_replicas_of_dead_brokers_are_ignored(h):
    h.set_alive((1, 2))
    fut = h.delete([(("t", 0), 4)])
    h.follower_fetch(2, 4)
    assert result(fut) == {("t", 0): (0, 4)}


def test_a_follower_dying_while_pending_is_noticed_on_update_metadata(h):
    fut = h.delete([(("t", 0), 4)])
    h.follower_fetch(2, 4)
    assert not fut.done()  # broker 3 is alive and has not followed
    h.set_alive((1, 2))    # the controller's UpdateMetadata after broker 3 died
    h.rm.on_metadata_update()
    assert result(fut) == {("t", 0): (0, 4)}


def test_follower_unknown_until_it_fetches_from_a_new_leader(h):
    h.lead()  # leader anew: followers' log start offsets are unknown (-1)
    assert h.partition().low_watermark() == -1
    fut = h.delete([(("t", 0), 1)])
    h.follower_fetch(2, 1)
    assert not fut.done()
    h.follower_fetch(3, 1)
    assert result(fut) == {("t", 0): (0, 1)}


def test_losing_leadership_completes_with_not_leader(h):
    fut = h.delete([(("t", 0), 5)])
    assert not fut.done()
    h.lead(leader=2)  # LeaderAndIsr makes this broker a follower
    assert result(fut) == {("t", 0): (Errors.NOT_LEADER_OR_FOLLOWER, -1)}


def test_stop_replica_completes_with_not_leader(h):
    fut = h.delete([(("t", 0), 5)])
    h.rm.handle_stop_replica(StopReplicaRequestData.from_json(5, {"controller_epoch": 1, "topic_states": [
        {"topic_name": "t", "partition_states": [{"partition_index": 0, "delete_partition": False,
                                                  "leader_epoch": -1}]}]}))
    assert result(fut) == {("t", 0): (Errors.NOT_LEADER_OR_FOLLOWER, -1)}


def test_mixed_pending_and_failed_partitions(h):
    fut = h.delete([(("t", 0), 5), (("nosuch", 1), 1)], timeout_ms=5000)
    assert not fut.done()
    h.catch_up(5)
    assert result(fut) == {("t", 0): (0, 5), ("nosuch", 1): (Errors.UNKNOWN_TOPIC_OR_PARTITION, -1)}


def test_future_log_counts_for_the_low_watermark(h):
    class Future_:
        log_start_offset = 1
    h.catch_up(0)
    fut = h.delete([(("t", 0), 3)])
    h.partition().future_log = Future_()
    h.catch_up(3)
    assert not fut.done()
    Future_.log_start_offset = 3
    h.catch_up(3)
    assert result(fut) == {("t", 0): (0, 3)}


# ------------------------------------------------------------------------------------------------ disk

def read_checkpoint(d: str) -> list[str]:
    path = os.path.join(d, "log-start-offset-checkpoint")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().splitlines()


def test_segments_below_are_deleted_and_the_checkpoint_is_written(tmp_path):
    h = Harness(tmp_path, segment_bytes=200)
    try:
        h.lead()
        for _ in range(6):
            h.produce(5)
        h.catch_up(0)
        plog = h.partition().log
        assert plog.num_segments > 3
        bases = [s.base_offset for s in plog.log_segments()]
        fut = h.delete([(("t", 0), 12)])
        h.catch_up(12)
        assert result(fut) == {("t", 0): (0, 12)}
        remaining = [s.base_offset for s in plog.log_segments()]
        assert remaining[0] == max(b for b in bases if b <= 12)
        assert len(remaining) < len(bases)
        lines = read_checkpoint(str(tmp_path / "d1"))
        assert lines[:2] == ["0", "1"] and lines[2:] == ["t 0 12"]
        with pytest.raises(Exception, match="only have log segments starting from offset: 12"):
            plog.read(11, 1000)
    finally:
        h.close()


def test_follower_hook_deletes_segments_and_checkpoints(tmp_path):
    h = Harness(tmp_path, segment_bytes=200)
    try:
        h.lead("t", leader=2)  # follower of t-0
        p = h.partition()
        for _ in range(6):
            p.log.append_as_leader(records(5), 1)  # stand-in for replicated batches
        p.log.update_high_watermark(30)
        h.rm._on_follower_fetched(p)  # first sighting, nothing to do
        assert read_checkpoint(str(tmp_path / "d1"))[2:] == []
        p.log.maybe_increment_log_start_offset_as_follower(17)
        h.rm._on_follower_fetched(p)
        assert read_checkpoint(str(tmp_path / "d1"))[2:] == ["t 0 17"]
        assert p.log.log_segments()[0].base_offset <= 17 < (p.log.log_segments()[1].base_offset
                                                            if p.log.num_segments > 1 else 31)
    finally:
        h.close()
