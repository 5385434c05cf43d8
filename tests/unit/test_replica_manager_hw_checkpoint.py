"""The high-watermark checkpoint (issue 27): an idle broker reads two numbers every interval; a moved high
watermark, a partition leaving or joining, and a failed write each make the next pass write the file."""
from __future__ import annotations

import os

import pytest

from kafkatier.log.errors import KafkaStorageError
from kafkatier.log.log_manager import LogManager
from kafkatier.protocol.control_messages import LeaderAndIsrRequestData, StopReplicaRequestData
from kafkatier.server.replica_manager import ReplicaManager


@pytest.fixture
def rm(tmp_path):
    lm = LogManager([str(tmp_path / "d1")])
    lm.startup()
    r = ReplicaManager(1, lm, lambda t: {})
    r.handle_leader_and_isr(LeaderAndIsrRequestData.from_json(7, {"controller_epoch": 1, "topic_states": [
        {"topic_name": "t", "partition_states": [
            {"partition_index": p, "leader": 1, "leader_epoch": 0, "isr": [1], "replicas": [1], "is_new": True,
             "partition_epoch": 0} for p in range(3)]}]}))
    yield r
    r.shutdown()
    lm.shutdown()


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "d1" / "replication-offset-checkpoint")


def _written_since(path: str) -> bool:
    return os.stat(path).st_mtime_ns != 1


def _checkpointed_and_aged(rm: ReplicaManager, path: str) -> None:
    rm.checkpoint_high_watermarks()
    os.utime(path, ns=(1, 1))


def test_an_idle_pass_reads_no_high_watermark(rm, path, monkeypatch):
    _checkpointed_and_aged(rm, path)
    monkeypatch.setattr(rm, "high_watermarks", lambda: pytest.fail("an idle pass read every high watermark"))
    for _ in range(3):
        rm.checkpoint_high_watermarks()
    assert not _written_since(path)


def test_a_high_watermark_moved_by_the_log_alone_is_written(rm, path):
    """As a follower's fetcher moves it: through the log, not through the replica manager."""
    _checkpointed_and_aged(rm, path)
    plog = rm.partitions[("t", 2)].log
    plog.truncate_fully_and_start_at(7)
    rm.checkpoint_high_watermarks()
    assert _written_since(path)
    with open(path) as f:
        assert "t 2 7" in f.read().splitlines()


def test_a_partition_stopped_without_deletion_is_written_out(rm, path):
    _checkpointed_and_aged(rm, path)
    rm.handle_stop_replica(StopReplicaRequestData.from_json(3, {
        "controller_id": 0, "controller_epoch": 1, "broker_epoch": -1, "topic_states": [
            {"topic_name": "t", "partition_states": [
                {"partition_index": 0, "leader_epoch": 1, "delete_partition": False}]}]}))
    rm.checkpoint_high_watermarks()
    assert _written_since(path)
    with open(path) as f:
        assert not any(line.startswith("t 0 ") for line in f.read().splitlines())


def test_a_failed_write_is_tried_again_at_the_next_pass(rm, path, monkeypatch):
    _checkpointed_and_aged(rm, path)
    rm.partitions[("t", 1)].log.truncate_fully_and_start_at(4)
    lm = rm.log_manager
    real = lm.checkpoint_high_watermarks
    monkeypatch.setattr(lm, "checkpoint_high_watermarks",
                        lambda hws: (_ for _ in ()).throw(KafkaStorageError("disk full")))
    rm.checkpoint_high_watermarks()
    monkeypatch.setattr(lm, "checkpoint_high_watermarks", real)
    rm.checkpoint_high_watermarks()
    assert _written_since(path)
