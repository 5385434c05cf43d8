"""Partition state machine: NewPartition / OnlinePartition / OfflinePartition / NonExistentPartition, with
leader election (initial and offline-partition election from the ISR)."""
from __future__ import annotations

from kafkatier.common.structs import LeaderAndIsr, TopicPartition
from kafkatier.controller.context import ControllerContext, PartitionState
from kafkatier.logsetup import get_logger, kv

log = get_logger("controller.partition-state-machine")

_VALID_PREVIOUS = {
    PartitionState.NEW: {PartitionState.NON_EXISTENT},
    PartitionState.ONLINE: {PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE},
    PartitionState.OFFLINE: {PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE},
    PartitionState.NON_EXISTENT: {PartitionState.OFFLINE},
}


class PartitionStateMachine:
    def __init__(self, controller) -> None:
        self.controller = controller

    @property
    def ctx(self) -> ControllerContext:
        return self.controller.ctx

    def startup(self) -> None:
        for tp in self.ctx.all_partitions():
            l = self.ctx.partition_leadership.get(tp)
            if l is None:
                self.ctx.partition_states[tp] = PartitionState.NEW
            elif l.leader >= 0 and self.ctx.is_replica_online(l.leader, tp):
                self.ctx.partition_states[tp] = PartitionState.ONLINE
            else:
                self.ctx.partition_states[tp] = PartitionState.OFFLINE
        self.trigger_online_partition_state_change()

    def trigger_online_partition_state_change(self, topic: str | None = None) -> None:
        parts = [tp for tp in self.ctx.partitions_in_states({PartitionState.NEW, PartitionState.OFFLINE})
                 if not self.ctx.is_topic_queued_for_deletion(tp.topic) and (topic is None or tp.topic == topic)]
        if parts:
            self.handle_state_changes(sorted(parts), PartitionState.ONLINE)

    def handle_state_changes(self, partitions, target: PartitionState) -> None:
        if not partitions:
            return
        batch = self.controller.batch
        batch.new_batch()
        self._do_handle(partitions, target)
        batch.send_requests_to_brokers(self.ctx.epoch)

    def _do_handle(self, partitions, target: PartitionState) -> None:
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
            others = [tp for tp in valid if tp not in new]
            for tp in self._initialize_leader_and_isr(new):
                self.ctx.partition_states[tp] = PartitionState.ONLINE
            need_election = [tp for tp in others if self.ctx.partition_states.get(tp) is PartitionState.OFFLINE
                             or self._leader_offline(tp)]
            for tp in others:
                if tp not in need_election:
                    self.ctx.partition_states[tp] = PartitionState.ONLINE
            for tp in self._elect_leaders(need_election):
                self.ctx.partition_states[tp] = PartitionState.ONLINE
        elif target is PartitionState.OFFLINE:
            for tp in valid:
                self.ctx.partition_states[tp] = PartitionState.OFFLINE
        elif target is PartitionState.NON_EXISTENT:
            for tp in valid:
                self.ctx.partition_states[tp] = PartitionState.NON_EXISTENT

    def _leader_offline(self, tp: TopicPartition) -> bool:
        l = self.ctx.partition_leadership.get(tp)
        return l is None or l.leader < 0 or not self.ctx.is_replica_online(l.leader, tp)

    def _initialize_leader_and_isr(self, partitions) -> list[TopicPartition]:
        """First leader = first live replica in assignment order; ISR = all live replicas; epoch 0."""
        done = []
        zkc = self.controller.kafka_zk
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
            self.controller.batch.add_leader_and_isr(
                [r for r in self.ctx.partition_replicas(tp) if self.ctx.is_replica_online(r, tp)], tp, l, is_new=True)
            done.append(tp)
        return done

    def _elect_leaders(self, partitions) -> list[TopicPartition]:
        """Offline-partition election: first replica in assignment order that is alive and in the ISR."""
        done = []
        zkc = self.controller.kafka_zk
        updates = {}
        for tp in partitions:
            cur = self.ctx.partition_leadership.get(tp)
            if cur is None:
                continue
            replicas = self.ctx.partition_replicas(tp)
            live_isr = [r for r in cur.isr if self.ctx.is_replica_online(r, tp)]
            leader = next((r for r in replicas if r in live_isr), None)
            if leader is None:
                unclean = self.controller.unclean_leader_election_enabled(tp.topic)
                if unclean:
                    leader = next((r for r in replicas if self.ctx.is_replica_online(r, tp)), None)
                    live_isr = [leader] if leader is not None else []
                if leader is None:
                    log.error("no eligible leader; partition stays offline %s",
                              kv(partition=tp, isr=list(cur.isr), replicas=list(replicas)))
                    continue
            updates[tp] = LeaderAndIsr(leader=leader, leader_epoch=cur.leader_epoch + 1, isr=tuple(live_isr),
                                       controller_epoch=self.ctx.epoch, partition_epoch=cur.partition_epoch,
                                       leader_recovery_state=cur.leader_recovery_state)
        for tp, l in zkc.update_leader_and_isr(updates, self.ctx.epoch_zk_version).items():
            self.ctx.partition_leadership[tp] = l
            log.info("elected leader %s", kv(partition=tp, leader=l.leader, leader_epoch=l.leader_epoch,
                                              isr=list(l.isr)))
            self.controller.batch.add_leader_and_isr(
                [r for r in self.ctx.partition_replicas(tp) if self.ctx.is_replica_online(r, tp)], tp, l)
            done.append(tp)
        return done
