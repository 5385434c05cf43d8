"""Replica state machine (docs/controller.md#state-machines)."""
from __future__ import annotations

from kafkatier.common.structs import PartitionAndReplica
from kafkatier.controller.context import ControllerContext, ReplicaState
from kafkatier.controller.request_batch import ControllerBrokerRequestBatch
from kafkatier.logsetup import get_logger, kv
from kafkatier.zk.kafka_zk_client import KafkaZkClient

log = get_logger("controller.replica-state-machine")

RS = ReplicaState
_VALID_PREVIOUS = {
    RS.NEW: {RS.NON_EXISTENT},
    RS.ONLINE: {RS.NEW, RS.ONLINE, RS.OFFLINE, RS.DELETION_INELIGIBLE},
    RS.OFFLINE: {RS.NEW, RS.ONLINE, RS.OFFLINE, RS.DELETION_INELIGIBLE},
    RS.DELETION_STARTED: {RS.OFFLINE},
    RS.DELETION_SUCCESSFUL: {RS.DELETION_STARTED},
    RS.DELETION_INELIGIBLE: {RS.OFFLINE, RS.DELETION_STARTED},
    RS.NON_EXISTENT: {RS.DELETION_SUCCESSFUL},
}


class ReplicaStateMachine:
    """Kafka's ``ZkReplicaStateMachine(config, stateChangeLogger, controllerContext, zkClient, requestBatch)``."""

    def __init__(self, ctx: ControllerContext, batch: ControllerBrokerRequestBatch, kafka_zk: KafkaZkClient) -> None:
        self.ctx = ctx
        self.batch = batch
        self.kafka_zk = kafka_zk

    def startup(self) -> None:
        """Kafka's ``startup``: every online replica OnlineReplica, every other one ReplicaDeletionIneligible, then
        ``handleStateChanges(online, OnlineReplica)`` and ``(offline, OfflineReplica)``.  The online move is done
        in bulk, one LeaderAndIsr entry per partition for all its online replicas (the same requests as one per
        replica; at a failover with 20,000 partitions the per-replica path was a large part of the work)."""
        ctx = self.ctx
        batch = self.batch
        offline = []
        batch.new_batch()
        # ctx.is_replica_online inlined: this loop runs over every replica of the cluster at a failover.
        online = set(ctx.live_brokers) - ctx.shutting_down_broker_ids
        offline_dirs = {b: tps for b, tps in ctx.replicas_on_offline_dirs.items() if tps}
        states, leadership = ctx.replica_states, ctx.partition_leadership
        for tp in ctx.all_partitions():
            online_brokers = []
            for r in ctx.partition_replicas(tp):
                pr = PartitionAndReplica(tp, r)
                if r in online and (not offline_dirs or tp not in offline_dirs.get(r, ())):
                    states[pr] = RS.ONLINE
                    online_brokers.append(r)
                else:
                    states[pr] = RS.DELETION_INELIGIBLE
                    offline.append(pr)
            l = leadership.get(tp)
            if online_brokers and l is not None:
                batch.add_leader_and_isr(online_brokers, tp, l)
        batch.send_requests_to_brokers(ctx.epoch)
        # The failover has just read every state znode (or written it, electing): not read again.
        self.handle_state_changes(offline, RS.OFFLINE, read_first=False)

    def handle_state_changes(self, replicas, target: ReplicaState, read_first: bool = True) -> None:
        """``read_first=False``: taking a replica offline writes from the context's partition states without
        reading them first (conditional writes: those whose znode moved are read and written again)."""
        if not replicas:
            return
        batch = self.batch
        batch.new_batch()
        by_broker: dict[int, list] = {}
        for pr in replicas:
            by_broker.setdefault(pr.replica, []).append(pr)
        for broker in sorted(by_broker):
            self._do_handle(broker, sorted(by_broker[broker]), target, read_first)
        batch.send_requests_to_brokers(self.ctx.epoch)

    def _do_handle(self, broker: int, replicas, target: ReplicaState, read_first: bool = True) -> None:
        ctx = self.ctx
        batch = self.batch
        valid = []
        for pr in replicas:
            cur = ctx.replica_states.get(pr, RS.NON_EXISTENT)
            if cur in _VALID_PREVIOUS[target]:
                valid.append(pr)
            else:
                log.warning("invalid replica state change %s", kv(replica=pr, current=cur.value, target=target.value))
        if target is RS.NEW:
            for pr in valid:
                l = ctx.partition_leadership.get(pr.tp)
                if l is not None:
                    if l.leader == broker:
                        log.error("replica %s cannot become NewReplica: it is the leader", pr)
                        continue
                    batch.add_leader_and_isr([broker], pr.tp, l, is_new=True)
                ctx.replica_states[pr] = RS.NEW
        elif target is RS.ONLINE:
            states, leadership = ctx.replica_states, ctx.partition_leadership
            to_send = []
            for pr in valid:
                if states.get(pr, RS.NON_EXISTENT) is not RS.NEW:
                    l = leadership.get(pr.tp)
                    if l is not None:
                        to_send.append((pr.tp, l))
                states[pr] = RS.ONLINE
            batch.add_leader_and_isr_to_broker(broker, to_send)
        elif target is RS.OFFLINE:
            for pr in valid:
                batch.add_stop_replica([broker], pr.tp, delete=False)
            with_leadership = [pr for pr in valid if pr.tp in ctx.partition_leadership]
            updated = self.kafka_zk.remove_replica_from_isr(
                broker, {pr.tp: ctx.partition_leadership[pr.tp] for pr in with_leadership}, ctx.epoch,
                ctx.epoch_zk_version, read_first=read_first)
            for tp, l in updated.items():
                ctx.partition_leadership[tp] = l
                if not ctx.is_topic_queued_for_deletion(tp.topic):
                    others = [r for r in ctx.partition_replicas(tp) if r != broker and ctx.is_replica_online(r, tp)]
                    batch.add_leader_and_isr(others, tp, l)
            for pr in valid:
                ctx.replica_states[pr] = RS.OFFLINE
            batch.add_update_metadata(ctx.live_broker_ids, [pr.tp for pr in valid])
        elif target is RS.DELETION_STARTED:
            for pr in valid:
                ctx.replica_states[pr] = RS.DELETION_STARTED
                batch.add_stop_replica([broker], pr.tp, delete=True)
        elif target in (RS.DELETION_INELIGIBLE, RS.DELETION_SUCCESSFUL):
            for pr in valid:
                ctx.replica_states[pr] = target
        elif target is RS.NON_EXISTENT:
            for pr in valid:
                a = ctx.assignment(pr.tp)
                if a is not None:
                    from kafkatier.controller.context import ReplicaAssignment
                    ctx.update_assignment(pr.tp, ReplicaAssignment(tuple(r for r in a.replicas if r != broker),
                                                                   a.adding, a.removing))
                ctx.replica_states.pop(pr, None)
