"""A controller failover elects and takes dead replicas out of ISRs from the states it has just read, without
reading every state znode again; a write that lost a race with a leader's ISR write is read again and retried."""
from __future__ import annotations

from kafkatier.common.structs import BrokerInfo, LeaderAndIsr, TopicPartition
from kafkatier.controller.context import ControllerContext, PartitionState, ReplicaAssignment
from kafkatier.controller.partition_state_machine import PartitionStateMachine
from kafkatier.controller.replica_state_machine import ReplicaStateMachine
from kafkatier.controller.request_batch import ControllerBrokerRequestBatch
from kafkatier.zk.kafka_zk_client import KafkaZkClient


class _StateZk(KafkaZkClient):
    """The state znodes as a dict (the partition epoch is the znode version); counts the partitions read."""

    def __init__(self, states: dict[TopicPartition, LeaderAndIsr]):
        self.states = dict(states)
        self.read: list[TopicPartition] = []

    def get_partition_states(self, tps):
        tps = list(tps)
        self.read += tps
        return {tp: self.states[tp] for tp in tps if tp in self.states}

    def create_partition_states(self, states, epoch_zk_version):
        assert not states
        return {}

    def update_leader_and_isr(self, updates, epoch_zk_version):
        out = {}
        for tp, l in updates.items():
            if self.states[tp].partition_epoch == l.partition_epoch:  # a conditional setData
                out[tp] = self.states[tp] = LeaderAndIsr(l.leader, l.leader_epoch, l.isr, l.controller_epoch,
                                                         partition_epoch=l.partition_epoch + 1)
        return out


def _cluster(partitions: int = 6):
    """Broker 1 is dead; it led partition p when p % 3 == 0 and follows the others."""
    ctx = ControllerContext()
    ctx.epoch, ctx.epoch_zk_version = 4, 4
    for b in (2, 3):
        ctx.live_brokers[b] = BrokerInfo(b, "127.0.0.1", 9090 + b, epoch=100 + b)
    ctx.all_topics.add("t")
    states = {}
    for p in range(partitions):
        tp = TopicPartition("t", p)
        replicas = tuple(1 + (p + i) % 3 for i in range(3))
        ctx.update_assignment(tp, ReplicaAssignment(replicas))
        states[tp] = LeaderAndIsr(replicas[0], 5, (1, 2, 3), 3, partition_epoch=9)
    zk = _StateZk(states)
    ctx.partition_leadership.update(zk.get_partition_states(states))  # the failover's read
    zk.read.clear()
    batch = ControllerBrokerRequestBatch(2, ctx, lambda *a: True)
    return ctx, zk, batch


def test_failover_elects_and_shrinks_isrs_without_reading_the_states_again():
    ctx, zk, batch = _cluster()
    with batch.coalesced(lambda: ctx.epoch, update_metadata_first=True):
        PartitionStateMachine(ctx, batch, zk, lambda topic: False).startup()
        ReplicaStateMachine(ctx, batch, zk).startup()
    assert zk.read == []
    for tp, l in zk.states.items():
        assert l.leader in (2, 3) and 1 not in l.isr and l.leader_epoch == 6, (tp, l)


def test_a_state_that_moved_since_the_failover_read_is_read_again_and_decided_again():
    ctx, zk, batch = _cluster()
    moved = TopicPartition("t", 0)   # led by the dead broker; its leader took broker 3 out meanwhile
    zk.states[moved] = LeaderAndIsr(1, 5, (1, 2), 3, partition_epoch=10)
    followed = TopicPartition("t", 1)  # broker 1 follows; broker 2 leads and wrote an ISR change meanwhile
    zk.states[followed] = LeaderAndIsr(2, 5, (2, 1), 3, partition_epoch=10)
    with batch.coalesced(lambda: ctx.epoch):
        PartitionStateMachine(ctx, batch, zk, lambda topic: False).startup()
        ReplicaStateMachine(ctx, batch, zk).startup()
    assert set(zk.read) == {moved, followed}
    assert (zk.states[moved].leader, zk.states[moved].isr) == (2, (2,))
    assert (zk.states[followed].leader, zk.states[followed].isr) == (2, (2,))


def test_elections_outside_a_failover_read_the_states_first():
    ctx, zk, batch = _cluster()
    sm = PartitionStateMachine(ctx, batch, zk, lambda topic: False)
    for tp in ctx.all_partitions():
        ctx.partition_states[tp] = PartitionState.OFFLINE if tp.partition % 3 == 0 else PartitionState.ONLINE
    sm.trigger_online_partition_state_change()
    assert set(zk.read) == {tp for tp in ctx.all_partitions() if tp.partition % 3 == 0}
