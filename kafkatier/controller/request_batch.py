"""ControllerBrokerRequestBatch: collect LeaderAndIsr, UpdateMetadata and StopReplica entries per broker during
one round of state changes, then send them (in that order) through the channel manager.

:meth:`ControllerBrokerRequestBatch.coalesced` widens "one round" to a whole sequence of rounds: the controller
failover runs its UpdateMetadata and both state machines' start-up inside it, so each broker gets one
LeaderAndIsr and one UpdateMetadata carrying the final state of every partition, not one per state machine
(Kafka sends one per state machine; at 20,000 partitions each is a full pass over the broker's replicas).

Each request is built as its typed message (:mod:`kafkatier.protocol.control_messages`, generated from the
specs in ``kafkatier/protocol/messages``): LeaderAndIsr v7, UpdateMetadata v8, StopReplica v5 (KIP-950), and
handed to the channel manager written at that version (``to_json``), as Kafka's batch builds
``LeaderAndIsrRequestData`` and the network client serialises it.  A partition's state is one frozen object
shared by every broker the round sends it to.
"""
from __future__ import annotations

import contextlib

import attrs
from collections import defaultdict
from typing import Callable, Iterator

from kafkatier.common.structs import LeaderAndIsr, TopicPartition
from kafkatier.controller.context import ControllerContext
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.control_messages import (ControlMessageError, LeaderAndIsrLiveLeader,
                                                 LeaderAndIsrPartitionState, LeaderAndIsrRequestData,
                                                 LeaderAndIsrResponseData, LeaderAndIsrTopicState,
                                                 StopReplicaPartitionState, StopReplicaRequestData,
                                                 StopReplicaResponseData, StopReplicaTopicState, UpdateMetadataBroker,
                                                 UpdateMetadataEndpoint, UpdateMetadataPartitionState,
                                                 UpdateMetadataRequestData, UpdateMetadataTopicState)
from kafkatier.protocol.control_requests import DISABLE_REMOTE_PARTITION
from kafkatier.protocol.errors import Errors
from kafkatier.zk.codecs import parse_endpoint, wire_topic_id

log = get_logger("controller.batch")

# The version of each control request the batch sends.
LEADER_AND_ISR_VERSION, UPDATE_METADATA_VERSION, STOP_REPLICA_VERSION = 7, 8, 5
# (api key, message name, version) of each, as the channel manager's ``send`` takes them.
LEADER_AND_ISR = (ApiKeys.LEADER_AND_ISR, ApiKeys.LEADER_AND_ISR.message_name, LEADER_AND_ISR_VERSION)
STOP_REPLICA = (ApiKeys.STOP_REPLICA, ApiKeys.STOP_REPLICA.message_name, STOP_REPLICA_VERSION)
UPDATE_METADATA = (ApiKeys.UPDATE_METADATA, ApiKeys.UPDATE_METADATA.message_name, UPDATE_METADATA_VERSION)


class IllegalBatchState(Exception):
    pass


class ControllerBrokerRequestBatch:
    def __init__(self, controller_id: int, context: ControllerContext, send: Callable[..., bool],
                 stop_replica_callback: Callable[[int, dict, StopReplicaResponseData], None] | None = None,
                 leader_and_isr_callback: Callable[[int, LeaderAndIsrResponseData], None] | None = None):
        """The callbacks get each broker's answer as its typed response (:func:`typed_response`)."""
        self.controller_id = controller_id
        self.ctx = context
        self._send = send
        self._stop_replica_callback = stop_replica_callback
        self._leader_and_isr_callback = leader_and_isr_callback
        self._open = False
        self._coalescing = False
        self._clear()

    @contextlib.contextmanager
    def coalesced(self, controller_epoch: Callable[[], int], update_metadata_first: bool = False) -> Iterator[None]:
        """Rounds started inside add to one batch, sent when the block ends (not sent if it raises: the
        controller then resigns and its successor sends everything again).  ``update_metadata_first``: each
        broker's UpdateMetadata is queued before its LeaderAndIsr (see :meth:`send_requests_to_brokers`)."""
        if self._coalescing:
            yield
            return
        self.new_batch()
        self._coalescing = True
        try:
            yield
        except BaseException:
            self._coalescing = False
            self._clear()
            self._open = False
            raise
        self._coalescing = False
        self.send_requests_to_brokers(controller_epoch(), update_metadata_first=update_metadata_first)

    def _clear(self) -> None:
        # broker -> tp -> (leader_and_isr, replicas/assignment, is_new)
        self.leader_and_isr: dict[int, dict[TopicPartition, tuple]] = defaultdict(dict)
        # broker -> tp -> {"delete": bool, DISABLE_REMOTE_PARTITION: bool} (StopReplica v5's flag, one name end to end)
        self.stop_replica: dict[int, dict[TopicPartition, dict]] = defaultdict(dict)
        self.update_metadata_brokers: set[int] = set()
        self.update_metadata_partitions: set[TopicPartition] = set()
        # broker -> partitions only its UpdateMetadata carries, beside the round's (add_update_metadata_only_to)
        self.update_metadata_only_to: dict[int, set[TopicPartition]] = {}
        # partitions of a topic deleted while its assignment could not be read: in no context, sent as deleted
        self.update_metadata_deleted: set[TopicPartition] = set()

    def reset(self) -> None:
        """Drop whatever a round left unsent (an error interrupted it, the controller resigned): the next
        ``new_batch`` starts clean."""
        self._coalescing = False
        self._open = False
        self._clear()

    def new_batch(self) -> None:
        if self._coalescing:
            return
        if self._open and (self.leader_and_isr or self.stop_replica or self.update_metadata_brokers):
            raise IllegalBatchState("a new batch was started before the previous one was sent")
        self._clear()
        self._open = True

    # --- adding ---------------------------------------------------------------------------------------------
    def add_leader_and_isr(self, broker_ids, tp: TopicPartition, leader: LeaderAndIsr, is_new: bool = False) -> None:
        assignment = self.ctx.assignment(tp)
        entry = (leader, assignment, is_new)  # one tuple for every broker: its wire form is built once
        for b in broker_ids:
            if b < 0:
                continue
            parts = self.leader_and_isr[b]
            prev = parts.get(tp)
            parts[tp] = (leader, assignment, True) if prev is not None and prev[2] and not is_new else entry
        self.update_metadata_brokers.update(self.ctx.live_brokers)
        self.update_metadata_partitions.add(tp)

    def add_leader_and_isr_to_broker(self, broker_id: int, states) -> None:
        """:meth:`add_leader_and_isr` of each ``(tp, leader)`` of ``states`` to ``broker_id`` alone, in one pass (a
        broker's start: every partition it hosts, tens of thousands)."""
        if broker_id < 0:
            return
        parts = self.leader_and_isr[broker_id]
        assignments = self.ctx.partition_assignments
        changed = self.update_metadata_partitions
        for tp, leader in states:
            prev = parts.get(tp)
            topic = assignments.get(tp.topic)
            parts[tp] = (leader, topic.get(tp.partition) if topic else None, prev is not None and prev[2])
            changed.add(tp)
        self.update_metadata_brokers.update(self.ctx.live_brokers)

    def add_update_metadata(self, broker_ids, partitions=()) -> None:
        self.update_metadata_brokers.update(b for b in broker_ids if b >= 0)
        self.update_metadata_partitions.update(partitions)

    def add_update_metadata_only_to(self, broker_ids, partitions) -> None:
        """``partitions`` in the UpdateMetadata of ``broker_ids`` only (each also gets the round's partitions):
        a starting broker is sent every partition while the others get only those the round changed (Kafka's
        separate ``sendUpdateMetadataRequest(newBrokers, allPartitions)`` in ``onBrokerStartup``, here merged
        with the round after it)."""
        partitions = set(partitions)
        for b in broker_ids:
            if b >= 0:
                self.update_metadata_brokers.add(b)
                self.update_metadata_only_to.setdefault(b, set()).update(partitions)

    def add_update_metadata_deleted(self, broker_ids, partitions) -> None:
        """UpdateMetadata marking ``partitions`` deleted (leader -2) though the context knows nothing of them."""
        self.update_metadata_brokers.update(b for b in broker_ids if b >= 0)
        self.update_metadata_deleted.update(partitions)

    def add_stop_replica(self, broker_ids, tp: TopicPartition, delete: bool,
                         disable_remote_partition: bool = False) -> None:
        for b in broker_ids:
            if b < 0:
                continue
            cur = self.stop_replica[b].get(tp)
            if cur:
                cur["delete"] = cur["delete"] or delete
                cur[DISABLE_REMOTE_PARTITION] = cur[DISABLE_REMOTE_PARTITION] or disable_remote_partition
            else:
                self.stop_replica[b][tp] = {"delete": delete, DISABLE_REMOTE_PARTITION: disable_remote_partition}

    # --- sending --------------------------------------------------------------------------------------------
    def send_update_metadata_so_far(self, controller_epoch: int) -> set[int]:
        """Inside a coalesced block: send now, to every broker collected so far, an UpdateMetadata of the
        partitions collected so far (a failover's elections), and keep them for the block's final round, which
        carries every partition's final state.  The brokers' metadata names the new leaders without waiting
        for the rest of the block (taking dead replicas out of every ISR: a ZooKeeper write and a LeaderAndIsr
        entry per partition).  Outside a coalesced block there is nothing to hurry: no-op.  Returns the brokers it
        was sent to."""
        if not self._coalescing or not self.update_metadata_partitions:
            return set()
        live = self.ctx.live_or_shutting_down_broker_ids
        self._send_update_metadata_requests(controller_epoch, live, {})
        return {b for b in self.update_metadata_brokers if b in live}

    def send_update_metadata(self, broker_ids, partitions) -> None:
        """Kafka's ``sendUpdateMetadataRequest``: one round of UpdateMetadata (the live brokers and
        ``partitions``) to ``broker_ids``, at the context's controller epoch."""
        self.new_batch()
        self.add_update_metadata(broker_ids, partitions)
        self.send_requests_to_brokers(self.ctx.epoch)

    def send_requests_to_brokers(self, controller_epoch: int, update_metadata_first: bool = False) -> None:
        """Queue each broker's LeaderAndIsr, UpdateMetadata and StopReplica, in that order (Kafka's).
        ``update_metadata_first`` (a controller failover): UpdateMetadata before LeaderAndIsr, so every
        broker's metadata names the new leaders without waiting behind a LeaderAndIsr of every partition it
        holds (the channel carries one request per broker at a time).  A client routed to a leader that has not
        applied its LeaderAndIsr yet gets NOT_LEADER_OR_FOLLOWER and retries, as when another broker's
        UpdateMetadata arrives first in Kafka."""
        if self._coalescing:
            return
        try:
            live = self.ctx.live_or_shutting_down_broker_ids
            # A partition's state is the same for every broker it goes to: built once (``shared``, by entry)
            # and written once (``written``, by state).
            shared: dict = {}
            written: dict = {}
            if update_metadata_first:
                self._send_update_metadata_requests(controller_epoch, live, written)
            for b, parts in self.leader_and_isr.items():
                if b in live and parts:
                    cb = None
                    if self._leader_and_isr_callback is not None:
                        cb = (lambda resp, b=b: self._leader_and_isr_callback(
                            b, typed_response(LeaderAndIsrResponseData, LEADER_AND_ISR_VERSION, resp)))
                    request = self._leader_and_isr_request(b, parts, controller_epoch, shared)
                    self._send(b, *LEADER_AND_ISR, request.to_json(LEADER_AND_ISR_VERSION, written), cb)
            if not update_metadata_first:
                self._send_update_metadata_requests(controller_epoch, live, written)
            for b, parts in self.stop_replica.items():
                if b in live and parts:
                    body = self._stop_replica_request(b, parts, controller_epoch).to_json(STOP_REPLICA_VERSION)
                    cb = None
                    if self._stop_replica_callback is not None:
                        entries = dict(parts)
                        cb = (lambda resp, b=b, entries=entries: self._stop_replica_callback(
                            b, entries, typed_response(StopReplicaResponseData, STOP_REPLICA_VERSION, resp)))
                    self._send(b, *STOP_REPLICA, body, cb)
        finally:
            self._clear()
            self._open = False

    def _send_update_metadata_requests(self, controller_epoch: int, live, written: dict) -> None:
        if not self.update_metadata_brokers:
            return
        common = self.update_metadata_partitions
        # The topic states of each distinct set of partitions, built once: the round's, and the round's plus a
        # starting broker's extra ones (usually all of the round's already, then the same set).
        topic_states: dict[frozenset | None, tuple] = {}
        live_brokers = self._live_brokers()
        for b in sorted(self.update_metadata_brokers):
            if b not in live:
                continue
            extra = self.update_metadata_only_to.get(b)
            key = None if not extra or extra <= common else frozenset(extra - common)
            states = topic_states.get(key)
            if states is None:
                states = topic_states[key] = self._update_metadata_topic_states(
                    common if key is None else common | key)
            request = UpdateMetadataRequestData(
                **self._header(b, controller_epoch), type=0, topic_states=states, live_brokers=live_brokers)
            self._send(b, *UPDATE_METADATA, request.to_json(UPDATE_METADATA_VERSION, written), None)

    def _header(self, broker_id: int, controller_epoch: int) -> dict:
        return {"controller_id": self.controller_id, "is_k_raft_controller": False,
                "controller_epoch": controller_epoch, "broker_epoch": self.ctx.live_broker_epoch(broker_id)}

    def _leader_and_isr_request(self, broker_id, parts, controller_epoch,
                                shared: dict | None = None) -> LeaderAndIsrRequestData:
        """``shared``: partition states already built for another broker of this batch, by entry (one tuple
        per partition and round, :meth:`add_leader_and_isr`)."""
        by_topic: dict[str, list] = defaultdict(list)
        leaders = set()
        shared = {} if shared is None else shared
        for tp, entry in sorted(parts.items()):
            l, a, is_new = entry
            leaders.add(l.leader)
            key = id(entry)  # the entries live in ``parts`` until sent: ids stay unique
            state = shared.get(key)
            if state is None:
                state = shared[key] = LeaderAndIsrPartitionState(
                    partition_index=tp.partition, controller_epoch=l.controller_epoch, leader=l.leader,
                    leader_epoch=l.leader_epoch, isr=tuple(l.isr), partition_epoch=l.partition_epoch,
                    replicas=tuple(a.replicas) if a else (), adding_replicas=tuple(a.adding) if a else (),
                    removing_replicas=tuple(a.removing) if a else (), is_new=is_new,
                    leader_recovery_state=l.leader_recovery_state)
            by_topic[tp.topic].append(state)
        return LeaderAndIsrRequestData(
            **self._header(broker_id, controller_epoch), type=0,
            topic_states=tuple(LeaderAndIsrTopicState(topic_name=t, topic_id=wire_topic_id(self.ctx.topic_ids.get(t)),
                                                      partition_states=tuple(ps)) for t, ps in by_topic.items()),
            live_leaders=tuple(LeaderAndIsrLiveLeader(broker_id=b.id, host_name=b.host, port=b.port)
                               for b in (self.ctx.live_brokers.get(i) for i in sorted(leaders)) if b))

    def _update_metadata_topic_states(self, partitions) -> tuple:
        by_topic: dict[str, list] = defaultdict(list)
        ctx = self.ctx
        # is_replica_online inlined: this loop runs over every partition of the cluster at a failover or a
        # broker's start.  A partition's offline replicas depend on its replicas alone unless a log dir failed:
        # computed once per distinct replica tuple (a cluster has a few).
        live, shutting_down = ctx.live_brokers, ctx.shutting_down_broker_ids
        offline_dirs = {b: tps for b, tps in ctx.replicas_on_offline_dirs.items() if tps}
        offline_of: dict[tuple, tuple] = {}
        leadership, assignments = ctx.partition_leadership, ctx.partition_assignments
        deleting = ctx.topics_to_be_deleted
        topics: dict[str, list] = defaultdict(list)
        for tp in partitions:
            topics[tp.topic].append(tp)
        for topic in sorted(topics):
            parts = assignments.get(topic)
            if not parts:
                continue
            states = by_topic[topic]
            deleted = topic in deleting
            for tp in sorted(topics[topic]):
                l = leadership.get(tp)
                a = parts.get(tp.partition)
                if l is None or a is None:
                    continue
                replicas = a.replicas
                if offline_dirs:
                    offline = tuple(r for r in replicas if r not in live or r in shutting_down
                                    or (r in offline_dirs and tp in offline_dirs[r]))
                else:
                    offline = offline_of.get(replicas)
                    if offline is None:
                        offline = offline_of[replicas] = tuple(r for r in replicas
                                                               if r not in live or r in shutting_down)
                states.append(UpdateMetadataPartitionState(
                    partition_index=tp.partition, controller_epoch=l.controller_epoch,
                    leader=LeaderAndIsr.LEADER_DURING_DELETE if deleted else l.leader,
                    leader_epoch=l.leader_epoch, isr=tuple(l.isr), zk_version=l.partition_epoch,
                    replicas=tuple(replicas), offline_replicas=offline))
            if not states:
                del by_topic[topic]
        for tp in sorted(self.update_metadata_deleted):
            by_topic[tp.topic].append(UpdateMetadataPartitionState(
                partition_index=tp.partition, controller_epoch=ctx.epoch,
                leader=LeaderAndIsr.LEADER_DURING_DELETE, leader_epoch=LeaderAndIsr.EPOCH_DURING_DELETE,
                zk_version=0))
        return tuple(UpdateMetadataTopicState(topic_name=t, topic_id=wire_topic_id(self.ctx.topic_ids.get(t)),
                                              partition_states=tuple(ps)) for t, ps in by_topic.items())

    def _live_brokers(self) -> tuple:
        """Every live broker with each listener it registered (PLAINTEXT first), as Kafka's UpdateMetadata."""
        return tuple(UpdateMetadataBroker(id=b.id, endpoints=_endpoints(b), rack=b.rack)
                     for b in sorted(self.ctx.live_brokers.values(), key=lambda b: b.id))

    def _stop_replica_request(self, broker_id, parts, controller_epoch) -> StopReplicaRequestData:
        by_topic: dict[str, list] = defaultdict(list)
        for tp, flags in sorted(parts.items()):
            disable = flags[DISABLE_REMOTE_PARTITION] and not flags["delete"]
            # disablement does not depend on who leads
            epoch = LeaderAndIsr.NO_EPOCH if disable else self.ctx.leader_epoch(tp)
            by_topic[tp.topic].append(StopReplicaPartitionState(
                partition_index=tp.partition, leader_epoch=epoch, delete_partition=flags["delete"],
                disable_remote_partition=disable))
        return StopReplicaRequestData(
            **self._header(broker_id, controller_epoch),
            topic_states=tuple(StopReplicaTopicState(topic_name=t, partition_states=tuple(ps))
                               for t, ps in by_topic.items()))


def typed_response(cls, version: int, response):
    """A broker's answer (``zk/codecs.ControlResponse``) as its typed response of ``version``; an answer that
    does not match the spec is logged and read as an UNKNOWN_SERVER_ERROR without partitions."""
    error = response.error_code if response is not None else int(Errors.UNKNOWN_SERVER_ERROR)
    if response is not None:
        try:
            typed = cls.from_json(version, response.body or {"error_code": error})
        except ControlMessageError as e:
            log.warning("malformed control response %s", kv(api=cls.MESSAGE.__name__, reason=str(e)[:300]))
        else:
            return typed if typed.error_code or not error else attrs.evolve(typed, error_code=error)
    return cls(error_code=int(Errors.UNKNOWN_SERVER_ERROR) if not error else error)


def _endpoints(b) -> tuple:
    out = [UpdateMetadataEndpoint(port=b.port, host=b.host, listener="PLAINTEXT", security_protocol=0)]
    for text in b.endpoints or ():
        try:
            ep = parse_endpoint(text)
        except ValueError:
            continue
        if ep.listener != "PLAINTEXT":
            out.append(UpdateMetadataEndpoint(port=ep.port, host=ep.host, listener=ep.listener, security_protocol=0))
    return tuple(out)
