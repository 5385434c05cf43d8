"""``Errors.exception_name``: Kafka's exception class for an error code (``Errors.exceptionName``), as Kafka's
tools print it (kafka-log-dirs, kafka-leader-election)."""
from __future__ import annotations

import pytest

from kafkatier.protocol.errors import Errors


@pytest.mark.parametrize("error, name", [
    (Errors.KAFKA_STORAGE_ERROR, "org.apache.kafka.common.errors.KafkaStorageException"),
    (Errors.LOG_DIR_NOT_FOUND, "org.apache.kafka.common.errors.LogDirNotFoundException"),
    (Errors.REQUEST_TIMED_OUT, "org.apache.kafka.common.errors.TimeoutException"),
    (Errors.ELECTION_NOT_NEEDED, "org.apache.kafka.common.errors.ElectionNotNeededException"),
    (Errors.OFFSET_METADATA_TOO_LARGE, "org.apache.kafka.common.errors.OffsetMetadataTooLarge"),
    (Errors.INVALID_RECORD, "org.apache.kafka.common.InvalidRecordException"),
    (Errors.NONE, None)])
def test_errors_name_kafkas_exception_classes(error, name):
    assert error.exception_name == name
