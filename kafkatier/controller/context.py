"""ControllerContext: the active controller's in-memory view, rebuilt from ZooKeeper at every failover.

Nothing here is durable: ZooKeeper is the only durable state.
"""
from __future__ import annotations

import enum
from collections import defaultdict


from kafkatier.common.structs import BrokerInfo, LeaderAndIsr, PartitionAndReplica, TopicPartition
from kafkatier.zk.codecs import ReplicaAssignment  # noqa: F401 - the controller's assignment type


class ReplicaState(enum.Enum):
    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"
    NON_EXISTENT = "NonExistentReplica"


class PartitionState(enum.Enum):
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"
    NON_EXISTENT = "NonExistentPartition"


class ControllerContext:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.epoch = 0
        self.epoch_zk_version = 0
        self.live_brokers: dict[int, BrokerInfo] = {}
        self.shutting_down_broker_ids: set[int] = set()
        self.all_topics: set[str] = set()
        self.topic_ids: dict[str, str] = {}
        self.partition_assignments: dict[str, dict[int, ReplicaAssignment]] = defaultdict(dict)
        # Derived from the assignments (their adding / removing replicas), as a new controller finds them.
        self.partitions_being_reassigned: set[TopicPartition] = set()
        self.partition_leadership: dict[TopicPartition, LeaderAndIsr] = {}
        self.partition_states: dict[TopicPartition, PartitionState] = {}
        self.replica_states: dict[PartitionAndReplica, ReplicaState] = {}
        self.replicas_on_offline_dirs: dict[int, set[TopicPartition]] = defaultdict(set)
        self.topic_configs: dict[str, dict[str, str]] = {}
        # Topic deletion
        self.topics_to_be_deleted: set[str] = set()
        self.topics_with_deletion_started: set[str] = set()
        self.topics_ineligible_for_deletion: set[str] = set()

    # --- brokers -------------------------------------------------------------------------------------------
    @property
    def live_broker_ids(self) -> set[int]:
        return set(self.live_brokers)

    @property
    def live_or_shutting_down_broker_ids(self) -> set[int]:
        return set(self.live_brokers)

    def live_broker_epoch(self, broker_id: int) -> int:
        b = self.live_brokers.get(broker_id)
        return b.epoch if b else -1

    def is_replica_online(self, broker_id: int, tp: TopicPartition) -> bool:
        return (broker_id in self.live_brokers and broker_id not in self.shutting_down_broker_ids
                and tp not in self.replicas_on_offline_dirs.get(broker_id, ()))

    # --- topics and partitions ------------------------------------------------------------------------------
    def partitions_for_topic(self, topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in sorted(self.partition_assignments.get(topic, {}))]

    def all_partitions(self) -> list[TopicPartition]:
        return [tp for t in sorted(self.partition_assignments) for tp in self.partitions_for_topic(t)]

    def assignment(self, tp: TopicPartition) -> ReplicaAssignment | None:
        return self.partition_assignments.get(tp.topic, {}).get(tp.partition)

    def partition_replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        a = self.assignment(tp)
        return a.replicas if a else ()

    def update_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        self.partition_assignments[tp.topic][tp.partition] = assignment
        if assignment.is_being_reassigned:
            self.partitions_being_reassigned.add(tp)
        else:
            self.partitions_being_reassigned.discard(tp)

    def is_topic_being_reassigned(self, topic: str) -> bool:
        return any(tp.topic == topic for tp in self.partitions_being_reassigned)

    def replicas_for_topic(self, topic: str) -> set[PartitionAndReplica]:
        return {PartitionAndReplica(tp, r) for tp in self.partitions_for_topic(topic) for r in self.partition_replicas(tp)}

    def replicas_on_brokers(self, broker_ids: set[int]) -> set[PartitionAndReplica]:
        # Straight over the assignments (no sorted partition list): a controlled shutdown asks this of a
        # broker hosting tens of thousands of replicas.
        return {PartitionAndReplica(TopicPartition(t, p), r) for t, parts in self.partition_assignments.items()
                for p, a in parts.items() for r in a.replicas if r in broker_ids}

    def partitions_on_broker(self, broker_id: int) -> set[TopicPartition]:
        return {TopicPartition(t, p) for t, parts in self.partition_assignments.items()
                for p, a in parts.items() if broker_id in a.replicas}

    def isr_members_not_eligible(self, states: dict[TopicPartition, LeaderAndIsr]) -> set[PartitionAndReplica]:
        """The followers in ``states``' ISRs that may not be there: on a broker that is dead or shutting down (Kafka
        3.9's ZooKeeper controller refuses such an ISR, INELIGIBLE_REPLICA; here a leader writes its ISR itself,
        and a follower's last fetch, answered after its broker stopped, could take it back in).  The leader is
        left alone (its election is the failure's or the shutdown's business), as are topics being deleted."""
        live, shutting_down = self.live_brokers, self.shutting_down_broker_ids
        return {PartitionAndReplica(tp, r) for tp, l in states.items()
                if not self.is_topic_queued_for_deletion(tp.topic)
                for r in l.isr if r != l.leader and (r not in live or r in shutting_down)}

    def partitions_led_by(self, broker_id: int) -> set[TopicPartition]:
        return {tp for tp, l in self.partition_leadership.items() if l.leader == broker_id}

    def remove_topic(self, topic: str) -> None:
        for tp in self.partitions_for_topic(topic):
            self.partition_leadership.pop(tp, None)
            self.partition_states.pop(tp, None)
        self.replica_states = {k: v for k, v in self.replica_states.items() if k.tp.topic != topic}
        self.partition_assignments.pop(topic, None)
        self.partitions_being_reassigned = {tp for tp in self.partitions_being_reassigned if tp.topic != topic}
        self.all_topics.discard(topic)
        self.topic_ids.pop(topic, None)
        self.topic_configs.pop(topic, None)
        for s in self.replicas_on_offline_dirs.values():
            s.difference_update({tp for tp in s if tp.topic == topic})

    def is_topic_queued_for_deletion(self, topic: str) -> bool:
        return topic in self.topics_to_be_deleted

    def is_topic_deletion_in_progress(self, topic: str) -> bool:
        return any(self.replica_states.get(pr) == ReplicaState.DELETION_STARTED for pr in self.replicas_for_topic(topic))

    def leader_epoch(self, tp: TopicPartition) -> int:
        if self.is_topic_queued_for_deletion(tp.topic):
            return LeaderAndIsr.EPOCH_DURING_DELETE
        l = self.partition_leadership.get(tp)
        return l.leader_epoch if l else LeaderAndIsr.NO_EPOCH

    def replicas_in_state(self, topic: str, state: ReplicaState) -> set[PartitionAndReplica]:
        return {pr for pr in self.replicas_for_topic(topic) if self.replica_states.get(pr) == state}

    def are_all_replicas_in_state(self, topic: str, state: ReplicaState) -> bool:
        return all(self.replica_states.get(pr) == state for pr in self.replicas_for_topic(topic))

    def is_any_replica_in_state(self, topic: str, state: ReplicaState) -> bool:
        return any(self.replica_states.get(pr) == state for pr in self.replicas_for_topic(topic))

    def partitions_in_states(self, states: set[PartitionState]) -> set[TopicPartition]:
        return {tp for tp, s in self.partition_states.items() if s in states}
