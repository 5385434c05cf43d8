"""Security hardening as a user and an attacker see it (issue #16): SCRAM users made with ``kafkatier configs``
and used by kafka-python and confluent-kafka, replication over an authenticated inter-broker login, wrong
passwords answered slowly and disconnected, no way in with a replica id, pre-authentication frames capped,
secrets never echoed."""
from __future__ import annotations

import json
import socket
import struct
import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from kafkatier.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

DELAY_MS = 300
PLAIN_ADMIN = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": "admin",
               "sasl_plain_password": "admin-secret"}
OVERRIDES = {
    "listener.security.protocol": "SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config":
        'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-secret";',
    "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
        'password="broker-secret";',
    "connection.failed.authentication.delay.ms": str(DELAY_MS),
}


@pytest.fixture(scope="module")
def secure(module_cluster_factory):
    return module_cluster_factory(brokers=2, log_dirs=1, overrides=OVERRIDES)


@pytest.fixture
def admin_props(tmp_path):
    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
                     "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" "
                     "password=\"admin-secret\";\n")
    return str(props)


def port_of(cluster) -> tuple[str, int]:
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    return host, int(port)


def frame(request, version: int, correlation_id: int = 1) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="attacker")
    return request.encode(version=version, header=True, framed=True)


def read_frame(sock: socket.socket) -> bytes | None:
    """One response frame, or None when the broker closed the connection."""
    def exact(n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            try:
                chunk = sock.recv(n - len(buf))
            except ConnectionResetError:  # closed with unread bytes
                return None
            if not chunk:
                return None
            buf += chunk
        return buf
    size = exact(4)
    return None if size is None else exact(struct.unpack(">i", size)[0])


def users_cli(kafkatier_cli, cluster, props, *args):
    return kafkatier_cli.run("configs", "--bootstrap-server", cluster.bootstrap_servers, "--command-config", props,
                             "--entity-type", "users", *args)


def test_scram_users_replication_and_both_clients(secure, kafkatier_cli, admin_props):
    # The inter-broker user first (Kafka's order: brokers log in with it), then alice, through the CLI.
    for user, spec in (("broker", "SCRAM-SHA-512=[password=broker-secret]"),
                       ("alice", "SCRAM-SHA-256=[iterations=8192,password=alice-secret],"
                                 "SCRAM-SHA-512=[password=alice-secret]")):
        proc = users_cli(kafkatier_cli, secure, admin_props, "--entity-name", user, "--alter", "--add-config", spec)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == f"Completed updating config for user {user}."
    stored = json.loads(secure.zk.get("/config/users/alice")[0])["config"]
    assert sorted(stored) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert stored["SCRAM-SHA-256"].startswith("salt=") and stored["SCRAM-SHA-256"].endswith(",iterations=8192")
    assert "alice-secret" not in json.dumps(stored)
    proc = users_cli(kafkatier_cli, secure, admin_props, "--entity-name", "alice", "--describe")
    assert proc.stdout.strip() == ("SCRAM credential configs for user-principal 'alice' are "
                                   "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096"), proc.stderr
    # A bad credential request exits 2 without echoing the password.
    proc = users_cli(kafkatier_cli, secure, admin_props, "--entity-name", "alice", "--alter", "--add-config",
                     "SCRAM-SHA-256=[iterations=x,password=do-not-print]")
    assert proc.returncode == 2 and "do-not-print" not in proc.stderr + proc.stdout

    topic = f"scram-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=secure.bootstrap_servers, request_timeout_ms=30000, **PLAIN_ADMIN)
    try:
        admin.create_topics([NewTopic(topic, 1, 2)], timeout_ms=30000)
    finally:
        admin.close()

    def isr() -> list:
        return json.loads(secure.zk.get(f"/brokers/topics/{topic}/partitions/0/state")[0])["isr"]
    alice256 = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
                "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"}
    producer = KafkaProducer(bootstrap_servers=secure.bootstrap_servers, acks="all", **alice256)
    try:
        for i in range(20):
            producer.send(topic, value=b"%d" % i)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)
    # acks=all with RF 2: the follower fetched as User:broker over SCRAM-SHA-512.
    wait_for(lambda: len(isr()) == 2, 30, interval=0.1, message="follower in sync")

    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": secure.bootstrap_servers, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest", "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                         "sasl.password": "alice-secret", "enable.auto.commit": False})
    got = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < 20 and time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        consumer.close()
    assert got == [b"%d" % i for i in range(20)]

    # Removing a mechanism takes effect at the next login.
    proc = users_cli(kafkatier_cli, secure, admin_props, "--entity-name", "alice", "--alter",
                     "--delete-config", "SCRAM-SHA-512")
    assert proc.returncode == 0, proc.stderr
    from kafka.errors import KafkaError as ClientError
    with pytest.raises(ClientError):
        KafkaAdminClient(bootstrap_servers=secure.bootstrap_servers, request_timeout_ms=5000,
                         bootstrap_timeout_ms=3000, **{**alice256, "sasl_mechanism": "SCRAM-SHA-512"})
    c = KafkaConsumer(bootstrap_servers=secure.bootstrap_servers, **alice256)
    try:
        assert topic in c.topics()  # SCRAM-SHA-256 still works
    finally:
        c.close()


def test_wrong_password_is_answered_late_then_disconnected(secure):
    sock = socket.create_connection(port_of(secure), timeout=10)
    try:
        sock.sendall(frame(SaslHandshakeRequest(mechanism="PLAIN"), 1, 1))
        assert read_frame(sock) is not None
        start = time.monotonic()
        sock.sendall(frame(SaslAuthenticateRequest(auth_bytes=b"\x00admin\x00guess"), 2, 2))
        answer = read_frame(sock)
        elapsed = time.monotonic() - start
        assert answer is not None and elapsed >= DELAY_MS / 1000 * 0.9
        sock.sendall(frame(SaslAuthenticateRequest(auth_bytes=b"\x00admin\x00guess2"), 2, 3))
        assert read_frame(sock) is None  # one guess per connection
    finally:
        sock.close()


def test_unauthenticated_replica_fetch_gets_nothing(secure):
    topic = f"secret-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=secure.bootstrap_servers, request_timeout_ms=30000, **PLAIN_ADMIN)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)], timeout_ms=30000)
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=secure.bootstrap_servers, **PLAIN_ADMIN)
    try:
        producer.send(topic, value=b"classified").get(timeout=30)
    finally:
        producer.close(timeout=10)
    v = 11
    req = FetchRequest[v](
        replica_id=1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[FetchRequest.FetchTopic(version=v, topic=topic, partitions=[
            FetchRequest.FetchTopic.FetchPartition(version=v, partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                   log_start_offset=-1, partition_max_bytes=1 << 20)])],
        forgotten_topics_data=[], rack_id="")
    for host_port in secure.bootstrap_servers.split(","):
        host, port = host_port.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=10)
        try:
            sock.sendall(frame(req, v))
            assert read_frame(sock) is None  # closed, nothing answered
        finally:
            sock.close()


def test_pre_authentication_frames_are_capped(secure):
    sock = socket.create_connection(port_of(secure), timeout=10)
    try:
        sock.sendall(struct.pack(">i", 100 * 1024 * 1024) + b"\x00" * 64)  # 100 MB announced, not yet sent
        assert read_frame(sock) is None
    finally:
        sock.close()
    sock = socket.create_connection(port_of(secure), timeout=10)
    try:  # ApiVersions still works before authentication
        sock.sendall(frame(ApiVersionsRequest[2](), 2))
        assert read_frame(sock) is not None
    finally:
        sock.close()


def test_sasl_handshake_v0_takes_bare_tokens(secure):
    """SaslHandshake v0 (Kafka 0.10.0's clients): the PLAIN token follows as a bare size-prefixed frame and is
    answered with a bare empty frame; then the connection is authenticated and requests are served.  A bad
    password with v0 gets no answer: the connection is closed after the failed-authentication delay."""
    from kafka.protocol.metadata import MetadataRequest
    sock = socket.create_connection(port_of(secure), timeout=10)
    try:
        sock.sendall(frame(SaslHandshakeRequest(mechanism="PLAIN"), 0, 1))
        answer = read_frame(sock)
        assert answer is not None and answer[4:6] == b"\x00\x00"   # correlation id, then error_code NONE
        token = b"\x00admin\x00admin-secret"
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert read_frame(sock) == b""                                 # PLAIN's empty reply, bare
        sock.sendall(frame(MetadataRequest(topics=[], allow_auto_topic_creation=False), 1, 2))
        assert read_frame(sock) is not None                            # authenticated: served
    finally:
        sock.close()
    sock = socket.create_connection(port_of(secure), timeout=10)
    try:
        sock.sendall(frame(SaslHandshakeRequest(mechanism="PLAIN"), 0, 1))
        assert read_frame(sock) is not None
        start = time.monotonic()
        token = b"\x00admin\x00guess"
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert read_frame(sock) is None and time.monotonic() - start >= DELAY_MS / 1000 * 0.9
    finally:
        sock.close()


def test_an_old_client_logs_in_with_handshake_v0(secure):
    """kafka-python pinned to Kafka 0.10.0 speaks SaslHandshake v0 and sends its PLAIN token bare."""
    topic = f"old-sasl-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=secure.bootstrap_servers, api_version=(0, 10, 0), **PLAIN_ADMIN)
    try:
        producer.send(topic, b"hello-v0").get(timeout=60)
    finally:
        producer.close()
