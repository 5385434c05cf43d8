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
