"""ISR changes at scale against a real ZooKeeper (issue 27): a leader's ISR writes pipelined and fenced by each
partition's zkVersion, notifications carrying many partitions in Kafka's format, and the controller's side
reading and deleting them in batches."""
from __future__ import annotations

import json

import pytest

from kafkatier.common.structs import LeaderAndIsr, TopicPartition
from kafkatier.server.zk_isr_manager import IsrChangePropagationConfig, IsrWrite, ZkIsrManager
from kafkatier.zk import codecs, paths
from kafkatier.zk.fenced import ControllerMovedError, register_controller_and_increment_epoch
from kafkatier.zk.kafka_zk_client import KafkaZkClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PARTITIONS = 1200


def _create_states(zk, partitions: int) -> KafkaZkClient:
    kzc = KafkaZkClient(zk)
    _, version = register_controller_and_increment_epoch(zk, 1, 0)
    kzc.create_partition_states({TopicPartition("t", p): LeaderAndIsr(1, 0, (1,), 1, partition_epoch=0)
                                 for p in range(partitions)}, version)
    return kzc


def _clock():
    now = [1000.0]
    return now, (lambda: now[0])


def test_isr_writes_are_pipelined_fenced_by_version_and_propagated_in_one_notification(zk):
    _create_states(zk, PARTITIONS)
    # partition 7 moved on (the controller wrote it): its write fails, the others succeed
    zk.set(paths.partition_state("t", 7), codecs.LeaderIsrAndControllerEpoch(2, 1, (2,), 1).encode())
    now, clock = _clock()
    mgr = ZkIsrManager(zk, IsrChangePropagationConfig(), clock=clock)
    writes = [IsrWrite(("t", p), 1, 0, (1, 2), 1, 0) for p in range(PARTITIONS)]
    got = mgr.write(writes)
    assert got[("t", 7)] is None
    assert all(got[("t", p)] == 1 for p in range(PARTITIONS) if p != 7)
    assert json.loads(zk.get(paths.partition_state("t", 3))[0])["isr"] == [1, 2]
    # the same write again (as after a lost reply): the znode holds it already, at version 1 -> counted written
    again = mgr.write([IsrWrite(("t", 3), 1, 0, (1, 2), 1, 0)])
    assert again == {("t", 3): 1}
    # nothing propagated before the changes have been quiet for linger.ms (5 s)
    assert mgr.maybe_propagate_isr_changes() == 0
    assert zk.exists(paths.ISR_CHANGE_NOTIFICATION) is None or not zk.get_children(paths.ISR_CHANGE_NOTIFICATION)
    now[0] += 5.1
    assert mgr.maybe_propagate_isr_changes() == PARTITIONS - 1
    children = zk.get_children(paths.ISR_CHANGE_NOTIFICATION)
    assert len(children) == 1 and children[0].startswith("isr_change_")
    body = json.loads(zk.get(f"{paths.ISR_CHANGE_NOTIFICATION}/{children[0]}")[0])
    assert body["version"] == 1
    assert {(e["topic"], e["partition"]) for e in body["partitions"]} == {("t", p) for p in range(PARTITIONS)
                                                                        if p != 7}
    assert mgr.maybe_propagate_isr_changes() == 0  # nothing new


def test_changes_that_keep_coming_are_propagated_after_max_delay(zk):
    _create_states(zk, 3)
    now, clock = _clock()
    mgr = ZkIsrManager(zk, IsrChangePropagationConfig(check_interval_ms=2500, linger_ms=5000, max_delay_ms=60000),
                       clock=clock)
    for step in range(25):  # a change every 2.5 s: never quiet for 5 s
        mgr.record_isr_changes([TopicPartition("t", step % 3)])
        now[0] += 2.5
        if mgr.maybe_propagate_isr_changes():
            break
    assert 55 <= step * 2.5 <= 62.5
    # a change of a partition being reassigned does not linger
    assert mgr.write([IsrWrite(("t", 0), 1, 0, (1, 2), 1, 0, urgent=True)]) == {("t", 0): 1}
    assert mgr.maybe_propagate_isr_changes() == 1


def test_the_controller_reads_and_deletes_notifications_in_batches(zk):
    kzc = _create_states(zk, 10)
    epoch_version = zk.get(paths.CONTROLLER_EPOCH)[1].version
    zk.ensure_path(paths.ISR_CHANGE_NOTIFICATION)
    for i in range(30):
        zk.create(f"{paths.ISR_CHANGE_NOTIFICATION}/isr_change_", codecs.IsrChangeNotification(
            {("t", i % 10), ("u", i)}).encode(), sequence=True)
    zk.create(f"{paths.ISR_CHANGE_NOTIFICATION}/isr_change_", b"not json", sequence=True)
    found, tps = kzc.get_isr_change_notifications()
    assert len(found) == 31
    assert tps == {TopicPartition("t", p) for p in range(10)} | {TopicPartition("u", i) for i in range(30)}
    zk.delete(found[5])  # gone meanwhile: dropped from its batch, the rest deleted
    assert kzc.delete_fenced(found, epoch_version) == 30
    assert zk.get_children(paths.ISR_CHANGE_NOTIFICATION) == []
    zk.create(f"{paths.ISR_CHANGE_NOTIFICATION}/isr_change_", codecs.IsrChangeNotification({("t", 0)}).encode(),
              sequence=True)
    with pytest.raises(ControllerMovedError):
        kzc.delete_fenced(kzc.get_isr_change_notifications()[0], epoch_version + 1)
    assert len(zk.get_children(paths.ISR_CHANGE_NOTIFICATION)) == 1


def test_elections_that_lost_races_with_isr_writes_are_left_out_together(zk):
    kzc = _create_states(zk, PARTITIONS)
    epoch_version = zk.get(paths.CONTROLLER_EPOCH)[1].version
    moved = set(range(0, PARTITIONS, 7))  # leaders' ISR writes won these: every batch has many conflicts
    for p in moved:
        zk.set(paths.partition_state("t", p), codecs.LeaderIsrAndControllerEpoch(1, 0, (1, 2), 1).encode())
    updates = {TopicPartition("t", p): LeaderAndIsr(2, 1, (2,), 1, partition_epoch=0) for p in range(PARTITIONS)}
    written = kzc.update_leader_and_isr(updates, epoch_version)
    assert set(written) == {TopicPartition("t", p) for p in range(PARTITIONS) if p not in moved}
    assert all(l.partition_epoch == 1 for l in written.values())
    assert json.loads(zk.get(paths.partition_state("t", 7))[0])["isr"] == [1, 2]


def test_isr_writes_in_multis_survive_many_moved_partitions(zk):
    """Writes go in multis, each failing whole on its first moved partition: with one partition in ten moved,
    every multi fails again and again, and the writes left after the last round go one by one."""
    _create_states(zk, PARTITIONS)
    moved = set(range(0, PARTITIONS, 10))
    for p in moved:
        zk.set(paths.partition_state("t", p), codecs.LeaderIsrAndControllerEpoch(2, 1, (2,), 1).encode())
    mgr = ZkIsrManager(zk, IsrChangePropagationConfig())
    got = mgr.write([IsrWrite(("t", p), 1, 0, (1, 2), 1, 0) for p in range(PARTITIONS)])
    assert {p for p in range(PARTITIONS) if got[("t", p)] is None} == moved
    assert all(got[("t", p)] == 1 for p in range(PARTITIONS) if p not in moved)
    assert json.loads(zk.get(paths.partition_state("t", 1))[0])["isr"] == [1, 2]
    assert json.loads(zk.get(paths.partition_state("t", 10))[0])["isr"] == [2]
    assert mgr.metrics["isr_writes"] == PARTITIONS - len(moved)
