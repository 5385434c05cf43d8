"""ControlApis: what the broker does with each control request, beside :class:`~kafkatier.server.kafka_apis.KafkaApis`.

Kafka's ``KafkaApis`` handles LeaderAndIsr, StopReplica and UpdateMetadata among the client requests; in
kafkatier those requests arrive over the ZooKeeper control channel (docs/architecture.md#control-channel-over-zookeeper),
so :class:`~kafkatier.server.control_request_handler.ControlRequestHandler` reads, checks and answers them and
this class applies them.  Each handler takes the typed request (:mod:`kafkatier.protocol.control_messages`,
read from the body against the message spec of its version) and returns the typed response, without the
top-level epoch checks, which the handler does.

- LeaderAndIsr: :meth:`ReplicaManager.handle_leader_and_isr`, then Kafka's ``onLeadershipChange``: the group
  and transaction coordinators load the ``__consumer_offsets`` / ``__transaction_state`` partitions this broker
  now leads and unload the others.
- StopReplica: a topic with ``disable_remote_partition`` entries (v5, KIP-950 in ZooKeeper mode) has its config
  re-read once (its change notification may not have arrived yet), then
  :meth:`ReplicaManager.handle_stop_replica`; the coordinators unload the stopped partitions.
- UpdateMetadata: the metadata cache, then the replica manager re-checks DeleteRecords waiting on dead brokers.
"""
from __future__ import annotations

from typing import Mapping, Protocol

from kafkatier.coordinator.group.group_metadata_manager import OFFSETS_TOPIC
from kafkatier.coordinator.transaction.transaction_log import TRANSACTION_STATE_TOPIC
from kafkatier.logsetup import get_logger
from kafkatier.protocol.control_messages import (LeaderAndIsrRequestData, LeaderAndIsrResponseData,
                                                 StopReplicaRequestData, StopReplicaResponseData,
                                                 UpdateMetadataRequestData, UpdateMetadataResponseData)
from kafkatier.protocol.errors import Errors

log = get_logger("server.control-apis")


class CoordinatorLeadership(Protocol):
    """What a coordinator (group or transaction) is told when this broker gains or loses one of its partitions."""

    def on_election(self, partition: int, epoch: int) -> None: ...

    def on_resignation(self, partition: int, epoch: int | None = None) -> None: ...


class ControlApis:
    def __init__(self, replica_manager, metadata_cache, topic_config_handler, tiered: bool,
                 coordinators: Mapping[str, CoordinatorLeadership]):
        """``tiered``: the broker runs a remote log manager (StopReplica v5 entries then re-read configs);
        ``coordinators``: internal topic name -> the coordinator of its partitions."""
        self.replica_manager = replica_manager
        self.metadata_cache = metadata_cache
        self.topic_config_handler = topic_config_handler
        self.tiered = tiered
        self.coordinators = dict(coordinators)

    def handle_leader_and_isr(self, request: LeaderAndIsrRequestData) -> LeaderAndIsrResponseData:
        result = self.replica_manager.handle_leader_and_isr(request)
        self._coordinator_leadership(request, stopped=False)
        return result

    def handle_stop_replica(self, request: StopReplicaRequestData) -> StopReplicaResponseData:
        disabling = sorted({ts.topic_name for ts in request.topic_states
                            if any(ps.disable_remote_partition for ps in ts.partition_states)})
        answers: dict[str, Errors] = {}
        if disabling and self.tiered:
            answers = self.topic_config_handler.refresh_for_disablement(disabling)
        result = self.replica_manager.handle_stop_replica(request, answers)
        self._coordinator_leadership(request, stopped=True)
        return result

    def handle_update_metadata(self, request: UpdateMetadataRequestData) -> UpdateMetadataResponseData:
        self.metadata_cache.update(request)
        try:
            self.replica_manager.on_metadata_update()  # DeleteRecords waiting on replicas of dead brokers
        except Exception:  # noqa: BLE001
            log.exception("re-checking DeleteRecords after a metadata update failed")
        return UpdateMetadataResponseData(error_code=0)

    def _coordinator_leadership(self, request: LeaderAndIsrRequestData | StopReplicaRequestData,
                                stopped: bool) -> None:
        """Kafka's onLeadershipChange: each coordinator loads the partitions of its topic this broker now leads
        (coordinator epoch = leader epoch) and unloads those it follows or stopped."""
        for ts in request.topic_states:
            coordinator = self.coordinators.get(ts.topic_name)
            if coordinator is None:
                continue
            topic = ts.topic_name
            for ps in ts.partition_states:
                p, epoch = ps.partition_index, ps.leader_epoch
                part = self.replica_manager.get_partition(topic, p)
                if not stopped and part is not None and part.is_leader:
                    coordinator.on_election(p, part.leader_epoch)
                else:
                    coordinator.on_resignation(p, None if stopped else epoch)


def internal_topic_coordinators(group_coordinator, transaction_coordinator) -> dict[str, CoordinatorLeadership]:
    """The coordinators :class:`ControlApis` tells about leadership, by the internal topic they own."""
    return {OFFSETS_TOPIC: group_coordinator, TRANSACTION_STATE_TOPIC: transaction_coordinator}
