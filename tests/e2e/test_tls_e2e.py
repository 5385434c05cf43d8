"""TLS listeners end to end (docs/security.md#tls): a ``cluster up --tls`` cluster with Kafka's ACL authorizer, used
over SSL and mTLS by kafka-python, confluent-kafka and kcat; ACLs by certificate principal; the CLI through
``DIR/client-ssl.properties``; bad certificates and a bad keystore refused with one line."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import (ACL, ACLOperation, ACLPermissionType, KafkaAdminClient, NewTopic, ResourcePattern,
                         ResourceType)

from kafkatier.testing.tls import make_cert

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

OVERRIDES = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
             "super.users": "User:ANONYMOUS;User:CN=admin", "allow.everyone.if.no.acl.found": "false"}
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def tls_cluster(module_cluster_factory):
    cluster = module_cluster_factory(brokers=2, log_dirs=1, overrides=OVERRIDES, tls=True)
    tls = cluster.manager.state["tls"]
    tls_dir = os.path.dirname(tls["ca"])
    certs = {"client": make_cert(tls_dir, "client-2", "CN=client", hosts=None),
             "stranger": make_cert(tls_dir, "stranger", "CN=stranger,O=elsewhere", hosts=None)}
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        admin.create_topics([NewTopic("tls-t", 1, 2)])
        topic = ResourcePattern(ResourceType.TOPIC, "tls-t")
        group = ResourcePattern(ResourceType.GROUP, "*")
        admin.create_acls([ACL("User:CN=client", "*", op, ACLPermissionType.ALLOW, res)
                           for op, res in ((ACLOperation.WRITE, topic), (ACLOperation.READ, topic),
                                           (ACLOperation.DESCRIBE, topic), (ACLOperation.READ, group))])
    finally:
        admin.close()
    return cluster, tls, certs


def _kp_ssl(tls, cert=None):
    kw = {"bootstrap_servers": tls["bootstrap_servers"], "security_protocol": "SSL", "ssl_cafile": tls["ca"],
          "request_timeout_ms": TIMEOUT_S * 1000}
    if cert is not None:
        kw.update(ssl_certfile=str(cert.certificate), ssl_keyfile=str(cert.key))
    return kw


def test_mtls_principal_allowed_by_its_acl_produces_and_consumes(tls_cluster):
    cluster, tls, certs = tls_cluster
    producer = KafkaProducer(acks="all", **_kp_ssl(tls, certs["client"]))
    try:
        for i in range(20):
            producer.send("tls-t", f"v{i}".encode()).get(timeout=TIMEOUT_S)
    finally:
        producer.close()
    consumer = KafkaConsumer("tls-t", group_id=f"g-{uuid.uuid4().hex[:6]}", auto_offset_reset="earliest",
                             consumer_timeout_ms=15000, **_kp_ssl(tls, certs["client"]))
    try:
        got = []
        for m in consumer:
            got.append(m.value)
            if len(got) == 20:
                break
    finally:
        consumer.close()
    assert got == [f"v{i}".encode() for i in range(20)]


def test_confluent_kafka_stranger_certificate_is_refused_by_acl(tls_cluster):
    from confluent_kafka import KafkaError, Producer
    cluster, tls, certs = tls_cluster
    errors = []
    base = {"bootstrap.servers": tls["bootstrap_servers"], "security.protocol": "SSL", "ssl.ca.location": tls["ca"],
            "message.timeout.ms": 10000}
    p = Producer({**base, "ssl.certificate.location": str(certs["stranger"].certificate),
                  "ssl.key.location": str(certs["stranger"].key)})
    p.produce("tls-t", b"x", on_delivery=lambda err, msg: errors.append(err))
    p.flush(TIMEOUT_S)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    errors.clear()
    p = Producer({**base, "ssl.certificate.location": str(certs["client"].certificate),
                  "ssl.key.location": str(certs["client"].key)})
    p.produce("tls-t", b"y", on_delivery=lambda err, msg: errors.append(err))
    p.flush(TIMEOUT_S)
    assert errors == [None]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not on PATH")
def test_kcat_over_tls(tls_cluster):
    cluster, tls, certs = tls_cluster
    out = subprocess.run(["kcat", "-L", "-b", tls["bootstrap_servers"], "-m", "15", "-X", "security.protocol=ssl",
                          "-X", f"ssl.ca.location={tls['ca']}"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "2 brokers" in out.stdout
    for port in (hp.rsplit(":", 1)[1] for hp in tls["bootstrap_servers"].split(",")):
        assert f":{port}" in out.stdout  # metadata answers with the SSL listener's addresses


def test_cli_with_the_written_client_config(tls_cluster, kafkatier_cli):
    cluster, tls, certs = tls_cluster
    r = kafkatier_cli.run("topics", "--data-dir", cluster.data_dir, "--command-config", tls["client_config"],
                          "--list")
    assert r.returncode == 0, r.stderr
    assert "tls-t" in r.stdout


def test_untrusted_certificate_fails_the_handshake(tls_cluster, tmp_path):
    from kafka.errors import KafkaError
    from kafkatier.testing.tls import make_ca
    cluster, tls, certs = tls_cluster
    make_ca(tmp_path, subject="CN=other-ca")
    foreign = make_cert(tmp_path, "foreign", "CN=client", hosts=None)
    with pytest.raises(KafkaError):
        KafkaAdminClient(**{**_kp_ssl(tls, foreign), "request_timeout_ms": 5000, "api_version_auto_timeout_ms": 5000})
    # and a client that does not trust the brokers' CA refuses them
    with pytest.raises(KafkaError):
        KafkaAdminClient(**{**_kp_ssl(tls), "ssl_cafile": str(tmp_path / "ca.pem"), "request_timeout_ms": 5000,
                            "api_version_auto_timeout_ms": 5000})


def test_missing_key_file_stops_the_broker_with_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "kafkatier", "broker", "start", "--id", "77", "--zookeeper",
                        "127.0.0.1:1", "--log-dirs", str(tmp_path / "d"),
                        "--override", "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                        "--override", "ssl.keystore.type=PEM", "--override", "ssl.keystore.location=/nonexistent.pem"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "start-up failed: listener SSL: ssl.keystore.location=/nonexistent.pem: No such file or directory" \
        in r.stdout + r.stderr
    assert not (tmp_path / "d").exists()  # nothing started


def test_replication_over_tls_with_broker_certificate_principals(module_cluster_factory):
    """inter.broker.listener.name=SSL with ssl.client.auth=required and no ACL for anonymous: followers can only
    fetch as User:CN=broker-N over TLS, so an acks=all write with min.insync.replicas=2 proves the path."""
    cluster = module_cluster_factory(brokers=2, log_dirs=1, tls=True, overrides={
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "allow.everyone.if.no.acl.found": "false",
        "super.users": "User:CN=broker-1;User:CN=broker-2;User:CN=client", "inter.broker.listener.name": "SSL",
        "ssl.client.auth": "required", "min.insync.replicas": "2"})
    tls = cluster.manager.state["tls"]
    client = {"bootstrap_servers": tls["bootstrap_servers"], "security_protocol": "SSL", "ssl_cafile": tls["ca"],
              "ssl_certfile": tls["client_certificate"], "ssl_keyfile": tls["client_key"],
              "request_timeout_ms": TIMEOUT_S * 1000}
    admin = KafkaAdminClient(**client)
    try:
        admin.create_topics([NewTopic("tls-r", 1, 2)])
    finally:
        admin.close()
    producer = KafkaProducer(acks="all", retries=20, **client)
    try:
        for i in range(10):
            producer.send("tls-r", f"r{i}".encode()).get(timeout=TIMEOUT_S)
    finally:
        producer.close()
    # the brokers registered both listeners with the security protocol map
    import json
    reg = json.loads(cluster.zk.get("/brokers/ids/1")[0])
    assert reg["listener_security_protocol_map"]["SSL"] == "SSL"
    assert any(e.startswith("SSL://") for e in reg["endpoints"])


def test_sasl_ssl_listener_with_inter_broker_sasl_over_tls(module_cluster_factory):
    """A SASL_SSL listener used by clients and by the brokers themselves (inter.broker.listener.name=SASL_SSL):
    PLAIN over TLS; a wrong password is refused."""
    from kafka.errors import KafkaError
    cluster = module_cluster_factory(brokers=2, log_dirs=1, sasl_ssl=True, overrides={
        "sasl.enabled.mechanisms": "PLAIN", "inter.broker.listener.name": "SASL_SSL", "min.insync.replicas": "2",
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
            'password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";'})
    tls = cluster.manager.state["tls"]
    client = {"bootstrap_servers": tls["sasl_ssl_bootstrap_servers"], "security_protocol": "SASL_SSL",
              "ssl_cafile": tls["ca"], "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
              "sasl_plain_password": "alice-secret", "request_timeout_ms": TIMEOUT_S * 1000}
    admin = KafkaAdminClient(**client)
    try:
        admin.create_topics([NewTopic("sasl-ssl-t", 1, 2)])
    finally:
        admin.close()
    producer = KafkaProducer(acks="all", retries=20, **client)
    try:
        for i in range(10):
            producer.send("sasl-ssl-t", f"s{i}".encode()).get(timeout=TIMEOUT_S)
    finally:
        producer.close()
    with pytest.raises(KafkaError):
        KafkaAdminClient(**{**client, "sasl_plain_password": "wrong", "request_timeout_ms": 5000,
                            "api_version_auto_timeout_ms": 5000})


def test_large_fetches_read_the_same_over_plaintext_sendfile_and_over_tls(tls_cluster):
    """Fetch answers of more than 64 KiB of records go out from the segment files with ``sendfile`` on PLAINTEXT
    listeners and are copied through TLS on SSL ones (docs/architecture.md#request-paths):
    kafka-python (SSL and PLAINTEXT, read_uncommitted), confluent-kafka (read_committed) and aiokafka read the
    same records, the follower's copy included (acks=all, RF 2)."""
    import asyncio

    import aiokafka
    import confluent_kafka
    from kafka import TopicPartition
    cluster, tls, _ = tls_cluster
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        admin.create_topics([NewTopic("big-t", 1, 2)])
    finally:
        admin.close()
    values = [os.urandom(8) * 1024 for _ in range(300)]   # 8 KiB each, 2.4 MB
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", batch_size=256 * 1024,
                             linger_ms=20, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        for v in values:
            producer.send("big-t", v)
        producer.flush(TIMEOUT_S)
    finally:
        producer.close()

    def kafka_python(**kw):
        consumer = KafkaConsumer(consumer_timeout_ms=15000, **kw)
        try:
            consumer.assign([TopicPartition("big-t", 0)])
            consumer.seek_to_beginning()
            got = []
            for m in consumer:
                got.append(m.value)
                if len(got) == len(values):
                    break
            return got
        finally:
            consumer.close()

    def confluent():
        consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "big",
                                             "enable.auto.commit": False, "check.crcs": True})
        try:
            consumer.assign([confluent_kafka.TopicPartition("big-t", 0, confluent_kafka.OFFSET_BEGINNING)])
            got = []
            for _ in range(60):
                for m in consumer.consume(1000, timeout=0.5):
                    assert m.error() is None, m.error()
                    got.append(m.value())
                if len(got) >= len(values):
                    break
            return got
        finally:
            consumer.close()

    async def aio():
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False,
                                             check_crcs=True)
        await consumer.start()
        try:
            consumer.assign([aiokafka.TopicPartition("big-t", 0)])
            await consumer.seek_to_beginning()
            got = []
            for _ in range(60):
                for msgs in (await consumer.getmany(timeout_ms=500)).values():
                    got += [m.value for m in msgs]
                if len(got) >= len(values):
                    break
            return got
        finally:
            await consumer.stop()

    assert kafka_python(bootstrap_servers=cluster.bootstrap_servers) == values
    assert kafka_python(**_kp_ssl(tls)) == values
    assert confluent() == values
    assert asyncio.run(aio()) == values
