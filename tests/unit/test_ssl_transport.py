"""TLS listeners on the SocketServer (server/ssl_transport.py): handshakes, principals from certificates, mapping
rules, bad input; with a raw ssl client, kafka-python, confluent-kafka and kcat."""
from __future__ import annotations

import shutil
import socket
import ssl
import struct
import subprocess

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from kafkatier.server.network import SocketServer
from kafkatier.server.ssl_transport import (
    NoMatchingRule, SslConfig, SslConfigError, SslPrincipalBuilder, SslPrincipalMapper, client_context,
    distinguished_name, server_context)
from kafkatier.testing.tls import make_ca, make_cert
from tests.unit.test_network import DEADLINE, StubBroker, _frame, _recv_frame

CLIENT_DN = "CN=alice,OU=eng,O=kafkatier"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    make_ca(d)
    other = tmp_path_factory.mktemp("other-ca")
    make_ca(other, subject="CN=someone-else")
    return {"dir": d, "ca": d / "ca.pem", "server": make_cert(d, "broker"),
            "client": make_cert(d, "alice", CLIENT_DN, hosts=None),
            "expired": make_cert(d, "old", "CN=old", hosts=None, expired=True),
            "stranger": make_cert(other, "mallory", "CN=mallory", hosts=None),
            "wrong_host": make_cert(d, "elsewhere", hosts=("broker.example",)),
            "encrypted": make_cert(d, "locked", hosts=("127.0.0.1",), key_password="s3cret")}


def _server_props(pki, client_auth="required", **extra):
    return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["server"].keystore),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki["ca"]),
            "ssl.client.auth": client_auth, **extra}


@pytest.fixture
def tls_server(pki, request):
    props = _server_props(pki, **getattr(request, "param", {}))
    cfg = SslConfig.from_props(props, "SSL")
    stub = StubBroker()
    server = SocketServer("127.0.0.1", 0, stub, num_handler_threads=2, listener_name="SSL",
                          ssl_context=server_context(cfg),
                          ssl_principal=SslPrincipalBuilder(SslPrincipalMapper.from_rules(cfg.principal_mapping_rules))
                          .principal).start()
    stub.port = server.port
    yield stub, server
    server.shutdown()


def _client_ctx(pki, cert="client", **extra):
    props = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki["ca"]), **extra}
    if cert:
        props.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki[cert].keystore)})
    return client_context(SslConfig.from_props(props))


def _api_versions(ctx, port, server_hostname="127.0.0.1"):
    raw = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
    with ctx.wrap_socket(raw, server_hostname=server_hostname) as s:
        s.sendall(_frame(ApiVersionsRequest[0](), 7, 0))
        ApiVersionsResponse[0].decode(_recv_frame(s), header=True)


def test_mtls_principal_is_the_mapped_dn(pki, tls_server):
    stub, server = tls_server
    _api_versions(_client_ctx(pki), server.port)
    assert stub.contexts[-1].principal == "User:" + CLIENT_DN
    assert stub.contexts[-1].listener_name == "SSL"


@pytest.mark.parametrize("tls_server", [{"ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/U, DEFAULT"}],
                         indirect=True)
def test_principal_mapping_rules(pki, tls_server):
    stub, server = tls_server
    _api_versions(_client_ctx(pki), server.port)
    assert stub.contexts[-1].principal == "User:ALICE"


@pytest.mark.parametrize("tls_server", [{"ssl.client.auth": "none"}], indirect=True)
def test_without_client_auth_the_principal_is_anonymous(pki, tls_server):
    stub, server = tls_server
    _api_versions(_client_ctx(pki, cert=None), server.port)
    assert stub.contexts[-1].principal == "User:ANONYMOUS"


def test_large_frames_both_ways(pki, tls_server):
    """A 1 MiB request through TLS records, with the in-flight limit making the loop resume reads of bytes
    OpenSSL already holds (pending())."""
    from kafka.protocol.producer import ProduceRequest
    stub, server = tls_server
    stub.ranges[0] = (0, 9)
    server.refresh_api_versions()
    T = ProduceRequest[9].TopicProduceData
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE)
    with _client_ctx(pki).wrap_socket(raw, server_hostname="127.0.0.1") as s:
        frames = b"".join(_frame(ProduceRequest[9](transactional_id=None, acks=1, timeout_ms=1000, topic_data=[
            T(name="t", partition_data=[T.PartitionProduceData(index=0, records=b"x" * 1048576)])]), i, 9)
            for i in range(8))
        s.sendall(frames)
        for _ in range(8):
            _recv_frame(s)


def test_untrusted_expired_and_missing_client_certificates_are_refused(pki, tls_server, caplog):
    stub, server = tls_server
    for cert in ("stranger", "expired", None):
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            _api_versions(_client_ctx(pki, cert=cert), server.port)
    assert "SSL handshake failed" in caplog.text
    assert server.connection_metrics["failed_authentication"] >= 1
    assert stub.seen == []  # no request reached the handler


def test_client_checks_the_broker_host_name(pki, tmp_path):
    props = _server_props(pki, client_auth="none")
    props["ssl.keystore.location"] = str(pki["wrong_host"].keystore)
    cfg = SslConfig.from_props(props)
    stub = StubBroker()
    with SocketServer("127.0.0.1", 0, stub, num_handler_threads=1, ssl_context=server_context(cfg)) as server:
        with pytest.raises(ssl.SSLCertVerificationError, match="mismatch|match"):
            _api_versions(_client_ctx(pki, cert=None), server.port)
        # ssl.endpoint.identification.algorithm= (empty) turns the host name check off
        _api_versions(_client_ctx(pki, cert=None, **{"ssl.endpoint.identification.algorithm": ""}), server.port)


def test_plaintext_client_on_a_tls_port_is_closed(pki, tls_server, caplog):
    _, server = tls_server
    with socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE) as s:
        s.sendall(_frame(ApiVersionsRequest[0](), 1, 0))
        try:
            data = s.recv(4096)
        except ConnectionResetError:
            data = b""
        assert not data.startswith(struct.pack(">i", 0)[:2] + b"\x00")  # no Kafka frame, a TLS alert at most
        try:
            while s.recv(4096):
                pass
        except ConnectionResetError:
            pass
    assert "SSL handshake failed" in caplog.text


def test_encrypted_key_and_inline_pem(pki):
    enc = pki["encrypted"]
    with pytest.raises(SslConfigError, match="ssl.keystore.location"):
        server_context(SslConfig.from_props({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(enc.keystore),
                                             "ssl.key.password": "wrong"}))
    server_context(SslConfig.from_props({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(enc.keystore),
                                         "ssl.key.password": "s3cret"}))
    server_context(SslConfig.from_props({
        "ssl.keystore.type": "PEM", "ssl.keystore.key": enc.key.read_text(), "ssl.key.password": "s3cret",
        "ssl.keystore.certificate.chain": enc.certificate.read_text(),
        "ssl.truststore.type": "PEM", "ssl.truststore.certificates": pki["ca"].read_text(),
        "ssl.client.auth": "required"}))


@pytest.mark.parametrize("props, message", [
    ({"ssl.keystore.location": "/nonexistent/k.pem", "ssl.keystore.type": "PEM"}, "No such file"),
    ({"ssl.keystore.location": "/etc/hostname"}, "a JKS store needs its password"),
    ({"ssl.keystore.location": "/etc/hostname", "ssl.keystore.password": "x"}, "cannot read the JKS store"),
    ({}, "needs a keystore"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/etc/hostname"}, "private key and a certificate"),
    ({"ssl.client.auth": "sometimes"}, "ssl.client.auth"),
    ({"ssl.principal.mapping.rules": "RULE:broken"}, "Invalid rule"),
    ({"ssl.enabled.protocols": "SSLv3"}, "ssl.enabled.protocols"),
])
def test_bad_settings_fail_with_one_line(props, message):
    with pytest.raises(SslConfigError, match=message) as e:
        server_context(SslConfig.from_props(props))
    assert "\n" not in str(e.value)


def test_listener_prefixed_settings_win():
    cfg = SslConfig.from_props({"ssl.client.auth": "none", "listener.name.internal.ssl.client.auth": "required"},
                               "INTERNAL")
    assert cfg.client_auth == "required"
    assert SslConfig.from_props({"ssl.client.auth": "none"}, "INTERNAL").client_auth == "none"


def test_mapping_rules_as_kafka():
    m = SslPrincipalMapper.from_rules(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,DEFAULT")
    assert m.name("CN=kafka-server1,OU=ServiceUsers,O=Org,C=US") == "kafka-server1"
    assert m.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=x,ST=y,C=US") == "duke@javasoft"
    assert m.name("OU=x,cn=Bob.Z,O=o") == "bob.z"
    assert SslPrincipalMapper.from_rules("DEFAULT").name("CN=a,O=b") == "CN=a,O=b"
    with pytest.raises(NoMatchingRule):
        SslPrincipalMapper.from_rules("RULE:^CN=x$/y/").name("CN=z")


def test_distinguished_name_is_rfc2253():
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc"),), (("commonName", "c"),))}
    assert distinguished_name(cert) == "CN=c,O=Acme\\, Inc,C=US"


def test_kafka_python_over_mtls(pki, tls_server):
    from kafka import KafkaAdminClient
    stub, server = tls_server
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{server.port}", security_protocol="SSL",
                             ssl_cafile=str(pki["ca"]), ssl_certfile=str(pki["client"].certificate),
                             ssl_keyfile=str(pki["client"].key), request_timeout_ms=5000)
    try:
        assert admin.list_topics() == []
    finally:
        admin.close()
    assert stub.contexts[-1].principal == "User:" + CLIENT_DN


def test_confluent_kafka_over_mtls(pki, tls_server):
    from confluent_kafka.admin import AdminClient
    stub, server = tls_server
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.port}", "security.protocol": "SSL",
                         "ssl.ca.location": str(pki["ca"]),
                         "ssl.certificate.location": str(pki["client"].certificate),
                         "ssl.key.location": str(pki["client"].key)})
    assert admin.list_topics(timeout=DEADLINE).topics == {}
    assert stub.contexts[-1].principal == "User:" + CLIENT_DN


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not on PATH")
def test_kcat_over_mtls(pki, tls_server):
    stub, server = tls_server
    out = subprocess.run(["kcat", "-L", "-b", f"127.0.0.1:{server.port}", "-m", "10",
                          "-X", "security.protocol=ssl", "-X", f"ssl.ca.location={pki['ca']}",
                          "-X", f"ssl.certificate.location={pki['client'].certificate}",
                          "-X", f"ssl.key.location={pki['client'].key}"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert stub.contexts[-1].principal == "User:" + CLIENT_DN


def test_pkcs12_keystore_and_truststore(pki, tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12
    key = serialization.load_pem_private_key(pki["server"].key.read_bytes(), None)
    cert = x509.load_pem_x509_certificate(pki["server"].certificate.read_bytes())
    ca = x509.load_pem_x509_certificate(pki["ca"].read_bytes())
    (tmp_path / "ks.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        b"broker", key, cert, None, serialization.BestAvailableEncryption(b"ks-pass")))
    (tmp_path / "ts.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        b"ca", None, None, [ca], serialization.BestAvailableEncryption(b"ts-pass")))
    props = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(tmp_path / "ks.p12"),
             "ssl.keystore.password": "ks-pass", "ssl.truststore.type": "PKCS12",
             "ssl.truststore.location": str(tmp_path / "ts.p12"), "ssl.truststore.password": "ts-pass",
             "ssl.client.auth": "required"}
    cfg = SslConfig.from_props(props)
    with SocketServer("127.0.0.1", 0, StubBroker(), num_handler_threads=1, ssl_context=server_context(cfg)) as server:
        _api_versions(_client_ctx(pki), server.port)
    with pytest.raises(SslConfigError, match="PKCS12"):
        server_context(SslConfig.from_props({**props, "ssl.keystore.password": "wrong"}))


@pytest.mark.skipif(shutil.which("keytool") is None, reason="JKS is read through the JDK's keytool")
def test_jks_keystore_and_truststore_kafkas_default_type(pki, tmp_path, monkeypatch):
    """Kafka's default ``ssl.keystore.type=JKS``: converted with keytool, nothing of the key left on disk."""
    import os
    import tempfile
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12
    key = serialization.load_pem_private_key(pki["server"].key.read_bytes(), None)
    cert = x509.load_pem_x509_certificate(pki["server"].certificate.read_bytes())
    (tmp_path / "ks.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        b"broker", key, cert, None, serialization.BestAvailableEncryption(b"ks-pass")))
    for src, dest, extra in (("ks.p12", "ks.jks", ["-srcstoretype", "PKCS12", "-srcstorepass", "ks-pass"]),):
        subprocess.run(["keytool", "-importkeystore", "-noprompt", "-srckeystore", str(tmp_path / src), *extra,
                        "-destkeystore", str(tmp_path / dest), "-deststoretype", "JKS", "-deststorepass", "ks-pass"],
                       check=True, capture_output=True)
    subprocess.run(["keytool", "-importcert", "-noprompt", "-alias", "ca", "-file", str(pki["ca"]), "-keystore",
                    str(tmp_path / "ts.jks"), "-storetype", "JKS", "-storepass", "ts-pass"], check=True,
                   capture_output=True)
    props = {"ssl.keystore.location": str(tmp_path / "ks.jks"), "ssl.keystore.password": "ks-pass",
             "ssl.truststore.location": str(tmp_path / "ts.jks"), "ssl.truststore.password": "ts-pass",
             "ssl.client.auth": "required"}   # no ssl.*.type: Kafka's default, JKS
    private_tmp = tmp_path / "tmp"   # the converted stores' temp dir, apart from other runs' in the shared /tmp
    private_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))
    before = set(os.listdir(tempfile.gettempdir()))
    cfg = SslConfig.from_props(props)
    with SocketServer("127.0.0.1", 0, StubBroker(), num_handler_threads=1, ssl_context=server_context(cfg)) as server:
        _api_versions(_client_ctx(pki), server.port)
    assert not {n for n in set(os.listdir(tempfile.gettempdir())) - before if n.startswith("kafkatier-")}
    with pytest.raises(SslConfigError, match="cannot read the JKS store") as e:
        server_context(SslConfig.from_props({**props, "ssl.keystore.password": "wrong-pass"}))
    assert "\n" not in str(e.value) and "wrong-pass" not in str(e.value)


def test_a_keystore_whose_key_does_not_match_its_certificate_is_one_line(pki, tmp_path):
    mixed = tmp_path / "mixed.pem"
    mixed.write_bytes(pki["client"].key.read_bytes() + pki["server"].certificate.read_bytes())
    with pytest.raises(SslConfigError, match="ssl.keystore.location: cannot load the key and certificate") as e:
        server_context(SslConfig.from_props({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(mixed)}))
    assert "\n" not in str(e.value)
