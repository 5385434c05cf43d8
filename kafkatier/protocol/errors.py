"""Kafka error codes (numbers as in Kafka's ``Errors.java``) and the exceptions that carry them.

Clients (kafka-python, confluent-kafka, kcat) map errors by number, so every code here is Kafka's, except
``TIERED_STORAGE_DISABLEMENT_IN_PROGRESS``: KIP-950 leaves its code open and Kafka never assigned
one.  We use **950** (after the KIP number): far above Kafka's sequential allocation (128 in late 2024), so it
will not collide with a code Kafka assigns in the foreseeable future.
"""
from __future__ import annotations

import enum


class Errors(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    TRANSACTION_ABORTABLE = 120     # KIP-890: a transactional produce to a partition not in the transaction
    # KIP-950; code chosen by this project (see the module docstring and docs/error-codes.md).
    TIERED_STORAGE_DISABLEMENT_IN_PROGRESS = 950

    @property
    def retriable(self) -> bool:
        return self in _RETRIABLE

    @property
    def exception_name(self) -> str | None:
        """The class name of Kafka's exception for this error (Kafka's ``Errors.exceptionName``), as Kafka's tools
        print it: ``org.apache.kafka.common.errors.KafkaStorageException``; None for NONE."""
        if self is Errors.NONE:
            return None
        name = _EXCEPTION_NAMES.get(self) or "".join(w.capitalize() for w in self.name.split("_")) + "Exception"
        return name if "." in name else f"org.apache.kafka.common.errors.{name}"


_RETRIABLE = {
    Errors.CORRUPT_MESSAGE, Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.LEADER_NOT_AVAILABLE,
    Errors.NOT_LEADER_OR_FOLLOWER, Errors.REQUEST_TIMED_OUT, Errors.NETWORK_EXCEPTION,
    Errors.NOT_ENOUGH_REPLICAS, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, Errors.NOT_CONTROLLER,
    Errors.KAFKA_STORAGE_ERROR, Errors.FENCED_LEADER_EPOCH, Errors.UNKNOWN_LEADER_EPOCH,
    Errors.OFFSET_NOT_AVAILABLE, Errors.REPLICA_NOT_AVAILABLE,
    Errors.TIERED_STORAGE_DISABLEMENT_IN_PROGRESS,
}


#: Kafka's exception classes whose names are not the error's name in CamelCase followed by "Exception".
_EXCEPTION_NAMES = {
    Errors.UNKNOWN_SERVER_ERROR: "UnknownServerException", Errors.CORRUPT_MESSAGE: "CorruptRecordException",
    Errors.REQUEST_TIMED_OUT: "TimeoutException", Errors.MESSAGE_TOO_LARGE: "RecordTooLargeException",
    Errors.STALE_CONTROLLER_EPOCH: "ControllerMovedException",
    Errors.OFFSET_METADATA_TOO_LARGE: "OffsetMetadataTooLarge", Errors.NETWORK_EXCEPTION: "NetworkException",
    Errors.INVALID_TOPIC_EXCEPTION: "InvalidTopicException",
    Errors.RECORD_LIST_TOO_LARGE: "RecordBatchTooLargeException",
    Errors.TOPIC_AUTHORIZATION_FAILED: "TopicAuthorizationException",
    Errors.GROUP_AUTHORIZATION_FAILED: "GroupAuthorizationException",
    Errors.CLUSTER_AUTHORIZATION_FAILED: "ClusterAuthorizationException",
    Errors.TOPIC_ALREADY_EXISTS: "TopicExistsException", Errors.INVALID_CONFIG: "InvalidConfigurationException",
    Errors.OUT_OF_ORDER_SEQUENCE_NUMBER: "OutOfOrderSequenceException",
    Errors.DUPLICATE_SEQUENCE_NUMBER: "DuplicateSequenceException",
    Errors.INVALID_PRODUCER_ID_MAPPING: "InvalidPidMappingException",
    Errors.INVALID_TRANSACTION_TIMEOUT: "InvalidTxnTimeoutException",
    Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TransactionalIdAuthorizationException",
    Errors.KAFKA_STORAGE_ERROR: "KafkaStorageException",
    Errors.SASL_AUTHENTICATION_FAILED: "SaslAuthenticationException",
    Errors.DELEGATION_TOKEN_AUTH_DISABLED: "DelegationTokenDisabledException",
    Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: "UnsupportedByAuthenticationException",
    Errors.NON_EMPTY_GROUP: "GroupNotEmptyException",
    Errors.FETCH_SESSION_TOPIC_ID_ERROR: "FetchSessionTopicIdException",
    Errors.INVALID_RECORD: "org.apache.kafka.common.InvalidRecordException",
}


class KafkaError(Exception):
    """An error with a Kafka error code; ``message`` goes into responses that carry one."""

    error: Errors = Errors.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str = "", error: Errors | None = None):
        super().__init__(message)
        if error is not None:
            self.error = error
        self.message = message

    @property
    def code(self) -> int:
        return int(self.error)


def _make(name: str, err: Errors) -> type[KafkaError]:
    return type(name, (KafkaError,), {"error": err})


OffsetOutOfRangeError = _make("OffsetOutOfRangeError", Errors.OFFSET_OUT_OF_RANGE)
CorruptRecordError = _make("CorruptRecordError", Errors.CORRUPT_MESSAGE)
UnknownTopicOrPartitionError = _make("UnknownTopicOrPartitionError", Errors.UNKNOWN_TOPIC_OR_PARTITION)
NotLeaderOrFollowerError = _make("NotLeaderOrFollowerError", Errors.NOT_LEADER_OR_FOLLOWER)
RequestTimedOutError = _make("RequestTimedOutError", Errors.REQUEST_TIMED_OUT)
StaleControllerEpochError = _make("StaleControllerEpochError", Errors.STALE_CONTROLLER_EPOCH)
InvalidTopicError = _make("InvalidTopicError", Errors.INVALID_TOPIC_EXCEPTION)
NotEnoughReplicasError = _make("NotEnoughReplicasError", Errors.NOT_ENOUGH_REPLICAS)
TopicAlreadyExistsError = _make("TopicAlreadyExistsError", Errors.TOPIC_ALREADY_EXISTS)
InvalidPartitionsError = _make("InvalidPartitionsError", Errors.INVALID_PARTITIONS)
InvalidReplicationFactorError = _make("InvalidReplicationFactorError", Errors.INVALID_REPLICATION_FACTOR)
InvalidConfigurationError = _make("InvalidConfigurationError", Errors.INVALID_CONFIG)
NotControllerError = _make("NotControllerError", Errors.NOT_CONTROLLER)
InvalidRequestError = _make("InvalidRequestError", Errors.INVALID_REQUEST)
PolicyViolationError = _make("PolicyViolationError", Errors.POLICY_VIOLATION)
KafkaStorageError = _make("KafkaStorageError", Errors.KAFKA_STORAGE_ERROR)
FencedLeaderEpochError = _make("FencedLeaderEpochError", Errors.FENCED_LEADER_EPOCH)
StaleBrokerEpochError = _make("StaleBrokerEpochError", Errors.STALE_BROKER_EPOCH)
BrokerNotAvailableError = _make("BrokerNotAvailableError", Errors.BROKER_NOT_AVAILABLE)
TieredStorageDisablementInProgressError = _make(
    "TieredStorageDisablementInProgressError", Errors.TIERED_STORAGE_DISABLEMENT_IN_PROGRESS)


def error_name(code: int) -> str:
    try:
        return Errors(code).name
    except ValueError:
        return f"UNKNOWN_ERROR_CODE_{code}"
