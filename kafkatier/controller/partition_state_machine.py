"""Partition state machine: NewPartition / OnlinePartition / OfflinePartition / NonExistentPartition, with
leader election: initial election for new partitions, then one of the strategies of
:mod:`kafkatier.controller.election` (offline by default; reassign, preferred and controlled shutdown when the
caller asks for them)."""
from __future__ import annotations

import functools
import logging
from typing import Callable

from kafkatier.common.structs import LeaderAndIsr, TopicPartition
from kafkatier.controller import election
from kafkatier.controller.context import ControllerContext, PartitionState
from kafkatier.controller.election import ElectionStrategy
from kafkatier.controller.request_batch import ControllerBrokerRequestBatch
from kafkatier.logsetup import get_logger, kv
from kafkatier.zk.kafka_zk_client import KafkaZkClient

log = get_logger("controller.partition-state-machine")

# Elections logged one line per partition up to this many at once; above, one summary line.
MAX_PARTITIONS_LOGGED = 50
# Elections written again after their conditional write lost a race with a leader's ISR write.
MAX_ELECTION_ROUNDS = 3

_VALID_PREVIOUS = {
    PartitionState.NEW: {PartitionState.NON_EXISTENT},
    PartitionState.ONLINE: {PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE},
    PartitionState.OFFLINE: {PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE},
    PartitionState.NON_EXISTENT: {PartitionState.OFFLINE},
}


class PartitionStateMachine:
    """Kafka's ``ZkPartitionStateMachine(config, stateChangeLogger, controllerContext, zkClient, requestBatch)``:
    it receives what it uses.  ``unclean_leader_election_enabled(topic)`` reads the topic's setting (asked only
    when no in-sync replica can lead)."""

    def __init__(self, ctx: ControllerContext, batch: ControllerBrokerRequestBatch, kafka_zk: KafkaZkClient,
                 unclean_leader_election_enabled: Callable[[str], bool]) -> None:
        self.ctx = ctx
        self.batch = batch
        self.kafka_zk = kafka_zk
        self.unclean_leader_election_enabled = unclean_leader_election_enabled

    def startup(self) -> None:
        for tp in self.ctx.all_partitions():
            l = self.ctx.partition_leadership.get(tp)
            if l is None:
                self.ctx.partition_states[tp] = PartitionState.NEW
            elif l.leader >= 0 and self.ctx.is_replica_online(l.leader, tp):
                self.ctx.partition_states[tp] = PartitionState.ONLINE
            else:
                self.ctx.partition_states[tp] = PartitionState.OFFLINE
        # The failover has just read every state znode into the context: the first election round writes from
        # it without reading them again (the writes are conditional on each znode's version; a partition whose
        # znode moved meanwhile is read again and decided again in the next round).
        self.trigger_online_partition_state_change(read_first=False)

    def trigger_online_partition_state_change(self, topic: str | None = None, read_first: bool = True) -> None:
        parts = [tp for tp in self.ctx.partitions_in_states({PartitionState.NEW, PartitionState.OFFLINE})
                 if not self.ctx.is_topic_queued_for_deletion(tp.topic) and (topic is None or tp.topic == topic)]
        if parts:
            self.handle_state_changes(sorted(parts), PartitionState.ONLINE, read_first=read_first)

    def handle_state_changes(self, partitions, target: PartitionState,
                             strategy: ElectionStrategy = ElectionStrategy.OFFLINE,
                             allow_unclean: bool = False, read_first: bool = True) -> dict[TopicPartition, str]:
        """Move ``partitions`` to ``target``; for OnlinePartition, elect with ``strategy``.  ``allow_unclean``
        (offline strategy only, ElectLeaders UNCLEAN): elect a live out-of-sync replica whatever the topic's
        ``unclean.leader.election.enable`` says.  ``read_first=False``: the
        first election round decides from the context's states without reading them (a failover has just read
        them; a controlled shutdown's are those of the last ISR change notification): each write is conditional
        on its znode's version, and a partition whose znode moved, or for which the context names no eligible
        leader, is read and decided again in the next round.

        Returns the partitions whose election failed, with the reason (empty when all succeeded).
        """
        if not partitions:
            return {}
        batch = self.batch
        batch.new_batch()
        failed = self._do_handle(partitions, target, strategy, allow_unclean, read_first)
        batch.send_requests_to_brokers(self.ctx.epoch)
        return failed

    def _do_handle(self, partitions, target: PartitionState,
                   strategy: ElectionStrategy = ElectionStrategy.OFFLINE,
                   allow_unclean: bool = False, read_first: bool = True) -> dict[TopicPartition, str]:
        failed: dict[TopicPartition, str] = {}
        valid = []
        for tp in partitions:
            cur = self.ctx.partition_states.get(tp, PartitionState.NON_EXISTENT)
            if cur in _VALID_PREVIOUS[target]:
                valid.append(tp)
            else:
                log.warning("invalid partition state change %s", kv(partition=tp, current=cur.value, target=target.value))
        if target is PartitionState.NEW:
            for tp in valid:
                self.ctx.partition_states[tp] = PartitionState.NEW
        elif target is PartitionState.ONLINE:
            new = [tp for tp in valid if self.ctx.partition_states.get(tp) is PartitionState.NEW]
            new_set = set(new)   # membership tests below: lists made a 20,000-partition failover quadratic
            others = [tp for tp in valid if tp not in new_set]
            for tp in self._initialize_leader_and_isr(new):
                self.ctx.partition_states[tp] = PartitionState.ONLINE
            if strategy is ElectionStrategy.OFFLINE:
                need_election = [tp for tp in others if self.ctx.partition_states.get(tp) is PartitionState.OFFLINE
                                 or self._leader_offline(tp)]
            else:
                need_election = list(others)
            electing = set(need_election)
            for tp in others:
                if tp not in electing:
                    self.ctx.partition_states[tp] = PartitionState.ONLINE
            elected, failed = self._elect_leaders(need_election, strategy, allow_unclean, read_first)
            for tp in elected:
                self.ctx.partition_states[tp] = PartitionState.ONLINE
        elif target is PartitionState.OFFLINE:
            for tp in valid:
                self.ctx.partition_states[tp] = PartitionState.OFFLINE
        elif target is PartitionState.NON_EXISTENT:
            for tp in valid:
                self.ctx.partition_states[tp] = PartitionState.NON_EXISTENT
        return failed

    def _leader_offline(self, tp: TopicPartition) -> bool:
        l = self.ctx.partition_leadership.get(tp)
        return l is None or l.leader < 0 or not self.ctx.is_replica_online(l.leader, tp)

    def _initialize_leader_and_isr(self, partitions) -> list[TopicPartition]:
        """First leader = first live replica in assignment order; ISR = all live replicas; epoch 0."""
        done = []
        zkc = self.kafka_zk
        to_create = {}
        for tp in partitions:
            replicas = self.ctx.partition_replicas(tp)
            live = [r for r in replicas if self.ctx.is_replica_online(r, tp)]
            if not live:
                log.error("cannot initialise partition: no live replica %s", kv(partition=tp, replicas=list(replicas)))
                continue
            to_create[tp] = LeaderAndIsr(leader=live[0], leader_epoch=0, isr=tuple(live),
                                         controller_epoch=self.ctx.epoch, partition_epoch=0)
        created = zkc.create_partition_states(to_create, self.ctx.epoch_zk_version)
        for tp, l in created.items():
            self.ctx.partition_leadership[tp] = l
            self.batch.add_leader_and_isr(
                [r for r in self.ctx.partition_replicas(tp) if self.ctx.is_replica_online(r, tp)], tp, l, is_new=True)
            done.append(tp)
        return done

    def _elect(self, tp: TopicPartition, cur: LeaderAndIsr, strategy: ElectionStrategy, unclean_enabled,
               live_or_shutting_down: frozenset[int] | None = None):
        """``live_or_shutting_down``: the context's live brokers, computed once per round by the caller."""
        ctx = self.ctx
        replicas = ctx.partition_replicas(tp)
        if strategy is not ElectionStrategy.CONTROLLED_SHUTDOWN:
            live = [r for r in replicas if ctx.is_replica_online(r, tp)]
        if strategy is ElectionStrategy.OFFLINE:
            # The unclean setting is read (from ZooKeeper) only when no in-sync replica can lead.
            return (election.leader_for_offline(replicas, cur.isr, live, False)
                    or election.leader_for_offline(replicas, cur.isr, live, unclean_enabled(tp.topic)))
        if strategy is ElectionStrategy.REASSIGN:
            a = ctx.assignment(tp)
            return election.leader_for_reassign(a.target if a else replicas, cur.isr, live)
        if strategy is ElectionStrategy.PREFERRED:
            return election.leader_for_preferred(replicas, cur.isr, live)
        brokers = ctx.live_or_shutting_down_broker_ids if live_or_shutting_down is None else live_or_shutting_down
        offline_dirs = ctx.replicas_on_offline_dirs
        live_or_shutting_down = [r for r in replicas if r in brokers and (r not in offline_dirs
                                                                          or tp not in offline_dirs[r])]
        return election.leader_for_controlled_shutdown(replicas, cur.isr, live_or_shutting_down,
                                                       ctx.shutting_down_broker_ids)

    def _elect_leaders(self, partitions, strategy: ElectionStrategy = ElectionStrategy.OFFLINE,
                       allow_unclean: bool = False,
                       read_first: bool = True) -> tuple[list[TopicPartition], dict[TopicPartition, str]]:
        """Elect with ``strategy``; one batched, fenced ZooKeeper write for all partitions."""
        done: list[TopicPartition] = []
        failed: dict[TopicPartition, str] = {}
        zkc = self.kafka_zk
        unclean_enabled = functools.lru_cache(maxsize=None)(
            lambda topic: allow_unclean or self.unclean_leader_election_enabled(topic))
        written: dict[TopicPartition, LeaderAndIsr] = {}
        todo = list(partitions)
        brokers = frozenset(self.ctx.live_or_shutting_down_broker_ids)
        for round_ in range(MAX_ELECTION_ROUNDS):
            # Elect from the states ZooKeeper holds now, as Kafka's doElectLeaderForPartitions does: leaders write
            # ISR changes there at once and tell the controller only in batched notifications (seconds later); a
            # later round re-reads the partitions whose write lost a race with such a write (``partitionsToRetry``).
            # Without ``read_first`` the first round decides from the context and lets the conditional writes
            # find what moved.
            read = bool(todo) and bool(round_ or read_first)
            if read:
                self.ctx.partition_leadership.update(zkc.get_partition_states(todo))
            updates = {}
            unread = []   # not decided from the context's view: read in the next round
            for tp in todo:
                cur = self.ctx.partition_leadership.get(tp)
                if cur is None:
                    failed[tp] = "no leadership znode"
                    continue
                result = self._elect(tp, cur, strategy, unclean_enabled, brokers)
                if result is None and not read:
                    unread.append(tp)
                    continue
                if result is None:
                    failed[tp] = f"no eligible leader ({strategy.value})"
                    log.error("no eligible leader %s", kv(partition=tp, strategy=strategy.value, isr=list(cur.isr),
                                                          replicas=list(self.ctx.partition_replicas(tp))))
                    continue
                if result.unclean:
                    log.warning("unclean leader election %s", kv(partition=tp, leader=result.leader))
                updates[tp] = LeaderAndIsr(leader=result.leader, leader_epoch=cur.leader_epoch + 1, isr=result.isr,
                                           controller_epoch=self.ctx.epoch, partition_epoch=cur.partition_epoch,
                                           leader_recovery_state=cur.leader_recovery_state)
            written.update(zkc.update_leader_and_isr(updates, self.ctx.epoch_zk_version))
            todo = sorted((updates.keys() - written.keys()) | set(unread))
            if not todo:
                break
        for tp in todo:
            failed[tp] = "leader and ISR update failed"
        # One line per partition for a few; past that one summary line (per partition at DEBUG): a failover
        # at 20,000 partitions would otherwise write thousands of lines on the controller thread.
        each = log.info if len(written) <= MAX_PARTITIONS_LOGGED else log.debug
        logged = len(written) <= MAX_PARTITIONS_LOGGED or log.isEnabledFor(logging.DEBUG)
        for tp, l in written.items():
            self.ctx.partition_leadership[tp] = l
            if logged:  # the line is not even built at INFO past the limit (thousands per round)
                each("elected leader %s", kv(partition=tp, leader=l.leader, leader_epoch=l.leader_epoch,
                                              isr=list(l.isr), strategy=strategy.value))
            self.batch.add_leader_and_isr(self._recipients(tp, strategy), tp, l)
            done.append(tp)
        if len(written) > MAX_PARTITIONS_LOGGED:
            by_leader: dict[int, int] = {}
            for l in written.values():
                by_leader[l.leader] = by_leader.get(l.leader, 0) + 1
            log.info("elected leaders %s", kv(partitions=len(written), strategy=strategy.value,
                                               by_leader=dict(sorted(by_leader.items()))))
        return done, failed

    def _recipients(self, tp: TopicPartition, strategy: ElectionStrategy) -> list[int]:
        """The online replicas; for a controlled shutdown the shutting-down ones too (Kafka's
        ``leaderForControlledShutdown``), so the old leader becomes a follower before it exits."""
        ctx = self.ctx
        return [r for r in ctx.partition_replicas(tp) if ctx.is_replica_online(r, tp)
                or (strategy is ElectionStrategy.CONTROLLED_SHUTDOWN and r in ctx.shutting_down_broker_ids
                    and r in ctx.live_brokers)]
