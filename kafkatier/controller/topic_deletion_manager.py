"""TopicDeletionManager: Kafka's two-round StopReplica deletion with ineligible topics resumed on broker
start-up and controller failover (docs/controller.md#topic-deletion)."""
from __future__ import annotations

from typing import Callable

from kafkatier.common.structs import PartitionAndReplica
from kafkatier.controller.context import ControllerContext, PartitionState, ReplicaState
from kafkatier.controller.partition_state_machine import PartitionStateMachine
from kafkatier.controller.replica_state_machine import ReplicaStateMachine
from kafkatier.controller.request_batch import ControllerBrokerRequestBatch
from kafkatier.zk.kafka_zk_client import KafkaZkClient
from kafkatier.logsetup import get_logger, kv

log = get_logger("controller.topic-deletion")
RS = ReplicaState


class TopicDeletionManager:
    """``unregister_partition_modifications_watch(topic)`` and ``on_deletion_completing(topic)`` are the
    controller's (Kafka's ``DeletionClient``): the first stops the topic's partition watch, the second tells the
    KIP-950 disablement manager the topic is going before its znodes are deleted."""

    def __init__(self, context: ControllerContext, batch: ControllerBrokerRequestBatch, kafka_zk: KafkaZkClient,
                 replica_state_machine: ReplicaStateMachine, partition_state_machine: PartitionStateMachine,
                 unregister_partition_modifications_watch: Callable[[str], None],
                 on_deletion_completing: Callable[[str], None], delete_topic_enable: bool = True) -> None:
        self.ctx = context
        self.batch = batch
        self.kafka_zk = kafka_zk
        self.replica_state_machine = replica_state_machine
        self.partition_state_machine = partition_state_machine
        self._unregister_partition_modifications_watch = unregister_partition_modifications_watch
        self._on_deletion_completing = on_deletion_completing
        self.delete_topic_enable = delete_topic_enable

    def init(self, topics_to_delete: set[str], ineligible: set[str]) -> None:
        if not self.delete_topic_enable:
            for t in topics_to_delete:
                self.kafka_zk.delete_topic_deletion_marker(t, self.ctx.epoch_zk_version)
            return
        self.ctx.topics_to_be_deleted |= topics_to_delete
        self.ctx.topics_ineligible_for_deletion |= ineligible & topics_to_delete

    def enqueue_topics_for_deletion(self, topics: set[str]) -> None:
        if self.delete_topic_enable:
            self.ctx.topics_to_be_deleted |= topics
            self.resume_deletions()

    def resume_deletion_for_topics(self, topics: set[str]) -> None:
        to_resume = topics & self.ctx.topics_to_be_deleted
        if to_resume:
            self.ctx.topics_ineligible_for_deletion -= to_resume
            self.resume_deletions()

    def fail_replica_deletion(self, replicas: set[PartitionAndReplica]) -> None:
        if not self.delete_topic_enable:
            return
        replicas = {pr for pr in replicas if self.ctx.is_topic_queued_for_deletion(pr.tp.topic)}
        if not replicas:
            return
        topics = {pr.tp.topic for pr in replicas}
        log.info("replica deletion failed; topics ineligible %s", kv(replicas=",".join(map(str, sorted(replicas))),
                                                                   topics=",".join(sorted(topics))))
        self.replica_state_machine.handle_state_changes(replicas, RS.DELETION_INELIGIBLE)
        self.ctx.topics_ineligible_for_deletion |= topics
        self.resume_deletions()

    def complete_replica_deletion(self, replicas: set[PartitionAndReplica]) -> None:
        self.replica_state_machine.handle_state_changes(replicas, RS.DELETION_SUCCESSFUL)
        self.resume_deletions()

    def is_topic_ineligible(self, topic: str) -> bool:
        return topic in self.ctx.topics_ineligible_for_deletion

    def resume_deletions(self) -> None:
        ctx = self.ctx
        eligible = set()
        for topic in sorted(ctx.topics_to_be_deleted):
            if ctx.are_all_replicas_in_state(topic, RS.DELETION_SUCCESSFUL):
                self._complete_delete_topic(topic)
                continue
            if ctx.is_any_replica_in_state(topic, RS.DELETION_STARTED):
                continue  # waiting for StopReplica answers
            if ctx.is_any_replica_in_state(topic, RS.DELETION_INELIGIBLE):
                self._retry_deletion_for_ineligible_replicas(topic)
            if topic not in ctx.topics_ineligible_for_deletion and not ctx.is_topic_being_reassigned(topic):
                eligible.add(topic)  # a reassignment in progress makes the topic wait (Kafka: ineligible)
        if eligible:
            self._on_topic_deletion(eligible)

    def _retry_deletion_for_ineligible_replicas(self, topic: str) -> None:
        replicas = self.ctx.replicas_in_state(topic, RS.DELETION_INELIGIBLE)
        self.replica_state_machine.handle_state_changes(replicas, RS.OFFLINE)

    def _on_topic_deletion(self, topics: set[str]) -> None:
        ctx = self.ctx
        log.info("deletion started for %s", ",".join(sorted(topics)))
        new_topics = topics - ctx.topics_with_deletion_started
        if new_topics:
            partitions = [tp for t in sorted(new_topics) for tp in ctx.partitions_for_topic(t)]
            psm = self.partition_state_machine
            psm.handle_state_changes(partitions, PartitionState.OFFLINE)
            psm.handle_state_changes(partitions, PartitionState.NON_EXISTENT)
            ctx.topics_with_deletion_started |= new_topics
        # UpdateMetadata with leader -2 for every partition of the topics.
        batch = self.batch
        batch.new_batch()
        batch.add_update_metadata(ctx.live_broker_ids, [tp for t in topics for tp in ctx.partitions_for_topic(t)])
        batch.send_requests_to_brokers(ctx.epoch)
        for topic in sorted(topics):
            replicas = ctx.replicas_for_topic(topic)
            dead = {pr for pr in replicas if not ctx.is_replica_online(pr.replica, pr.tp)}
            successful = ctx.replicas_in_state(topic, RS.DELETION_SUCCESSFUL)
            alive = replicas - dead - successful
            rsm = self.replica_state_machine
            rsm.handle_state_changes(dead, RS.DELETION_INELIGIBLE)
            rsm.handle_state_changes(alive, RS.OFFLINE)
            rsm.handle_state_changes(alive, RS.DELETION_STARTED)
            if dead:
                ctx.topics_ineligible_for_deletion.add(topic)
                log.info("topic deletion waits for brokers %s", kv(topic=topic,
                                                                  brokers=sorted({pr.replica for pr in dead})))

    def _complete_delete_topic(self, topic: str) -> None:
        ctx = self.ctx
        self._unregister_partition_modifications_watch(topic)
        replicas = ctx.replicas_in_state(topic, RS.DELETION_SUCCESSFUL)
        self.replica_state_machine.handle_state_changes(replicas, RS.NON_EXISTENT)
        self._on_deletion_completing(topic)
        zkc = self.kafka_zk
        zkc.delete_topic_znodes(topic, ctx.epoch_zk_version)
        ctx.topics_to_be_deleted.discard(topic)
        ctx.topics_with_deletion_started.discard(topic)
        ctx.topics_ineligible_for_deletion.discard(topic)
        ctx.remove_topic(topic)
        log.info("deletion of topic %s completed", topic)
