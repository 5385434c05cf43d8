"""kafkatier.testing pieces that need neither Docker nor ZooKeeper: zoo.cfg of an ensemble, port allocation,
the image's input hash and the Debian mirror lookup."""
from __future__ import annotations

import attrs

from kafkatier.testing import zookeeper_image
from kafkatier.testing.zookeeper_container import EnsembleSettings, ServerAddress, ZooKeeperEnsemble


def test_ensemble_zoo_cfg_lists_every_server_on_loopback_and_a_standalone_one_none():
    peers = (ServerAddress(1, 20001, 20002, 20003), ServerAddress(2, 20011, 20012, 20013),
             ServerAddress(3, 20021, 20022, 20023))
    cfg = EnsembleSettings().zoo_cfg(peers[1], peers).splitlines()
    assert "clientPort=20011" in cfg and "clientPortAddress=127.0.0.1" in cfg
    assert "dataDir=/zk/data" in cfg and "4lw.commands.whitelist=*" in cfg
    assert [ln for ln in cfg if ln.startswith("server.")] == [
        "server.1=127.0.0.1:20002:20003", "server.2=127.0.0.1:20012:20013", "server.3=127.0.0.1:20022:20023"]
    standalone = EnsembleSettings().zoo_cfg(peers[0], peers[:1])
    assert "server." not in standalone


def test_an_ensemble_gets_nine_distinct_ports_and_its_own_data_dirs(tmp_path):
    ensemble = ZooKeeperEnsemble("kafkatier/zookeeper:test", tmp_path, size=3)
    ports = [p for s in ensemble.servers
             for p in (s.address.client_port, s.address.quorum_port, s.address.election_port)]
    assert len(set(ports)) == 9
    assert len({s.data_dir for s in ensemble.servers}) == 3
    assert ensemble.connect_string == ",".join(f"127.0.0.1:{s.address.client_port}" for s in ensemble.servers)


def test_the_image_tag_changes_with_any_jar_and_only_then(tmp_path):
    jars = []
    for name in ("zookeeper-3.9.5.jar", "zookeeper-jute-3.9.5.jar"):
        (tmp_path / name).write_bytes(name.encode())
        jars.append(tmp_path / name)
    inputs = zookeeper_image.ImageInputs(suite="bookworm", packages=("openjdk-17-jre-headless",),
                                         recipe_version=1, jars=tuple(jars))
    same = attrs.evolve(inputs, jars=tuple(reversed(jars)))
    assert inputs.tag == same.tag and inputs.tag.startswith("kafkatier/zookeeper:")
    before = inputs.digest()
    assert inputs.digest() == before                              # stable while nothing changes
    jars[0].write_bytes(b"patched")
    assert inputs.digest() != before
    assert attrs.evolve(inputs, packages=("openjdk-21-jre-headless",)).digest() != inputs.digest()


def test_the_debian_mirror_is_the_one_apt_uses(monkeypatch):
    monkeypatch.delenv(zookeeper_image.MIRROR_ENV, raising=False)
    mirror = zookeeper_image.debian_mirror()
    assert mirror.startswith("http") and "security" not in mirror
    monkeypatch.setenv(zookeeper_image.MIRROR_ENV, "http://mirror.example/debian")
    assert zookeeper_image.debian_mirror() == "http://mirror.example/debian"
