"""Authorization on every API (issue #16): one SASL cluster with ``AclAuthorizer`` and
``allow.everyone.if.no.acl.found=false``, probed by four principals per API -- the super user, a user holding
exactly the ACLs Kafka's table asks for (``server/auth_helper.API_ACL_TABLE``), an authenticated user without
ACLs, and an anonymous connection -- with Kafka's expected error codes; then the same rules through
kafka-python's and confluent-kafka's clients, and ``kafkatier acls`` end to end.

The raw requests are kafka-python's protocol classes over a SASL connection authenticated with kafka-python's
own SASL mechanisms.  ``MECHANISMS`` parametrizes the matrix and the client tests: PLAIN and SCRAM-SHA-256
(:func:`grant` stores each user's salted SCRAM credentials, which PLAIN logins are checked against too).
"""
from __future__ import annotations

import time
import uuid

import pytest
from kafka.net.sasl import get_sasl_mechanism
from kafka.record.memory_records import MemoryRecordsBuilder

from kafkatier.protocol import codec
from kafkatier.protocol.build import build
from kafkatier.server.broker_client import BrokerClient, BrokerConnectionError
from kafkatier.waiting import wait_for




def request(api_key: int):
    """A builder of requests of ``api_key`` from snake_case fields (nested dicts), built per version on send."""
    return lambda **fields: (api_key, fields)


# Request builders by API key (kafka-python's generated messages, as the broker's codec registers them).
ProduceRequest = request(0)
FetchRequest = request(1)
ListOffsetsRequest = request(2)
MetadataRequest = request(3)
OffsetCommitRequest = request(8)
OffsetFetchRequest = request(9)
FindCoordinatorRequest = request(10)
JoinGroupRequest = request(11)
HeartbeatRequest = request(12)
LeaveGroupRequest = request(13)
SyncGroupRequest = request(14)
DescribeGroupsRequest = request(15)
ListGroupsRequest = request(16)
SaslHandshakeRequest = request(17)
CreateTopicsRequest = request(19)
DeleteTopicsRequest = request(20)
DeleteRecordsRequest = request(21)
InitProducerIdRequest = request(22)
DescribeAclsRequest = request(29)
CreateAclsRequest = request(30)
DeleteAclsRequest = request(31)
DescribeConfigsRequest = request(32)
AlterConfigsRequest = request(33)
AlterReplicaLogDirsRequest = request(34)
DescribeLogDirsRequest = request(35)
SaslAuthenticateRequest = request(36)
CreatePartitionsRequest = request(37)
DeleteGroupsRequest = request(42)
IncrementalAlterConfigsRequest = request(44)
OffsetDeleteRequest = request(47)
DescribeClusterRequest = request(60)
AddPartitionsToTxnRequest = request(24)
AddOffsetsToTxnRequest = request(25)
EndTxnRequest = request(26)
WriteTxnMarkersRequest = request(27)
TxnOffsetCommitRequest = request(28)
DescribeProducersRequest = request(61)
DescribeTransactionsRequest = request(65)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

MECHANISMS = ["PLAIN", "SCRAM-SHA-256"]
TOPIC, GROUP = "authz-t", "authz-g"
PASSWORD = "pw-secret"
CLUSTER = ("Cluster", "kafka-cluster")
OK, TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_ID_DENIED = 0, 29, 30, 31, 53
UNKNOWN_TXN_ID = 49        # INVALID_PRODUCER_ID_MAPPING: the id exists nowhere
SUPER = "admin"


def records(n: int = 3) -> bytes:
    b = MemoryRecordsBuilder(2, 0, 1 << 16)
    now = int(time.time() * 1000)
    for i in range(n):
        b.append(now + i, None, b"v%d" % i)
    b.close()
    return bytes(b.buffer())


class Conn:
    """One connection; ``user`` None stays anonymous (no SASL)."""

    def __init__(self, cluster, user: str | None, mechanism: str = "PLAIN"):
        host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
        self.client = BrokerClient(host, int(port), client_id=f"authz-{user}", timeout_s=20)
        if user is not None:
            sasl = get_sasl_mechanism(mechanism)(sasl_mechanism=mechanism, sasl_plain_username=user,
                                                 sasl_plain_password=PASSWORD)
            assert self.send(SaslHandshakeRequest(mechanism=mechanism), 1).error_code == 0
            while not sasl.is_done():
                auth = self.send(SaslAuthenticateRequest(auth_bytes=sasl.auth_bytes()), 2)
                assert auth.error_code == 0, auth.error_message
                sasl.receive(auth.auth_bytes)

    def send(self, req, version: int):
        api_key, fields = req
        return self.client.send(build(codec.REGISTRY[api_key][0], version, fields), codec.response_class(api_key),
                                version)

    def close(self) -> None:
        self.client.close()


@pytest.fixture(scope="module")
def authz_cluster(module_cluster_factory):
    users = " ".join(f'user_{u}="{PASSWORD}"' for u in (SUPER, "bob"))
    cluster = module_cluster_factory(brokers=1, log_dirs=1, overrides={
        "listener.security.protocol": "SASL_PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": f"User:{SUPER}",
        "allow.everyone.if.no.acl.found": "false", "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"})
    from kafkatier.server.sasl import set_user_password
    for user in (SUPER, "bob"):  # SCRAM credentials for the JAAS (PLAIN) users
        set_user_password(cluster.zk, user, PASSWORD)
    admin = Conn(cluster, SUPER)
    try:
        r = admin.send(CreateTopicsRequest(topics=[{"name": TOPIC, "num_partitions": 1, "replication_factor": 1,
                                                    "assignments": [], "configs": []}], timeout_ms=20000), 5)
        assert r.topics[0].error_code == 0
        r = admin.send(ProduceRequest(acks=1, timeout_ms=10000, topic_data=[
            {"name": TOPIC, "partition_data": [{"index": 0, "records": records(5)}]}]), 7)
        assert r.responses[0].partition_responses[0].error_code == 0
        wait_for(lambda: admin.send(FindCoordinatorRequest(key=GROUP, key_type=0), 3).error_code == 0, 60,
                 interval=0.2, message="group coordinator")
        r = admin.send(OffsetCommitRequest(group_id=GROUP, generation_id_or_member_epoch=-1, member_id="",
                                           topics=[{"name": TOPIC, "partitions": [
                                               {"partition_index": 0, "committed_offset": 1,
                                                "committed_metadata": ""}]}]), 7)
        assert r.topics[0].partitions[0].error_code == 0
        # __transaction_state exists and is loaded (a transactional id's coordinator answers).
        wait_for(lambda: admin.send(FindCoordinatorRequest(key="tx-probe", key_type=1), 3).error_code == 0, 60,
                 interval=0.2, message="transaction coordinator")
        wait_for(lambda: admin.send(InitProducerIdRequest(transactional_id="tx-probe", transaction_timeout_ms=60000,
                                                          producer_id=-1, producer_epoch=-1), 3).error_code == 0,
                 60, interval=0.2, message="transaction state loaded")
    finally:
        admin.close()
    return cluster


def grant(cluster, user: str, acls) -> None:
    """ACLs for ``user`` through the broker's CreateAcls (as the super user); its cache has them at once."""
    from kafkatier.server.acl_apis import PATTERN_TYPE_CODES, RESOURCE_TYPE_CODES
    from kafkatier.server.auth_helper import OPERATION_CODES
    from kafkatier.server.sasl import set_user_password

    set_user_password(cluster.zk, user, PASSWORD)
    admin = Conn(cluster, SUPER)
    try:
        r = admin.send(CreateAclsRequest(creations=[
            {"resource_type": RESOURCE_TYPE_CODES[rtype], "resource_name": name,
             "resource_pattern_type": PATTERN_TYPE_CODES[pattern], "principal": f"User:{user}", "host": "*",
             "operation": OPERATION_CODES[op], "permission_type": 3}
            for rtype, name, op, pattern in acls]), 2)
        assert [c.error_code for c in r.results] == [0] * len(acls), r
    finally:
        admin.close()


def lit(rtype: str, name: str, op: str, pattern: str = "LITERAL"):
    return (rtype, name, op, pattern)


def first_partition_error(r) -> int:
    return r.responses[0].partitions[0].error_code


# (name, the ACLs Kafka's table asks for, version, request builder (-> request), error extractor, allowed codes,
#  denied code).  Each case gets its own user holding exactly these ACLs.
def cases():
    uid = uuid.uuid4().hex[:6]
    return [
        ("Produce", [lit("Topic", TOPIC, "Write")], 7, lambda u: ProduceRequest(acks=1, timeout_ms=5000, topic_data=[
            {"name": TOPIC, "partition_data": [{"index": 0, "records": records()}]}]),
         lambda r: r.responses[0].partition_responses[0].error_code, {OK}, TOPIC_DENIED),
        ("Fetch", [lit("Topic", TOPIC, "Read")], 11, lambda u: FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, topics=[{"topic": TOPIC, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                                         "partition_max_bytes": 1 << 20}]}],
            forgotten_topics_data=[], rack_id=""), first_partition_error, {OK}, TOPIC_DENIED),
        ("ListOffsets", [lit("Topic", TOPIC, "Describe")], 5, lambda u: ListOffsetsRequest(
            replica_id=-1, isolation_level=0, topics=[{"name": TOPIC, "partitions": [
                {"partition_index": 0, "timestamp": -1}]}]), lambda r: r.topics[0].partitions[0].error_code,
         {OK}, TOPIC_DENIED),
        ("Metadata", [lit("Topic", TOPIC, "Describe")], 9, lambda u: MetadataRequest(
            topics=[{"name": TOPIC}], allow_auto_topic_creation=False), lambda r: r.topics[0].error_code,
         {OK}, TOPIC_DENIED),
        ("Metadata auto-create", [lit("Topic", f"auto-{uid}", "Create", "PREFIXED"),
                                  lit("Topic", f"auto-{uid}", "Describe", "PREFIXED")], 9, lambda u: MetadataRequest(
            topics=[{"name": f"auto-{uid}-{u}"}], allow_auto_topic_creation=True), lambda r: r.topics[0].error_code,
         {OK, 5}, TOPIC_DENIED),
        ("CreateTopics", [lit("Topic", f"ct-{uid}", "Create", "PREFIXED")], 5, lambda u: CreateTopicsRequest(
            topics=[{"name": f"ct-{uid}-{u}", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                     "configs": []}], timeout_ms=20000, validate_only=True), lambda r: r.topics[0].error_code,
         {OK}, TOPIC_DENIED),
        ("DeleteTopics", [lit("Topic", f"nx-{uid}", "Delete")], 4, lambda u: DeleteTopicsRequest(
            topic_names=[f"nx-{uid}"], timeout_ms=5000), lambda r: r.responses[0].error_code, {3}, TOPIC_DENIED),
        ("CreatePartitions", [lit("Topic", TOPIC, "Alter")], 1, lambda u: CreatePartitionsRequest(
            topics=[{"name": TOPIC, "count": 1, "assignments": None}], timeout_ms=5000, validate_only=True),
         lambda r: r.results[0].error_code, {37}, TOPIC_DENIED),  # INVALID_PARTITIONS: already has 1
        ("DeleteRecords", [lit("Topic", TOPIC, "Delete")], 1, lambda u: DeleteRecordsRequest(
            topics=[{"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 0}]}], timeout_ms=5000),
         lambda r: r.topics[0].partitions[0].error_code, {OK}, TOPIC_DENIED),
        ("InitProducerId", [lit(*CLUSTER, "IdempotentWrite")], 3, lambda u: InitProducerIdRequest(
            transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1),
         lambda r: r.error_code, {OK}, CLUSTER_DENIED),
        ("InitProducerId (WRITE on a topic)", [lit("Topic", f"w-{uid}", "Write", "PREFIXED")], 3,
         lambda u: InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
                                         producer_epoch=-1), lambda r: r.error_code, {OK}, CLUSTER_DENIED),
        ("DescribeConfigs topic", [lit("Topic", TOPIC, "DescribeConfigs")], 3, lambda u: DescribeConfigsRequest(
            resources=[{"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None}],
            include_synonyms=False), lambda r: r.results[0].error_code, {OK}, TOPIC_DENIED),
        ("DescribeConfigs broker", [lit(*CLUSTER, "DescribeConfigs")], 3, lambda u: DescribeConfigsRequest(
            resources=[{"resource_type": 4, "resource_name": "", "configuration_keys": None}],
            include_synonyms=False), lambda r: r.results[0].error_code, {OK}, CLUSTER_DENIED),
        ("AlterConfigs topic", [lit("Topic", TOPIC, "AlterConfigs")], 1, lambda u: AlterConfigsRequest(
            resources=[{"resource_type": 2, "resource_name": TOPIC, "configs": [
                {"name": "retention.ms", "value": "600000"}]}], validate_only=True),
         lambda r: r.responses[0].error_code, {OK}, TOPIC_DENIED),
        ("IncrementalAlterConfigs broker", [lit(*CLUSTER, "AlterConfigs")], 1,
         lambda u: IncrementalAlterConfigsRequest(resources=[{"resource_type": 4, "resource_name": "", "configs": [
             {"name": "intra.broker.throttled.rate", "config_operation": 0, "value": "1000000"}]}], validate_only=True),
         lambda r: r.responses[0].error_code, {OK}, CLUSTER_DENIED),
        ("FindCoordinator", [lit("Group", GROUP, "Describe")], 3, lambda u: FindCoordinatorRequest(
            key=GROUP, key_type=0), lambda r: r.error_code, {OK}, GROUP_DENIED),
        ("JoinGroup", [lit("Group", GROUP, "Read")], 5, lambda u: JoinGroupRequest(
            group_id=GROUP, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
            group_instance_id=None, protocol_type="consumer", protocols=[{"name": "range", "metadata": b""}]),
         lambda r: r.error_code, {79}, GROUP_DENIED),  # MEMBER_ID_REQUIRED: the first join of a v4+ member
        ("Heartbeat", [lit("Group", GROUP, "Read")], 3, lambda u: HeartbeatRequest(
            group_id=GROUP, generation_id=1, member_id="m", group_instance_id=None), lambda r: r.error_code,
         {25}, GROUP_DENIED),
        ("SyncGroup", [lit("Group", GROUP, "Read")], 3, lambda u: SyncGroupRequest(
            group_id=GROUP, generation_id=1, member_id="m", group_instance_id=None, assignments=[]),
         lambda r: r.error_code, {25}, GROUP_DENIED),
        ("LeaveGroup", [lit("Group", GROUP, "Read")], 3, lambda u: LeaveGroupRequest(
            group_id=GROUP, members=[{"member_id": "m", "group_instance_id": None}]),
         lambda r: r.error_code or r.members[0].error_code, {25}, GROUP_DENIED),
        ("OffsetCommit", [lit("Group", GROUP, "Read"), lit("Topic", TOPIC, "Read")], 7, lambda u: OffsetCommitRequest(
            group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None, topics=[
                {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                "committed_metadata": ""}]}]),
         lambda r: r.topics[0].partitions[0].error_code, {OK}, GROUP_DENIED),
        ("OffsetCommit without the topic", [lit("Group", GROUP, "Read")], 7, lambda u: OffsetCommitRequest(
            group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None, topics=[
                {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                "committed_metadata": ""}]}]),
         lambda r: r.topics[0].partitions[0].error_code, {TOPIC_DENIED}, GROUP_DENIED),
        ("OffsetFetch", [lit("Group", GROUP, "Describe"), lit("Topic", TOPIC, "Describe")], 7,
         lambda u: OffsetFetchRequest(group_id=GROUP, topics=[{"name": TOPIC, "partition_indexes": [0]}],
                                      require_stable=False),
         lambda r: r.error_code or r.topics[0].partitions[0].error_code, {OK}, GROUP_DENIED),
        ("DescribeGroups", [lit("Group", GROUP, "Describe")], 3, lambda u: DescribeGroupsRequest(
            groups=[GROUP], include_authorized_operations=False), lambda r: r.groups[0].error_code,
         {OK}, GROUP_DENIED),
        ("DeleteGroups", [lit("Group", f"nx-{uid}", "Delete")], 2, lambda u: DeleteGroupsRequest(
            groups_names=[f"nx-{uid}"]), lambda r: r.results[0].error_code, {69}, GROUP_DENIED),
        ("OffsetDelete", [lit("Group", GROUP, "Delete"), lit("Topic", TOPIC, "Read")], 0,
         lambda u: OffsetDeleteRequest(group_id=GROUP, topics=[{"name": TOPIC, "partitions": [
             {"partition_index": 0}]}]), lambda r: r.error_code, {OK}, GROUP_DENIED),
        ("DescribeAcls", [lit(*CLUSTER, "Describe")], 2, lambda u: DescribeAclsRequest(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
            host_filter=None, operation=1, permission_type=1), lambda r: r.error_code, {OK}, CLUSTER_DENIED),
        ("CreateAcls", [lit(*CLUSTER, "Alter")], 2, lambda u: CreateAclsRequest(creations=[
            {"resource_type": 2, "resource_name": f"x-{u}", "resource_pattern_type": 3, "principal": "User:nobody",
             "host": "*", "operation": 3, "permission_type": 3}]), lambda r: r.results[0].error_code,
         {OK}, CLUSTER_DENIED),
        ("DeleteAcls", [lit(*CLUSTER, "Alter")], 2, lambda u: DeleteAclsRequest(filters=[
            {"resource_type_filter": 2, "resource_name_filter": f"x-{u}", "pattern_type_filter": 3,
             "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}]),
         lambda r: r.filter_results[0].error_code, {OK}, CLUSTER_DENIED),
        ("DescribeLogDirs", [lit(*CLUSTER, "Describe")], 3, lambda u: DescribeLogDirsRequest(topics=None),
         lambda r: r.error_code, {OK}, CLUSTER_DENIED),
        ("Produce with a transactional id", [lit("TransactionalId", f"tx-{uid}", "Write", "PREFIXED"),
                                             lit("Topic", TOPIC, "Write")], 7,
         lambda u: ProduceRequest(transactional_id=f"tx-{uid}-{u}", acks=1, timeout_ms=5000, topic_data=[
             {"name": TOPIC, "partition_data": [{"index": 0, "records": records()}]}]),
         lambda r: r.responses[0].partition_responses[0].error_code, {OK}, TXN_ID_DENIED),
        ("InitProducerId transactional", [lit("TransactionalId", f"tx-{uid}", "Write", "PREFIXED")], 3,
         lambda u: InitProducerIdRequest(transactional_id=f"tx-{uid}-{u}", transaction_timeout_ms=60000,
                                         producer_id=-1, producer_epoch=-1), lambda r: r.error_code, {OK},
         TXN_ID_DENIED),
        ("FindCoordinator transactional", [lit("TransactionalId", f"tx-{uid}", "Describe", "PREFIXED")], 3,
         lambda u: FindCoordinatorRequest(key=f"tx-{uid}-{u}", key_type=1), lambda r: r.error_code, {OK},
         TXN_ID_DENIED),
        ("AddPartitionsToTxn", [lit("TransactionalId", f"tx-{uid}", "Write", "PREFIXED"),
                                lit("Topic", TOPIC, "Write")], 3,
         lambda u: AddPartitionsToTxnRequest(v3_and_below_transactional_id=f"tx-{uid}-{u}",
                                             v3_and_below_producer_id=987654321, v3_and_below_producer_epoch=0,
                                             v3_and_below_topics=[{"name": TOPIC, "partitions": [0]}]),
         lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
         {UNKNOWN_TXN_ID}, TXN_ID_DENIED),
        ("AddPartitionsToTxn without the topic", [lit("TransactionalId", f"tx-{uid}", "Write", "PREFIXED")], 3,
         lambda u: AddPartitionsToTxnRequest(v3_and_below_transactional_id=f"tx-{uid}-{u}",
                                             v3_and_below_producer_id=987654321, v3_and_below_producer_epoch=0,
                                             v3_and_below_topics=[{"name": TOPIC, "partitions": [0]}]),
         lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
         {TOPIC_DENIED, UNKNOWN_TXN_ID}, TXN_ID_DENIED),   # the user: TOPIC_DENIED; the super user: 49
        ("AddOffsetsToTxn", [lit("TransactionalId", f"tx-{uid}", "Write", "PREFIXED"), lit("Group", GROUP, "Read")],
         3, lambda u: AddOffsetsToTxnRequest(transactional_id=f"tx-{uid}-{u}", producer_id=987654321, producer_epoch=0,
                                             group_id=GROUP), lambda r: r.error_code, {UNKNOWN_TXN_ID},
         TXN_ID_DENIED),
        ("EndTxn", [lit("TransactionalId", f"tx-{uid}", "Write", "PREFIXED")], 3,
         lambda u: EndTxnRequest(transactional_id=f"tx-{uid}-{u}", producer_id=987654321, producer_epoch=0, committed=True),
         lambda r: r.error_code, {UNKNOWN_TXN_ID}, TXN_ID_DENIED),
        ("TxnOffsetCommit", [lit("TransactionalId", f"tx-{uid}", "Write", "PREFIXED"), lit("Group", GROUP, "Read"),
                             lit("Topic", TOPIC, "Read")], 3,
         lambda u: TxnOffsetCommitRequest(transactional_id=f"tx-{uid}-{u}", group_id=GROUP, producer_id=987654321,
                                          producer_epoch=0, generation_id=-1, member_id="", group_instance_id=None,
                                          topics=[{"name": TOPIC, "partitions": [
                                              {"partition_index": 0, "committed_offset": 1,
                                               "committed_leader_epoch": -1, "committed_metadata": ""}]}]),
         # KIP-890: the producer is verified with its coordinator first: none yet (no __transaction_state:
         # COORDINATOR_NOT_AVAILABLE, 15) or one that knows no such id.
         lambda r: r.topics[0].partitions[0].error_code, {UNKNOWN_TXN_ID, 15}, TXN_ID_DENIED),
        ("DescribeTransactions", [lit("TransactionalId", f"tx-{uid}", "Describe", "PREFIXED")], 0,
         lambda u: DescribeTransactionsRequest(transactional_ids=[f"tx-{uid}-{u}"]),
         lambda r: r.transaction_states[0].error_code, {105}, TXN_ID_DENIED),     # TRANSACTIONAL_ID_NOT_FOUND
        ("DescribeProducers", [lit("Topic", TOPIC, "Read")], 0,
         lambda u: DescribeProducersRequest(topics=[{"name": TOPIC, "partition_indexes": [0]}]),
         lambda r: r.topics[0].partitions[0].error_code, {OK}, TOPIC_DENIED),
        ("WriteTxnMarkers", [lit(*CLUSTER, "ClusterAction")], 1, lambda u: WriteTxnMarkersRequest(markers=[
            {"producer_id": 987654, "producer_epoch": 0, "transaction_result": False, "coordinator_epoch": 0,
             "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]),
         lambda r: r.markers[0].topics[0].partitions[0].error_code, {OK}, CLUSTER_DENIED),
        ("AlterReplicaLogDirs", [lit(*CLUSTER, "Alter")], 1, lambda u: AlterReplicaLogDirsRequest(dirs=[
            {"path": "/nonexistent-dir", "topics": [{"name": TOPIC, "partitions": [0]}]}]),
         lambda r: r.results[0].partitions[0].error_code, {57}, CLUSTER_DENIED),  # LOG_DIR_NOT_FOUND
    ]


CASES = cases()


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_authorization_matrix(authz_cluster, case, mechanism):
    """Super user and right-ACL user pass the check; an authenticated user without ACLs gets Kafka's error; an
    anonymous connection is closed before any of these APIs (SASL is required)."""
    name, acls, version, build_req, error_of, allowed, denied = case
    user = "u" + uuid.uuid4().hex[:8]
    grant(authz_cluster, user, acls)
    outcome = {}
    for who in (SUPER, user, "bob"):
        conn = Conn(authz_cluster, who, mechanism)
        try:
            outcome[who] = error_of(conn.send(build_req(who), version))
        finally:
            conn.close()
    anonymous = Conn(authz_cluster, None)
    try:
        with pytest.raises(BrokerConnectionError):
            anonymous.send(build_req("anon"), version)
    finally:
        anonymous.close()
    assert outcome[user] in allowed, (name, outcome)
    assert outcome[SUPER] in allowed | {OK}, (name, outcome)
    assert outcome["bob"] == denied, (name, outcome)


def fetch_request(replica_id: int):
    return FetchRequest(replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[{"topic": TOPIC, "partitions": [
                            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
                        forgotten_topics_data=[], rack_id="")


def test_fetch_claiming_a_replica_id_needs_cluster_action(authz_cluster):
    """A Fetch with replica_id=2 from a client without CLUSTER_ACTION reads nothing: an unauthenticated one has
    its connection closed (a request other than the SASL handshake before authentication, as Kafka), an
    authenticated one -- even one allowed to READ the topic -- gets TOPIC_AUTHORIZATION_FAILED."""
    reader = "r" + uuid.uuid4().hex[:8]
    grant(authz_cluster, reader, [lit("Topic", TOPIC, "Read")])
    anonymous = Conn(authz_cluster, None)
    try:
        with pytest.raises(BrokerConnectionError):
            anonymous.send(fetch_request(2), 11)
    finally:
        anonymous.close()
    for who in ("bob", reader):
        conn = Conn(authz_cluster, who)
        try:
            part = conn.send(fetch_request(2), 11).responses[0].partitions[0]
        finally:
            conn.close()
        assert (part.error_code, bytes(part.records or b"")) == (TOPIC_DENIED, b""), who
    conn = Conn(authz_cluster, SUPER)  # CLUSTER_ACTION (a super user): the records
    try:
        part = conn.send(fetch_request(2), 11).responses[0].partitions[0]
        assert part.error_code == 0 and part.records
    finally:
        conn.close()


def test_metadata_hides_topics_and_creates_only_with_create(authz_cluster):
    describer = "d" + uuid.uuid4().hex[:8]
    grant(authz_cluster, describer, [lit("Topic", TOPIC, "Describe")])
    shown = {}
    for who in (SUPER, describer, "bob"):
        conn = Conn(authz_cluster, who)
        try:
            shown[who] = {t.name: t.error_code for t in conn.send(MetadataRequest(topics=None), 9).topics}
        finally:
            conn.close()
    assert shown[SUPER][TOPIC] == 0 and shown[describer] == {TOPIC: 0} and shown["bob"] == {}
    missing = "nope-" + uuid.uuid4().hex[:6]
    conn = Conn(authz_cluster, describer)
    try:
        r = conn.send(MetadataRequest(topics=[{"name": TOPIC}], include_topic_authorized_operations=True), 9)
        assert r.topics[0].authorized_operations == {8}  # DESCRIBE only
        r = conn.send(MetadataRequest(topics=[{"name": missing}], allow_auto_topic_creation=True), 9)
        assert r.topics[0].error_code == TOPIC_DENIED  # not even DESCRIBE on it: nothing is disclosed
    finally:
        conn.close()
    assert not authz_cluster.zk.exists(f"/brokers/topics/{missing}")
    conn = Conn(authz_cluster, SUPER)
    try:
        ops = conn.send(DescribeClusterRequest(include_cluster_authorized_operations=True), 0)
        assert ops.authorized_operations == {5, 7, 8, 9, 10, 11, 12}  # every cluster operation
    finally:
        conn.close()
    conn = Conn(authz_cluster, "bob")
    try:
        assert conn.send(DescribeClusterRequest(include_cluster_authorized_operations=True), 0
                         ).authorized_operations == set()
        assert conn.send(ListGroupsRequest(states_filter=[]), 3).groups == []
    finally:
        conn.close()
    conn = Conn(authz_cluster, SUPER)
    try:
        assert GROUP in [g.group_id for g in conn.send(ListGroupsRequest(states_filter=[]), 3).groups]
        r = conn.send(DescribeGroupsRequest(groups=[GROUP], include_authorized_operations=True), 3)
        assert r.groups[0].authorized_operations == {3, 6, 8}  # READ, DELETE, DESCRIBE
    finally:
        conn.close()


def sasl_kwargs(user: str, mechanism: str) -> dict:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism, "sasl_plain_username": user,
            "sasl_plain_password": PASSWORD}


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_clients(authz_cluster, mechanism):
    """kafka-python: a producer / consumer / admin without ACLs get Kafka's authorization errors; with
    ``--producer`` / ``--consumer``-style ACLs they work."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.errors import TopicAuthorizationFailedError

    user = "kp" + uuid.uuid4().hex[:6]
    topic = "kp-" + uuid.uuid4().hex[:6]
    grant(authz_cluster, user, [lit("Topic", topic, "Write"), lit("Topic", topic, "Describe"),
                                lit("Topic", topic, "Create"), lit("Topic", topic, "Read"),
                                lit("Group", f"g-{topic}", "Read")])
    bob = KafkaAdminClient(bootstrap_servers=authz_cluster.bootstrap_servers, request_timeout_ms=10000,
                           **sasl_kwargs("bob", mechanism))
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            bob.create_topics([NewTopic(topic, 1, 1)])
        assert topic not in bob.list_topics()
    finally:
        bob.close()
    admin = KafkaAdminClient(bootstrap_servers=authz_cluster.bootstrap_servers, request_timeout_ms=10000,
                             **sasl_kwargs(user, mechanism))
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=authz_cluster.bootstrap_servers, request_timeout_ms=10000,
                             max_block_ms=10000, **sasl_kwargs(user, mechanism))
    try:
        producer.send(topic, b"hello").get(timeout=20)
    finally:
        producer.close(timeout=5)
    with pytest.raises(TopicAuthorizationFailedError):
        p = KafkaProducer(bootstrap_servers=authz_cluster.bootstrap_servers, request_timeout_ms=10000,
                          max_block_ms=10000, **sasl_kwargs("bob", mechanism))
        try:
            p.send(topic, b"no").get(timeout=20)
        finally:
            p.close(timeout=5)
    consumer = KafkaConsumer(bootstrap_servers=authz_cluster.bootstrap_servers, group_id=f"g-{topic}",
                             auto_offset_reset="earliest", consumer_timeout_ms=15000, **sasl_kwargs(user, mechanism))
    try:
        consumer.assign([TopicPartition(topic, 0)])
        assert [m.value for m in consumer][:1] == [b"hello"]
        consumer.commit()
    finally:
        consumer.close()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_clients(authz_cluster, mechanism):
    """confluent-kafka (librdkafka): TOPIC_AUTHORIZATION_FAILED for a producer without WRITE, a topic hidden
    from a user without DESCRIBE, and a consumer with READ on topic and group reading."""
    from confluent_kafka import Consumer, KafkaError, Producer
    from confluent_kafka.admin import AdminClient

    def conf(user: str) -> dict:
        return {"bootstrap.servers": authz_cluster.bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": PASSWORD}
    user = "ck" + uuid.uuid4().hex[:6]
    group = f"g-{user}"
    grant(authz_cluster, user, [lit("Topic", TOPIC, "Read"), lit("Group", group, "Read")])
    assert TOPIC not in AdminClient(conf("bob")).list_topics(timeout=10).topics
    assert TOPIC in AdminClient(conf(user)).list_topics(timeout=10).topics
    errors = []
    p = Producer({**conf("bob"), "message.timeout.ms": 10000})
    try:
        p.produce(TOPIC, b"x", on_delivery=lambda err, msg: errors.append(err))
        p.flush(20)
    finally:
        p.close()
    assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    c = Consumer({**conf(user), "group.id": group, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([TOPIC])
        got = None
        deadline = time.monotonic() + 30
        while got is None and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got = m.value()
        assert got is not None
    finally:
        c.close()


def test_acls_cli(authz_cluster, kafkatier_cli, tmp_path):
    """``kafkatier acls`` end to end: add (kafka-acls' output), list, --producer/--consumer, remove --force;
    bad input exits 2 with one line; a refused request exits 1 with one line."""
    def props(user: str):
        path = tmp_path / f"{user}.properties"
        path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=org.apache."
                        f"kafka.common.security.plain.PlainLoginModule required username=\"{user}\" "
                        f"password=\"{PASSWORD}\";\n")
        return str(path)

    def acls(*args: str, user: str = SUPER):
        return kafkatier_cli.run("acls", "--bootstrap-server", authz_cluster.bootstrap_servers,
                                 "--command-config", props(user), *args)
    topic = "cli-" + uuid.uuid4().hex[:6]
    rp = f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)"
    out = acls("--add", "--allow-principal", "User:carol", "--operation", "Read", "--operation", "Describe",
               "--topic", topic)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        f"Adding ACLs for resource `{rp}`: \n \t(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)"
        "\n\t(principal=User:carol, host=*, operation=DESCRIBE, permissionType=ALLOW) \n\n"
        f"Current ACLs for resource `{rp}`: \n \t(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)"
        "\n\t(principal=User:carol, host=*, operation=DESCRIBE, permissionType=ALLOW) \n\n")
    out = acls("--add", "--producer", "--consumer", "--allow-principal", "User:dave", "--topic", f"{topic}-",
               "--group", "cg", "--resource-pattern-type", "prefixed", "--idempotent")
    assert out.returncode == 0, out.stderr
    listed = acls("--list", "--principal", "User:dave").stdout
    assert f"ResourcePattern(resourceType=TOPIC, name={topic}-, patternType=PREFIXED)" in listed
    for op in ("WRITE", "DESCRIBE", "CREATE", "READ"):
        assert f"(principal=User:dave, host=*, operation={op}, permissionType=ALLOW)" in listed
    assert "ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, patternType=LITERAL)" in listed
    assert "operation=IDEMPOTENT_WRITE" in listed
    assert "User:carol" not in listed
    out = acls("--list", "--topic", f"{topic}-x", "--resource-pattern-type", "match")
    assert f"name={topic}-, patternType=PREFIXED" in out.stdout and "User:carol" not in out.stdout
    out = acls("--remove", "--force", "--allow-principal", "User:carol", "--operation", "Read", "--topic", topic)
    assert out.returncode == 0, out.stderr
    assert "operation=READ" not in out.stdout.split("Current ACLs")[-1]
    assert "operation=DESCRIBE" in out.stdout.split("Current ACLs")[-1]
    out = acls("--remove", "--force", "--topic", topic)
    assert out.returncode == 0 and "Current ACLs" not in out.stdout.split("resource filter")[-1]
    for bad in (["--add", "--topic", topic, "--allow-principal", "carol"], ["--list", "--add"],
                ["--add", "--topic", topic, "--allow-principal", "User:x", "--resource-pattern-type", "match"],
                ["--add", "--group", "g", "--allow-principal", "User:x", "--operation", "Write"],
                ["--add", "--consumer", "--topic", topic, "--allow-principal", "User:x"]):
        out = acls(*bad)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, (bad, out.stderr)
    out = acls("--add", "--allow-principal", "User:x", "--topic", topic, user="bob")
    assert out.returncode == 1 and out.stderr.strip().splitlines() == [
        "kafkatier acls: CLUSTER_AUTHORIZATION_FAILED: Cluster authorization failed."], out.stderr
