"""AuthHelper: how request handlers ask the authorizer (Kafka's ``kafka.server.AuthHelper``), and the table of
what each API checks.

Every handler asks through one :class:`AuthHelper` built by ``KafkaServer`` around the broker's
:class:`~kafkatier.server.acl.AclAuthorizer` (``None`` when ``authorizer.class.name`` is unset: everything is
allowed, as Kafka without an authorizer).  The principal is the connection's (SASL) principal, or
``User:ANONYMOUS``; the host is the client's IP address.  An authorizer that fails (ZooKeeper trouble while not
started) denies: authorization fails closed.

:data:`API_ACL_TABLE` is Kafka's resource/operation table for the APIs this broker serves (KafkaApis in Kafka
3.6, ZooKeeper mode); the handlers implement it, and docs/security.md and tests read it.  Kafka's semantics that live in
the handlers rather than here: Metadata hides topics the principal may not DESCRIBE when all topics are asked
for (named ones answer TOPIC_AUTHORIZATION_FAILED), and auto-creates only with CREATE on the cluster or the
topic; Fetch from a replica (``replica_id >= 0``) needs CLUSTER_ACTION on the cluster, else every partition
answers TOPIC_AUTHORIZATION_FAILED and nothing is read; InitProducerId without a transactional id needs
IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679).
"""
from __future__ import annotations

from typing import Callable, Iterable, TypeVar

import attrs

from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import Errors, KafkaError

log = get_logger("server.auth")

CLUSTER_NAME = "kafka-cluster"
T = TypeVar("T")

#: Kafka's operation codes (``AclOperation``), for the *_authorized_operations bit fields and the ACL APIs.
OPERATION_CODES = {"Any": 1, "All": 2, "Read": 3, "Write": 4, "Create": 5, "Delete": 6, "Alter": 7, "Describe": 8,
                   "ClusterAction": 9, "DescribeConfigs": 10, "AlterConfigs": 11, "IdempotentWrite": 12,
                   "CreateTokens": 13, "DescribeTokens": 14}

#: Kafka's ``AclEntry.supportedOperations`` per resource type.
SUPPORTED_OPERATIONS = {
    "Topic": ("Read", "Write", "Create", "Describe", "Delete", "Alter", "DescribeConfigs", "AlterConfigs"),
    "Group": ("Read", "Describe", "Delete"),
    "Cluster": ("Create", "ClusterAction", "DescribeConfigs", "AlterConfigs", "IdempotentWrite", "Alter",
                "Describe"),
    "TransactionalId": ("Describe", "Write"),
    "DelegationToken": ("Describe",),
    "User": ("CreateTokens", "DescribeTokens"),
}

#: "No authorized operations were asked for" in Metadata / DescribeCluster / DescribeGroups (kafka-python's
#: bitfield type encodes None as Kafka's -2147483648 and a set of operation codes as their bits).
OPERATIONS_NOT_REQUESTED = None


@attrs.frozen
class AclCheck:
    """One row of the table: ``operation`` on ``resource_type``; ``error`` is Kafka's answer when denied."""

    operation: str
    resource_type: str
    error: str
    note: str = ""


#: api key -> the checks Kafka makes for it (in order).  ApiVersions, SaslHandshake and SaslAuthenticate check
#: nothing; DescribeCluster only computes its authorized operations.
API_ACL_TABLE: dict[int, tuple[AclCheck, ...]] = {
    0: (AclCheck("Write", "TransactionalId", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "transactional"),  # Produce
        AclCheck("Write", "Topic", "TOPIC_AUTHORIZATION_FAILED")),
    1: (AclCheck("Read", "Topic", "TOPIC_AUTHORIZATION_FAILED", "consumer fetch"),                     # Fetch
        AclCheck("ClusterAction", "Cluster", "TOPIC_AUTHORIZATION_FAILED", "replica_id >= 0: nothing read")),
    2: (AclCheck("Describe", "Topic", "TOPIC_AUTHORIZATION_FAILED"),),                                 # ListOffsets
    3: (AclCheck("Describe", "Topic", "TOPIC_AUTHORIZATION_FAILED", "all topics: unauthorized hidden"),  # Metadata
        AclCheck("Create", "Cluster", "TOPIC_AUTHORIZATION_FAILED", "auto-creation: cluster or topic"),
        AclCheck("Create", "Topic", "TOPIC_AUTHORIZATION_FAILED", "auto-creation without cluster CREATE")),
    8: (AclCheck("Read", "Group", "GROUP_AUTHORIZATION_FAILED"),                                       # OffsetCommit
        AclCheck("Read", "Topic", "TOPIC_AUTHORIZATION_FAILED")),
    9: (AclCheck("Describe", "Group", "GROUP_AUTHORIZATION_FAILED"),                                   # OffsetFetch
        AclCheck("Describe", "Topic", "TOPIC_AUTHORIZATION_FAILED", "all partitions: unauthorized hidden")),
    10: (AclCheck("Describe", "Group", "GROUP_AUTHORIZATION_FAILED"),                                  # FindCoordinator
         AclCheck("Describe", "TransactionalId", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")),
    11: (AclCheck("Read", "Group", "GROUP_AUTHORIZATION_FAILED"),),                                    # JoinGroup
    12: (AclCheck("Read", "Group", "GROUP_AUTHORIZATION_FAILED"),),                                    # Heartbeat
    13: (AclCheck("Read", "Group", "GROUP_AUTHORIZATION_FAILED"),),                                    # LeaveGroup
    14: (AclCheck("Read", "Group", "GROUP_AUTHORIZATION_FAILED"),),                                    # SyncGroup
    15: (AclCheck("Describe", "Group", "GROUP_AUTHORIZATION_FAILED"),),                                # DescribeGroups
    16: (AclCheck("Describe", "Cluster", "", "else only the groups it may DESCRIBE are listed"),),     # ListGroups
    19: (AclCheck("Create", "Cluster", "TOPIC_AUTHORIZATION_FAILED", "or CREATE on the topic"),),      # CreateTopics
    20: (AclCheck("Delete", "Topic", "TOPIC_AUTHORIZATION_FAILED"),),                                  # DeleteTopics
    21: (AclCheck("Delete", "Topic", "TOPIC_AUTHORIZATION_FAILED"),),                                  # DeleteRecords
    22: (AclCheck("IdempotentWrite", "Cluster", "CLUSTER_AUTHORIZATION_FAILED", "or WRITE on any topic"),  # InitPid
         AclCheck("Write", "TransactionalId", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "transactional")),
    24: (AclCheck("Write", "TransactionalId", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),                 # AddPartsToTxn
         AclCheck("Write", "Topic", "TOPIC_AUTHORIZATION_FAILED", "internal topics not checked")),
    25: (AclCheck("Write", "TransactionalId", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),                 # AddOffsets
         AclCheck("Read", "Group", "GROUP_AUTHORIZATION_FAILED")),
    26: (AclCheck("Write", "TransactionalId", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),),               # EndTxn
    27: (AclCheck("ClusterAction", "Cluster", "CLUSTER_AUTHORIZATION_FAILED", "or ALTER on the cluster"),),  # Markers
    28: (AclCheck("Write", "TransactionalId", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),                 # TxnOffsets
         AclCheck("Read", "Group", "GROUP_AUTHORIZATION_FAILED"),
         AclCheck("Read", "Topic", "TOPIC_AUTHORIZATION_FAILED")),
    23: (AclCheck("ClusterAction", "Cluster", "", "allows every topic (brokers)"),                    # OffsetForLE
         AclCheck("Describe", "Topic", "TOPIC_AUTHORIZATION_FAILED", "without CLUSTER_ACTION")),
    29: (AclCheck("Describe", "Cluster", "CLUSTER_AUTHORIZATION_FAILED"),),                            # DescribeAcls
    30: (AclCheck("Alter", "Cluster", "CLUSTER_AUTHORIZATION_FAILED"),),                               # CreateAcls
    31: (AclCheck("Alter", "Cluster", "CLUSTER_AUTHORIZATION_FAILED"),),                               # DeleteAcls
    32: (AclCheck("DescribeConfigs", "Topic", "TOPIC_AUTHORIZATION_FAILED"),                           # DescribeConfigs
         AclCheck("DescribeConfigs", "Cluster", "CLUSTER_AUTHORIZATION_FAILED", "broker resources")),
    33: (AclCheck("AlterConfigs", "Topic", "TOPIC_AUTHORIZATION_FAILED"),                              # AlterConfigs
         AclCheck("AlterConfigs", "Cluster", "CLUSTER_AUTHORIZATION_FAILED", "broker resources")),
    34: (AclCheck("Alter", "Cluster", "CLUSTER_AUTHORIZATION_FAILED"),),                               # AlterLogDirs
    35: (AclCheck("Describe", "Cluster", "CLUSTER_AUTHORIZATION_FAILED"),),                            # DescrLogDirs
    37: (AclCheck("Alter", "Topic", "TOPIC_AUTHORIZATION_FAILED"),),                                   # CreatePart.
    42: (AclCheck("Delete", "Group", "GROUP_AUTHORIZATION_FAILED"),),                                  # DeleteGroups
    44: (AclCheck("AlterConfigs", "Topic", "TOPIC_AUTHORIZATION_FAILED"),                              # IncrAlterConfigs
         AclCheck("AlterConfigs", "Cluster", "CLUSTER_AUTHORIZATION_FAILED", "broker resources")),
    47: (AclCheck("Delete", "Group", "GROUP_AUTHORIZATION_FAILED"),                                    # OffsetDelete
         AclCheck("Read", "Topic", "TOPIC_AUTHORIZATION_FAILED")),
    60: (AclCheck("Describe", "Cluster", "", "only cluster_authorized_operations"),),                 # DescribeCluster
    61: (AclCheck("Read", "Topic", "TOPIC_AUTHORIZATION_FAILED"),),                                    # DescrProducers
    65: (AclCheck("Describe", "TransactionalId", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",              # DescribeTxns
                  "topics filtered by DESCRIBE on the topic"),),
    66: (AclCheck("Describe", "TransactionalId", "", "only the ids it may DESCRIBE are listed"),),     # ListTxns
}


def principal_of(context) -> str | None:
    """The connection's principal (set by the network layer after SASL or TLS), or None (anonymous)."""
    return getattr(context, "principal", None)


def host_of(context) -> str:
    address = getattr(context, "client_address", None)
    return str(address[0]) if address else "*"


class AuthHelper:
    """The request handlers' view of the authorizer (Kafka's ``AuthHelper``).  ``authorizer`` may be None."""

    def __init__(self, authorizer=None):
        self.authorizer = authorizer

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def authorize(self, context, operation: str, resource_type: str, name: str) -> bool:
        if self.authorizer is None:
            return True
        principal = principal_of(context)
        try:
            return self.authorizer.authorize(principal, host_of(context), operation, resource_type, name)
        except Exception:  # noqa: BLE001 - fail closed
            log.exception("authorization failed %s", kv(operation=operation, resource_type=resource_type,
                                                        name=name, principal=principal))
            return False

    def authorize_cluster(self, context, operation: str) -> bool:
        return self.authorize(context, operation, "Cluster", CLUSTER_NAME)

    def filter_authorized(self, context, operation: str, resource_type: str, names: Iterable[str]) -> set[str]:
        """The distinct names the principal may ``operation`` (each asked once)."""
        return {n for n in dict.fromkeys(names) if self.authorize(context, operation, resource_type, n)}

    def partition_by_authorized(self, context, operation: str, resource_type: str, items: Iterable[T],
                                name: Callable[[T], str]) -> tuple[list[T], list[T]]:
        items = list(items)
        ok = self.filter_authorized(context, operation, resource_type, (name(i) for i in items))
        return [i for i in items if name(i) in ok], [i for i in items if name(i) not in ok]

    def authorize_by_resource_type(self, context, operation: str, resource_type: str) -> bool:
        if self.authorizer is None:
            return True
        try:
            return self.authorizer.authorize_by_resource_type(principal_of(context), host_of(context), operation,
                                                              resource_type)
        except Exception:  # noqa: BLE001 - fail closed
            log.exception("authorization failed %s", kv(operation=operation, resource_type=resource_type))
            return False

    def authorized_operations(self, context, resource_type: str, name: str) -> set[int]:
        """The codes of the supported operations the principal may do (Kafka's bit field, as kafka-python's
        bitfield type takes it)."""
        return {OPERATION_CODES[op] for op in SUPPORTED_OPERATIONS[resource_type]
                if self.authorize(context, op, resource_type, name)}

    # --- the per-API rules of the table that take more than one check ------------------------------------------
    def readable_topics(self, context, replica_id: int, topics: Iterable[str]) -> set[str]:
        """Fetch: a replica's fetch (``replica_id >= 0``) reads every topic with CLUSTER_ACTION on the cluster
        and nothing without; a consumer's reads the topics it may READ."""
        topics = list(topics)
        if replica_id >= 0:
            return set(topics) if self.authorize_cluster(context, "ClusterAction") else set()
        return self.filter_authorized(context, "Read", "Topic", topics)

    def metadata_topics(self, context, names: list[str], all_topics: bool, missing: Callable[[str], bool],
                        auto_create: bool) -> tuple[list[str], list[str]]:
        """Metadata: ``(topics to answer, topics to answer TOPIC_AUTHORIZATION_FAILED)``.  Without DESCRIBE a
        topic is hidden when all topics were asked for, else denied; a missing topic that would be auto-created
        is denied without CREATE on the cluster or the topic."""
        ok = self.filter_authorized(context, "Describe", "Topic", names)
        shown = [n for n in names if n in ok]
        denied = [] if all_topics else [n for n in names if n not in ok]
        if auto_create and self.enabled:
            absent = [n for n in shown if missing(n)]
            if absent and not self.authorize_cluster(context, "Create"):
                no_create = {n for n in absent if not self.authorize(context, "Create", "Topic", n)}
                shown = [n for n in shown if n not in no_create]
                denied += [n for n in absent if n in no_create]
        return shown, denied

    def may_create_topic(self, context, name: str) -> bool:
        """CreateTopics and Metadata auto-creation: CREATE on the cluster or on the topic."""
        return self.authorize_cluster(context, "Create") or self.authorize(context, "Create", "Topic", name)

    def check_config_resource(self, context, resource_type: int, name: str, alter: bool) -> None:
        """Describe/Alter(Incremental)Configs: DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic (TOPIC, 2) or on the
        cluster (BROKER 4, BROKER_LOGGER 8); raises KafkaError with Kafka's code when denied."""
        op = "AlterConfigs" if alter else "DescribeConfigs"
        if resource_type == 2:
            if not self.authorize(context, op, "Topic", name):
                raise KafkaError("Topic authorization failed.", Errors.TOPIC_AUTHORIZATION_FAILED)
        elif resource_type in (4, 8):
            if not self.authorize_cluster(context, op):
                raise KafkaError("Cluster authorization failed.", Errors.CLUSTER_AUTHORIZATION_FAILED)

    def init_producer_id_error(self, context, transactional_id: str | None):
        """InitProducerId: WRITE on the transactional id, or (idempotent producer) IDEMPOTENT_WRITE on the
        cluster or WRITE on some topic (KIP-679).  The error to answer, or None."""
        if transactional_id is not None:
            if not self.authorize(context, "Write", "TransactionalId", transactional_id):
                return Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            return None
        if self.authorize_cluster(context, "IdempotentWrite") or \
                self.authorize_by_resource_type(context, "Write", "Topic"):
            return None
        return Errors.CLUSTER_AUTHORIZATION_FAILED

    def cluster_operations(self, context, requested: bool) -> set[int] | None:
        """``cluster_authorized_operations``: not requested -> Kafka's marker; without DESCRIBE on the cluster
        none."""
        if not requested:
            return OPERATIONS_NOT_REQUESTED
        if not self.authorize_cluster(context, "Describe"):
            return set()
        return self.authorized_operations(context, "Cluster", CLUSTER_NAME)

    def topic_operations(self, context, requested: bool, topic: str) -> set[int] | None:
        return self.authorized_operations(context, "Topic", topic) if requested else OPERATIONS_NOT_REQUESTED
