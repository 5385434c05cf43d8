"""A partition's log reads its producer state back on first use, not when it is created (a restarted
broker's LeaderAndIsr creates thousands of partitions, issue 27).  The state must be what building it at
creation gave: a restarted follower's first append and the leadership after it keep the producer's sequence."""
from __future__ import annotations

from batches import producer_batch as batch

from kafkatier.log.log import Log
from kafkatier.protocol.control_messages import LeaderAndIsrPartitionState
from kafkatier.server.partition import Partition


def partition(log: Log) -> Partition:
    return Partition("t", 0, 2, log, lambda writes: {w.tp: w.expected_version + 1 for w in writes}, lambda: 1)


def follow(p: Partition, leader_epoch: int) -> None:
    p.make_follower(LeaderAndIsrPartitionState(leader=1, leader_epoch=leader_epoch, isr=(1, 2), replicas=(1, 2)), 1)


def lead(p: Partition, leader_epoch: int) -> None:
    p.make_leader(LeaderAndIsrPartitionState(leader=2, leader_epoch=leader_epoch, isr=(2,), replicas=(1, 2)), 1)


def test_creating_a_partition_reads_nothing_of_its_producer_state(tmp_path, monkeypatch):
    log = Log(str(tmp_path / "t-0"))
    calls = []
    monkeypatch.setattr("kafkatier.log.producer_state.ProducerStateManager.rebuild",
                        lambda self, lg: calls.append(lg))
    p = partition(log)
    follow(p, 1)
    assert calls == []
    p.producer_state  # first use
    assert calls == [log]
    p.producer_state
    assert calls == [log]


def test_a_restarted_followers_first_append_keeps_the_producers_sequence(tmp_path):
    log = Log(str(tmp_path / "t-0"))
    first = partition(log)
    lead(first, 0)
    first.append_records_to_leader(batch(7, 0, 0), required_acks=1)
    # Restarted: a new partition on the same log, following; the leader sends the producer's next batch.
    p = partition(log)
    follow(p, 1)
    leader_log = Log(str(tmp_path / "leader-0"))
    leader_log.append_as_leader(batch(7, 0, 0), leader_epoch=0)
    p.append_records_to_follower(leader_log.append_as_leader(batch(7, 0, 2), leader_epoch=1).records)
    assert p.producer_state.active_producers()[7].last_sequence == 3
    # Then it leads: the producer's next batch is in sequence, a retry of the last one a duplicate.
    lead(p, 2)
    info = p.append_records_to_leader(batch(7, 0, 4), required_acks=1)
    assert info.num_batches == 1
    dup = p.append_records_to_leader(batch(7, 0, 4), required_acks=1)
    assert type(dup).__name__ == "DuplicateAppend"
