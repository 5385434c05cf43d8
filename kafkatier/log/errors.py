"""Errors raised by the log layer.

Those that reach clients carry Kafka's error codes (``KafkaError`` subclasses); the others are internal
conditions that Kafka also keeps off the wire (``UnexpectedAppendOffsetException``, corrupt indexes).
"""
from __future__ import annotations

from kafkatier.protocol.errors import (
    CorruptRecordError,
    Errors,
    InvalidConfigurationError,
    InvalidTopicError,
    KafkaError,
    KafkaStorageError,
    OffsetOutOfRangeError,
)

__all__ = [  # the log layer's errors, and those of protocol/errors.py its callers take from here
    "CorruptRecordError", "Errors", "InvalidConfigurationError", "InvalidTopicError", "KafkaError",
    "KafkaStorageError", "OffsetOutOfRangeError", "RecordTooLargeError", "RecordBatchTooLargeError",
    "InvalidRecordError", "InvalidTimestampError", "InconsistentTopicIdError", "InconsistentClusterIdError",
    "OffsetsOutOfOrderError", "UnexpectedAppendOffsetError", "LogSegmentOffsetOverflowError", "CheckpointReadError",
    "CorruptIndexError", "MissingIndexFileError", "InvalidOffsetError", "InconsistentBrokerIdError",
    "LogDirectoryError",
]


class RecordTooLargeError(KafkaError):
    """A batch is larger than ``max.message.bytes`` (MESSAGE_TOO_LARGE)."""

    error = Errors.MESSAGE_TOO_LARGE


class RecordBatchTooLargeError(KafkaError):
    """An append is larger than ``segment.bytes`` (RECORD_LIST_TOO_LARGE)."""

    error = Errors.RECORD_LIST_TOO_LARGE


class InvalidRecordError(KafkaError):
    """A batch is well formed but breaks a rule for client appends (INVALID_RECORD)."""

    error = Errors.INVALID_RECORD


class InvalidTimestampError(KafkaError):
    """A batch timestamp is outside ``message.timestamp.{before,after}.max.ms`` (INVALID_TIMESTAMP)."""

    error = Errors.INVALID_TIMESTAMP


class InconsistentTopicIdError(KafkaError):
    """``partition.metadata`` holds another topic id than the one being assigned."""

    error = Errors.INCONSISTENT_TOPIC_ID


class InconsistentClusterIdError(KafkaError):
    """``meta.properties`` belongs to another cluster."""

    error = Errors.INCONSISTENT_CLUSTER_ID


class OffsetsOutOfOrderError(KafkaError):
    """A follower append whose batches do not have increasing offsets (Kafka: OffsetsOutOfOrderException)."""

    error = Errors.UNKNOWN_SERVER_ERROR


class UnexpectedAppendOffsetError(KafkaError):
    """A follower append that starts below the log end offset (Kafka: UnexpectedAppendOffsetException)."""

    error = Errors.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str, first_offset: int, last_offset: int):
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class LogSegmentOffsetOverflowError(KafkaError):
    """An offset that does not fit in a segment's 32-bit relative offsets."""

    error = Errors.UNKNOWN_SERVER_ERROR


class CheckpointReadError(KafkaStorageError):
    """A malformed checkpoint file (Kafka turns this into a storage error for the dir)."""


class CorruptIndexError(Exception):
    """An index file that fails its sanity check; the segment's indexes are rebuilt from the log."""


class MissingIndexFileError(CorruptIndexError):
    """A segment with data whose index file does not exist (Kafka's NoSuchFileException at load): rebuilt too."""


class InvalidOffsetError(Exception):
    """An index append that is not above the last entry (Kafka: InvalidOffsetException)."""


class InconsistentBrokerIdError(Exception):
    """``meta.properties`` was written by another broker id."""


class LogDirectoryError(Exception):
    """A log directory layout the broker must refuse to start with (lock held, duplicate partitions)."""
