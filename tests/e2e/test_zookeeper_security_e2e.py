"""ZooKeeper authentication and ACLs as Kafka sets them (issue #26): a cluster started with ``--zookeeper-sasl``
(embedded ZooKeeper requiring SASL DIGEST-MD5, brokers with ``zookeeper.set.acl=true``) gives every znode
creator-all plus world-read, and no world access on sensitive paths.  An anonymous client cannot write any znode,
read SCRAM credentials or the control channel, nor forge a StopReplica; brokers and the CLI work; security-migration
converts the tree secure -> unsecure -> secure; a wrong password or a broken JAAS file is one clear line."""
from __future__ import annotations

import json
import os
import stat

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, SessionClosedRequireSaslError
from kazoo.security import OPEN_ACL_UNSAFE, Id

from kafkatier.cluster.manager import ClusterManager
from kafkatier.zk import paths
from kafkatier.zk.client import ZooKeeperAuthError, start_client
from kafkatier.zk.security import ZkSecurity, ZooKeeperSecurityError, sensitive_path, zk_security

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("zksec-cluster"))
    m = ClusterManager(data_dir)
    try:
        m.up(brokers=2, log_dirs_per_broker=1, zookeeper_sasl=True, overrides={"zookeeper.set.acl": "true"})
        yield m
    finally:
        m.down()


def _client(m, security):
    return start_client(m.state["zookeeper"], timeout=10.0, connect_timeout=30.0, security=security)


@pytest.fixture(scope="module")
def admin(secured):
    c = _client(secured, zk_security({"java.security.auth.login.config": secured.state["zookeeper_jaas"]}))
    yield c
    c.stop()
    c.close()


def _anonymous_refused(m) -> None:
    """The embedded ZooKeeper enforces SASL (enforce.auth.schemes=sasl): a client without a login is refused."""
    with pytest.raises(ZooKeeperAuthError, match="requires a SASL login"):
        _client(m, ZkSecurity())


def _cli_env(m) -> dict:
    return {"KAFKATIER_JAAS_CONFIG": m.state["zookeeper_jaas"]}


def test_jaas_file_private(secured):
    path = secured.state["zookeeper_jaas"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_every_znode_secured_and_anonymous_refused(secured, admin, kafkatier_cli):
    r = kafkatier_cli.run("topics", "--create", "--topic", "secured", "--partitions", "2", "--replication-factor",
                          "2", "--bootstrap-server", secured.state["bootstrap_servers"])
    assert r.returncode == 0, r.stderr
    r = kafkatier_cli.run("configs", "--bootstrap-server", secured.state["bootstrap_servers"], "--alter",
                          "--entity-type", "users", "--entity-name", "alice",
                          "--add-config", "SCRAM-SHA-256=[password=alice-secret]")
    assert r.returncode == 0, r.stderr
    r = kafkatier_cli.run("topics", "--describe", "--topic", "secured",
                          "--bootstrap-server", secured.state["bootstrap_servers"])
    assert r.returncode == 0 and "secured" in r.stdout, r.stderr
    # every znode kafkatier wrote: creator-all for the SASL user; world-read only off sensitive paths
    stack, seen = ["/"], 0
    while stack:
        p = stack.pop()
        if p.startswith("/zookeeper"):
            continue
        acls, _ = admin.get_acls(p)
        world = [a for a in acls if a.id.scheme == "world"]
        if p == "/consumers":  # Kafka keeps the old consumers' path open
            assert acls == OPEN_ACL_UNSAFE
        elif p != "/":
            seen += 1
            assert any(a.id.scheme == "sasl" and a.id.id == "kafka" and a.perms == 31 for a in acls), (p, acls)
            assert all(a.perms == 1 for a in world), (p, acls)
            assert bool(world) != sensitive_path(p), (p, acls)
        stack += [p.rstrip("/") + "/" + c for c in admin.get_children(p)]
    assert seen > 30
    assert admin.exists("/config/users/alice")
    _anonymous_refused(secured)


def test_forged_stop_replica_refused_by_zookeeper(secured, admin):
    epoch = int(admin.get("/controller_epoch")[0])
    forged = {"version": 1, "api_key": 5, "api_version": 3, "api_name": "StopReplica", "controller_id": 1,
              "controller_epoch": epoch, "broker_epoch": -1,
              "body": {"controller_id": 1, "controller_epoch": epoch, "broker_epoch": -1, "topic_states": [
                  {"topic_name": "secured", "partition_states": [
                      {"partition_index": 0, "leader_epoch": -2, "delete_partition": True}]}]}}
    raw = KazooClient(hosts=secured.state["zookeeper"])   # a plain kazoo client, no login
    raw.start(timeout=30)
    try:
        with pytest.raises((SessionClosedRequireSaslError, NoAuthError)):   # ZooKeeper itself refuses it
            raw.create(paths.control_requests(2) + "/" + paths.REQUEST_PREFIX, json.dumps(forged).encode(),
                       sequence=True)
    finally:
        raw.stop()
        raw.close()


def test_security_migration_unsecure_then_secure(secured, admin, kafkatier_cli):
    z = secured.state["zookeeper"]
    r = kafkatier_cli.run("zookeeper", "security-migration", "--zookeeper.acl", "unsecure",
                          "--zookeeper.connect", z, env=_cli_env(secured))
    assert r.returncode == 0, r.stderr
    assert admin.get_acls("/config/users/alice")[0] == OPEN_ACL_UNSAFE
    assert admin.get_acls("/brokers/topics/secured")[0] == OPEN_ACL_UNSAFE
    r = kafkatier_cli.run("zookeeper", "security-migration", "--zookeeper.acl", "secure",
                          "--zookeeper.connect", z, env=_cli_env(secured))
    assert r.returncode == 0, r.stderr
    for path, world_perms in (("/config/users/alice", []), ("/brokers/topics/secured", [1])):
        acls = admin.get_acls(path)[0]
        assert [a.perms for a in acls if a.id.scheme == "world"] == world_perms, (path, acls)
        assert any(a.id == Id("sasl", "kafka") and a.perms == 31 for a in acls), (path, acls)
    r = kafkatier_cli.run("zookeeper", "security-migration", "--zookeeper.acl", "secure",
                          "--zookeeper.connect", z)  # no JAAS file: refused, usage error
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


# A refused login ends the client's connection thread cleanly (kazoo's AUTH_FAILED), not with a traceback:
# start_client joins that thread, so a death would be reported during this test.
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_wrong_password_and_bad_jaas_one_line(secured, kafkatier_cli, tmp_path):
    bad = tmp_path / "bad.conf"
    bad.write_text('Client {\n org.apache.zookeeper.server.auth.DigestLoginModule required\n'
                   ' username="kafka" password="wrong";\n};\n')
    with pytest.raises(ZooKeeperAuthError):
        start_client(secured.state["zookeeper"], connect_timeout=30.0,
                     security=zk_security({"java.security.auth.login.config": str(bad)}))
    r = kafkatier_cli.run("zookeeper", "security-migration", "--zookeeper.acl", "secure",
                          "--zookeeper.connect", secured.state["zookeeper"], env={"KAFKATIER_JAAS_CONFIG": str(bad)})
    assert r.returncode == 1 and "refused the SASL login" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    broken = tmp_path / "broken.conf"
    broken.write_text('Client { org.apache.zookeeper.server.auth.DigestLoginModule required username="kafka" ')
    with pytest.raises(ZooKeeperSecurityError):
        zk_security({"java.security.auth.login.config": str(broken)})
    r = kafkatier_cli.run("zookeeper", "security-migration", "--zookeeper.acl", "secure",
                          "--zookeeper.connect", secured.state["zookeeper"],
                          env={"KAFKA_OPTS": f"-Djava.security.auth.login.config={broken}"})
    assert r.returncode == 2 and "syntax error" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_broker_with_wrong_password_fails_fast_one_line(secured, kafkatier_cli, tmp_path):
    bad = tmp_path / "bad.conf"
    bad.write_text('Client {\n org.apache.zookeeper.server.auth.DigestLoginModule required\n'
                   ' username="kafka" password="wrong";\n};\n')
    props = tmp_path / "server.properties"
    props.write_text(f"zookeeper.set.acl=true\njava.security.auth.login.config={bad}\n")
    logdir = tmp_path / "logs"
    r = kafkatier_cli.run("broker", "start", "--id", "9", "--zookeeper", secured.state["zookeeper"],
                          "--log-dirs", str(logdir), "--config", str(props), timeout=60)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "refused the SASL login" in r.stderr
    assert not logdir.exists() or not any(logdir.iterdir())  # nothing half-started


def test_zookeeper_start_refuses_a_bad_server_jaas(kafkatier_cli, tmp_path):
    jaas = tmp_path / "server.conf"
    jaas.write_text('Client { org.apache.zookeeper.server.auth.DigestLoginModule required\n'
                    ' username="a" password="b"; };')
    r = kafkatier_cli.run("zookeeper", "start", "--data-dir", str(tmp_path / "zk"), "--port", "0",
                          "--sasl-jaas-config", str(jaas), "--detach")
    assert r.returncode == 2 and "Server section" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "zk" / "zookeeper.pid").exists()
