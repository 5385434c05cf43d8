"""KafkaController: election through ZooKeeper, failover, broker membership, topic creation and deletion.

Runs inside every broker; one is active.  All state changes happen on the controller event thread; ZooKeeper
watches and control-channel callbacks only enqueue events.  Every ZooKeeper write is fenced by the
``/controller_epoch`` zkVersion won at election; a fenced write that fails raises ``ControllerMovedError``
and the controller resigns.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

import attrs

from kafkatier.common.scheduler import KafkaScheduler
from kafkatier.controller.channel_manager import ControllerChannelManager
from kafkatier.common.structs import PartitionAndReplica, TopicPartition
from kafkatier.controller.context import ControllerContext, PartitionState, ReplicaState
from kafkatier.controller.controlled_shutdown import ControlledShutdownManager
from kafkatier.controller.event_manager import ControllerEvent, ControllerEventManager, ControllerEvents
from kafkatier.controller.fenced_writes import FencedZkWrites
from kafkatier.controller.partition_reassignment import PartitionReassignmentManager
from kafkatier.controller.partition_state_machine import PartitionStateMachine
from kafkatier.controller.replica_election_manager import AutoRebalanceConfig, ReplicaElectionManager
from kafkatier.controller.replica_state_machine import ReplicaStateMachine
from kafkatier.controller.request_batch import ControllerBrokerRequestBatch
from kafkatier.controller.tiered_storage_disablement_manager import TieredStorageDisablementManager
from kafkatier.controller.topic_deletion_manager import TopicDeletionManager
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.control_messages import LeaderAndIsrResponseData, StopReplicaResponseData
from kafkatier.protocol.errors import Errors
from kafkatier.zk import codecs, paths
from kafkatier.zk.client import ensure_persistent_paths
from kafkatier.zk.errors import NoNodeError
from kafkatier.zk.fenced import ControllerMovedError, register_controller_and_increment_epoch
from kafkatier.zk.kafka_zk_client import KafkaZkClient, assignment_from_codec, now_ms, read_entity_config
from kafkatier.zk.watchers import ChildrenWatch, DataWatch

log = get_logger("controller")

# How long a failover waits for its own broker to apply its elections' UpdateMetadata before it takes the dead
# replicas out of the ISRs (see KafkaController._await_applied), and from how many partitions on: below, that
# work holds the interpreter lock for tens of milliseconds, less than the wait's own round trips through the
# control channel.
ELECTED_METADATA_WAIT_S = 10.0
ELECTED_METADATA_WAIT_MIN_PARTITIONS = 10_000


@attrs.frozen
class ControllerConfig:
    delete_topic_enable: bool = True
    request_timeout_s: float = 30.0
    unclean_leader_election_enable: bool = False
    # Test only (failover scenarios): a delay before each control request is written, from the broker override
    # ``kafkatier.test.control.channel.latency.ms`` read at start-up.  Keeps a DISABLING or a reassignment in
    # flight long enough for a scenario to act during it.  0 in every real configuration.
    control_request_latency_s: float = 0.0
    auto_rebalance: AutoRebalanceConfig = AutoRebalanceConfig()


class KafkaController:
    def __init__(self, broker_id: int, zk, config: ControllerConfig | None = None, admin_factory=None,
                 scheduler: KafkaScheduler | None = None):
        self.broker_id = broker_id
        self.zk = zk
        self.kafka_zk = KafkaZkClient(zk)
        self.config = config or ControllerConfig()
        self.ctx = ControllerContext()
        self.event_manager = ControllerEventManager(on_controller_moved=lambda e: self._put("ControllerMoved",
                                                                                                self.maybe_resign))
        self.events = ControllerEvents(self.event_manager, is_active=lambda: self.is_active)
        self.active_controller_id = -1
        self.channel: ControllerChannelManager | None = None
        self.batch = ControllerBrokerRequestBatch(broker_id, self.ctx, self._send,
                                                  stop_replica_callback=self._on_stop_replica_response,
                                                  leader_and_isr_callback=self._on_leader_and_isr_response)
        self.fenced = FencedZkWrites(self.kafka_zk, self.ctx)
        self.replica_state_machine = ReplicaStateMachine(self.ctx, self.batch, self.kafka_zk)
        self.partition_state_machine = PartitionStateMachine(self.ctx, self.batch, self.kafka_zk,
                                                             self.unclean_leader_election_enabled)
        self.topic_deletion_manager = TopicDeletionManager(
            self.ctx, self.batch, self.kafka_zk, self.replica_state_machine, self.partition_state_machine,
            unregister_partition_modifications_watch=self.unregister_partition_modifications_watch,
            on_deletion_completing=self.on_topic_deletion_completing,
            delete_topic_enable=self.config.delete_topic_enable)
        # Timers (the disablement's retry backoff): the broker's scheduler, or one of our own.
        self._owns_scheduler = scheduler is None
        self.scheduler = scheduler if scheduler is not None else KafkaScheduler(1, "controller-scheduler-")
        self.tiered_manager = TieredStorageDisablementManager(self.ctx, self.batch, self.zk, self.kafka_zk,
                                                              self.events, self.admin_zk, self.scheduler)
        self.replica_election_manager = ReplicaElectionManager(
            self.ctx, self.zk, self.fenced, self.events, self.partition_state_machine,
            is_active=lambda: self.is_active, confirm_still_controller=self.confirm_still_controller,
            scheduler=self.scheduler, auto_rebalance=self.config.auto_rebalance)
        self.controlled_shutdown_manager = ControlledShutdownManager(
            self.ctx, self.batch, self.partition_state_machine, self.replica_state_machine, self.event_manager,
            is_active=lambda: self.is_active, channel=lambda: self.channel, scheduler=self.scheduler,
            request_timeout_s=self.config.request_timeout_s)
        self.partition_reassignment = PartitionReassignmentManager(
            self.ctx, self.batch, self.zk, self.kafka_zk, self.fenced, self.events, self.replica_state_machine,
            self.partition_state_machine, self.topic_deletion_manager, self.tiered_manager,
            is_active=lambda: self.is_active)
        self._admin_factory = admin_factory
        self._admin = None
        self._topic_watch_gen: dict[str, int] = {}
        self._broker_watch_gen: dict[int, int] = {}
        self._controller_watch = None
        self.metrics = {"failovers": 0, "resignations": 0, "last_failover_ms": 0.0}
        self._in_failover = False
        self._coalesce_lock = threading.Lock()
        self._coalesced_events: set[str] = set()

    # --- lifecycle ------------------------------------------------------------------------------------------
    def startup(self) -> None:
        if self._owns_scheduler:
            self.scheduler.startup()
        self.event_manager.start()
        self._controller_watch = DataWatch(self.zk, paths.CONTROLLER, self._on_controller_znode)
        self._put("Startup", self.elect)

    def shutdown(self) -> None:
        ev = self.event_manager.clear_and_put(ControllerEvent("Shutdown", self._on_shutdown))
        ev.done.wait(10)
        self.event_manager.shutdown()
        if self._owns_scheduler:
            self.scheduler.shutdown()

    def _on_shutdown(self) -> None:
        if self.is_active:
            self.on_controller_resignation()
        self.active_controller_id = -1

    @property
    def is_active(self) -> bool:
        return self.active_controller_id == self.broker_id

    @property
    def in_failover(self) -> bool:
        """True while ``on_controller_failover`` runs: the broker defers its own GIL-heavy periodic work (the
        status file of every partition) so the failover is not slowed by it."""
        return self._in_failover

    def _put(self, name: str, fn: Callable[[], None], preempt=None, urgent: bool = False) -> ControllerEvent:
        return self.events.put(name, fn, preempt, urgent=urgent)

    def _active_only(self, fn: Callable[[], None]) -> Callable[[], None]:
        return self.events.active_only(fn)

    # --- session events (called by the broker's ZooKeeper state listener) ----------------------------------
    def expire(self) -> threading.Event:
        def run():
            self.active_controller_id = -1
            self.on_controller_resignation()
        return self.event_manager.clear_and_put(ControllerEvent("Expire", run)).done

    def reelect(self) -> None:
        self._put("RegisterBrokerAndReelect", self._reelect)

    def _reelect(self) -> None:
        self.maybe_resign()
        self.elect()

    # --- election -------------------------------------------------------------------------------------------
    def _on_controller_znode(self, data, stat, event=None):
        if data is None:
            self._put("Reelect", self._reelect)
        else:
            self._put("ControllerChange", self.maybe_resign)
        return True

    def _refresh_active_controller_id(self) -> None:
        cid = self.kafka_zk.get_controller_id()
        self.active_controller_id = -1 if cid is None else cid

    def maybe_resign(self) -> None:
        was_active = self.is_active
        self._refresh_active_controller_id()
        if was_active and not self.is_active:
            self.on_controller_resignation()

    def elect(self) -> None:
        self._refresh_active_controller_id()
        if self.active_controller_id != -1:
            log.debug("broker %s sees controller %s", self.broker_id, self.active_controller_id)
            return
        try:
            epoch, epoch_zk_version = register_controller_and_increment_epoch(self.zk, self.broker_id, now_ms())
        except ControllerMovedError as e:
            log.info("lost the controller election: %s", e)
            self.maybe_resign()
            return
        except Exception:  # noqa: BLE001
            log.exception("error during controller election; resigning")
            self._delete_controller_znode()
            return
        self.active_controller_id = self.broker_id
        self.ctx.epoch, self.ctx.epoch_zk_version = epoch, epoch_zk_version
        log.info("elected as controller %s", kv(broker=self.broker_id, epoch=epoch, epoch_zk_version=epoch_zk_version))
        try:
            self.on_controller_failover()
        except ControllerMovedError:
            raise
        except Exception:  # noqa: BLE001
            log.exception("error during controller failover; resigning")
            self._trigger_controller_move()

    def _trigger_controller_move(self) -> None:
        """Kafka's ``triggerControllerMove``: stop acting as controller (no event may find it active without a
        channel), then delete ``/controller`` fenced by the epoch zkVersion it was elected with (read before the
        resignation resets the context), so every broker, this one included, elects again."""
        expected_epoch_zk_version = self.ctx.epoch_zk_version
        self.active_controller_id = -1
        self.on_controller_resignation()
        self._delete_controller_znode(expected_epoch_zk_version)

    def _delete_controller_znode(self, epoch_zk_version: int | None = None) -> None:
        try:
            self.kafka_zk.writer(self.ctx.epoch_zk_version if epoch_zk_version is None else epoch_zk_version) \
                .delete(paths.CONTROLLER)
        except Exception:  # noqa: BLE001
            log.warning("could not delete /controller", exc_info=True)

    def on_controller_failover(self) -> None:
        self._in_failover = True
        try:
            self._on_controller_failover()
        finally:
            self._in_failover = False

    def _on_controller_failover(self) -> None:
        t0 = time.monotonic()
        gen = self.events.next_generation()
        w = self.kafka_zk.writer(self.ctx.epoch_zk_version)
        # 1. /feature
        feature = codecs.FeatureZNode(features={}).encode()
        try:
            w.set_data(paths.FEATURE, feature)
        except NoNodeError:
            w.create(paths.FEATURE, feature)
        # 2. watches (their paths checked in one pipelined round: every broker creates them at start-up)
        ensure_persistent_paths(self.zk, (paths.BROKER_IDS, paths.BROKER_TOPICS, paths.DELETE_TOPICS,
                                          paths.ISR_CHANGE_NOTIFICATION, paths.LOG_DIR_EVENT_NOTIFICATION))
        # Urgent like ControlledShutdown, so a shutdown never runs ahead of the death of a broker seen before it
        # (it would elect the dead broker, still in an ISR, as leader).
        self._children_watch(gen, paths.BROKER_IDS, "BrokerChange", self.process_broker_change, urgent=True)
        self._children_watch(gen, paths.BROKER_TOPICS, "TopicChange", self.process_topic_change)
        self._children_watch(gen, paths.DELETE_TOPICS, "TopicDeletion", self.process_topic_deletion)
        self._children_watch(gen, paths.ISR_CHANGE_NOTIFICATION, "IsrChangeNotification",
                             self.process_isr_change_notification, coalesce=True)
        self._children_watch(gen, paths.LOG_DIR_EVENT_NOTIFICATION, "LogDirEventNotification",
                             self.process_log_dir_event_notification)
        self.partition_reassignment.register_watch()
        t_watches = time.monotonic()
        # 3. stale notifications
        for c in self.kafka_zk.get_children_or_empty(paths.LOG_DIR_EVENT_NOTIFICATION):
            self._fenced_delete(f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{c}")
        # 4. context
        t_read = time.monotonic()
        self._initialize_context()
        t_elect = time.monotonic()
        self.channel = ControllerChannelManager(
            self.zk, self.broker_id, writer=lambda: self.kafka_zk.writer(self.ctx.epoch_zk_version),
            controller_epoch=lambda: self.ctx.epoch,
            on_controller_moved=lambda e: self._put("ControllerMoved", self.maybe_resign),
            request_timeout_s=self.config.request_timeout_s, send_latency_s=self.config.control_request_latency_s)
        self.channel.startup({b.id: b.epoch for b in self.ctx.live_brokers.values()})
        t_channel = time.monotonic()
        # 5-6. deletion
        to_delete = set(self.kafka_zk.get_children_or_empty(paths.DELETE_TOPICS))
        unknown = to_delete - self.ctx.all_topics
        for t in unknown:
            self._fenced_delete(paths.delete_topic(t))
        to_delete -= unknown
        ineligible = {t for t in to_delete
                      if any(not self.ctx.is_replica_online(pr.replica, pr.tp) for pr in self.ctx.replicas_for_topic(t))}
        self.topic_deletion_manager.init(to_delete, ineligible)
        self.tiered_manager.on_failover()
        # 7-9. UpdateMetadata with the live brokers, then the state machines, as one request of each kind per
        # broker (the batch is coalesced).  Kafka starts the replica state machine first, which removes dead
        # replicas from the ISR (a leader epoch bump) before the partition state machine elects (a second
        # bump).  Electing first gives the dead leader's partitions exactly one new leader epoch, as acceptance
        # scenario A2 requires; the dead replicas have then already left the ISR.
        # Kafka's onControllerFailover sends UpdateMetadata with the live brokers to every live broker before the
        # state machines start: the brokers drop a dead broker (the old controller) from their metadata at once,
        # not after the elections.  The round after the elections carries every partition's final state, its
        # UpdateMetadata queued before the LeaderAndIsr (request_batch.py's send_requests_to_brokers).
        t_states = time.monotonic()
        self._send_update_metadata(self.ctx.live_broker_ids, [])
        with self.batch.coalesced(lambda: self.ctx.epoch, update_metadata_first=True):
            self.partition_state_machine.startup()
            # The elected leaders reach every broker's metadata now, not after every dead replica has left
            # every ISR (a project difference: Kafka sends the elections' UpdateMetadata with its LeaderAndIsr).
            t_wait = time.monotonic()
            elected_to = self.batch.send_update_metadata_so_far(self.ctx.epoch)
            if len(self.ctx.partition_leadership) >= ELECTED_METADATA_WAIT_MIN_PARTITIONS:
                # Only this broker is waited for: the others apply it in their own processes, whatever this one
                # does meanwhile.
                self._await_applied(elected_to & {self.broker_id}, ELECTED_METADATA_WAIT_S)
            t_elected = time.monotonic()
            self.replica_state_machine.startup()
            t_send = time.monotonic()
        t_resume = time.monotonic()
        # 10. resume reassignments, then deletion
        self.partition_reassignment.on_controller_failover()
        self.topic_deletion_manager.resume_deletions()
        self.tiered_manager.resume_disablements()
        self.replica_election_manager.on_failover()  # pending preferred election, auto rebalance
        self.metrics["failovers"] += 1
        t_end = time.monotonic()
        self.metrics["last_failover_ms"] = (t_end - t0) * 1000
        # Where the time went: reading ZooKeeper into the context, deletion/tiered set-up, the state machines
        # (elections and their ZooKeeper writes), queueing the coalesced requests, resuming pending work.
        phases = {"read_ms": t_elect - t_read, "elections_ms": t_elected - t_states, "states_ms": t_send - t_states,
                  "send_ms": t_resume - t_send,
                  "other_ms": (t_read - t0) + (t_states - t_elect) + (t_end - t_resume),
                  "wait_ms": t_elected - t_wait, "watches_ms": t_watches - t0, "channel_ms": t_channel - t_elect,
                  "resume_ms": t_end - t_resume}
        self.metrics["last_failover_phases_ms"] = {k: round(v * 1000, 1) for k, v in phases.items()}
        log.info("controller failover done %s", kv(epoch=self.ctx.epoch, brokers=sorted(self.ctx.live_broker_ids),
                                                   topics=len(self.ctx.all_topics),
                                                   ms=round(self.metrics["last_failover_ms"], 1),
                                                   **self.metrics["last_failover_phases_ms"]))

    def _await_applied(self, brokers: set[int], timeout_s: float) -> None:
        """Block until each of ``brokers`` has answered what was queued to it so far, at most ``timeout_s``.  The
        failover waits so for its own broker to apply its elections' UpdateMetadata before it takes the dead
        replicas out of every ISR: that work holds this process's interpreter lock for seconds at 20,000
        partitions, and this broker's control handler shares that lock (the other brokers apply it in their own
        processes meanwhile)."""
        if not brokers or self.channel is None:
            return
        lock, done = threading.Lock(), threading.Event()
        pending = set(brokers)

        def applied(broker: int) -> None:
            with lock:
                pending.discard(broker)
                if not pending:
                    done.set()
        for b in sorted(brokers):
            if not self.channel.barrier(b, lambda b=b: applied(b)):
                applied(b)
        if not done.wait(timeout_s):
            log.info("elected leaders' metadata not applied yet; going on %s",
                     kv(brokers=sorted(pending), waited_s=timeout_s))

    def on_controller_resignation(self) -> None:
        log.info("resigning %s", kv(broker=self.broker_id, epoch=self.ctx.epoch))
        self.events.next_generation()
        self._topic_watch_gen.clear()
        self._broker_watch_gen.clear()
        if self.channel is not None:
            self.channel.shutdown()
            self.channel = None
        self.tiered_manager.reset()
        self.batch.reset()  # a round an error interrupted is never sent: the next controller sends from ZooKeeper
        self.ctx.reset()
        self.metrics["resignations"] += 1

    def _initialize_context(self) -> None:
        ctx = self.ctx
        ctx.live_brokers = self.kafka_zk.get_all_brokers_and_epochs()
        self._register_broker_watches(ctx.live_brokers)
        ctx.shutting_down_broker_ids.clear()
        ctx.all_topics = self.kafka_zk.get_all_topics()
        for t in ctx.all_topics:
            self._register_partition_modifications_watch(t)
        assignments = self.kafka_zk.get_topic_assignments(ctx.all_topics)
        self._load_assignments(assignments)
        ctx.topic_configs.update(self.kafka_zk.get_topic_configs(ctx.all_topics))
        ctx.partition_leadership.update(self.kafka_zk.get_partition_states(ctx.all_partitions()))

    def _load_assignments(self, assignments: dict) -> None:
        ctx = self.ctx
        w = self.kafka_zk.writer(ctx.epoch_zk_version)
        for t, ta in assignments.items():
            if not ta.topic_id:
                ta = attrs.evolve(ta, topic_id=codecs.new_topic_id())
                w.set_data(paths.topic(t), ta.encode())
                log.info("assigned topic id %s", kv(topic=t, topic_id=ta.topic_id))
            ctx.topic_ids[t] = ta.topic_id
            for p, a in assignment_from_codec(ta).items():
                ctx.update_assignment(TopicPartition(t, p), a)

    # --- watches --------------------------------------------------------------------------------------------
    def _children_watch(self, gen: int, path: str, name: str, handler: Callable[[], None],
                        coalesce: bool = False, urgent: bool = False) -> None:
        """``coalesce``: no new event while one of this name is queued (a change after it started running
        queues the next).  ``urgent``: queued with the urgent events (see event_manager).  ``path`` exists (the
        failover made sure)."""

        def on_children(children):
            if gen != self.events.generation:
                return False
            if not coalesce:
                self._put(name, self._active_only(handler), urgent=urgent)
                return True
            with self._coalesce_lock:
                if name in self._coalesced_events:
                    return True
                self._coalesced_events.add(name)

            def unqueued() -> None:
                with self._coalesce_lock:
                    self._coalesced_events.discard(name)

            def run() -> None:
                unqueued()
                if self.is_active:
                    handler()
            self._put(name, run, unqueued)
            return True
        ChildrenWatch(self.zk, path, on_children)

    def _register_partition_modifications_watch(self, topic: str) -> None:
        gen = self.events.generation
        self._topic_watch_gen[topic] = gen
        first = [True]

        def on_data(data, stat, event=None):
            if self._topic_watch_gen.get(topic) != gen or gen != self.events.generation:
                return False
            if first[0]:
                first[0] = False
                return True
            if data is None:
                return False
            self._put(f"PartitionModifications({topic})", self._active_only(lambda: self.process_partition_modifications(topic)))
            return True
        DataWatch(self.zk, paths.topic(topic), on_data)

    def _register_broker_watches(self, broker_ids) -> None:
        """A data watch per broker znode: a broker that bounces between two reads of ``/brokers/ids`` leaves
        the child list unchanged, but its re-created znode fires this watch (Kafka's BrokerModifications)."""
        gen = self.events.generation
        for b in broker_ids:
            if self._broker_watch_gen.get(b) == gen:
                continue
            self._broker_watch_gen[b] = gen
            first = [True]

            def on_data(data, stat, event=None, b=b):
                if self._broker_watch_gen.get(b) != gen or gen != self.events.generation:
                    return False
                if first[0]:
                    first[0] = False
                    return True
                self._put(f"BrokerModifications({b})", self._active_only(self.process_broker_change))
                return True
            DataWatch(self.zk, paths.broker(b), on_data)

    def unregister_partition_modifications_watch(self, topic: str) -> None:
        self._topic_watch_gen.pop(topic, None)

    # --- sending --------------------------------------------------------------------------------------------
    def _send(self, broker_id, api_key, api_name, api_version, body, callback) -> bool:
        if self.channel is None:
            return False
        return self.channel.send(broker_id, api_key, api_name, api_version, body, callback)

    def _send_update_metadata(self, brokers, partitions) -> None:
        self.batch.send_update_metadata(brokers, partitions)

    def _fenced_delete(self, path: str) -> None:
        self.fenced.delete_if_exists(path)

    # --- broker membership ----------------------------------------------------------------------------------
    def process_broker_change(self) -> None:
        ctx = self.ctx
        current = self.kafka_zk.get_all_brokers_and_epochs()
        self._register_broker_watches(current)
        cached = dict(ctx.live_brokers)
        new = sorted(set(current) - set(cached))
        dead = sorted(set(cached) - set(current))
        bounced = sorted(b for b in set(current) & set(cached) if current[b].epoch > cached[b].epoch)
        if not (new or dead or bounced):
            return
        log.info("broker change %s", kv(new=new, dead=dead, bounced=bounced, live=sorted(current)))
        for b in dead:
            self.channel.remove_broker(b)
        for b in new:
            ctx.live_brokers[b] = current[b]
            self.channel.add_broker(b, current[b].epoch)
        for b in bounced:
            self.channel.remove_broker(b)
        for b in dead:
            ctx.live_brokers.pop(b, None)
        if new:
            self.on_broker_startup(new)
        if bounced:
            for b in bounced:
                ctx.live_brokers.pop(b, None)
            self.on_broker_failure(bounced)
            for b in bounced:
                ctx.live_brokers[b] = current[b]
                self.channel.add_broker(b, current[b].epoch)
            self.on_broker_startup(bounced)
        if dead:
            self.on_broker_failure(dead)

    def on_broker_startup(self, new_brokers: list[int]) -> None:
        """Kafka's ``onBrokerStartup``: UpdateMetadata with the live brokers to the others and with every
        partition to the new brokers, their replicas OnlineReplica (one LeaderAndIsr per new broker, from the
        states in the context), then elections for partitions that were offline.  The rounds are coalesced
        (request_batch.py): each new broker gets one UpdateMetadata of every partition queued before its one
        LeaderAndIsr, the others one UpdateMetadata of the changed partitions; Kafka sends a new broker a second
        UpdateMetadata of its partitions after the LeaderAndIsr (20,000 partitions' worth to build, write and
        apply again)."""
        ctx = self.ctx
        t0 = time.monotonic()
        log.info("new brokers %s", new_brokers)
        new = set(new_brokers)
        for b in new:
            ctx.replicas_on_offline_dirs.pop(b, None)
        replicas = ctx.replicas_on_brokers(new)
        with self.batch.coalesced(lambda: ctx.epoch, update_metadata_first=True):
            self.batch.add_update_metadata(ctx.live_broker_ids - new, [])
            self.batch.add_update_metadata_only_to(new, ctx.all_partitions())
            self.replica_state_machine.handle_state_changes(replicas, ReplicaState.ONLINE)
            self.partition_state_machine.trigger_online_partition_state_change()
        log.info("new brokers' requests queued %s", kv(brokers=sorted(new), replicas=len(replicas),
                                                       ms=round((time.monotonic() - t0) * 1000, 1)))
        self.partition_reassignment.on_broker_startup(new_brokers)
        topics = {pr.tp.topic for pr in replicas}
        self.topic_deletion_manager.resume_deletion_for_topics(topics)
        self.tiered_manager.on_broker_startup(new_brokers)

    def on_broker_failure(self, dead: list[int]) -> None:
        ctx = self.ctx
        log.info("broker failure %s", dead)
        for b in dead:
            ctx.replicas_on_offline_dirs.pop(b, None)
            ctx.shutting_down_broker_ids.discard(b)
        self.tiered_manager.on_broker_failure(dead)
        self.on_replicas_become_offline(ctx.replicas_on_brokers(set(dead)))

    def on_replicas_become_offline(self, replicas: set[PartitionAndReplica]) -> None:
        ctx = self.ctx
        deleting, others = set(), set()
        for pr in replicas:
            (deleting if ctx.is_topic_queued_for_deletion(pr.tp.topic) else others).add(pr)
        offline_leader = [tp for tp, l in ctx.partition_leadership.items()
                          if not ctx.is_replica_online(l.leader, tp) and not ctx.is_topic_queued_for_deletion(tp.topic)
                          and tp in ctx.partition_states]
        self.partition_state_machine.handle_state_changes(offline_leader, PartitionState.OFFLINE)
        self.partition_state_machine.trigger_online_partition_state_change()
        self.replica_state_machine.handle_state_changes(others, ReplicaState.OFFLINE)
        if deleting:
            self.topic_deletion_manager.fail_replica_deletion(deleting)
        if not offline_leader:
            self._send_update_metadata(ctx.live_broker_ids, [])

    # --- topics ---------------------------------------------------------------------------------------------
    def process_topic_change(self) -> None:
        ctx = self.ctx
        topics = self.kafka_zk.get_all_topics()
        new = topics - ctx.all_topics
        deleted = ctx.all_topics - topics
        ctx.all_topics = topics
        for t in deleted:
            ctx.remove_topic(t)
            self.unregister_partition_modifications_watch(t)
        if not new:
            return
        for t in new:
            self._register_partition_modifications_watch(t)
        assignments = self.kafka_zk.get_topic_assignments(new)
        self._load_assignments(assignments)
        ctx.topic_configs.update(self.kafka_zk.get_topic_configs(new))
        log.info("new topics %s", kv(topics=",".join(sorted(new))))
        self.on_new_partition_creation([tp for t in sorted(new) for tp in ctx.partitions_for_topic(t)])
        self.tiered_manager.on_new_topics(sorted(new))

    def process_partition_modifications(self, topic: str) -> None:
        ctx = self.ctx
        ta = self.kafka_zk.get_topic_assignments([topic]).get(topic)
        if ta is None:
            return
        current = ctx.partition_assignments.get(topic, {})
        added = {p: a for p, a in assignment_from_codec(ta).items() if p not in current}
        if not added:
            return
        if ctx.is_topic_queued_for_deletion(topic):
            log.info("ignoring partitions added to a topic being deleted %s", kv(topic=topic, added=sorted(added)))
            return
        for p, a in added.items():
            ctx.update_assignment(TopicPartition(topic, p), a)
        self.on_new_partition_creation([TopicPartition(topic, p) for p in sorted(added)])

    def on_new_partition_creation(self, partitions: list[TopicPartition]) -> None:
        replicas = {PartitionAndReplica(tp, r) for tp in partitions for r in self.ctx.partition_replicas(tp)}
        self.partition_state_machine.handle_state_changes(partitions, PartitionState.NEW)
        self.replica_state_machine.handle_state_changes(replicas, ReplicaState.NEW)
        self.partition_state_machine.handle_state_changes(partitions, PartitionState.ONLINE)
        online = {pr for pr in replicas if self.ctx.is_replica_online(pr.replica, pr.tp)}
        self.replica_state_machine.handle_state_changes(online, ReplicaState.ONLINE)

    def process_topic_deletion(self) -> None:
        ctx = self.ctx
        topics = set(self.kafka_zk.get_children_or_empty(paths.DELETE_TOPICS))
        unknown = topics - ctx.all_topics
        for t in unknown:
            if self.config.delete_topic_enable and self.zk.exists(paths.topic(t)):
                self._delete_unreadable_topic(t)
                continue
            log.info("removing deletion marker of unknown topic %s", t)
            self._fenced_delete(paths.delete_topic(t))
        topics -= unknown
        if self.config.delete_topic_enable:
            # a topic whose /brokers/topics/T could not be decoded is known by name only, with no partitions
            unreadable = {t for t in topics if t not in ctx.topics_to_be_deleted and not ctx.partitions_for_topic(t)}
            for t in unreadable:
                self._delete_unreadable_topic(t)
                ctx.remove_topic(t)
            topics -= unreadable
        if not self.config.delete_topic_enable:
            for t in topics:
                self._fenced_delete(paths.delete_topic(t))
            return
        new = topics - ctx.topics_to_be_deleted
        if new:
            log.info("topics queued for deletion %s", ",".join(sorted(new)))
            self.tiered_manager.on_topic_queued_for_deletion(new)
            self.topic_deletion_manager.enqueue_topics_for_deletion(new)

    def _delete_unreadable_topic(self, topic: str) -> None:
        """Delete a topic whose ``/brokers/topics/T`` cannot be decoded (so it is in no context): StopReplica with
        delete to every live broker for each partition znode, then its znodes and marker.  Its assignment is
        unknown, so no replica state is tracked; a broker down now finds the topic gone when it comes back."""
        ctx = self.ctx
        partitions = sorted(int(p) for p in self.kafka_zk.get_children_or_empty(paths.topic_partitions(topic))
                            if p.isdigit())
        log.warning("deleting a topic whose assignment cannot be read %s",
                    kv(topic=topic, partitions=len(partitions), brokers=sorted(ctx.live_broker_ids)))
        if partitions and ctx.live_broker_ids:
            tps = [TopicPartition(topic, p) for p in partitions]
            self.batch.new_batch()
            self.batch.add_update_metadata_deleted(ctx.live_broker_ids, tps)
            for tp in tps:
                self.batch.add_stop_replica(ctx.live_broker_ids, tp, delete=True)
            self.batch.send_requests_to_brokers(ctx.epoch)
        self.kafka_zk.delete_topic_znodes(topic, ctx.epoch_zk_version)

    def on_topic_deletion_completing(self, topic: str) -> None:
        self.tiered_manager.on_topic_queued_for_deletion([topic])

    def unclean_leader_election_enabled(self, topic: str) -> bool:
        """The topic's ``unclean.leader.election.enable``, else the broker's (dynamic, then static), read from
        ZooKeeper at election time as Kafka does (only asked when no in-sync replica can lead)."""
        key = "unclean.leader.election.enable"
        for entity, name in (("topics", topic), ("brokers", str(self.broker_id)), ("brokers", "<default>")):
            try:
                v = (read_entity_config(self.zk, entity, name) or {}).get(key)
            except codecs.MalformedZNodeError:
                v = None  # logged by the reader
            if v is not None:
                return str(v).lower() == "true"
        return self.config.unclean_leader_election_enable

    def enable_unclean_leader_election(self, topic: str | None = None) -> None:
        """A config change set ``unclean.leader.election.enable=true`` for ``topic`` (None: the brokers' default):
        elect leaders for the offline partitions now, not at the next broker change -- Kafka's
        ``TopicUncleanLeaderElectionEnable`` (``UncleanLeaderElectionEnable`` for the default) event, which only
        the active controller acts on.  Called by every broker's config change handler."""
        name = "UncleanLeaderElectionEnable" if topic is None else f"TopicUncleanLeaderElectionEnable({topic})"
        log.info("unclean leader election enabled %s", kv(topic=topic or "<default>"))
        self._put(name, self._active_only(
            lambda: self.partition_state_machine.trigger_online_partition_state_change(topic)))

    # --- elections and controlled shutdown asked for by requests (ElectLeaders, ControlledShutdown) ----------
    def confirm_still_controller(self) -> bool:
        """Whether ``/controller_epoch`` still has the zkVersion this controller was elected with, read from
        ZooKeeper.  Asked before answering from the controller's own view without writing anything (an unclean
        ElectLeaders for a partition whose leader it believes alive): a controller paused past its ZooKeeper
        session (a zombie) still believes it is active until the expiry reaches it, and its writes are fenced
        but its answers are not.  A read through an expired session fails: NOT_CONTROLLER, and the client asks
        the new controller."""
        try:
            _, stat = self.zk.get(paths.CONTROLLER_EPOCH)
        except Exception as e:  # noqa: BLE001 - no session, no answer from this controller
            log.info("cannot confirm this broker is still the controller %s", kv(reason=type(e).__name__))
            return False
        if stat.version != self.ctx.epoch_zk_version:
            log.info("no longer the controller %s", kv(epoch_zk_version=self.ctx.epoch_zk_version,
                                                       current=stat.version))
            self._put("ControllerMoved", self.maybe_resign)
            return False
        return True

    def elect_leaders(self, partitions, election_type):
        """ElectLeaders: a future of {partition: ElectionOutcome} (replica_election_manager.py)."""
        return self.replica_election_manager.submit(partitions, election_type)

    def controlled_shutdown(self, broker_id: int, broker_epoch: int):
        """ControlledShutdown: a future of the partitions the broker still leads (controlled_shutdown.py)."""
        return self.controlled_shutdown_manager.submit(broker_id, broker_epoch)

    # --- ISR change notifications (leaders write ISR changes themselves, as with IBPs before AlterPartition) --
    def process_isr_change_notification(self) -> None:
        """Kafka's ``processIsrChangeNotification``: read every notification (multiReads), delete them all (fenced
        multis, pipelined), then refresh the named partitions' leadership from their ``state`` znodes and send
        UpdateMetadata.  A notification names many partitions (server/zk_isr_manager.py); one event handles
        every notification present, and further watch firings while it is queued add no event."""
        found, tps = self.kafka_zk.get_isr_change_notifications()
        if not found:
            return
        self.kafka_zk.delete_fenced(found, self.ctx.epoch_zk_version)
        tps = {tp for tp in tps if self.ctx.assignment(tp) is not None}
        fresh = self.kafka_zk.get_partition_states(tps)
        self.ctx.partition_leadership.update(fresh)
        log.info("ISR changes %s", kv(notifications=len(found), partitions=len(fresh)))
        # A leader took a follower on a dead or shutting-down broker back into its ISR (that follower's last fetch
        # was answered late): out again, as Kafka's controller refuses such an ISR.  acks=all produce would
        # otherwise wait for it until the leader's own shrink, replica.lag.time.max.ms later.
        ineligible = self.ctx.isr_members_not_eligible(fresh)
        if ineligible:
            log.info("ISR members on dead or shutting-down brokers removed %s",
                     kv(replicas=len(ineligible), brokers=sorted({pr.replica for pr in ineligible})))
            self.replica_state_machine.handle_state_changes(ineligible, ReplicaState.OFFLINE)
            fresh = {tp: self.ctx.partition_leadership.get(tp, l) for tp, l in fresh.items()}
        self._send_update_metadata(self.ctx.live_broker_ids, sorted(fresh))
        self.partition_reassignment.on_isr_change(fresh)

    # --- log dir failures (KIP-112) ----------------------------------------------------------------------------
    def process_log_dir_event_notification(self) -> None:
        """Kafka's ``processLogDirEventNotification``: send LeaderAndIsr for every replica on the brokers that
        reported a failed log dir (their answers say which replicas are offline), then delete the
        notifications."""
        children = sorted(self.kafka_zk.get_children_or_empty(paths.LOG_DIR_EVENT_NOTIFICATION))
        if not children:
            return
        brokers = set()
        for c in children:
            path = f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{c}"
            try:
                data, _ = self.zk.get(path)
                note = codecs.LogDirEventNotification.decode(data, path)
                if note.event == codecs.LOG_DIR_FAILURE_EVENT:
                    brokers.add(note.broker_id)
            except NoNodeError:
                continue
            except codecs.MalformedZNodeError as e:
                log.warning("skipping malformed log dir event notification %s", kv(path=path, reason=e))
        live = sorted(b for b in brokers if b in self.ctx.live_broker_ids)
        log.info("log dir failure reported %s", kv(brokers=sorted(brokers), live=live))
        if live:
            self.replica_state_machine.handle_state_changes(self.ctx.replicas_on_brokers(set(live)),
                                                            ReplicaState.ONLINE)
        for c in children:
            self._fenced_delete(f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{c}")

    def _on_leader_and_isr_response(self, broker_id: int, response: LeaderAndIsrResponseData) -> None:
        """Runs on the send thread: only enqueue."""
        self._put(f"LeaderAndIsrResponseReceived(broker={broker_id})",
                  self._active_only(lambda: self._handle_leader_and_isr_response(broker_id, response)))

    def _handle_leader_and_isr_response(self, broker_id: int, response: LeaderAndIsrResponseData) -> None:
        """KAFKA_STORAGE_ERROR marks the replica offline (a new one triggers ``onReplicasBecomeOffline``); NONE
        marks it online again (docs/controller.md#broker-membership)."""
        ctx = self.ctx
        if response.error_code:
            log.warning("LeaderAndIsr failed %s", kv(broker=broker_id, error=response.error_code))
            return
        names = {tid: t for t, tid in ctx.topic_ids.items()}
        offline, online = set(), set()
        entries = []
        for t in response.topics or ():   # one topic id conversion per topic, not per partition (20,000 at a failover)
            topic = names.get(codecs.topic_id_from_wire(t.topic_id))
            entries += [(topic, pe) for pe in t.partition_errors or ()]
        entries += [(pe.topic_name, pe) for pe in response.partition_errors or ()]
        for topic, pe in entries:
            if not topic:
                continue
            tp = TopicPartition(topic, pe.partition_index)
            if pe.error_code == Errors.KAFKA_STORAGE_ERROR:
                offline.add(tp)
            elif pe.error_code == Errors.NONE:
                online.add(tp)
        current = ctx.replicas_on_offline_dirs[broker_id]
        newly = offline - current
        current |= offline
        current -= online
        if newly:
            log.info("replicas in offline log dirs %s", kv(broker=broker_id, partitions=sorted(map(str, newly))))
            self.on_replicas_become_offline({PartitionAndReplica(tp, broker_id) for tp in newly})

    # --- StopReplica responses ------------------------------------------------------------------------------
    def _on_stop_replica_response(self, broker_id: int, entries: dict, response: StopReplicaResponseData) -> None:
        """Runs on the send thread: only enqueue."""
        self._put(f"StopReplicaResponseReceived(broker={broker_id})",
                  self._active_only(lambda: self._handle_stop_replica_response(broker_id, entries, response)))

    def _handle_stop_replica_response(self, broker_id: int, entries: dict,
                                      response: StopReplicaResponseData) -> None:
        ctx = self.ctx
        top_error = response.error_code
        partition_errors = {TopicPartition(pe.topic_name, pe.partition_index): pe.error_code
                            for pe in response.partition_errors or ()}
        deleting = {tp for tp, f in entries.items() if f["delete"] and tp.topic in ctx.topics_with_deletion_started}
        if deleting and (partition_errors or not top_error):
            failed, ok = set(), set()
            for tp in deleting:
                err = top_error or partition_errors.get(tp, 0)
                (failed if err != Errors.NONE else ok).add(PartitionAndReplica(tp, broker_id))
            if failed:
                self.topic_deletion_manager.fail_replica_deletion(failed)
            if ok:
                self.topic_deletion_manager.complete_replica_deletion(ok)
        self.tiered_manager.on_stop_replica_response(broker_id, entries, top_error, partition_errors)

    # --- topic config changes decided by the controller (KIP-950) -------------------------------------------
    def admin_zk(self):
        if self._admin is None:
            from kafkatier.admin.admin_zk_client import AdminZkClient
            self._admin = self._admin_factory() if self._admin_factory else AdminZkClient(self.zk)
        return self._admin

    def submit_topic_config_change(self, topic: str, compute, validate_only: bool):
        """Run a topic config change on the controller thread.  ``compute(admin, extra_ops)`` performs it; the
        tiered transition's ops join the AdminZkClient multi.  Returns a Future (NOT_CONTROLLER if this broker is
        not, or stops being, the active controller)."""
        from concurrent.futures import Future
        from kafkatier.protocol.errors import NotControllerError
        fut: Future = Future()

        def run():
            if not self.is_active:
                fut.set_exception(NotControllerError("This is not the correct controller for this cluster."))
                return
            try:
                fut.set_result(self.tiered_manager.alter_config(topic, compute, validate_only))
            except ControllerMovedError as e:
                fut.set_exception(NotControllerError(str(e)))
                raise
            except Exception as e:  # noqa: BLE001 - the client gets the error
                fut.set_exception(e)

        def preempt():
            if not fut.done():
                fut.set_exception(NotControllerError("The controller moved while the change was queued."))
        self._put(f"TopicConfigChange({topic})", run, preempt)
        return fut

    # --- describe -------------------------------------------------------------------------------------------
    def describe(self) -> dict:
        ctx = self.ctx
        return {"active": self.is_active, "active_controller_id": self.active_controller_id,
                "epoch": ctx.epoch, "epoch_zk_version": ctx.epoch_zk_version,
                "live_brokers": sorted(ctx.live_broker_ids), "topics": len(ctx.all_topics),
                "topics_to_be_deleted": sorted(ctx.topics_to_be_deleted),
                "topics_ineligible_for_deletion": sorted(ctx.topics_ineligible_for_deletion),
                "event_queue": self.event_manager.queue_size(),
                "tiered_storage_disablement": self.tiered_manager.describe() if self.is_active else {},
                "channel_queues": self.channel.queue_sizes() if self.channel else {},
                "shutting_down_brokers": sorted(ctx.shutting_down_broker_ids),
                **self.replica_election_manager.metrics, **self.controlled_shutdown_manager.metrics,
                **self.metrics, **self.event_manager.metrics}
