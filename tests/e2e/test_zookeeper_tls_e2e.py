"""TLS to ZooKeeper (docs/security.md#zookeeper): ``cluster up --zookeeper-tls --zookeeper-sasl`` starts the embedded
ZooKeeper serving TLS only (mutual TLS, on its ``secureClientPort``) with SASL required; the brokers connect with
Kafka's ``zookeeper.ssl.*`` and log in through the JAAS ``Client`` section.  Records go through, a CLI command and
zkCli reach ZooKeeper with ``KAFKATIER_ZK_TLS_CONFIG``; a plain client, a client without a certificate and a client
with an expired or untrusted one are refused, each with one line."""
from __future__ import annotations

import os
import socket
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer

from kafkatier.cluster.manager import ClusterManager
from kafkatier.testing.tls import make_ca, make_cert
from kafkatier.zk.client import ZooKeeperUnavailableError, start_client
from kafkatier.cluster.embedded_zookeeper import parse_connect_string
from kafkatier.zk.security import ZkSecurity, ZkTls, ZooKeeperSecurityError, read_properties, zk_security

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def zk_tls_cluster(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("zktls-cluster"))
    m = ClusterManager(data_dir)
    try:
        m.up(brokers=2, log_dirs_per_broker=1, zookeeper_tls=True, zookeeper_sasl=True)
        yield m
    finally:
        m.down()


def _env(m) -> dict:
    return {"KAFKATIER_ZK_TLS_CONFIG": m.state["zookeeper_tls_config"],
            "KAFKATIER_JAAS_CONFIG": m.state["zookeeper_jaas"]}


def _tls_props(m) -> dict:
    return read_properties(m.state["zookeeper_tls_config"], "tls config")


def test_records_and_cli_over_a_tls_zookeeper(zk_tls_cluster, kafkatier_cli):
    m = zk_tls_cluster
    topic = f"zktls-{uuid.uuid4().hex[:6]}"
    r = kafkatier_cli.run("topics", "--create", "--topic", topic, "--partitions", "2", "--replication-factor", "2",
                          "--bootstrap-server", m.state["bootstrap_servers"])
    assert r.returncode == 0, r.stderr
    producer = KafkaProducer(bootstrap_servers=m.state["bootstrap_servers"], acks="all",
                             request_timeout_ms=TIMEOUT_S * 1000)
    for i in range(50):
        producer.send(topic, f"v{i}".encode())
    producer.flush(TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=m.state["bootstrap_servers"], auto_offset_reset="earliest",
                             consumer_timeout_ms=TIMEOUT_S * 1000)
    seen = set()
    for rec in consumer:
        seen.add(rec.value)
        if len(seen) == 50:
            break
    consumer.close()
    assert len(seen) == 50
    # a tool that reads ZooKeeper itself, and ZooKeeper's own shell, over TLS with the tools' config file
    r = kafkatier_cli.run("topics", "--zookeeper", m.zookeeper, "--list", env=_env(m))
    assert r.returncode == 0 and topic in r.stdout, r.stderr
    r = kafkatier_cli.run("zookeeper", "shell", "--zookeeper", m.zookeeper, "ls", "/brokers/ids", env=_env(m))
    assert r.returncode == 0 and "[1, 2]" in r.stdout, r.stdout + r.stderr
    # the brokers' sessions are TLS and SASL: the znodes they created carry their SASL identity
    zk = start_client(m.zookeeper, timeout=10.0, connect_timeout=30.0,
                      security=zk_security({**_tls_props(m), "java.security.auth.login.config":
                                            m.state["zookeeper_jaas"], "zookeeper.set.acl": "true"}))
    try:
        acls, _ = zk.get_acls(f"/brokers/topics/{topic}")
        assert any(a.id.scheme == "sasl" and a.id.id == "kafka" for a in acls)
    finally:
        zk.stop()
        zk.close()


def test_plain_clients_are_refused_on_the_secure_port(zk_tls_cluster, kafkatier_cli):
    m = zk_tls_cluster
    with pytest.raises(ZooKeeperUnavailableError, match="serves TLS only"):
        start_client(m.zookeeper, timeout=5.0, connect_timeout=3.0, security=ZkSecurity())
    # a raw ZooKeeper connect request: no answer, the connection is closed by the TLS layer
    (host, port), = parse_connect_string(m.zookeeper)
    with socket.create_connection((host, port), timeout=TIMEOUT_S) as s:
        s.sendall(b"\0\0\0\x2c" + b"\0" * 0x2c)
        s.settimeout(TIMEOUT_S)
        assert s.recv(4096)[:1] in (b"", b"\x15")   # closed, or a TLS alert record
    # the CLI without the TLS config: one line, exit 1
    r = kafkatier_cli.run("topics", "--zookeeper", m.zookeeper, "--list")
    assert r.returncode != 0 and "serves TLS only" in r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.strip()]) == 1, r.stderr


def test_no_expired_or_untrusted_client_certificate_is_refused(zk_tls_cluster, tmp_path):
    m = zk_tls_cluster
    ca = _tls_props(m)["zookeeper.ssl.truststore.location"]
    tls_dir = os.path.dirname(ca)
    expired = make_cert(tls_dir, "zk-expired", "CN=zk-expired", hosts=None, expired=True, out_dir=tmp_path)
    make_ca(tmp_path / "other", subject="CN=other-ca")
    stranger = make_cert(tmp_path / "other", "zk-stranger", "CN=zk-stranger", hosts=None)
    for keystore in (None, expired.keystore, stranger.keystore):
        security = ZkSecurity(tls=ZkTls(keystore=str(keystore) if keystore else None, truststore=ca))
        with pytest.raises(ZooKeeperUnavailableError, match="TLS to ZooKeeper at .* failed: ") as e:
            start_client(m.zookeeper, timeout=5.0, connect_timeout=3.0, security=security)
        assert "\n" not in str(e.value)
    # the server's certificate checked by the client: a truststore of another CA
    security = ZkSecurity(tls=ZkTls(keystore=_tls_props(m)["zookeeper.ssl.keystore.location"],
                                    truststore=str(tmp_path / "other" / "ca.pem")))
    with pytest.raises(ZooKeeperUnavailableError, match="certificate verify failed"):
        start_client(m.zookeeper, timeout=5.0, connect_timeout=3.0, security=security)


@pytest.mark.parametrize("props, message", [
    ({"zookeeper.ssl.client.enable": "true"}, "needs zookeeper.clientCnxnSocket"),
    ({"zookeeper.ssl.client.enable": "true", "zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNetty",
      "zookeeper.ssl.truststore.location": "/nonexistent/ca.pem", "zookeeper.ssl.truststore.type": "PEM"},
     "zookeeper.ssl.truststore.location=/nonexistent/ca.pem: No such file"),
    ({"zookeeper.ssl.client.enable": "true", "zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNetty",
      "zookeeper.ssl.keystore.location": "/etc/hostname", "zookeeper.ssl.keystore.password": "nope"},
     "cannot read the JKS store"),
])
def test_bad_zookeeper_tls_settings_are_one_line(props, message):
    with pytest.raises(ZooKeeperSecurityError, match=message) as e:
        zk_security(props)
    assert "\n" not in str(e.value) and "nope" not in str(e.value)


def test_broker_with_a_bad_zookeeper_tls_config_fails_fast_with_one_line(zk_tls_cluster, kafkatier_cli, tmp_path):
    m = zk_tls_cluster
    props = tmp_path / "bad.properties"
    props.write_text("zookeeper.ssl.client.enable=true\n"
                     "zookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty\n"
                     "zookeeper.ssl.truststore.type=PEM\nzookeeper.ssl.truststore.location=/nonexistent/ca.pem\n")
    logdir = tmp_path / "logs"
    r = kafkatier_cli.run("broker", "start", "--id", "77", "--zookeeper", m.zookeeper, "--log-dirs", str(logdir),
                          "--config", str(props), timeout=60)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "zookeeper.ssl.truststore.location=/nonexistent/ca.pem" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert not logdir.exists() or not any(logdir.iterdir())  # nothing half-started
