"""Every Kafka API key, once: :class:`ApiKeys` follows Kafka's ``org.apache.kafka.common.protocol.ApiKeys``.

Handlers register under ``ApiKeys.X``, request builders ask ``codec.request_class(ApiKeys.X)``, fault rules and
logs print :attr:`ApiKeys.message_name` (``StopReplica``).  Numbers and names are Kafka 3.9's; a module never
redefines a key as an integer of its own.

Difference from Kafka: Kafka's enum also carries each API's message types, listeners and throttling; here the
message classes live in :mod:`kafkatier.protocol.codec` and the advertised versions in
``kafkatier.server.api_versions``.
"""
from __future__ import annotations

from enum import IntEnum


class ApiKeys(IntEnum):
    """Kafka's API keys (names as in Kafka's ``ApiKeys`` enum)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    UPDATE_FEATURES = 57
    ENVELOPE = 58
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    CONTROLLER_REGISTRATION = 70
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    ASSIGN_REPLICAS_TO_DIRS = 73
    LIST_CLIENT_METRICS_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75

    @property
    def message_name(self) -> str:
        """The API's message name, as in its JSON spec and Kafka's logs: ``StopReplica``, ``ApiVersions``."""
        return _MESSAGE_NAMES[self]

    @classmethod
    def for_id(cls, api_key: int) -> "ApiKeys | None":
        """The key numbered ``api_key``, or None for a number Kafka does not define."""
        try:
            return cls(api_key)
        except ValueError:
            return None


_ACRONYMS = {"ISR": "Isr", "ACLS": "Acls", "TXN": "Txn", "SASL": "Sasl"}
_MESSAGE_NAMES = {
    key: "".join(_ACRONYMS.get(w, w.capitalize()) for w in key.name.split("_")) for key in ApiKeys
}
_MESSAGE_NAMES[ApiKeys.CONTROLLED_SHUTDOWN] = "ControlledShutdown"

__all__ = ["ApiKeys"]
