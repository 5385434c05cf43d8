"""DeleteRecords (KIP-107, API key 21, versions 0-2) on the broker: the request handler, the leader-side
deletion, and :class:`DelayedDeleteRecords`, which holds the response until the partition's low watermark (the
minimum log start offset of its live replicas, :meth:`Partition.low_watermark`) reaches the requested offset.

Order of checks per partition (docs/kip-107-delete-records.md#order-of-checks): authorization (DELETE on the topic,
only with an authorizer configured) -> metadata -> internal topic -> hosting (offline dir / not hosted) -> on the
partition under its lock: leader, ``cleanup.policy`` contains ``delete``, offset -1 = high watermark, negative
offset, offset above the high watermark, then the log start offset moves to ``max(current, offset)``.  Every error
answers ``LowWatermark=-1``.

Waiting (docs/kip-107-delete-records.md#purgatory): partitions without error whose low watermark is below the
requested offset wait in the replica manager's ``DeleteRecords`` purgatory under the key ``("delete_records",
(topic, partition))``; follower fetches, high-watermark changes and LeaderAndIsr / StopReplica re-check it (see
ReplicaManager), and so does UpdateMetadata (project: a follower whose broker died no longer counts, and it sends no
fetch).  Losing leadership completes a partition with NOT_LEADER_OR_FOLLOWER (Kafka lets it time out), a partition
that is gone with UNKNOWN_TOPIC_OR_PARTITION; expiry answers REQUEST_TIMED_OUT with the low watermark computed at
request time.

Project choices beyond Kafka:

- after a move, the segments wholly below the new log start offset are deleted at once (leader here, followers
  when they follow the leader's log start offset: ``ReplicaManager.after_log_start_offset_moved``) and
  ``log-start-offset-checkpoint`` of that log dir is written, so an acknowledged deletion survives a crash
  (Kafka only checkpoints every ``log.flush.start.offset.checkpoint.interval.ms`` and at shutdown).

``KafkaApis`` serves API 21 with :meth:`DeleteRecordsManager.handle`; ``KafkaServer`` builds the manager with the
replica manager, the metadata cache and the authorizer.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Callable

import attrs

from kafkatier.common.structs import TopicPartition
from kafkatier.log.log import CLIENT_RECORD_DELETION
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol import codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.build import build
from kafkatier.protocol.errors import (Errors, InvalidTopicError, KafkaError, NotLeaderOrFollowerError,
                                       OffsetOutOfRangeError, PolicyViolationError)
from kafkatier.server.auth_helper import AuthHelper
from kafkatier.server.purgatory import DelayedOperation
from kafkatier.server.replica_manager import ReplicaManager


log = get_logger("server.delete-records")

VERSIONS = (0, 2)
HIGH_WATERMARK = -1
INVALID_LOW_WATERMARK = -1
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})



def tp_str(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


@attrs.define
class PartitionStatus:
    """One partition of a DeleteRecords request: what it waits for and what it will answer."""

    required_offset: int
    low_watermark: int
    error: Errors
    pending: bool = False


class DelayedDeleteRecords(DelayedOperation):
    """Kafka's DelayedDeleteRecords: completes when no partition is pending any more, or at the timeout."""

    def __init__(self, delay_ms: int, statuses: dict[TopicPartition, PartitionStatus],
                 check: Callable[[TopicPartition], tuple[Errors, int]],
                 respond: Callable[[dict[TopicPartition, PartitionStatus]], None]):
        super().__init__(max(delay_ms, 0))
        self.statuses = statuses
        self.check = check
        self.respond = respond
        self._check_lock = threading.Lock()
        for st in statuses.values():
            if st.error == Errors.NONE:
                st.pending = True
                st.error = Errors.REQUEST_TIMED_OUT  # provisional; the low watermark stays the request-time one

    def try_complete(self) -> bool:
        with self._check_lock:  # statuses change only under this lock; the response is built under it too
            if self.is_completed:
                return False
            for tp, st in self.statuses.items():
                if not st.pending:
                    continue
                required = st.required_offset
                err, lw = self.check(tp)
                if err != Errors.NONE:
                    st.pending, st.error, st.low_watermark = False, err, INVALID_LOW_WATERMARK
                elif lw >= required:
                    st.pending, st.error, st.low_watermark = False, Errors.NONE, lw
            if any(st.pending for st in self.statuses.values()):
                return False
            return self.force_complete()

    def force_complete_on_expiry(self) -> bool:
        with self._check_lock:
            return self.force_complete()

    def on_complete(self) -> None:
        self.respond(self.statuses)

    def on_expiration(self) -> None:
        pending = [tp_str(tp) for tp, st in self.statuses.items() if st.pending]
        log.info("DeleteRecords timed out %s", kv(pending=",".join(pending) or None))


class DeleteRecordsManager:
    """Serves DeleteRecords for one broker (Kafka's ``KafkaApis.handleDeleteRecordsRequest`` and
    ``ReplicaManager.deleteRecords``)."""

    def __init__(self, broker_id: int, replica_manager: ReplicaManager, metadata_cache,
                 auth: AuthHelper | None = None):
        self.broker_id = broker_id
        self.rm = replica_manager
        self.cache = metadata_cache
        self.auth = auth or AuthHelper()  # DELETE on the topic; allows all without an authorizer

    # --- request ----------------------------------------------------------------------------------------------
    def handle(self, header, request, context) -> Future:
        version = header.request_api_version
        order: list[TopicPartition] = []
        offsets: dict[TopicPartition, int] = {}
        early: dict[TopicPartition, PartitionStatus] = {}
        authorized: dict[str, bool] = {}
        for t in request.topics:
            if t.name not in authorized:
                authorized[t.name] = self.auth.authorize(context, "Delete", "Topic", t.name)
            allowed = authorized[t.name]
            for pt in t.partitions:
                tp = (t.name, pt.partition_index)
                if tp not in offsets and tp not in early:
                    order.append(tp)
                offsets.pop(tp, None)
                early.pop(tp, None)
                if not allowed:
                    early[tp] = PartitionStatus(-1, INVALID_LOW_WATERMARK, Errors.TOPIC_AUTHORIZATION_FAILED)
                elif self.cache.get_partition(*tp) is None:
                    early[tp] = PartitionStatus(-1, INVALID_LOW_WATERMARK, Errors.UNKNOWN_TOPIC_OR_PARTITION)
                else:
                    offsets[tp] = pt.offset
        fut: Future = Future()

        def respond(statuses: dict[TopicPartition, PartitionStatus]) -> None:
            merged = {**early, **statuses}
            by_topic: dict[str, list] = {}
            for tp in order:
                st = merged[tp]
                lw = st.low_watermark if st.error in (Errors.NONE, Errors.REQUEST_TIMED_OUT) else INVALID_LOW_WATERMARK
                by_topic.setdefault(tp[0], []).append({"partition_index": tp[1], "low_watermark": lw,
                                                       "error_code": int(st.error)})
            fut.set_result(build(codec.response_class(ApiKeys.DELETE_RECORDS), version, {
                "throttle_time_ms": 0,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}))
        self.delete_records(request.timeout_ms, offsets, respond)
        return fut

    # --- replica manager side ---------------------------------------------------------------------------------
    def delete_records(self, timeout_ms: int, offsets: dict[TopicPartition, int],
                       respond: Callable[[dict[TopicPartition, PartitionStatus]], None]) -> None:
        """Raise the log start offsets on this leader, then answer at once or after the replicas follow."""
        statuses: dict[TopicPartition, PartitionStatus] = {}
        for tp, offset in offsets.items():
            try:
                required, lw = self.delete_on_leader(tp, offset)
                statuses[tp] = PartitionStatus(required, lw, Errors.NONE)
            except KafkaError as e:
                log.info("DeleteRecords failed %s", kv(partition=tp_str(tp), offset=offset, error=e.error.name,
                                                       reason=repr(e.message)))
                statuses[tp] = PartitionStatus(-1, INVALID_LOW_WATERMARK, e.error)
            except Exception:  # noqa: BLE001
                log.exception("DeleteRecords failed %s", kv(partition=tp_str(tp), offset=offset))
                statuses[tp] = PartitionStatus(-1, INVALID_LOW_WATERMARK, Errors.UNKNOWN_SERVER_ERROR)
        if not any(st.error == Errors.NONE and st.low_watermark < st.required_offset for st in statuses.values()):
            respond(statuses)
            return
        op = DelayedDeleteRecords(timeout_ms, statuses, self.check_low_watermark, respond)
        self.rm.delete_records_purgatory.try_complete_else_watch(op, [("delete_records", tp) for tp in offsets])

    def delete_on_leader(self, tp: TopicPartition, offset: int) -> tuple[int, int]:
        """Kafka's ``deleteRecordsOnLocalLog`` + ``Partition.deleteRecordsOnLeader``: returns (the converted
        requested offset, the low watermark now); raises KafkaError with Kafka's messages."""
        topic, partition = tp
        if topic in INTERNAL_TOPICS:
            raise InvalidTopicError(f"Cannot delete records of internal topic {topic}")
        p = self.rm.get_partition_or_error(topic, partition, leader_only=False)
        with p.lock:
            if not p.is_leader:
                raise NotLeaderOrFollowerError(f"Leader not local for partition {tp_str(tp)} on broker "
                                               f"{self.broker_id}")
            plog = p.log
            if not plog.config.delete:
                raise PolicyViolationError(f"Records of partition {tp_str(tp)} can not be deleted due to the "
                                           f"configured policy")
            converted = plog.high_watermark if offset == HIGH_WATERMARK else offset
            if converted < 0:
                raise OffsetOutOfRangeError(f"The offset {converted} for partition {tp_str(tp)} is not valid")
            moved = plog.maybe_increment_log_start_offset(converted, CLIENT_RECORD_DELETION)
            lw = p.low_watermark(self.is_alive)
        if moved:
            log.info("log start offset raised by DeleteRecords %s", kv(partition=tp_str(tp), log_start_offset=converted))
            self.rm.after_log_start_offset_moved(p)
        return converted, lw

    def is_alive(self, broker_id: int) -> bool:
        return self.cache.broker(broker_id) is not None

    def check_low_watermark(self, tp: TopicPartition) -> tuple[Errors, int]:
        """DelayedDeleteRecords' check: (NONE, low watermark) while leader, else the error."""
        try:
            p = self.rm.get_partition_or_error(tp[0], tp[1], leader_only=False)
            return Errors.NONE, p.low_watermark(self.is_alive)
        except KafkaError as e:
            return e.error, INVALID_LOW_WATERMARK
