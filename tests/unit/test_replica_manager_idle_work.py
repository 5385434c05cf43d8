"""Idle work proportional to change (issue 27): the high-watermark checkpoint is rewritten only when a high
watermark (or a log's place) changed; follower fetches and ISR-expiration rounds write their ISR changes
together."""
from __future__ import annotations

import os

import pytest
from batches import producer_batch

from kafkatier.log.log_manager import LogManager
from kafkatier.server.replica_manager import FetchPartitionData, ReplicaManager
from kafkatier.protocol.control_messages import LeaderAndIsrRequestData


@pytest.fixture
def rm(tmp_path):
    lm = LogManager([str(tmp_path / "d1")])
    lm.startup()
    r = ReplicaManager(1, lm, lambda t: {})
    yield r
    r.shutdown()
    lm.shutdown()


def lead(rm: ReplicaManager, partitions: int, replicas=(1, 2), isr=(1,)) -> None:
    rm.handle_leader_and_isr(LeaderAndIsrRequestData.from_json(7, {"controller_epoch": 1, "topic_states": [{"topic_name": "t", "partition_states": [
        {"partition_index": p, "leader": 1, "leader_epoch": 0, "isr": list(isr), "replicas": list(replicas),
         "is_new": True, "partition_epoch": 0} for p in range(partitions)]}]}))


def test_the_high_watermark_checkpoint_is_written_only_after_a_change(rm, tmp_path):
    lead(rm, 3, replicas=(1,), isr=(1,))
    path = str(tmp_path / "d1" / "replication-offset-checkpoint")
    rm.checkpoint_high_watermarks()
    first = os.stat(path).st_mtime_ns
    os.utime(path, ns=(1, 1))
    rm.checkpoint_high_watermarks()  # nothing changed: not rewritten
    assert os.stat(path).st_mtime_ns == 1
    rm.partitions[("t", 1)].log.update_high_watermark(0)  # same value: still nothing to write
    rm.checkpoint_high_watermarks()
    assert os.stat(path).st_mtime_ns == 1
    lead_more = {"controller_epoch": 1, "topic_states": [{"topic_name": "u", "partition_states": [
        {"partition_index": 0, "leader": 1, "leader_epoch": 0, "isr": [1], "replicas": [1], "is_new": True}]}]}
    rm.handle_leader_and_isr(LeaderAndIsrRequestData.from_json(7, lead_more))  # a new partition: written again
    rm.checkpoint_high_watermarks()
    assert os.stat(path).st_mtime_ns != 1 and first


def test_one_follower_fetch_writes_every_isr_expansion_it_allows_in_one_batch(rm, monkeypatch):
    lead(rm, 50)
    batches = []
    real = rm.isr_manager.write

    def write(writes):
        writes = list(writes)
        batches.append(len(writes))
        return real(writes)
    monkeypatch.setattr(rm.isr_manager, "write", write)
    answered = []
    rm.fetch_messages(2, 0, 1, 1 << 20, [FetchPartitionData(("t", p), 0) for p in range(50)], answered.append)
    assert batches == [50]
    assert all(p.isr == (1, 2) and p.partition_epoch == 1 for p in rm.partitions.values())
    assert rm.isr_manager.pending() == {("t", p) for p in range(50)}
    rm.fetch_messages(2, 0, 1, 1 << 20, [FetchPartitionData(("t", p), 0) for p in range(50)], answered.append)
    assert batches == [50]  # nothing more to write


def test_an_idle_follower_fetch_that_expires_answers_from_offsets_and_reuses_its_answers(rm, monkeypatch):
    lead(rm, 4, replicas=(1, 2), isr=(1, 2))
    rm.append_records(1000, 1, {("t", 3): producer_batch()}, lambda res: None)
    reads = []
    real = rm.read_partition
    monkeypatch.setattr(rm, "read_partition", lambda *a, **kw: reads.append(a[1].tp) or real(*a, **kw))
    fps = [FetchPartitionData(("t", p), 0, current_leader_epoch=0) for p in range(3)]
    fps.append(FetchPartitionData(("t", 3), 0, current_leader_epoch=0))  # behind: has something to read
    fps.append(FetchPartitionData(("u", 0), 0, current_leader_epoch=0))  # not hosted: an error to answer
    answers = []
    rm.fetch_messages(2, 0, 1, 1 << 20, fps, answers.append)
    (first,) = answers
    assert sorted(reads) == [("t", 3), ("u", 0)]
    assert [first[("t", p)].error for p in range(3)] == [0, 0, 0]
    assert first[("t", 3)].records and first[("u", 0)].error != 0
    answers.clear()
    rm.fetch_messages(2, 0, 1, 1 << 20, fps[:3], answers.append)
    assert all(answers[0][("t", p)] is first[("t", p)] for p in range(3))  # offsets unchanged: the same answers
    stale = [FetchPartitionData(("t", 0), 0, current_leader_epoch=1)]  # another leader epoch: read, an error
    answers.clear()
    rm.fetch_messages(2, 0, 1, 1 << 20, stale, answers.append)
    assert answers[0][("t", 0)].error != 0


@pytest.mark.parametrize("partitions, lines", [(3, 3), (150, 0)])
def test_a_large_batch_of_isr_expansions_logs_no_line_per_partition(rm, caplog, partitions, lines):
    """A restarted follower rejoining thousands of ISRs: the ISR manager's one summary line, each partition's at
    DEBUG (13,333 INFO lines held a leader's GIL for most of a second)."""
    lead(rm, partitions)
    caplog.set_level("INFO", logger="kafkatier")
    rm.fetch_messages(2, 0, 1, 1 << 20, [FetchPartitionData(("t", p), 0) for p in range(partitions)],
                      lambda answer: None)
    assert all(p.isr == (1, 2) for p in rm.partitions.values())
    assert sum(r.getMessage().startswith("ISR updated") for r in caplog.records) == lines


def test_a_quiet_follower_waits_without_reading_and_an_append_ends_its_wait(rm, monkeypatch):
    import threading
    lead(rm, 3, replicas=(1, 2), isr=(1, 2))
    monkeypatch.setattr(rm, "read_partition", lambda *a, **kw: pytest.fail("a quiet wait read a partition"))
    answered = threading.Event()
    seq = rm.change_seq
    rm.wait_quiet_follower(2, 20, seq, answered.set, lambda ms: pytest.fail("nothing changed"))
    assert answered.wait(10)   # the wait ended, answered as quiet
    busy = []
    woke = threading.Event()
    rm.wait_quiet_follower(2, 60000, rm.change_seq, lambda: pytest.fail("an append is news"),
                           lambda ms: (busy.append(ms), woke.set()))
    rm.append_records(1000, 1, {("t", 0): producer_batch()}, lambda res: None)
    assert woke.wait(10) and 0 < busy[0] <= 60000   # ended at once, the rest of the wait handed on


def test_a_quiet_session_is_read_whole_at_least_three_times_per_replica_lag_time(tmp_path):
    """The full reads refresh the followers' caught-up times: a small replica.lag.time.max.ms must not see a
    quiet follower as lagging."""
    lm = LogManager([str(tmp_path / "d2")])
    for lag_ms, refresh_s in ((30000, 5.0), (3000, 1.0)):
        r = ReplicaManager(1, lm, lambda t: {}, replica_lag_time_max_ms=lag_ms)
        try:
            assert r.quiet_refresh_s == refresh_s
        finally:
            r.shutdown()
