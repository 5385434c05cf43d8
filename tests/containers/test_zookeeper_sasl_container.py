"""SASL in the ZooKeeper container image (docs/security.md#zookeeper): a server in a container started with SASL
required (a JAAS ``Server`` section, ``enforce.auth.schemes=sasl``) refuses an anonymous client and a wrong
password, and a cluster's brokers connect to it with the JAAS ``Client`` section and ``zookeeper.set.acl=true``."""
from __future__ import annotations

import secrets

import pytest

from kafkatier.cluster.manager import ClusterManager
from kafkatier.testing.zookeeper_container import ZooKeeperEnsemble
from kafkatier.zk.client import ZooKeeperAuthError, start_client
from kafkatier.zk.security import ZkSecurity, ZooKeeperSecurityError, server_jaas, zk_security

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(300)]


@pytest.fixture
def sasl_zookeeper(zookeeper_image, tmp_path):
    jaas = tmp_path / "zookeeper-jaas.conf"
    jaas.write_text(server_jaas({"kafka": secrets.token_urlsafe(16)}))
    jaas.chmod(0o600)
    ensemble = ZooKeeperEnsemble(zookeeper_image, tmp_path / "zk", size=1, sasl_jaas_config=jaas).start()
    yield ensemble, str(jaas)
    ensemble.stop()


def test_container_requires_sasl_and_a_broker_logs_in_with_the_client_section(sasl_zookeeper, tmp_path):
    ensemble, jaas = sasl_zookeeper
    with pytest.raises(ZooKeeperAuthError, match="requires a SASL login"):   # enforce.auth: nothing without one
        start_client(ensemble.connect_string, timeout=6.0, connect_timeout=30.0, security=ZkSecurity())
    with pytest.raises(ZooKeeperAuthError, match="refused the SASL login"):
        start_client(ensemble.connect_string, timeout=6.0, connect_timeout=30.0,
                     security=ZkSecurity(username="kafka", password="wrong"))
    m = ClusterManager(str(tmp_path / "cluster"))
    try:
        m.up(brokers=1, log_dirs_per_broker=1, zookeeper=ensemble.connect_string,
             overrides={"zookeeper.set.acl": "true", "java.security.auth.login.config": jaas})
        admin = start_client(ensemble.connect_string, timeout=6.0, connect_timeout=30.0,
                             security=zk_security({"java.security.auth.login.config": jaas}))
        try:
            acls, _ = admin.get_acls("/brokers/ids/1")
            assert any(a.id.scheme == "sasl" and a.id.id == "kafka" for a in acls), acls
        finally:
            admin.stop()
            admin.close()
    finally:
        if m.state:
            m.down()


def test_a_bad_server_jaas_is_one_line_before_any_container(zookeeper_image, tmp_path):
    bad = tmp_path / "bad.conf"
    bad.write_text("Server { nonsense };")
    with pytest.raises(ZooKeeperSecurityError) as e:
        ZooKeeperEnsemble(zookeeper_image, tmp_path / "zk", size=1, sasl_jaas_config=bad)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "zk").exists()


