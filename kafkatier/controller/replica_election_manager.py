"""Replica leader elections asked for by an admin or by the controller itself: Kafka's
``KafkaController.processReplicaLeaderElection`` / ``onReplicaElection`` and
``checkAndTriggerAutoLeaderRebalance``, for the three triggers Kafka knows:

- **znode** (``/admin/preferred_replica_election``, written by old tools): a watch enqueues a
  ``ReplicaLeaderElection`` event; the controller elects the preferred leaders of the listed partitions and deletes
  the znode (fenced).  A malformed znode is logged and deleted, and nothing is elected.
- **admin client** (ElectLeaders, key 43): :meth:`ReplicaElectionManager.submit` enqueues the same event with the
  requested partitions and an election type, and completes a future with one :class:`ElectionOutcome` per
  partition.
- **auto** (``auto.leader.rebalance.enable``): every ``leader.imbalance.check.interval.seconds`` the controller
  computes, per preferred broker, the share of its partitions led by another broker; above
  ``leader.imbalance.per.broker.percentage`` it runs a preferred election for those whose preferred replica is
  online and in the ISR.

Per partition, as Kafka: unknown → UNKNOWN_TOPIC_OR_PARTITION; topic being deleted → INVALID_TOPIC_EXCEPTION;
preferred election with the preferred replica already leading, or unclean election with a live leader →
ELECTION_NOT_NEEDED; a failed preferred election → PREFERRED_LEADER_NOT_AVAILABLE; a failed unclean one →
ELIGIBLE_LEADERS_NOT_AVAILABLE.  An unclean election is the offline strategy with unclean election allowed
whatever the topic's ``unclean.leader.election.enable`` says.

Deliberate difference from Kafka: the first auto-rebalance check runs ``min(5 s, interval)`` after failover
(Kafka: always 5 s), so a short interval is honoured from the start.
"""
from __future__ import annotations

import enum
from concurrent.futures import Future
from typing import Callable, Iterable

import attrs

from kafkatier.common.scheduler import KafkaScheduler
from kafkatier.common.structs import TopicPartition
from kafkatier.controller.context import ControllerContext, PartitionState
from kafkatier.controller.election import ElectionStrategy
from kafkatier.controller.event_manager import ControllerEvents
from kafkatier.controller.fenced_writes import FencedZkWrites
from kafkatier.controller.partition_state_machine import PartitionStateMachine
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import Errors
from kafkatier.zk import codecs, paths
from kafkatier.zk.errors import NoNodeError
from kafkatier.zk.fenced import ControllerMovedError
from kafkatier.zk.watchers import DataWatch

log = get_logger("controller.replica-election")

FIRST_AUTO_REBALANCE_DELAY_S = 5.0


class ElectionType(enum.IntEnum):
    """Kafka's ``org.apache.kafka.common.ElectionType`` (the wire value of ElectLeaders v1+)."""

    PREFERRED = 0
    UNCLEAN = 1


class ElectionTrigger(enum.Enum):
    ZNODE = "ZkTriggered"
    ADMIN_CLIENT = "AdminClientTriggered"
    AUTO = "AutoTriggered"


@attrs.frozen
class ElectionOutcome:
    """One partition's answer: ``error`` NONE with the new ``leader``, or an error with a message."""

    error: Errors
    message: str | None = None
    leader: int = -1


@attrs.frozen
class AutoRebalanceConfig:
    """``auto.leader.rebalance.enable`` (true), ``leader.imbalance.check.interval.seconds`` (300),
    ``leader.imbalance.per.broker.percentage`` (10)."""

    enable: bool = True
    check_interval_s: float = 300.0
    per_broker_percentage: int = 10

    @classmethod
    def from_props(cls, props: dict) -> AutoRebalanceConfig:
        return cls(enable=str(props.get("auto.leader.rebalance.enable", "true")).lower() == "true",
                   check_interval_s=float(props.get("leader.imbalance.check.interval.seconds", 300)),
                   per_broker_percentage=int(props.get("leader.imbalance.per.broker.percentage", 10)))


def imbalanced_partitions(ctx: ControllerContext, percentage: int) -> dict[int, list[TopicPartition]]:
    """Kafka's imbalance check: per preferred broker whose ratio of partitions led by another broker is above
    ``percentage`` %, the partitions that could move back to it now (preferred replica online and in the ISR)."""
    by_preferred: dict[int, list[TopicPartition]] = {}
    for tp in ctx.all_partitions():
        replicas = ctx.partition_replicas(tp)
        if replicas and not ctx.is_topic_queued_for_deletion(tp.topic):
            by_preferred.setdefault(replicas[0], []).append(tp)
    out: dict[int, list[TopicPartition]] = {}
    for broker, tps in by_preferred.items():
        not_preferred = [tp for tp in tps if (l := ctx.partition_leadership.get(tp)) is not None and l.leader != broker]
        if len(not_preferred) / len(tps) <= percentage / 100:
            continue
        candidates = [tp for tp in not_preferred if ctx.is_replica_online(broker, tp)
                      and broker in ctx.partition_leadership[tp].isr]
        if candidates:
            out[broker] = sorted(candidates)
    return out


class ReplicaElectionManager:
    """``is_active()`` says whether this broker is the active controller in its own view;
    ``confirm_still_controller()`` asks ZooKeeper (KafkaController.confirm_still_controller)."""

    def __init__(self, context: ControllerContext, zk, fenced: FencedZkWrites, events: ControllerEvents,
                 partition_state_machine: PartitionStateMachine, is_active: Callable[[], bool],
                 confirm_still_controller: Callable[[], bool], scheduler: KafkaScheduler,
                 auto_rebalance: AutoRebalanceConfig):
        self.ctx = context
        self.zk = zk
        self.fenced = fenced
        self.events = events
        self.partition_state_machine = partition_state_machine
        self._is_active = is_active
        self._confirm_still_controller = confirm_still_controller
        self.scheduler = scheduler
        self.auto_rebalance = auto_rebalance
        self.metrics = {"preferred_elections": 0, "unclean_elections": 0, "auto_rebalance_checks": 0}

    # --- failover -------------------------------------------------------------------------------------------
    def on_failover(self) -> None:
        """Watch ``/admin/preferred_replica_election`` (a pending one is processed right after failover) and
        schedule the first auto-rebalance check."""
        gen = self.events.generation

        def on_data(data, stat, event=None):
            if gen != self.events.generation:
                return False
            if stat is not None:
                self.events.put_active_only("ReplicaLeaderElection(znode)", self.process_znode_election)
            return True
        DataWatch(self.zk, paths.PREFERRED_REPLICA_ELECTION, on_data)
        if self.auto_rebalance.enable:
            self._schedule_auto_rebalance(gen, min(FIRST_AUTO_REBALANCE_DELAY_S, self.auto_rebalance.check_interval_s))

    # --- znode trigger --------------------------------------------------------------------------------------
    def process_znode_election(self) -> None:
        path = paths.PREFERRED_REPLICA_ELECTION
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            return
        try:
            partitions = [TopicPartition(t, p) for t, p in codecs.PreferredReplicaElection.decode(data, path).partitions]
        except codecs.MalformedZNodeError as e:
            log.warning("ignoring preferred replica election due to invalid json %s", kv(path=path, reason=e))
            self.fenced.delete_if_exists(path)
            return
        try:
            self.elect(partitions, ElectionType.PREFERRED, ElectionTrigger.ZNODE)
        finally:
            self.fenced.delete_if_exists(path)

    # --- admin client trigger -------------------------------------------------------------------------------
    def submit(self, partitions: Iterable[TopicPartition], election_type: ElectionType
               ) -> Future[dict[TopicPartition, ElectionOutcome]]:
        """Run an election on the controller thread; NOT_CONTROLLER for every partition when this broker is
        not (or stops being) the active controller."""
        partitions = sorted(set(partitions))
        fut: Future = Future()

        def not_controller() -> dict[TopicPartition, ElectionOutcome]:
            return {tp: ElectionOutcome(Errors.NOT_CONTROLLER, "This is not the correct controller for this cluster.")
                    for tp in partitions}

        def run():
            if not self._is_active() or not self._confirm_still_controller():
                fut.set_result(not_controller())
                return
            try:
                fut.set_result(self.elect(partitions, election_type, ElectionTrigger.ADMIN_CLIENT))
            except ControllerMovedError:
                fut.set_result(not_controller())
                raise  # the controller resigns
            except BaseException as e:
                fut.set_exception(e)
                raise

        def preempt():
            if not fut.done():
                fut.set_result(not_controller())
        self.events.put(f"ReplicaLeaderElection({election_type.name}, {len(partitions)} partitions)", run, preempt)
        return fut

    # --- auto rebalance -------------------------------------------------------------------------------------
    def _schedule_auto_rebalance(self, gen: int, delay_s: float) -> None:
        def fire():
            if gen != self.events.generation:
                return

            def run():
                try:
                    self.check_and_trigger_auto_leader_rebalance()
                finally:
                    if gen == self.events.generation:
                        self._schedule_auto_rebalance(gen, self.auto_rebalance.check_interval_s)
            self.events.put_active_only("AutoPreferredReplicaLeaderElection", run)
        self.scheduler.schedule_once("auto-leader-rebalance-task", fire, delay_s * 1000)

    def check_and_trigger_auto_leader_rebalance(self) -> None:
        self.metrics["auto_rebalance_checks"] += 1
        for broker, tps in sorted(imbalanced_partitions(self.ctx, self.auto_rebalance.per_broker_percentage).items()):
            log.info("leader imbalance above the threshold %s",
                     kv(broker=broker, partitions=len(tps), percentage=self.auto_rebalance.per_broker_percentage))
            self.elect(tps, ElectionType.PREFERRED, ElectionTrigger.AUTO)

    # --- the election ---------------------------------------------------------------------------------------
    def elect(self, partitions: Iterable[TopicPartition], election_type: ElectionType,
              trigger: ElectionTrigger) -> dict[TopicPartition, ElectionOutcome]:
        ctx = self.ctx
        results: dict[TopicPartition, ElectionOutcome] = {}
        electable = []
        for tp in partitions:
            l = ctx.partition_leadership.get(tp)
            if ctx.assignment(tp) is None or l is None:
                log.info("skipping replica leader election for a partition that does not exist %s",
                         kv(partition=tp, type=election_type.name, trigger=trigger.value))
                results[tp] = ElectionOutcome(Errors.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            elif ctx.is_topic_queued_for_deletion(tp.topic):
                results[tp] = ElectionOutcome(Errors.INVALID_TOPIC_EXCEPTION, "The topic is being deleted")
            elif not self._election_needed(tp, l.leader, election_type):
                results[tp] = ElectionOutcome(Errors.ELECTION_NOT_NEEDED, "Leader election not needed for topic "
                                              "partition.", l.leader)
            else:
                electable.append(tp)
        if electable:
            if election_type is ElectionType.PREFERRED:
                failed = self.partition_state_machine.handle_state_changes(
                    electable, PartitionState.ONLINE, ElectionStrategy.PREFERRED)
                error = Errors.PREFERRED_LEADER_NOT_AVAILABLE
            else:
                failed = self.partition_state_machine.handle_state_changes(
                    electable, PartitionState.ONLINE, ElectionStrategy.OFFLINE, allow_unclean=True)
                error = Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE
            for tp in electable:
                if tp in failed:
                    results[tp] = ElectionOutcome(error, f"Failed to elect leader for partition {tp}: {failed[tp]}")
                else:
                    results[tp] = ElectionOutcome(Errors.NONE, None, ctx.partition_leadership[tp].leader)
            key = "preferred_elections" if election_type is ElectionType.PREFERRED else "unclean_elections"
            self.metrics[key] += len(electable) - len(failed)
        log.info("replica leader election %s", kv(
            type=election_type.name, trigger=trigger.value, requested=len(results),
            elected=sum(1 for o in results.values() if o.error == Errors.NONE),
            errors=",".join(f"{tp}:{o.error.name}" for tp, o in sorted(results.items())
                            if o.error not in (Errors.NONE, Errors.ELECTION_NOT_NEEDED))[:500] or "-"))
        return results

    def _election_needed(self, tp: TopicPartition, leader: int, election_type: ElectionType) -> bool:
        if election_type is ElectionType.PREFERRED:
            return leader != self.ctx.partition_replicas(tp)[0]
        return leader < 0 or leader not in self.ctx.live_broker_ids
