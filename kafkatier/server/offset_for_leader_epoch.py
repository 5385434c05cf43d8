"""OffsetForLeaderEpoch (apiKey 23, v0-4): Kafka's ``KafkaApis.handleOffsetForLeaderEpochRequest`` with
``ReplicaManager.lastOffsetForLeaderEpoch`` and ``Partition.lastOffsetForLeaderEpoch``.

KIP-320 clients (kafka-python's consumer, librdkafka) send it after every leader change to validate their
position: "where did the epoch of my last fetched record end on the new leader?"  An end offset below the
position means the log was truncated under the consumer.

Order of checks, as Kafka 3.x:

1. Authorization, when an authorizer is configured: CLUSTER_ACTION on the CLUSTER allows every topic (brokers);
   otherwise DESCRIBE on each TOPIC (consumers), and each partition of a denied topic answers
   TOPIC_AUTHORIZATION_FAILED.  Kafka asks for CLUSTER_ACTION whatever the ``replica_id``, and so do we.
2. Hosting (``ReplicaManager``): a partition in an offline log dir answers KAFKA_STORAGE_ERROR; one this broker
   does not host answers NOT_LEADER_OR_FOLLOWER when the metadata knows it, else UNKNOWN_TOPIC_OR_PARTITION.
3. On the partition, under its lock (``Partition.getLocalLog``): ``current_leader_epoch`` (-1: not checked)
   older than ours is FENCED_LEADER_EPOCH, newer is UNKNOWN_LEADER_EPOCH; then only the leader answers
   (``fetchOnlyFromLeader`` is always true in Kafka 3.x's ReplicaManager), else NOT_LEADER_OR_FOLLOWER.
4. The answer: the largest epoch <= the requested one and the offset where it ended (the log end offset for the
   latest epoch), from the leader epoch cache (``LeaderEpochFileCache.end_offset_for``); epoch and offset -1
   with no error when the cache knows no such epoch.

Every error answers ``leader_epoch = end_offset = -1``.  Difference from Kafka: the partition-level lookup lives
here (:func:`last_offset_for_leader_epoch`) rather than on ``Partition``; it only reads the partition.
Followers send this request (``replica_id`` set) in their truncation phase: ``server/replica_fetcher.py``.
"""
from __future__ import annotations

from typing import Any, Callable

import attrs

from kafkatier.common.structs import TopicPartition
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol import codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.build import build
from kafkatier.protocol.errors import Errors, KafkaError, NotLeaderOrFollowerError
from kafkatier.server.auth_helper import AuthHelper
from kafkatier.server.partition import Partition
from kafkatier.server.replica_manager import ReplicaManager

log = get_logger("server.offset-for-leader-epoch")

VERSIONS = (0, 4)  # Kafka 3.9's range (0-1, without the current leader epoch, were removed in Kafka 4.0)
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@attrs.frozen
class EpochEndOffset:
    """One partition's answer (Kafka's ``EpochEndOffset``)."""

    error: Errors
    leader_epoch: int = UNDEFINED_EPOCH
    end_offset: int = UNDEFINED_EPOCH_OFFSET


def last_offset_for_leader_epoch(partition: Partition, current_leader_epoch: int, leader_epoch: int) -> EpochEndOffset:
    """Kafka's ``Partition.lastOffsetForLeaderEpoch`` with ``fetchOnlyFromLeader = true``: raises nothing."""
    with partition.lock:
        try:
            partition.check_leader_epoch(current_leader_epoch)
            if not partition.is_leader:
                raise NotLeaderOrFollowerError(f"broker {partition.broker_id} is not the leader of {partition}")
        except KafkaError as e:
            return EpochEndOffset(e.error)
        epoch, end_offset = partition.log.end_offset_for_epoch(leader_epoch)
    if end_offset == UNDEFINED_EPOCH_OFFSET:
        return EpochEndOffset(Errors.NONE)
    return EpochEndOffset(Errors.NONE, epoch, end_offset)


class OffsetForLeaderEpochApis:
    """The OffsetForLeaderEpoch handler, over the replica manager and the broker's :class:`AuthHelper`."""

    def __init__(self, replica_manager: ReplicaManager, auth: AuthHelper):
        self.rm = replica_manager
        self.auth = auth

    def handlers(self) -> dict[int, tuple[tuple[int, int], Callable]]:
        return {ApiKeys.OFFSET_FOR_LEADER_EPOCH: (VERSIONS, self.handle_offset_for_leader_epoch)}

    def handle_offset_for_leader_epoch(self, header, req, context) -> Any:
        topics = list(req.topics)
        if self.auth.authorize_cluster(context, "ClusterAction"):
            describable = {t.topic for t in topics}
        else:
            describable = self.auth.filter_authorized(context, "Describe", "Topic", (t.topic for t in topics))
        results = []
        for t in topics:
            answers = []
            for p in t.partitions:
                if t.topic in describable:
                    answer = self.last_offset_for_leader_epoch(TopicPartition(t.topic, p.partition),
                                                               p.current_leader_epoch, p.leader_epoch)
                else:
                    answer = EpochEndOffset(Errors.TOPIC_AUTHORIZATION_FAILED)
                answers.append({"error_code": int(answer.error), "partition": p.partition,
                                "leader_epoch": answer.leader_epoch, "end_offset": answer.end_offset})
            results.append({"topic": t.topic, "partitions": answers})
        return build(codec.response_class(ApiKeys.OFFSET_FOR_LEADER_EPOCH), header.request_api_version,
                     {"throttle_time_ms": 0, "topics": results})

    def last_offset_for_leader_epoch(self, tp: TopicPartition, current_leader_epoch: int,
                                     leader_epoch: int) -> EpochEndOffset:
        """Kafka's ``ReplicaManager.lastOffsetForLeaderEpoch`` for one partition."""
        try:
            partition = self.rm.get_partition_or_error(tp.topic, tp.partition, leader_only=False)
            return last_offset_for_leader_epoch(partition, current_leader_epoch, leader_epoch)
        except KafkaError as e:
            return EpochEndOffset(e.error)
        except Exception:  # noqa: BLE001 - one partition's failure must not fail the others
            log.exception("OffsetForLeaderEpoch failed %s", kv(partition=f"{tp.topic}-{tp.partition}",
                                                               leader_epoch=leader_epoch))
            return EpochEndOffset(Errors.UNKNOWN_SERVER_ERROR)
