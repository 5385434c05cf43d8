"""Partition reassignment in the ZooKeeper-mode controller: Kafka's ``KafkaController.onPartitionReassignment``
and the steps around it (``updateCurrentReassignment``, ``isReassignmentComplete``,
``moveReassignedPartitionLeaderIfRequired``, ``stopRemovedReplicasOfReassignedPartition``,
``processZkPartitionReassignment``, ``processApiPartitionReassignment``, ``maybeResumeReassignments``), run on
the controller event thread.

Notation (Kafka's): RS = the partition's replicas, ORS = the origin replicas, TRS = the target replicas,
AR = adding, RR = removing.  The durable state is the topic znode's ``partitions`` / ``adding_replicas`` /
``removing_replicas`` (every write fenced by ``/controller_epoch``); the context's
``partitions_being_reassigned`` is derived from it, so a new controller resumes every reassignment it finds.

``on_partition_reassignment(tp, RS = ORS + TRS)``:

1. Write the new assignment to the topic znode (fenced) and the context; replicas of an earlier reassignment
   that are no longer wanted are stopped and deleted.  The topic is not deleted while this lasts.
2. If TRS is not yet within the ISR: bump the leader epoch and send LeaderAndIsr (RS, AR, RR) to every replica,
   then AR -> NewReplica (LeaderAndIsr ``is_new``).  A topic whose tiered storage is being disabled (KIP-950,
   docs/controller.md#tiered-storage-disablement-manager) then sends its new replicas StopReplica v5 before the
   disablement can complete.
3. Once TRS is within the ISR (checked again at every ISR change notification): AR -> OnlineReplica;
   RS = TRS in memory; the leader moves with the *reassign* election if it is not in TRS or not alive, else its
   epoch is bumped; RR -> Offline -> StopReplica(delete) -> NonExistent; RS = TRS in ZooKeeper; the partition
   leaves ``/admin/reassign_partitions``; UpdateMetadata; topic deletion and disablement resume.

Triggers: ``/admin/reassign_partitions`` (a data watch; the controller rewrites it as partitions finish and
deletes it when empty), AlterPartitionReassignments / ListPartitionReassignments (answered through futures,
NOT_CONTROLLER when this broker is not, or stops being, the active controller), controller failover and broker
start-up (resume).

Deliberate differences from Kafka:

- Leaders here write ISR changes themselves (IBPs before AlterPartition), so the completion check runs on the
  ISR change notifications instead of a per-partition ``PartitionReassignmentIsrChangeHandler`` watch.
- A garbage ``/admin/reassign_partitions`` is logged ("Ignoring partition reassignment due to invalid json")
  and deleted; Kafka logs and leaves it.  A znode entry with an empty replica list is refused and removed like
  a failed entry (Kafka would reassign the partition to nothing).
- Re-requesting exactly the reassignment in progress (the same target) changes nothing: our own rewrites of
  the znode fire the watch again, and Kafka would bump the leader epoch each time.
"""
from __future__ import annotations

from concurrent.futures import Future
from typing import Callable, Iterable, Mapping

import attrs

from kafkatier.common.structs import LeaderAndIsr, PartitionAndReplica, TopicPartition
from kafkatier.controller.context import ControllerContext, PartitionState, ReplicaState
from kafkatier.controller.election import ElectionStrategy
from kafkatier.controller.event_manager import ControllerEvents
from kafkatier.controller.fenced_writes import FencedZkWrites
from kafkatier.controller.partition_state_machine import PartitionStateMachine
from kafkatier.controller.replica_state_machine import ReplicaStateMachine
from kafkatier.controller.request_batch import ControllerBrokerRequestBatch
from kafkatier.controller.tiered_storage_disablement_manager import TieredStorageDisablementManager
from kafkatier.controller.topic_deletion_manager import TopicDeletionManager
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import Errors, NotControllerError
from kafkatier.zk import codecs, paths
from kafkatier.zk.codecs import ReplicaAssignment
from kafkatier.zk.errors import NoNodeError
from kafkatier.zk.fenced import ControllerMovedError
from kafkatier.zk.kafka_zk_client import KafkaZkClient
from kafkatier.zk.watchers import DataWatch

log = get_logger("controller.reassignment")

RS = ReplicaState
LEADER_EPOCH_BUMP_ATTEMPTS = 5  # conditional writes racing a leader's own ISR writes


@attrs.frozen
class ReassignmentResult:
    """Kafka's ``ApiError`` for one partition of a reassignment request."""

    error: Errors = Errors.NONE
    message: str | None = None


OK = ReassignmentResult()


@attrs.frozen
class OngoingReassignment:
    """One partition being reassigned (ListPartitionReassignments' entry)."""

    tp: TopicPartition
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


class PartitionReassignmentManager:
    """``is_active()`` says whether this broker is the active controller; a completed reassignment resumes the
    topic's deletion and its KIP-950 disablement, which may have waited for it."""

    def __init__(self, context: ControllerContext, batch: ControllerBrokerRequestBatch, zk, kafka_zk: KafkaZkClient,
                 fenced: FencedZkWrites, events: ControllerEvents, replica_state_machine: ReplicaStateMachine,
                 partition_state_machine: PartitionStateMachine, topic_deletion_manager: TopicDeletionManager,
                 tiered_manager: TieredStorageDisablementManager, is_active: Callable[[], bool]) -> None:
        self.ctx = context
        self.batch = batch
        self.zk = zk
        self.kafka_zk = kafka_zk
        self.fenced = fenced
        self.events = events
        self.replica_state_machine = replica_state_machine
        self.partition_state_machine = partition_state_machine
        self.topic_deletion_manager = topic_deletion_manager
        self.tiered_manager = tiered_manager
        self._is_active = is_active

    # --- watch, failover, broker start-up, ISR changes (controller thread) ----------------------------------
    def register_watch(self) -> None:
        """Data watch on ``/admin/reassign_partitions``: its creation and changes enqueue ZkPartitionReassignment
        (the first call, at registration, is handled by :meth:`on_controller_failover`)."""
        events = self.events
        gen = events.generation
        first = [True]

        def on_data(data, stat, event=None):
            if gen != events.generation:
                return False
            if first[0]:
                first[0] = False
                return True
            if data is not None:
                events.put_active_only("ZkPartitionReassignment", self.process_zk_partition_reassignment)
            return True
        DataWatch(self.zk, paths.REASSIGN_PARTITIONS, on_data)

    def on_controller_failover(self) -> None:
        """Kafka's ``initializePartitionReassignments``: the znode's reassignments first, then every partition
        the topic znodes say is being reassigned."""
        resumed = self.process_zk_partition_reassignment()
        for tp in sorted(self.ctx.partitions_being_reassigned - resumed):
            self._resume(tp)

    def on_broker_startup(self, new_brokers: Iterable[int]) -> None:
        """Resume the reassignments whose target has a replica on a broker that just started."""
        new = set(new_brokers)
        for tp in sorted(self.ctx.partitions_being_reassigned):
            a = self.ctx.assignment(tp)
            if a is not None and new & set(a.target):
                self._resume(tp)

    def on_isr_change(self, partitions: Iterable[TopicPartition]) -> None:
        """Kafka's ``PartitionReassignmentIsrChange``: complete the reassignments whose TRS joined the ISR."""
        for tp in sorted(set(partitions) & self.ctx.partitions_being_reassigned):
            a = self.ctx.assignment(tp)
            if a is not None and self._is_reassignment_complete(tp, a):
                self.on_partition_reassignment(tp, a)

    def _resume(self, tp: TopicPartition) -> None:
        a = self.ctx.assignment(tp)
        if a is None or not a.is_being_reassigned:
            return
        try:
            self.on_partition_reassignment(tp, a)
        except ControllerMovedError:
            raise
        except Exception:  # noqa: BLE001 - one partition's failure must not stop the others
            log.exception("resuming a reassignment failed %s", kv(partition=tp))

    # --- triggers -------------------------------------------------------------------------------------------
    def process_zk_partition_reassignment(self) -> set[TopicPartition]:
        """Kafka's ``processZkPartitionReassignment``; returns the partitions it started or resumed."""
        try:
            data, _ = self.zk.get(paths.REASSIGN_PARTITIONS)
        except NoNodeError:
            return set()
        try:
            requested = codecs.ReassignPartitions.decode(data).partitions
        except codecs.MalformedZNodeError as e:
            log.warning("Ignoring partition reassignment due to invalid json: %s", e)
            self.fenced.delete_if_exists(paths.REASSIGN_PARTITIONS)
            return set()
        results: dict[TopicPartition, ReassignmentResult] = {}
        to_reassign: dict[TopicPartition, ReplicaAssignment] = {}
        for (topic, partition), replicas in sorted(requested.items()):
            tp = TopicPartition(topic, partition)
            if not replicas:
                results[tp] = ReassignmentResult(Errors.INVALID_REPLICA_ASSIGNMENT,
                                                 "Empty replica list specified in partition reassignment.")
                continue
            built = self._build_reassignment(tp, replicas)
            if built is None:
                results[tp] = ReassignmentResult(Errors.NO_REASSIGNMENT_IN_PROGRESS)
            elif built == self.ctx.assignment(tp) and built.is_being_reassigned:
                continue  # already in progress with this target (our own rewrite of the znode fired the watch)
            else:
                to_reassign[tp] = built
        results.update(self._maybe_trigger_partition_reassignment(to_reassign))
        failed = {tp: r for tp, r in results.items() if r.error != Errors.NONE}
        if failed:
            log.warning("Failed reassignment through zk %s", kv(partitions=",".join(
                f"{tp}:{r.error.name}" for tp, r in sorted(failed.items()))))
            self._maybe_remove_from_zk_reassignment(lambda tp, _replicas: tp in failed)
        return {tp for tp in to_reassign if tp not in failed}

    def alter_partition_reassignments(self, reassignments: Mapping[TopicPartition, tuple[int, ...] | None]
                                      ) -> Future:
        """AlterPartitionReassignments on the controller thread (``None`` cancels).  The future holds
        ``{tp: ReassignmentResult}`` once every reassignment started, or NotControllerError."""
        fut: Future = Future()

        def run():
            if not self._is_active():
                fut.set_exception(NotControllerError("This is not the correct controller for this cluster."))
                return
            try:
                fut.set_result(self._process_api_partition_reassignment(reassignments))
            except ControllerMovedError as e:
                fut.set_exception(NotControllerError(str(e)))
                raise
            except Exception as e:  # noqa: BLE001 - the client gets the error
                fut.set_exception(e)
        self.events.put("ApiPartitionReassignment", run, self._preempt(fut))
        return fut

    def list_partition_reassignments(self, partitions: Iterable[TopicPartition] | None) -> Future:
        """ListPartitionReassignments on the controller thread: the future holds the ongoing reassignments of
        ``partitions`` (all if None), sorted."""
        fut: Future = Future()
        wanted = None if partitions is None else set(partitions)

        def run():
            if not self._is_active():
                fut.set_exception(NotControllerError("This is not the correct controller for this cluster."))
                return
            tps = self.ctx.partitions_being_reassigned if wanted is None else wanted
            out = []
            for tp in sorted(tps):
                a = self.ctx.assignment(tp)
                if a is not None and a.is_being_reassigned:
                    out.append(OngoingReassignment(tp, a.replicas, a.adding, a.removing))
            fut.set_result(out)
        self.events.put("ListPartitionReassignments", run, self._preempt(fut))
        return fut

    @staticmethod
    def _preempt(fut: Future) -> Callable[[], None]:
        def preempt():
            if not fut.done():
                fut.set_exception(NotControllerError("The controller moved while the request was queued."))
        return preempt

    def _process_api_partition_reassignment(self, reassignments) -> dict[TopicPartition, ReassignmentResult]:
        results: dict[TopicPartition, ReassignmentResult] = {}
        to_reassign: dict[TopicPartition, ReplicaAssignment] = {}
        for tp, target in reassignments.items():
            error = self._validate_replicas(tp, target) if target is not None else None
            if error is not None:
                results[tp] = error
                continue
            built = self._build_reassignment(tp, target)
            if built is None:
                results[tp] = ReassignmentResult(Errors.NO_REASSIGNMENT_IN_PROGRESS,
                                                 f"No reassignment in progress for partition {tp}.")
            else:
                to_reassign[tp] = built
        # The latest reassignment, by API or znode, wins: the znode forgets these partitions.
        self._maybe_remove_from_zk_reassignment(lambda tp, _replicas: tp in to_reassign)
        results.update(self._maybe_trigger_partition_reassignment(to_reassign))
        log.info("AlterPartitionReassignments %s", kv(
            started=",".join(str(tp) for tp, r in sorted(results.items()) if r.error == Errors.NONE) or "-",
            failed=",".join(f"{tp}:{r.error.name}" for tp, r in sorted(results.items())
                            if r.error != Errors.NONE) or "-"))
        return results

    def _validate_replicas(self, tp: TopicPartition, replicas: tuple[int, ...]) -> ReassignmentResult | None:
        """Kafka's ``validateReplicas``: non-empty, distinct, non-negative, new replicas on live brokers."""
        replicas = tuple(replicas)
        if not replicas:
            return ReassignmentResult(Errors.INVALID_REPLICA_ASSIGNMENT,
                                      "Empty replica list specified in partition reassignment.")
        if len(set(replicas)) != len(replicas):
            return ReassignmentResult(Errors.INVALID_REPLICA_ASSIGNMENT,
                                      f"Duplicate replica ids in partition reassignment replica list: "
                                      f"{list(replicas)}")
        if any(r < 0 for r in replicas):
            return ReassignmentResult(Errors.INVALID_REPLICA_ASSIGNMENT,
                                      f"Invalid broker id in replica list: {list(replicas)}")
        current = self.ctx.assignment(tp) or ReplicaAssignment(())
        adding = current.reassign_to(replicas).adding
        live = self.ctx.live_broker_ids
        if not set(adding) <= live:
            return ReassignmentResult(Errors.INVALID_REPLICA_ASSIGNMENT,
                                      f"Replica assignment has brokers that are not alive. Replica list: "
                                      f"{list(replicas)}, live broker list: {sorted(live)}")
        return None

    def _build_reassignment(self, tp: TopicPartition, target: tuple[int, ...] | None) -> ReplicaAssignment | None:
        """Kafka's ``maybeBuildReassignment``: a cancel (None) of a partition being reassigned goes back to
        its origin; a cancel of anything else is None (NO_REASSIGNMENT_IN_PROGRESS)."""
        current = self.ctx.assignment(tp) or ReplicaAssignment(())
        if current.is_being_reassigned:
            return current.reassign_to(current.origin if target is None else target)
        return None if target is None else current.reassign_to(target)

    def _maybe_trigger_partition_reassignment(self, reassignments: Mapping[TopicPartition, ReplicaAssignment]
                                              ) -> dict[TopicPartition, ReassignmentResult]:
        results = {}
        for tp, reassignment in sorted(reassignments.items()):
            if self.ctx.is_topic_queued_for_deletion(tp.topic):
                log.info("Skipping reassignment since the topic is currently being deleted %s", kv(partition=tp))
                results[tp] = ReassignmentResult(Errors.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            elif self.ctx.assignment(tp) is None:
                results[tp] = ReassignmentResult(Errors.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            else:
                try:
                    self.on_partition_reassignment(tp, reassignment)
                    results[tp] = OK
                except ControllerMovedError:
                    raise
                except Exception as e:  # noqa: BLE001 - reported to the caller
                    log.exception("reassignment failed %s", kv(partition=tp))
                    results[tp] = ReassignmentResult(Errors.UNKNOWN_SERVER_ERROR, str(e))
        return results

    # --- the algorithm --------------------------------------------------------------------------------------
    def on_partition_reassignment(self, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
        self._update_current_reassignment(tp, reassignment)
        if not self._is_reassignment_complete(tp, reassignment):
            log.info("reassignment started %s", kv(partition=tp, replicas=list(reassignment.replicas),
                                                   adding=list(reassignment.adding),
                                                   removing=list(reassignment.removing)))
            self._update_leader_epoch_and_send_request(tp, reassignment)
            self.replica_state_machine.handle_state_changes(
                {PartitionAndReplica(tp, r) for r in reassignment.adding}, RS.NEW)
            if tp.topic in self.tiered_manager.topics_to_be_disabled:
                self.tiered_manager.resume_disablements()
            return
        rsm = self.replica_state_machine
        rsm.handle_state_changes({PartitionAndReplica(tp, r) for r in reassignment.adding}, RS.ONLINE)
        completed = reassignment.complete()
        self.ctx.update_assignment(tp, completed)
        self._move_reassigned_partition_leader_if_required(tp, completed)
        self._stop_removed_replicas(tp, reassignment.removing)
        self._write_topic_assignment(tp.topic)
        self._maybe_remove_from_zk_reassignment(lambda p, replicas: p == tp and replicas == completed.replicas)
        self.batch.send_update_metadata(self.ctx.live_or_shutting_down_broker_ids, [tp])
        log.info("reassignment completed %s", kv(partition=tp, replicas=list(completed.replicas),
                                                 removed=list(reassignment.removing)))
        self.topic_deletion_manager.resume_deletion_for_topics({tp.topic})
        if tp.topic in self.tiered_manager.topics_to_be_disabled:
            self.tiered_manager.resume_disablements()

    def _update_current_reassignment(self, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
        current = self.ctx.assignment(tp)
        if current == reassignment:
            return
        self.ctx.update_assignment(tp, reassignment)
        self._write_topic_assignment(tp.topic)
        unneeded = [r for r in (current.replicas if current else ()) if r not in reassignment.replicas]
        if unneeded:
            self._stop_removed_replicas(tp, unneeded)

    def _is_reassignment_complete(self, tp: TopicPartition, assignment: ReplicaAssignment) -> bool:
        """TRS within the ISR, read fresh from ZooKeeper (leaders write ISR changes themselves)."""
        state = self.kafka_zk.get_partition_states([tp]).get(tp)
        if state is None:
            return False
        self.ctx.partition_leadership[tp] = state
        return set(assignment.target) <= set(state.isr)

    def _update_leader_epoch_and_send_request(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        """Bump the leader epoch (conditional write, re-read on a race with the leader's ISR write) and send
        LeaderAndIsr with the new assignment to every replica."""
        zkc = self.kafka_zk
        for _ in range(LEADER_EPOCH_BUMP_ATTEMPTS):
            cur = zkc.get_partition_states([tp]).get(tp)
            if cur is None:
                break
            if cur.controller_epoch > self.ctx.epoch:
                raise ControllerMovedError(f"partition {tp} was written by controller epoch {cur.controller_epoch}")
            bumped = attrs.evolve(cur, leader_epoch=cur.leader_epoch + 1, controller_epoch=self.ctx.epoch)
            written = zkc.update_leader_and_isr({tp: bumped}, self.ctx.epoch_zk_version).get(tp)
            if written is None:
                continue
            self.ctx.partition_leadership[tp] = written
            batch = self.batch
            batch.new_batch()
            batch.add_leader_and_isr(assignment.replicas, tp, written)
            batch.send_requests_to_brokers(self.ctx.epoch)
            return
        log.error("could not bump the leader epoch of a partition being reassigned %s", kv(partition=tp))

    def _move_reassigned_partition_leader_if_required(self, tp: TopicPartition, completed: ReplicaAssignment) -> None:
        leadership: LeaderAndIsr | None = self.ctx.partition_leadership.get(tp)
        if (leadership is not None and leadership.leader in completed.replicas
                and self.ctx.is_replica_online(leadership.leader, tp)):
            self._update_leader_epoch_and_send_request(tp, completed)
            return
        psm = self.partition_state_machine
        failed: dict = {}
        for _ in range(LEADER_EPOCH_BUMP_ATTEMPTS):
            failed = psm.handle_state_changes([tp], PartitionState.ONLINE, ElectionStrategy.REASSIGN)
            if not failed:
                return
            fresh = self.kafka_zk.get_partition_states([tp]).get(tp)
            if fresh is None:
                break
            self.ctx.partition_leadership[tp] = fresh
        log.error("could not move the leader of a reassigned partition %s", kv(partition=tp, reason=failed.get(tp)))

    def _stop_removed_replicas(self, tp: TopicPartition, removed: Iterable[int]) -> None:
        replicas = {PartitionAndReplica(tp, r) for r in removed}
        if not replicas:
            return
        rsm = self.replica_state_machine
        rsm.handle_state_changes(replicas, RS.OFFLINE)
        rsm.handle_state_changes(replicas, RS.DELETION_STARTED)
        rsm.handle_state_changes(replicas, RS.DELETION_SUCCESSFUL)
        rsm.handle_state_changes(replicas, RS.NON_EXISTENT)

    # --- ZooKeeper writes (fenced) --------------------------------------------------------------------------
    def _write_topic_assignment(self, topic: str) -> None:
        ctx = self.ctx
        assignments = {tp.partition: ctx.assignment(tp) for tp in ctx.partitions_for_topic(topic)}
        ta = codecs.TopicAssignment.from_replica_assignments(assignments, ctx.topic_ids.get(topic))
        self.kafka_zk.set_topic_assignment(topic, ta, ctx.epoch_zk_version)

    def _maybe_remove_from_zk_reassignment(self, should_remove: Callable[[TopicPartition, tuple[int, ...]], bool]
                                           ) -> None:
        """Rewrite ``/admin/reassign_partitions`` without the entries ``should_remove`` picks; delete it when
        nothing is left."""
        zk = self.zk
        try:
            data, stat = zk.get(paths.REASSIGN_PARTITIONS)
        except NoNodeError:
            return
        try:
            current = codecs.ReassignPartitions.decode(data).partitions
        except codecs.MalformedZNodeError:
            return  # handled (deleted) by process_zk_partition_reassignment
        keep = {k: r for k, r in current.items() if not should_remove(TopicPartition(*k), r)}
        if len(keep) == len(current):
            return
        w = self.fenced.writer()
        if keep:
            w.set_data(paths.REASSIGN_PARTITIONS, codecs.ReassignPartitions(keep).encode())
        else:
            self.fenced.delete_if_exists(paths.REASSIGN_PARTITIONS)
