"""Metadata of one remote log segment (Kafka's ``RemoteLogSegmentMetadata`` + KIP-950's ``tieredEpoch``).

A segment copied to remote storage is identified by a :class:`RemoteLogSegmentId` (topic id, topic, partition
and a random UUID).  Its metadata goes through the states of :class:`RemoteLogSegmentState`; only the
transitions Kafka allows are applied (:func:`is_valid_transition`).  Every metadata carries the topic's tiered
epoch at the time it was copied (docs/kip-950-tiered-storage.md#tiered-epoch): the later disablement work fences
and garbage-collects by it.

Values are immutable; an update (:class:`RemoteLogSegmentMetadataUpdate`) yields a new metadata through
:meth:`RemoteLogSegmentMetadata.create_with_update`.  ``to_json`` / ``from_json`` give the stored form
(``zk_schemas/remote_log_segment_metadata.json``).
"""
from __future__ import annotations

import base64
import enum
import json
import time
import uuid
from typing import Any, Iterable, Mapping

import attrs

from kafkatier.common.structs import TopicIdPartition


class RemoteLogMetadataError(ValueError):
    """Metadata that breaks one of Kafka's constructor rules, or that cannot be decoded."""


def _now_ms() -> int:
    return int(time.time() * 1000)


def new_uuid_str() -> str:
    """A random id in Kafka's ``Uuid.toString`` form (URL-safe base64, 22 chars, never starting with '-')."""
    while True:
        s = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not s.startswith("-"):
            return s


# ------------------------------------------------------------------------------------------------- states

class RemoteLogSegmentState(enum.IntEnum):
    """Kafka's ids: COPY_SEGMENT_STARTED 0, COPY_SEGMENT_FINISHED 1, DELETE_SEGMENT_STARTED 2, DELETE_SEGMENT_FINISHED 3."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


_S = RemoteLogSegmentState
_VALID: dict[RemoteLogSegmentState | None, frozenset[RemoteLogSegmentState]] = {
    None: frozenset({_S.COPY_SEGMENT_STARTED}),
    _S.COPY_SEGMENT_STARTED: frozenset({_S.COPY_SEGMENT_STARTED, _S.COPY_SEGMENT_FINISHED,
                                        _S.DELETE_SEGMENT_STARTED}),
    _S.COPY_SEGMENT_FINISHED: frozenset({_S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED}),
    _S.DELETE_SEGMENT_STARTED: frozenset({_S.DELETE_SEGMENT_STARTED, _S.DELETE_SEGMENT_FINISHED}),
    _S.DELETE_SEGMENT_FINISHED: frozenset({_S.DELETE_SEGMENT_FINISHED}),
}


def is_valid_transition(source: RemoteLogSegmentState | None, target: RemoteLogSegmentState) -> bool:
    """Kafka's ``RemoteLogSegmentState.isValidTransition`` (``None`` = no metadata yet)."""
    return target in _VALID[source]


class RemotePartitionDeleteState(enum.IntEnum):
    """Partition-level delete states (Kafka's ids)."""

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


_P = RemotePartitionDeleteState
_VALID_PARTITION: dict[RemotePartitionDeleteState | None, frozenset[RemotePartitionDeleteState]] = {
    None: frozenset({_P.DELETE_PARTITION_MARKED}),
    _P.DELETE_PARTITION_MARKED: frozenset({_P.DELETE_PARTITION_MARKED, _P.DELETE_PARTITION_STARTED}),
    _P.DELETE_PARTITION_STARTED: frozenset({_P.DELETE_PARTITION_STARTED, _P.DELETE_PARTITION_FINISHED}),
    _P.DELETE_PARTITION_FINISHED: frozenset({_P.DELETE_PARTITION_FINISHED}),
}


def is_valid_partition_transition(source: RemotePartitionDeleteState | None,
                                  target: RemotePartitionDeleteState) -> bool:
    return target in _VALID_PARTITION[source]


# ---------------------------------------------------------------------------------------------------- ids

@attrs.frozen(order=True)
class RemoteLogSegmentId:
    topic_id_partition: TopicIdPartition
    id: str

    @classmethod
    def generate(cls, topic_id_partition: TopicIdPartition) -> RemoteLogSegmentId:
        return cls(topic_id_partition, new_uuid_str())

    def __str__(self) -> str:
        return f"RemoteLogSegmentId{{topicIdPartition={self.topic_id_partition}, id={self.id}}}"


# ----------------------------------------------------------------------------------------------- metadata

def _epochs(value: Mapping[int, int] | Iterable[tuple[int, int]] | None) -> tuple[tuple[int, int], ...]:
    if value is None:
        return ()
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted((int(e), int(o)) for e, o in items))


def _state(value: Any) -> RemoteLogSegmentState:
    if isinstance(value, RemoteLogSegmentState):
        return value
    if isinstance(value, str):
        return RemoteLogSegmentState[value]
    return RemoteLogSegmentState(value)


@attrs.frozen
class RemoteLogSegmentMetadataUpdate:
    """A state change of an existing segment (Kafka's ``RemoteLogSegmentMetadataUpdate``)."""

    remote_log_segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    state: RemoteLogSegmentState = attrs.field(converter=_state)
    broker_id: int
    custom_metadata: bytes | None = None

    def __attrs_post_init__(self) -> None:
        if self.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise RemoteLogMetadataError("Given state can not be COPY_SEGMENT_STARTED")


@attrs.frozen
class RemoteLogSegmentMetadata:
    """One remote segment: offsets ``[start_offset, end_offset]``, the leader epochs it holds (epoch -> first
    offset), its size, state and ``tiered_epoch``.  New metadata starts in COPY_SEGMENT_STARTED."""

    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: tuple[tuple[int, int], ...] = attrs.field(converter=_epochs)
    state: RemoteLogSegmentState = attrs.field(default=RemoteLogSegmentState.COPY_SEGMENT_STARTED, converter=_state)
    tiered_epoch: int = 0
    custom_metadata: bytes | None = None

    def __attrs_post_init__(self) -> None:
        # Kafka's constructor checks and messages.
        if self.remote_log_segment_id is None:
            raise RemoteLogMetadataError("remoteLogSegmentId can not be null")
        if self.start_offset < 0:
            raise RemoteLogMetadataError(f"Unexpected start offset = {self.start_offset}. StartOffset for a remote "
                                         f"segment cannot be negative")
        if self.end_offset < self.start_offset:
            raise RemoteLogMetadataError(f"Unexpected end offset = {self.end_offset}. EndOffset for a remote segment "
                                         f"cannot be less than startOffset = {self.start_offset}")
        if not self.segment_leader_epochs:
            raise RemoteLogMetadataError("segmentLeaderEpochs can not be null or empty")
        if self.state is None:
            raise RemoteLogMetadataError("state can not be null")
        if self.tiered_epoch < 0:
            raise RemoteLogMetadataError(f"tieredEpoch can not be negative: {self.tiered_epoch}")

    # --- derived --------------------------------------------------------------------------------------------
    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition

    @property
    def segment_id(self) -> str:
        return self.remote_log_segment_id.id

    @property
    def leader_epochs(self) -> dict[int, int]:
        return dict(self.segment_leader_epochs)

    @property
    def first_leader_epoch(self) -> int:
        return self.segment_leader_epochs[0][0]

    @property
    def last_leader_epoch(self) -> int:
        return self.segment_leader_epochs[-1][0]

    def contains_offset(self, offset: int) -> bool:
        return self.start_offset <= offset <= self.end_offset

    def create_with_update(self, update: RemoteLogSegmentMetadataUpdate) -> RemoteLogSegmentMetadata:
        """The metadata after ``update`` (Kafka's ``createWithUpdates``); the transition is not checked here."""
        if update.remote_log_segment_id != self.remote_log_segment_id:
            raise RemoteLogMetadataError("Given rlsmUpdate does not have this instance's remoteLogSegmentId.")
        return attrs.evolve(self, state=update.state, broker_id=update.broker_id,
                            event_timestamp_ms=update.event_timestamp_ms,
                            custom_metadata=update.custom_metadata if update.custom_metadata is not None
                            else self.custom_metadata)

    def __str__(self) -> str:
        return (f"RemoteLogSegmentMetadata{{remoteLogSegmentId={self.remote_log_segment_id}, startOffset="
                f"{self.start_offset}, endOffset={self.end_offset}, brokerId={self.broker_id}, maxTimestampMs="
                f"{self.max_timestamp_ms}, eventTimestampMs={self.event_timestamp_ms}, segmentLeaderEpochs="
                f"{self.leader_epochs}, segmentSizeInBytes={self.segment_size_in_bytes}, state={self.state.name}, "
                f"tieredEpoch={self.tiered_epoch}}}")

    # --- stored form ----------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        tip = self.topic_id_partition
        return {
            "version": 1,
            "topic_id": tip.topic_id, "topic": tip.topic, "partition": tip.partition,
            "segment_id": self.segment_id,
            "start_offset": self.start_offset, "end_offset": self.end_offset,
            "max_timestamp_ms": self.max_timestamp_ms,
            "segment_leader_epochs": [{"epoch": e, "start_offset": o} for e, o in self.segment_leader_epochs],
            "segment_size_in_bytes": self.segment_size_in_bytes,
            "state": self.state.name,
            "tiered_epoch": self.tiered_epoch,
            "broker_id": self.broker_id,
            "event_timestamp_ms": self.event_timestamp_ms,
            "custom_metadata": None if self.custom_metadata is None
            else base64.b64encode(self.custom_metadata).decode("ascii"),
        }

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=False).encode("utf-8")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RemoteLogSegmentMetadata:
        try:
            if d.get("version") != 1:
                raise RemoteLogMetadataError(f"unsupported version {d.get('version')!r}")
            tip = TopicIdPartition(str(d["topic_id"]), str(d["topic"]), int(d["partition"]))
            custom = d.get("custom_metadata")
            return cls(
                remote_log_segment_id=RemoteLogSegmentId(tip, str(d["segment_id"])),
                start_offset=int(d["start_offset"]), end_offset=int(d["end_offset"]),
                max_timestamp_ms=int(d["max_timestamp_ms"]), broker_id=int(d["broker_id"]),
                event_timestamp_ms=int(d["event_timestamp_ms"]),
                segment_size_in_bytes=int(d["segment_size_in_bytes"]),
                segment_leader_epochs=[(int(x["epoch"]), int(x["start_offset"])) for x in d["segment_leader_epochs"]],
                state=RemoteLogSegmentState[str(d["state"])], tiered_epoch=int(d["tiered_epoch"]),
                custom_metadata=None if custom is None else base64.b64decode(custom))
        except RemoteLogMetadataError:
            raise
        except (KeyError, TypeError, ValueError) as e:
            raise RemoteLogMetadataError(f"malformed remote log segment metadata: {e!r}") from None

    @classmethod
    def from_json(cls, data: bytes | str) -> RemoteLogSegmentMetadata:
        try:
            d = json.loads(data)
        except (ValueError, UnicodeDecodeError) as e:
            raise RemoteLogMetadataError(f"malformed remote log segment metadata: {e}") from None
        if not isinstance(d, dict):
            raise RemoteLogMetadataError("malformed remote log segment metadata: not a JSON object")
        return cls.from_dict(d)


def new_segment_metadata(segment_id: RemoteLogSegmentId, start_offset: int, end_offset: int,
                         max_timestamp_ms: int, broker_id: int, segment_size_in_bytes: int,
                         segment_leader_epochs: Mapping[int, int], tiered_epoch: int,
                         event_timestamp_ms: int | None = None) -> RemoteLogSegmentMetadata:
    """Metadata for a copy that is about to start (COPY_SEGMENT_STARTED)."""
    return RemoteLogSegmentMetadata(segment_id, start_offset, end_offset, max_timestamp_ms, broker_id,
                                    _now_ms() if event_timestamp_ms is None else event_timestamp_ms,
                                    segment_size_in_bytes, segment_leader_epochs,
                                    RemoteLogSegmentState.COPY_SEGMENT_STARTED, tiered_epoch)
