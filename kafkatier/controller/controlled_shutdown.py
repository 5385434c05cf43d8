"""Controlled shutdown, controller side: Kafka's ``KafkaController.processControlledShutdown`` /
``doControlledShutdown`` (docs/controller.md#broker-membership).

A broker about to stop sends ControlledShutdown (key 7) with its broker epoch; the request handler calls
:meth:`ControlledShutdownManager.submit`, which runs on the controller event thread as an *urgent* event (ahead
of queued bulk work, controller/event_manager.py):

1. not the active controller → STALE_CONTROLLER_EPOCH (Kafka's ``ControllerMovedException``; also when the event
   is pre-empted by a resignation); unknown broker → BROKER_NOT_AVAILABLE; a broker epoch that is not -1 and
   below the registered one → STALE_BROKER_EPOCH;
2. the broker joins ``shutting_down_broker_ids`` (its replicas are no longer online);
3. of its partitions with more than one replica, not being deleted and with a leadership znode: those it leads
   get a new leader with the controlled-shutdown strategy (the first in-sync, live, not shutting-down replica;
   the shutting-down brokers leave the ISR), those it follows go OfflineReplica (StopReplica(delete=false), out
   of the ISR); both in batches: the elections and the ISR removals each in pipelined fenced multis
   (``KafkaZkClient.update_leader_and_isr``), and one request of each kind per broker for the whole shutdown;
4. the answer is the replicated partitions it still leads (no eligible replica); the broker retries while
   that is not empty.

Deliberate difference from Kafka: the answer is sent once every other live broker has applied the control
requests of step 3 (a barrier on each broker's control queue, at most half of ``request.timeout.ms``), not as
soon as they are queued, so that when the broker exits the new leaders already lead and clients see no
NOT_LEADER_OR_FOLLOWER.

Deliberate difference from Kafka: an unknown broker is checked before its epoch (Kafka looks the epoch up
first and fails on an unknown id with an internal error).
"""
from __future__ import annotations

import time
import threading
from concurrent.futures import Future
from typing import Callable

from kafkatier.common.scheduler import KafkaScheduler
from kafkatier.common.structs import PartitionAndReplica, TopicPartition
from kafkatier.controller.channel_manager import ControllerChannelManager
from kafkatier.controller.context import ControllerContext, PartitionState, ReplicaState
from kafkatier.controller.election import ElectionStrategy
from kafkatier.controller.event_manager import ControllerEvent, ControllerEventManager
from kafkatier.controller.partition_state_machine import PartitionStateMachine
from kafkatier.controller.replica_state_machine import ReplicaStateMachine
from kafkatier.controller.request_batch import ControllerBrokerRequestBatch
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import (BrokerNotAvailableError, KafkaError, StaleBrokerEpochError,
                                       StaleControllerEpochError)
from kafkatier.zk.fenced import ControllerMovedError

log = get_logger("controller.controlled-shutdown")

UNKNOWN_BROKER_EPOCH = -1


class ControlledShutdownManager:
    """Receives what it uses: the context, the request batch, both state machines, the event queue, whether this
    broker is the active controller and its channel manager (both change at failover: asked each time), the
    scheduler (the answer's timeout) and the request timeout."""

    def __init__(self, ctx: ControllerContext, batch: ControllerBrokerRequestBatch,
                 partition_state_machine: PartitionStateMachine, replica_state_machine: ReplicaStateMachine,
                 event_manager: ControllerEventManager, is_active: Callable[[], bool],
                 channel: Callable[[], ControllerChannelManager | None], scheduler: KafkaScheduler,
                 request_timeout_s: float) -> None:
        self.ctx = ctx
        self.batch = batch
        self.partition_state_machine = partition_state_machine
        self.replica_state_machine = replica_state_machine
        self.event_manager = event_manager
        self.is_active = is_active
        self.channel = channel
        self.scheduler = scheduler
        self.request_timeout_s = request_timeout_s
        self.metrics = {"controlled_shutdowns": 0, "last_controlled_shutdown_ms": 0.0}

    def submit(self, broker_id: int, broker_epoch: int) -> Future[set[TopicPartition]]:
        """Enqueue ``ControlledShutdown(broker_id)``; the future holds the partitions the broker still leads, or
        a KafkaError carrying the error code for the response."""
        fut: Future = Future()

        def run():
            try:
                remaining = self.do_controlled_shutdown(broker_id, broker_epoch)
            except ControllerMovedError:
                fut.set_exception(StaleControllerEpochError(
                    "Controller moved to another broker. Aborting controlled shutdown"))
                raise  # the controller resigns
            except KafkaError as e:
                fut.set_exception(e)  # the answer's error code; nothing else to do
                return
            except BaseException as e:
                fut.set_exception(e)
                raise
            self._answer_once_applied(fut, remaining, broker_id)

        def preempt():
            if not fut.done():
                fut.set_exception(StaleControllerEpochError(
                    "Controller moved to another broker. Aborting controlled shutdown"))
        # Urgent: ahead of bulk work already queued (ISR changes, responses), which the broker's request would
        # otherwise wait behind until it times out.
        self.event_manager.put(ControllerEvent(f"ControlledShutdown({broker_id})", run, preempt), urgent=True)
        return fut

    def _answer_once_applied(self, fut: Future, remaining: set[TopicPartition], shutting_down: int) -> None:
        """Complete ``fut`` when every other live broker (the new leaders among them) has answered what was
        queued to it so far, or after half the request timeout (so the answer reaches the broker before its
        own request times out).  The shutting-down broker's own requests are not waited for: it exits."""
        lock = threading.Lock()
        pending = set(self.ctx.live_broker_ids) - self.ctx.shutting_down_broker_ids - {shutting_down}

        def complete():
            with lock:
                if fut.done():
                    return
                fut.set_result(remaining)

        def applied(broker: int):
            with lock:
                pending.discard(broker)
                last = not pending
            if last:
                complete()
        channel = self.channel()
        for b in sorted(pending):
            if channel is None or not channel.barrier(b, lambda b=b: applied(b)):
                applied(b)
        if not pending:
            complete()
        if not fut.done():
            self.scheduler.schedule_once("ControlledShutdownAnswerTimeout", complete,
                                         self.request_timeout_s * 1000 / 2)

    def _partitions_to_act_on(self, broker_id: int) -> tuple[list[TopicPartition], set[PartitionAndReplica]]:
        """Of the broker's partitions with more than one replica, not being deleted and with a leadership
        znode: those it leads (sorted) and its replicas of those it follows.  One pass over the assignments (a
        broker of a 3-broker cluster holds every partition: tens of thousands)."""
        ctx = self.ctx
        leadership, deleting = ctx.partition_leadership, ctx.topics_to_be_deleted
        led: list[TopicPartition] = []
        followed: set[PartitionAndReplica] = set()
        for topic, parts in ctx.partition_assignments.items():
            if topic in deleting:
                continue
            for p, a in parts.items():
                if len(a.replicas) < 2 or broker_id not in a.replicas:
                    continue
                tp = TopicPartition(topic, p)
                l = leadership.get(tp)
                if l is None:
                    continue
                if l.leader == broker_id:
                    led.append(tp)
                else:
                    followed.add(PartitionAndReplica(tp, broker_id))
        led.sort()
        return led, followed

    def do_controlled_shutdown(self, broker_id: int, broker_epoch: int) -> set[TopicPartition]:
        t0 = time.monotonic()
        ctx = self.ctx
        if not self.is_active():
            raise StaleControllerEpochError("Controller moved to another broker. Aborting controlled shutdown")
        if broker_id not in ctx.live_or_shutting_down_broker_ids:
            raise BrokerNotAvailableError(f"Broker id {broker_id} does not exist.")
        cached = ctx.live_broker_epoch(broker_id)
        if broker_epoch != UNKNOWN_BROKER_EPOCH and broker_epoch < cached:
            log.info("controlled shutdown from an old broker epoch %s",
                     kv(broker=broker_id, epoch=broker_epoch, current=cached))
            raise StaleBrokerEpochError(f"Received controlled shutdown request from an old broker epoch "
                                        f"{broker_epoch} for broker {broker_id}. Current broker epoch is {cached}.")
        log.info("shutting down broker %s", kv(broker=broker_id, epoch=broker_epoch))
        ctx.shutting_down_broker_ids.add(broker_id)
        led, followed = self._partitions_to_act_on(broker_id)
        # One LeaderAndIsr, StopReplica and UpdateMetadata per broker for both state machines' changes; each
        # machine writes its partitions' states in pipelined fenced multis.
        with self.batch.coalesced(lambda: ctx.epoch):
            # The elections are decided from the context's states, not read first: each write is conditional on
            # its znode's version (a leader's ISR write since the last notification fails it, and that partition
            # is read and decided again), so leadership moves after the writes alone.
            failed = self.partition_state_machine.handle_state_changes(
                led, PartitionState.ONLINE, ElectionStrategy.CONTROLLED_SHUTDOWN, read_first=False)
            self.replica_state_machine.handle_state_changes(followed, ReplicaState.OFFLINE)
        remaining = {tp for tp in ctx.partitions_led_by(broker_id)
                     if len(ctx.partition_replicas(tp)) > 1 and not ctx.is_topic_queued_for_deletion(tp.topic)}
        ms = (time.monotonic() - t0) * 1000
        self.metrics["controlled_shutdowns"] += 1
        self.metrics["last_controlled_shutdown_ms"] = round(ms, 1)
        log.info("controlled shutdown handled %s", kv(broker=broker_id, moved=len(led) - len(failed),
                                                      followers_stopped=len(followed), remaining=len(remaining),
                                                      ms=round(ms, 1)))
        return remaining
