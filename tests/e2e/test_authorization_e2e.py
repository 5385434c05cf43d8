"""Authorization on every API (issue #16): one SASL cluster with ``AclAuthorizer`` and
``allow.everyone.if.no.acl.found=false``, probed by four principals per API -- the super user, a user holding
exactly the ACLs Kafka's table asks for (``server/auth_helper.API_ACL_TABLE``), an authenticated user without
ACLs, and an anonymous connection -- with Kafka's expected error codes; then the same rules through
kafka-python's and confluent-kafka's clients, and ``kafkatier acls`` end to end.

The raw requests are kafka-python's protocol classes over a SASL/PLAIN connection.  ``MECHANISMS`` is the
parameter for the client-level tests: add ``"SCRAM-SHA-256"`` once SCRAM is on main (branch ``harden``).
"""
from __future__ import annotations

import time
import uuid

import pytest
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

pytestmark = pytest.mark.timeout(240)

MECHANISMS = ["PLAIN"]  # + "SCRAM-SHA-256" once SCRAM lands (branch harden)
TOPIC, GROUP = "authz-t", "authz-g"
PASSWORD = "pw-secret"
CLUSTER = ("Cluster", "kafka-cluster")
OK, TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED = 0, 29, 30, 31
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

    def __init__(self, cluster, user: str | None):
        host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
        self.client = BrokerClient(host, int(port), client_id=f"authz-{user}", timeout_s=20)
        if user is not None:
            hs = self.send(SaslHandshakeRequest(mechanism="PLAIN"), 1)
            assert hs.error_code == 0
            auth = self.send(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{PASSWORD}".encode()), 2)
            assert auth.error_code == 0, auth.error_message

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
        "listener.security.protocol": "SASL_PLAINTEXT",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": f"User:{SUPER}",
        "allow.everyone.if.no.acl.found": "false", "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"})
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
    tp = [{"name": TOPIC, "partitions": [0]}]
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
        ("AlterReplicaLogDirs", [lit(*CLUSTER, "Alter")], 1, lambda u: AlterReplicaLogDirsRequest(dirs=[
            {"path": "/nonexistent-dir", "topics": [{"name": TOPIC, "partitions": [0]}]}]),
         lambda r: r.results[0].partitions[0].error_code, {57}, CLUSTER_DENIED),  # LOG_DIR_NOT_FOUND
    ]


CASES = cases()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_authorization_matrix(authz_cluster, case):
    """Super user and right-ACL user pass the check; an authenticated user without ACLs gets Kafka's error; an
    anonymous connection is closed before any of these APIs (SASL is required)."""
    name, acls, version, build_req, error_of, allowed, denied = case
    user = "u" + uuid.uuid4().hex[:8]
    grant(authz_cluster, user, acls)
    outcome = {}
    for who in (SUPER, user, "bob"):
        conn = Conn(authz_cluster, who)
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
