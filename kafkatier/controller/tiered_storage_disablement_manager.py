"""TieredStorageDisablementManager: KIP-950's ZooKeeper design, on the pattern of Kafka's TopicDeletionManager.

Durable state is the topic's ``/brokers/topics/{t}/tieredstorage/{tiered_epoch,state}`` znodes.  The active
controller decides every tiering transition of a topic (broker request handlers route tiered config changes to
it).  A disablement is one fenced multi -- topic config + ``config_change_`` notification + ``tiered_epoch``
+ 1 + ``state`` = DISABLING, with version checks on all of them and on ``/controller_epoch`` -- after which the
topic sits in ``topicsToBeDisabled`` until every replica has answered StopReplica v5 with
``DisableRemotePartition=true``; then ``state`` = DISABLED is written, fenced and conditional on the tiered
epoch the disablement started with.  Replicas on dead brokers are ineligible until the broker returns; a
replica that answers with an error is retried after a bounded backoff.  A new controller rebuilds the queue
from every ``state`` znode that says DISABLING.
"""
from __future__ import annotations

import time

from typing import Callable

from kafkatier.common.scheduler import KafkaScheduler
from kafkatier.common.structs import PartitionAndReplica, TopicPartition
from kafkatier.controller.context import ControllerContext
from kafkatier.controller.event_manager import ControllerEvents
from kafkatier.controller.request_batch import ControllerBrokerRequestBatch
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.control_requests import DISABLE_REMOTE_PARTITION
from kafkatier.protocol.errors import Errors, TieredStorageDisablementInProgressError
from kafkatier.zk import codecs, paths
from kafkatier.zk.errors import BadVersionError, NoNodeError
from kafkatier.zk.fenced import Check, ControllerMovedError, SetData
from kafkatier.zk.kafka_zk_client import KafkaZkClient
from kafkatier.zk.tiered_state import (CREATE, DISABLE, DISABLED, DISABLING, ENABLE, ENABLED, TIERED_KEYS,
                                       TieredTopicState, classify_transition, read_tiered_state)
from kafkatier.zk.watchers import DataWatch

log = get_logger("controller.tiered-disablement")

RETRY_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)

STARTED, SUCCESSFUL, INELIGIBLE = "DisablementStarted", "DisablementSuccessful", "DisablementIneligible"


class TieredStorageDisablementManager:
    """``admin_zk()`` gives the controller's AdminZkClient (created on first use); ``scheduler`` runs the
    retry backoff timers."""

    def __init__(self, context: ControllerContext, batch: ControllerBrokerRequestBatch, zk, kafka_zk: KafkaZkClient,
                 events: ControllerEvents, admin_zk: Callable[[], object], scheduler: KafkaScheduler):
        self.ctx = context
        self.batch = batch
        self.zk = zk
        self.kafka_zk = kafka_zk
        self.events = events
        self.admin_zk = admin_zk
        self.scheduler = scheduler
        self.reset()

    def reset(self) -> None:
        self.topics_to_be_disabled: dict[str, int] = {}   # topic -> tiered epoch being disabled
        self.epoch_versions: dict[str, int] = {}          # topic -> zkVersion of tiered_epoch at that epoch
        self.state_versions: dict[str, int] = {}          # topic -> zkVersion of state when it said DISABLING
        self.topics_with_disablement_started: set[str] = set()
        self.topics_ineligible: set[str] = set()
        self.replica_states: dict[PartitionAndReplica, str] = {}
        self.started_at: dict[str, float] = {}
        self.retry_count: dict[PartitionAndReplica, int] = {}
        self.retry_pending: set[PartitionAndReplica] = set()
        self.completed: list[dict] = []
        self._watch_gen: dict[str, int] = {}

    # --- failover / watches ---------------------------------------------------------------------------------
    def on_failover(self) -> None:
        """Rebuild the queue from every DISABLING ``state`` znode (after the context is built)."""
        self.reset()
        for topic in sorted(self.ctx.all_topics):
            self.register_state_watch(topic)
            z = self._read(topic)
            if z is not None and z.state == DISABLING:
                self._enqueue(topic, z)
                if any(not self.ctx.is_replica_online(pr.replica, pr.tp) for pr in self.ctx.replicas_for_topic(topic)):
                    self.topics_ineligible.add(topic)

    def register_state_watch(self, topic: str) -> None:
        gen = self.events.generation
        if self._watch_gen.get(topic) == gen:
            return
        self._watch_gen[topic] = gen

        def on_state(data, stat, event=None):
            if self._watch_gen.get(topic) != gen or gen != self.events.generation:
                return False
            if data:
                self.events.put_active_only(f"TieredStateChange({topic})", lambda: self.process_state_change(topic))
            return True
        DataWatch(self.zk, paths.tiered_state(topic), on_state)

    def process_state_change(self, topic: str) -> None:
        if topic not in self.ctx.all_topics or self.ctx.is_topic_queued_for_deletion(topic):
            return
        z = self._read(topic)
        if z is not None and z.state == DISABLING and topic not in self.topics_to_be_disabled:
            log.info("found DISABLING topic %s", kv(topic=topic, tiered_epoch=z.tiered_epoch))
            self._enqueue(topic, z)
            self.resume_disablements()

    def _read(self, topic: str) -> TieredTopicState | None:
        try:
            return read_tiered_state(self.zk, topic)
        except codecs.MalformedZNodeError as e:
            log.warning("skipping malformed tiered storage znode %s", kv(topic=topic, reason=e))
            return None

    def _enqueue(self, topic: str, z: TieredTopicState) -> None:
        self.topics_to_be_disabled[topic] = z.tiered_epoch
        self.epoch_versions[topic] = z.epoch_version
        self.state_versions[topic] = z.state_version
        self.started_at.setdefault(topic, time.monotonic())
        for pr in self.ctx.replicas_for_topic(topic):
            self.replica_states.pop(pr, None)

    # --- config changes (on the controller thread) ----------------------------------------------------------
    def alter_config(self, topic: str, compute, validate_only: bool):
        """Apply a topic config change decided by the controller.  ``compute(admin, extra_ops)`` performs it
        through the controller's AdminZkClient (incremental or full); the tiered transition's ops join the same
        ZooKeeper multi."""
        admin = self.admin_zk()
        z = self._read(topic)
        if z is not None and z.state == DISABLING:
            raise TieredStorageDisablementInProgressError(
                f"Tiered storage disablement is in progress for topic {topic} (tiered epoch {z.tiered_epoch}); "
                f"retry after it completes.")
        decision: dict = {}

        def transition_ops(zk, name, old, new) -> list:
            ops: list = []
            cur = read_tiered_state(zk, name)
            if cur is not None and cur.state == DISABLING and any(
                    old.get(k) != new.get(k) for k in TIERED_KEYS):
                raise TieredStorageDisablementInProgressError(
                    f"Tiered storage disablement is in progress for topic {name} (tiered epoch {cur.tiered_epoch}); "
                    f"retry after it completes.")
            kind = classify_transition(cur.state if cur else None, old, new)
            decision.clear()
            decision.update(kind=kind, znodes=cur)
            if kind is None or kind == CREATE:
                return ops  # first enablement: the admin client creates the znodes
            # The multi's check fences the write; a failed check would only look like a concurrent config
            # change to the admin client (it retries those), so a moved controller is detected here first.
            stat = zk.exists(paths.CONTROLLER_EPOCH)
            if stat is None or stat.version != self.ctx.epoch_zk_version:
                raise ControllerMovedError("controller epoch changed during a tiered config change")
            ops.append(Check(paths.CONTROLLER_EPOCH, self.ctx.epoch_zk_version))
            if kind == DISABLE:
                ops.append(SetData(paths.tiered_epoch(name), codecs.encode_tiered_epoch(cur.tiered_epoch + 1),
                                   cur.epoch_version))
                ops.append(SetData(paths.tiered_state(name), codecs.TieredState(DISABLING).encode(),
                                   cur.state_version))
            elif kind == ENABLE:
                ops.append(Check(paths.tiered_epoch(name), cur.epoch_version))
                ops.append(SetData(paths.tiered_state(name), codecs.TieredState(ENABLED).encode(),
                                   cur.state_version))
            return ops
        try:
            result = compute(admin, transition_ops)
        except BadVersionError as e:
            if getattr(e, "op_index", None) == 2:
                raise ControllerMovedError("controller epoch changed during a tiered config change") from e
            raise
        if validate_only or not decision:
            return result
        kind, cur = decision.get("kind"), decision.get("znodes")
        if kind == DISABLE:
            z = TieredTopicState(cur.tiered_epoch + 1, DISABLING, cur.epoch_version + 1, cur.state_version + 1)
            log.info("tiered storage disablement started %s", kv(topic=topic, tiered_epoch=z.tiered_epoch))
            self._enqueue(topic, z)
            self.resume_disablements()
        elif kind == ENABLE:
            log.info("tiered storage re-enabled %s", kv(topic=topic, tiered_epoch=cur.tiered_epoch))
        return result

    # --- the queue ------------------------------------------------------------------------------------------
    def resume_disablements(self) -> None:
        ctx = self.ctx
        to_send: dict[int, list[TopicPartition]] = {}
        for topic in sorted(list(self.topics_to_be_disabled)):
            if topic not in ctx.all_topics or ctx.is_topic_queued_for_deletion(topic):
                self._forget(topic)
                continue
            replicas = ctx.replicas_for_topic(topic)
            if all(self.replica_states.get(pr) == SUCCESSFUL for pr in replicas):
                self._complete(topic)
                continue
            if topic in self.topics_ineligible:
                # Ineligible replicas whose brokers are back are retried; dead ones stay ineligible.
                pass
            self.topics_with_disablement_started.add(topic)
            for pr in sorted(replicas):
                st = self.replica_states.get(pr)
                if st in (SUCCESSFUL, STARTED):
                    continue
                if not ctx.is_replica_online(pr.replica, pr.tp):
                    self.replica_states[pr] = INELIGIBLE
                    self.topics_ineligible.add(topic)
                    continue
                if st == INELIGIBLE and pr in self.retry_pending:
                    continue  # waiting for its backoff timer
                self.replica_states[pr] = STARTED
                to_send.setdefault(pr.replica, []).append(pr.tp)
            if not any(self.replica_states.get(pr) == INELIGIBLE for pr in replicas):
                self.topics_ineligible.discard(topic)
        if to_send:
            batch = self.batch
            batch.new_batch()
            for broker, tps in to_send.items():
                for tp in tps:
                    batch.add_stop_replica([broker], tp, delete=False, disable_remote_partition=True)
            batch.send_requests_to_brokers(ctx.epoch)
            log.info("sent StopReplica v5 (DisableRemotePartition) %s",
                     kv(brokers={b: len(t) for b, t in sorted(to_send.items())}))

    def on_stop_replica_response(self, broker_id: int, entries: dict, top_error: int, partition_errors: dict) -> None:
        relevant = [tp for tp, f in entries.items()
                    if f.get(DISABLE_REMOTE_PARTITION) and not f.get("delete") and tp.topic in self.topics_with_disablement_started]
        if not relevant:
            return
        failed = []
        for tp in relevant:
            pr = PartitionAndReplica(tp, broker_id)
            if self.replica_states.get(pr) != STARTED:
                continue
            err = top_error or partition_errors.get(tp, 0 if partition_errors or not top_error else top_error)
            if err == Errors.NONE:
                self.replica_states[pr] = SUCCESSFUL
                self.retry_count.pop(pr, None)
            else:
                self.replica_states[pr] = INELIGIBLE
                self.topics_ineligible.add(tp.topic)
                failed.append((pr, err))
        for pr, err in failed:
            n = self.retry_count.get(pr, 0)
            delay = RETRY_BACKOFF_S[min(n, len(RETRY_BACKOFF_S) - 1)]
            self.retry_count[pr] = n + 1
            self.retry_pending.add(pr)
            log.info("disablement failed on a replica; retrying %s",
                     kv(replica=pr, error=_name(err), retry_in_s=delay))
            self._schedule_retry(pr, delay)
        if failed or self.topics_ineligible:
            self.resume_disablements()  # also picks up ineligible replicas whose brokers are usable again
            return
        # All answered fine and none is waiting: only these topics can have completed (a retry, a returning
        # broker and a new disablement each resume the queue themselves).
        for topic in sorted({tp.topic for tp in relevant}):
            if topic in self.topics_to_be_disabled:
                self._maybe_complete(topic)

    def _maybe_complete(self, topic: str) -> None:
        ctx = self.ctx
        if topic not in ctx.all_topics or ctx.is_topic_queued_for_deletion(topic):
            self._forget(topic)
        elif all(self.replica_states.get(pr) == SUCCESSFUL for pr in ctx.replicas_for_topic(topic)):
            self._complete(topic)

    def _schedule_retry(self, pr: PartitionAndReplica, delay: float) -> None:
        gen = self.events.generation

        def fire():
            if gen != self.events.generation:
                return

            def run():
                self.retry_pending.discard(pr)
                if self.replica_states.get(pr) == INELIGIBLE:
                    self.replica_states.pop(pr, None)
                self.resume_disablements()
            self.events.put_active_only(f"TieredDisablementRetry({pr})", run)
        self.scheduler.schedule_once(f"TieredDisablementRetry({pr})", fire, delay * 1000)

    def on_broker_startup(self, new_brokers) -> None:
        new = set(new_brokers)
        changed = False
        for pr, st in list(self.replica_states.items()):
            if pr.replica in new and st in (INELIGIBLE, STARTED):
                self.replica_states.pop(pr, None)
                self.retry_pending.discard(pr)
                changed = True
        if changed or self.topics_to_be_disabled:
            self.resume_disablements()

    def on_broker_failure(self, dead) -> None:
        dead = set(dead)
        for pr, st in list(self.replica_states.items()):
            if pr.replica in dead and st == STARTED:
                self.replica_states[pr] = INELIGIBLE
                self.topics_ineligible.add(pr.tp.topic)

    def on_topic_queued_for_deletion(self, topics) -> None:
        for t in topics:
            self._forget(t)

    def on_new_topics(self, topics) -> None:
        for t in topics:
            self.register_state_watch(t)
            self.process_state_change(t)

    def _forget(self, topic: str) -> None:
        self.topics_to_be_disabled.pop(topic, None)
        self.epoch_versions.pop(topic, None)
        self.state_versions.pop(topic, None)
        self.topics_with_disablement_started.discard(topic)
        self.topics_ineligible.discard(topic)
        self.started_at.pop(topic, None)
        for pr in [pr for pr in self.replica_states if pr.tp.topic == topic]:
            self.replica_states.pop(pr, None)
            self.retry_count.pop(pr, None)
            self.retry_pending.discard(pr)

    def _complete(self, topic: str) -> None:
        """DISABLED, fenced and conditional on the znode versions of the DISABLING write (one multi); if either
        znode moved since, it is read to tell a superseded disablement from a lost race."""
        epoch = self.topics_to_be_disabled[topic]
        w = self.kafka_zk.writer(self.ctx.epoch_zk_version)
        disabled = codecs.TieredState(DISABLED).encode()
        try:
            try:
                w.multi([Check(paths.tiered_epoch(topic), self.epoch_versions[topic]),
                         SetData(paths.tiered_state(topic), disabled, self.state_versions[topic])])
            except (BadVersionError, NoNodeError, KeyError):
                z = read_tiered_state(self.zk, topic)
                if z is None or z.tiered_epoch != epoch or z.state != DISABLING:
                    log.info("disablement superseded %s", kv(topic=topic, tiered_epoch=epoch))
                    self._forget(topic)
                    return
                w.multi([Check(paths.tiered_epoch(topic), z.epoch_version),
                         SetData(paths.tiered_state(topic), disabled, z.state_version)])
        except (BadVersionError, NoNodeError) as e:
            log.warning("could not complete the disablement %s", kv(topic=topic, reason=type(e).__name__))
            self._forget(topic)
            return
        took = time.monotonic() - self.started_at.get(topic, time.monotonic())
        self.completed.append({"topic": topic, "tiered_epoch": epoch, "duration_ms": round(took * 1000, 1)})
        self.completed = self.completed[-50:]
        log.info("tiered storage disablement completed %s", kv(topic=topic, tiered_epoch=epoch,
                                                               duration_ms=round(took * 1000, 1)))
        self._forget(topic)

    # --- metrics --------------------------------------------------------------------------------------------
    def describe(self) -> dict:
        pending = {}
        for topic in self.topics_to_be_disabled:
            pending[topic] = {
                "tiered_epoch": self.topics_to_be_disabled[topic],
                "pending_replicas": sorted(str(pr) for pr in self.ctx.replicas_for_topic(topic)
                                           if self.replica_states.get(pr) != SUCCESSFUL),
                "ineligible_replicas": sorted(str(pr) for pr, st in self.replica_states.items()
                                              if st == INELIGIBLE and pr.tp.topic == topic),
                "elapsed_ms": round((time.monotonic() - self.started_at.get(topic, time.monotonic())) * 1000, 1)}
        return {"topics_to_be_disabled": pending, "topics_ineligible": sorted(self.topics_ineligible),
                "recently_completed": self.completed[-10:]}


def _name(code: int) -> str:
    try:
        return Errors(code).name
    except ValueError:
        return str(code)
