"""JAAS parsing, where the JAAS file comes from, and Kafka's default ZooKeeper ACLs (kafkatier/zk/security.py)."""
from __future__ import annotations

import pytest
from kazoo.security import OPEN_ACL_UNSAFE

from kafkatier.zk.security import (ZooKeeperSecurityError, default_acls, jaas_path, parse_jaas, sensitive_path,
                                   server_jaas, validate_server_jaas, zk_security)

CLIENT = ('// comment\nClient {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n'
          '  username="kafka"\n  password="s3cret";\n};\n')


def test_parse_client_and_server_sections():
    assert parse_jaas(CLIENT) == {"Client": {"username": "kafka", "password": "s3cret"}}
    parsed = parse_jaas(server_jaas({"kafka": "pw", "admin": "x"}))
    assert parsed["Server"] == {"user_kafka": "pw", "user_admin": "x"}
    assert parsed["Client"] == {"username": "kafka", "password": "pw"}


@pytest.mark.parametrize("text", ["Client { foo }", "Client {\n m required username=\"a\"\n};",
                                  "Client { m maybe a=\"b\"; };", "garbage", CLIENT + "trailing"])
def test_syntax_errors_are_one_clear_error(text):
    with pytest.raises(ZooKeeperSecurityError) as e:
        parse_jaas(text, "JAAS file F")
    assert "\n" not in str(e.value) and "JAAS file F" in str(e.value)


def test_jaas_path_sources():
    assert jaas_path({"java.security.auth.login.config": "/a"}, {}) == "/a"
    assert jaas_path(None, {"KAFKATIER_JAAS_CONFIG": "/b"}) == "/b"
    assert jaas_path(None, {"KAFKA_OPTS": "-Xmx1g -Djava.security.auth.login.config=/c"}) == "/c"
    assert jaas_path(None, {}) is None


def test_zk_security(tmp_path):
    f = tmp_path / "jaas.conf"
    f.write_text(CLIENT)
    broker = zk_security({"java.security.auth.login.config": str(f), "zookeeper.set.acl": "true"}, {})
    assert broker.sasl and broker.set_acl and broker.username == "kafka" and "s3cret" not in repr(broker)
    assert not zk_security({"java.security.auth.login.config": str(f)} | {"zookeeper.set.acl": "false"}, {}).set_acl
    assert zk_security(None, {"KAFKATIER_JAAS_CONFIG": str(f)}).set_acl  # a tool: secure whenever it logs in
    assert not zk_security(None, {}).sasl
    with pytest.raises(ZooKeeperSecurityError, match="needs a JAAS file"):
        zk_security({"zookeeper.set.acl": "true"}, {})
    with pytest.raises(ZooKeeperSecurityError, match="cannot read"):
        zk_security({"java.security.auth.login.config": str(tmp_path / "missing")}, {})
    f.write_text("Other { m required a=\"b\"; };")
    with pytest.raises(ZooKeeperSecurityError, match="no Client section"):
        zk_security(None, {"KAFKATIER_JAAS_CONFIG": str(f)})
    with pytest.raises(ZooKeeperSecurityError, match="Server section"):
        validate_server_jaas(str(f))


def test_default_acls_as_kafka():
    assert default_acls(False, "/brokers/ids") == list(OPEN_ACL_UNSAFE)
    assert default_acls(True, "/consumers") == list(OPEN_ACL_UNSAFE)
    secure = default_acls(True, "/brokers/topics/t")
    assert [(a.id.scheme, a.perms) for a in secure] == [("auth", 31), ("world", 1)]
    for p in ("/config/users", "/config/users/alice", "/config/brokers/1", "/delegation_token/tokens",
              "/kafkatier/control/1/requests/request_0000000001", "/kafkatier/faults/1", "/kafkatier/fault_state"):
        assert sensitive_path(p) and [a.id.scheme for a in default_acls(True, p)] == ["auth"], p
    assert not sensitive_path("/config/usersx") and not sensitive_path("/config/topics/t")


NETTY = {"zookeeper.ssl.client.enable": "true",
         "zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNetty"}


def test_zookeeper_tls_from_kafkas_names_and_the_tools_file(tmp_path):
    from kafkatier.testing.tls import make_ca, make_cert
    ca = make_ca(tmp_path)
    cert = make_cert(tmp_path, "zk-client", hosts=None)
    props = {**NETTY, "zookeeper.ssl.keystore.type": "PEM", "zookeeper.ssl.keystore.location": str(cert.keystore),
             "zookeeper.ssl.truststore.type": "PEM", "zookeeper.ssl.truststore.location": str(ca)}
    tls = zk_security(props, env={}).tls
    assert tls is not None and tls.keystore == str(cert.keystore) and tls.truststore == str(ca) and tls.check_hostname
    assert tls.kazoo_kwargs() == {"use_ssl": True, "verify_certs": True, "check_hostname": True, "ca": str(ca),
                                  "certfile": str(cert.keystore), "keyfile": str(cert.keystore)}
    assert zk_security({}, env={}).tls is None
    # a tool: the same names in the file KAFKATIER_ZK_TLS_CONFIG names (Kafka's --zk-tls-config-file)
    f = tmp_path / "zk-tls.properties"
    f.write_text("# tools\n" + "".join(f"{k}={v}\n" for k, v in props.items())
                 + "zookeeper.ssl.endpoint.identification.algorithm=\n")
    tls = zk_security(env={"KAFKATIER_ZK_TLS_CONFIG": str(f)}).tls
    assert tls is not None and not tls.check_hostname
    # PKCS12 stores become private PEM files kazoo can load
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12
    key = serialization.load_pem_private_key(cert.key.read_bytes(), None)
    (tmp_path / "ks.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        b"c", key, x509.load_pem_x509_certificate(cert.certificate.read_bytes()), None,
        serialization.BestAvailableEncryption(b"pw")))
    tls = zk_security({**NETTY, "zookeeper.ssl.keystore.type": "PKCS12", "zookeeper.ssl.keystore.password": "pw",
                       "zookeeper.ssl.keystore.location": str(tmp_path / "ks.p12")}, env={}).tls
    import os
    import stat
    assert b"PRIVATE KEY" in open(tls.keystore, "rb").read()
    assert stat.S_IMODE(os.stat(tls.keystore).st_mode) == 0o600


@pytest.mark.parametrize("props, message", [
    ({"zookeeper.ssl.client.enable": "true", "zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNIO"},
     "needs zookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty"),
    ({**NETTY, "zookeeper.ssl.endpoint.identification.algorithm": "LDAPS"}, "only HTTPS or empty"),
    ({**NETTY, "zookeeper.ssl.keystore.type": "PKCS12", "zookeeper.ssl.keystore.location": "/etc/hostname",
      "zookeeper.ssl.keystore.password": "pw"}, "cannot read the PKCS12 store"),
    ({**NETTY, "zookeeper.ssl.keystore.type": "BKS", "zookeeper.ssl.keystore.location": "/etc/hostname"},
     "supported are PEM, PKCS12 and JKS"),
])
def test_bad_zookeeper_tls_settings(props, message):
    with pytest.raises(ZooKeeperSecurityError, match=message) as e:
        zk_security(props, env={})
    assert "\n" not in str(e.value)


def test_tools_tls_file_errors_are_one_line(tmp_path):
    with pytest.raises(ZooKeeperSecurityError, match="cannot read"):
        zk_security(env={"KAFKATIER_ZK_TLS_CONFIG": str(tmp_path / "missing")})
    bad = tmp_path / "bad.properties"
    bad.write_text("zookeeper.ssl.client.enable\n")
    with pytest.raises(ZooKeeperSecurityError, match="line 1 is not key=value"):
        zk_security(env={"KAFKATIER_ZK_TLS_CONFIG": str(bad)})


def test_embedded_zookeeper_tls_settings(tmp_path):
    from pathlib import Path
    from kafkatier.cluster.embedded_zookeeper import EmbeddedZooKeeperError, ZooKeeperSettings, ZooKeeperTls
    (tmp_path / "k.pem").write_text("x")
    (tmp_path / "ca.pem").write_text("x")
    tls = ZooKeeperTls(tmp_path / "k.pem", tmp_path / "ca.pem")
    cfg = ZooKeeperSettings(data_dir=Path(tmp_path), port=2281, tls=tls).zoo_cfg()
    assert "secureClientPort=2281" in cfg and "\nclientPort=" not in cfg   # TLS only: no plain port
    assert "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory" in cfg
    assert "ssl.keyStore.type=PEM" in cfg and "ssl.clientAuth=need" in cfg
    with pytest.raises(EmbeddedZooKeeperError, match="truststore"):
        ZooKeeperTls(tmp_path / "k.pem", tmp_path / "missing.pem")
    with pytest.raises(ValueError, match="ssl.clientAuth"):
        ZooKeeperTls(tmp_path / "k.pem", tmp_path / "ca.pem", client_auth="maybe")
