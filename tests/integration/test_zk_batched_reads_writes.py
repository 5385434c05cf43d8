"""The controller's fan-out ZooKeeper traffic at scale, against a real ZooKeeper: pipelined reads with a bounded
window, leader/ISR writes and new partition states in fenced multis (issue 15)."""
from __future__ import annotations

import pytest
from kazoo.exceptions import NoAuthError
from kazoo.security import make_acl

from kafkatier.common.structs import LeaderAndIsr, TopicPartition
from kafkatier.zk import paths
from kafkatier.zk.client import get_many
from kafkatier.zk.fenced import ControllerMovedError, register_controller_and_increment_epoch
from kafkatier.zk.kafka_zk_client import MULTI_BATCH_PARTITIONS, KafkaZkClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PARTITIONS = 2 * MULTI_BATCH_PARTITIONS + 7  # three multis, the last one partial


def _states(epoch: int, partitions: int, leader: int = 1) -> dict[TopicPartition, LeaderAndIsr]:
    return {TopicPartition("t", p): LeaderAndIsr(leader, 0, (1, 2), epoch, partition_epoch=0)
            for p in range(partitions)}


def test_pipelined_reads_keep_order_and_report_missing_nodes(zk):
    for i in range(0, 10, 2):
        zk.create(f"/r/{i}", str(i).encode(), makepath=True)
    got = get_many(zk, [f"/r/{i}" for i in range(10)], max_in_flight=3)
    assert [g[0] if g else None for g in got] == [b"0", None, b"2", None, b"4", None, b"6", None, b"8", None]


def test_multireads_across_windows_return_every_znode_with_its_stat(zk):
    zk.ensure_path("/m")
    created = [zk.create_async(f"/m/{i}", str(i).encode()) for i in range(0, 1000, 3)]
    for c in created:
        c.get()
    zk.set("/m/3", b"three")
    # 1,000 paths in multiReads of 64, 3 in flight: 16 replies, the last one partial; a third of the paths exist.
    got = get_many(zk, [f"/m/{i}" for i in range(1000)], max_in_flight=3, paths_per_read=64)
    assert [i for i, g in enumerate(got) if g is not None] == list(range(0, 1000, 3))
    assert got[0][0] == b"0" and got[999][0] == b"999" and got[3] == (b"three", zk.get("/m/3")[1])
    assert got[3][1].version == 1 and got[6][1].version == 0
    assert get_many(zk, []) == []


def test_a_znode_the_session_may_not_read_fails_the_read(zk):
    zk.create("/secret", b"x", acl=[make_acl("world", "anyone", create=True, delete=True, admin=True)])
    zk.create("/open", b"y")
    with pytest.raises(NoAuthError):
        get_many(zk, ["/open", "/secret"])


def test_new_partition_states_and_elections_go_in_fenced_batches(zk):
    epoch, version = register_controller_and_increment_epoch(zk, 1, 1700000000000)
    kzc = KafkaZkClient(zk)
    zk.ensure_path(paths.topic("t"))
    # One state exists already (a previous controller's partial work): it is skipped, the others created.
    kzc.create_partition_states({TopicPartition("t", 5): _states(epoch, 6)[TopicPartition("t", 5)]}, version)
    created = kzc.create_partition_states(_states(epoch, PARTITIONS), version)
    assert len(created) == PARTITIONS - 1 and TopicPartition("t", 5) not in created
    current = kzc.get_partition_states(_states(epoch, PARTITIONS))
    assert len(current) == PARTITIONS

    # Elect leader 2 everywhere; one partition's state changed meanwhile (its zkVersion is stale).
    stale = TopicPartition("t", MULTI_BATCH_PARTITIONS + 3)
    zk.set(paths.partition_state("t", stale.partition), zk.get(paths.partition_state("t", stale.partition))[0])
    updates = {tp: LeaderAndIsr(2, l.leader_epoch + 1, (2,), epoch, l.partition_epoch) for tp, l in current.items()}
    written = kzc.update_leader_and_isr(updates, version)
    assert set(written) == set(updates) - {stale}
    after = kzc.get_partition_states(updates)
    assert all(after[tp].leader == 2 and after[tp].partition_epoch == written[tp].partition_epoch == 1
               for tp in written)
    assert after[stale].leader == 1

    # A controller that lost the epoch writes nothing.
    zk.delete(paths.CONTROLLER)
    register_controller_and_increment_epoch(zk, 2, 1700000000001)
    with pytest.raises(ControllerMovedError):
        kzc.update_leader_and_isr({tp: LeaderAndIsr(3, 9, (3,), epoch, after[tp].partition_epoch)
                                   for tp in list(written)[:3]}, version)
    assert all(l.leader == 2 for tp, l in kzc.get_partition_states(list(written)[:3]).items())


def test_pipelined_fenced_multis_fail_alone_and_stop_at_a_moved_fence(zk):
    """``multi_many``: each batch is its own fenced multi; one whose op fails is reported (nothing of it
    applied) while the others apply; once the fence has moved, no batch applies and ControllerMovedError."""
    from kafkatier.zk.errors import NodeExistsError

    from kafkatier.zk.fenced import Create, FencedZkWriter
    _, version = register_controller_and_increment_epoch(zk, 1, 1700000000000)
    zk.create("/m/taken", b"x", makepath=True)
    w = FencedZkWriter(zk, version)
    batches = [[Create(f"/m/a{i}"), Create(f"/m/b{i}")] for i in range(30)]
    batches[7] = [Create("/m/c7"), Create("/m/taken")]
    results = w.multi_many(batches, max_in_flight=4)
    assert isinstance(results[7], NodeExistsError) and results[7].op_index == 1
    assert zk.exists("/m/c7") is None
    assert all(r == [f"/m/a{i}", f"/m/b{i}"] for i, r in enumerate(results) if i != 7)

    zk.delete(paths.CONTROLLER)
    register_controller_and_increment_epoch(zk, 2, 1700000000001)
    with pytest.raises(ControllerMovedError):
        w.multi_many([[Create(f"/m/late{i}")] for i in range(20)], max_in_flight=4)
    assert not [c for c in zk.get_children("/m") if c.startswith("late")]
