"""The controller's ControlledShutdown handling (controller/controlled_shutdown.py) on an in-memory context: which
partitions it acts on, the new leaders, the shutting-down broker out of every ISR, and the answer."""
from __future__ import annotations

import pytest

from kafkatier.common.structs import BrokerInfo, LeaderAndIsr, PartitionAndReplica, TopicPartition
from kafkatier.controller.context import ControllerContext, PartitionState, ReplicaAssignment, ReplicaState
from kafkatier.controller.controlled_shutdown import ControlledShutdownManager
from kafkatier.controller.partition_state_machine import PartitionStateMachine
from kafkatier.controller.replica_state_machine import ReplicaStateMachine
from kafkatier.controller.request_batch import ControllerBrokerRequestBatch
from kafkatier.protocol.errors import BrokerNotAvailableError, StaleBrokerEpochError
from tests.unit.test_controller_failover_reads import _StateZk


def _cluster():
    """Brokers 1-3 live.  Topic ``t``: partition p has replicas rotated from p; broker 1 leads p % 3 == 0.
    ``single`` has one replica on broker 1, ``gone`` is being deleted, ``t-5`` has no leadership znode."""
    ctx = ControllerContext()
    ctx.epoch, ctx.epoch_zk_version = 4, 4
    for b in (1, 2, 3):
        ctx.live_brokers[b] = BrokerInfo(b, "127.0.0.1", 9090 + b, epoch=100 + b)
    states = {}
    for topic, n in (("t", 6), ("single", 1), ("gone", 3)):
        ctx.all_topics.add(topic)
        for p in range(n):
            tp = TopicPartition(topic, p)
            replicas = (1,) if topic == "single" else tuple(1 + (p + i) % 3 for i in range(3))
            ctx.update_assignment(tp, ReplicaAssignment(replicas))
            if tp != TopicPartition("t", 5):
                states[tp] = LeaderAndIsr(replicas[0], 5, replicas, 3, partition_epoch=9)
            ctx.partition_states[tp] = PartitionState.ONLINE
            for r in replicas:
                ctx.replica_states[PartitionAndReplica(tp, r)] = ReplicaState.ONLINE
    ctx.topics_to_be_deleted.add("gone")
    zk = _StateZk(states)
    ctx.partition_leadership.update(zk.get_partition_states(states))
    sent = []
    batch = ControllerBrokerRequestBatch(2, ctx, lambda *a: sent.append(a) or True)
    manager = ControlledShutdownManager(
        ctx, batch, PartitionStateMachine(ctx, batch, zk, lambda topic: False), ReplicaStateMachine(ctx, batch, zk),
        event_manager=None, is_active=lambda: True, channel=lambda: None, scheduler=None, request_timeout_s=30)
    return ctx, zk, manager, sent


def test_the_partitions_acted_on_are_the_replicated_live_ones_not_being_deleted():
    ctx, zk, manager, sent = _cluster()
    led, followed = manager._partitions_to_act_on(1)
    assert led == [TopicPartition("t", 0), TopicPartition("t", 3)]
    assert followed == {PartitionAndReplica(TopicPartition("t", p), 1) for p in (1, 2, 4)}


def test_a_controlled_shutdown_moves_leadership_and_takes_the_broker_out_of_every_isr():
    ctx, zk, manager, sent = _cluster()
    remaining = manager.do_controlled_shutdown(1, 101)
    assert remaining == set()
    for p in (0, 1, 2, 3, 4):
        l = zk.states[TopicPartition("t", p)]
        assert l.leader != 1 and 1 not in l.isr, (p, l)
    assert zk.states[TopicPartition("single", 0)].leader == 1   # nobody else can lead it: not acted on
    assert 1 in ctx.shutting_down_broker_ids
    kinds = {(s[0], s[2]) for s in sent}
    assert {(2, "LeaderAndIsr"), (3, "LeaderAndIsr"), (1, "StopReplica")} <= kinds


def test_unknown_and_stale_brokers_are_refused():
    ctx, zk, manager, sent = _cluster()
    with pytest.raises(BrokerNotAvailableError):
        manager.do_controlled_shutdown(7, -1)
    with pytest.raises(StaleBrokerEpochError):
        manager.do_controlled_shutdown(1, 100)
    assert sent == [] and not ctx.shutting_down_broker_ids


def test_the_elections_are_written_from_the_context_without_reading_the_led_partitions_first():
    ctx, zk, manager, sent = _cluster()
    zk.read.clear()
    manager.do_controlled_shutdown(1, 101)
    led = {TopicPartition("t", 0), TopicPartition("t", 3)}
    assert not led & set(zk.read)   # only the followed partitions' ISR removals read their states
    assert all(zk.states[tp].leader != 1 for tp in led)


def test_an_isr_change_the_controller_has_not_heard_of_is_read_and_the_partition_decided_again():
    ctx, zk, manager, sent = _cluster()
    moved = TopicPartition("t", 0)        # replicas (1, 2, 3): its leader took broker 2 out meanwhile
    zk.states[moved] = LeaderAndIsr(1, 5, (1, 3), 3, partition_epoch=10)
    expanded = TopicPartition("t", 3)     # the context's ISR has only the leader; the leader took 2 back in
    ctx.partition_leadership[expanded] = LeaderAndIsr(1, 5, (1,), 3, partition_epoch=8)
    zk.states[expanded] = LeaderAndIsr(1, 5, (1, 2), 3, partition_epoch=9)
    remaining = manager.do_controlled_shutdown(1, 101)
    assert remaining == set()
    assert zk.states[moved].leader == 3 and zk.states[moved].isr == (3,)   # not 2: out of the ISR in ZooKeeper
    assert zk.states[expanded].leader == 2 and zk.states[expanded].isr == (2,)
    assert moved in zk.read and expanded in zk.read


def test_a_follower_taken_back_into_an_isr_after_its_shutdown_is_taken_out_again():
    """A leader answered the shutting-down (then dead) follower's last fetch after the controller had taken it out
    of the ISR, and took it back in (seen live: broker 2 in the ISR of broker 1's partitions a minute after it
    stopped, acks=all produce waiting until the leader's own shrink).  The ISR change notification's states
    name it: the controller takes it out again, the leader keeps leading."""
    ctx, zk, manager, sent = _cluster()
    manager.do_controlled_shutdown(1, 101)
    followed = TopicPartition("t", 1)                 # replicas (2, 3, 1), led by 2
    l = zk.states[followed]
    assert 1 not in l.isr
    zk.states[followed] = LeaderAndIsr(l.leader, l.leader_epoch, l.isr + (1,), 3, partition_epoch=l.partition_epoch + 1)
    fresh = zk.get_partition_states([followed, TopicPartition("t", 2)])
    ctx.partition_leadership.update(fresh)

    ineligible = ctx.isr_members_not_eligible(fresh)
    assert ineligible == {PartitionAndReplica(followed, 1)}
    manager.replica_state_machine.handle_state_changes(ineligible, ReplicaState.OFFLINE)
    after = zk.states[followed]
    assert after.leader == l.leader and 1 not in after.isr and after.leader_epoch == l.leader_epoch + 1
    assert ctx.partition_leadership[followed] == after

    # Once broker 1 is gone altogether it is not eligible either; a leader is never taken out this way.
    ctx.shutting_down_broker_ids.discard(1)
    del ctx.live_brokers[1]
    assert ctx.isr_members_not_eligible({followed: LeaderAndIsr(2, 9, (2, 1), 3, partition_epoch=20)}) \
        == {PartitionAndReplica(followed, 1)}
    assert ctx.isr_members_not_eligible({followed: LeaderAndIsr(1, 9, (1, 2), 3, partition_epoch=20)}) == set()
    ctx.topics_to_be_deleted.add("t")
    assert ctx.isr_members_not_eligible({followed: LeaderAndIsr(2, 9, (2, 1), 3, partition_epoch=20)}) == set()
