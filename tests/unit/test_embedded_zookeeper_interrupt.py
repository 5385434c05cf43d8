"""A start of the embedded ZooKeeper interrupted while it waits for the server (Ctrl-C, or a sweep stopping a hung
run with SIGTERM) stops the server it spawned: it runs in a session of its own and nobody else knows its pid."""
from __future__ import annotations

import sys

import pytest

from kafkatier.cluster import embedded_zookeeper
from kafkatier.cluster.embedded_zookeeper import EmbeddedZooKeeper, pid_alive


def test_an_interrupted_start_leaves_no_server_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(embedded_zookeeper, "java_command",
                        lambda *a, **k: [sys.executable, "-c", "import time; time.sleep(600)"])

    zk = EmbeddedZooKeeper(data_dir=tmp_path / "zookeeper", port=0)
    spawned = []

    def interrupted(*a, **k):
        spawned.append(int(zk.pid_path.read_text()))   # written once the server process is spawned
        raise KeyboardInterrupt()
    monkeypatch.setattr(embedded_zookeeper, "wait_until_serving", interrupted)
    with pytest.raises(KeyboardInterrupt):
        zk.start_detached()
    assert len(spawned) == 1 and not pid_alive(spawned[0])
    assert not zk.pid_path.exists()


def test_a_cluster_start_interrupted_before_its_state_exists_stops_its_zookeeper(tmp_path, monkeypatch):
    import subprocess

    from kafkatier.cluster import manager as manager_module
    from kafkatier.cluster.manager import ClusterManager
    servers = []

    class _Server:
        connect_string = "127.0.0.1:1"

        def __init__(self, **kwargs):
            pass

        def start_detached(self):
            self.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                         start_new_session=True)
            self.pid = self.proc.pid
            servers.append(self)
            return self.pid

    def interrupted(*a, **k):
        raise KeyboardInterrupt()
    monkeypatch.setattr(embedded_zookeeper, "EmbeddedZooKeeper", _Server)
    monkeypatch.setattr(manager_module, "write_server_properties", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ClusterManager(str(tmp_path)).up(brokers=1)
    assert len(servers) == 1 and servers[0].proc.wait(timeout=15) is not None
