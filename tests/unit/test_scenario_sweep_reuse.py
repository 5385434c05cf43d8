"""Which sweeps may share an executor's ZooKeeper (a chroot per seed), and the run options a sweep uses for it:
``--zookeeper HOST:PORT/chroot`` and ``--reports failing`` (the shared server itself:
tests/integration/test_executor_zookeeper.py)."""
from __future__ import annotations

import subprocess
import sys

import attrs
import pytest

from kafkatier.scenario.executor_zookeeper import reuse_refused
from kafkatier.scenario.runner import ScenarioRunner
from kafkatier.scenario.spec import load, resolve


def _spec(name):
    return load(resolve(name))


def test_broker_faults_share_a_zookeeper():
    # expire_session and the controller's session are per broker session: still shareable.
    spec = _spec("nemesis-broker-faults")
    assert "expire_session" in spec.nemesis.menu
    assert reuse_refused(spec) is None


@pytest.mark.parametrize("name, words", [
    ("zk-restart-during-disablement", "faults the ZooKeeper server (zk_restart)"),
    ("zk-ensemble-leader-loss", "names its ZooKeeper"),
    ("nemesis-network-faults", "links"),
])
def test_scenarios_that_touch_the_server_or_its_paths_keep_their_own(name, words):
    assert words in reuse_refused(_spec(name))


def test_a_named_zookeeper_is_never_replaced():
    spec = _spec("nemesis-broker-faults")
    spec = attrs.evolve(spec, cluster=attrs.evolve(spec.cluster, zookeeper="127.0.0.1:2181"))
    assert "names its ZooKeeper" in reuse_refused(spec)


def test_reports_must_be_all_or_failing():
    with pytest.raises(ValueError, match="reports"):
        ScenarioRunner(_spec("nemesis-broker-faults"), 1, True, "runs", False, print, reports="never")


@pytest.mark.parametrize("value", ["127.0.0.1", "127.0.0.1:2181/", "127.0.0.1:x/a"])
def test_run_refuses_a_malformed_zookeeper_in_one_line(value):
    p = subprocess.run([sys.executable, "-m", "kafkatier", "scenario", "run", "nemesis-broker-faults", "--quick",
                        "--zookeeper", value], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "HOST:PORT[/chroot]" in p.stderr and len(p.stderr.strip().splitlines()) == 1, \
        p.stderr


def test_run_refuses_unknown_reports_value():
    p = subprocess.run([sys.executable, "-m", "kafkatier", "scenario", "run", "nemesis-broker-faults",
                        "--reports", "some"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--reports" in p.stderr


class _FakeZk:
    def __init__(self, made: list, deleted: list, fail: list):
        self.made, self.deleted, self.fail = made, deleted, fail

    def ensure_path(self, path):
        if self.fail:
            raise self.fail.pop(0)
        self.made.append(path)

    def delete(self, path, recursive=False):
        self.deleted.append(path)

    def stop(self):
        pass

    def close(self):
        pass


def test_a_seeds_chroot_is_made_again_after_a_connection_dropped_under_load(tmp_path, monkeypatch):
    from kafkatier.scenario.executor_zookeeper import ExecutorZooKeeper
    from kafkatier.zk import client
    from kafkatier.zk.errors import ConnectionLoss
    made, deleted = [], []
    fail = [client.ZooKeeperUnavailableError("no connection within 30s"), ConnectionLoss()]
    monkeypatch.setattr(client, "start_client", lambda *a, **k: _FakeZk(made, deleted, fail))
    monkeypatch.setattr(ExecutorZooKeeper, "connect_string", lambda self: "127.0.0.1:2181")
    (tmp_path / "kafkatier-sweep-zk-abc" / "leases").mkdir(parents=True)
    with ExecutorZooKeeper("abc", base=str(tmp_path)).lease(7) as connect:
        assert connect.startswith("127.0.0.1:2181/sweep-7-") and made == [connect[len("127.0.0.1:2181"):]]
    assert deleted == made


def test_a_seeds_chroot_gives_up_after_three_attempts(tmp_path, monkeypatch):
    from kafkatier.scenario.executor_zookeeper import ExecutorZooKeeper
    from kafkatier.zk import client
    fail = [client.ZooKeeperUnavailableError(f"attempt {i}") for i in range(1, 5)]
    monkeypatch.setattr(client, "start_client", lambda *a, **k: _FakeZk([], [], fail))
    monkeypatch.setattr(ExecutorZooKeeper, "connect_string", lambda self: "127.0.0.1:2181")
    (tmp_path / "kafkatier-sweep-zk-abc" / "leases").mkdir(parents=True)
    with pytest.raises(client.ZooKeeperUnavailableError, match="attempt 3"):
        with ExecutorZooKeeper("abc", base=str(tmp_path)).lease(7):
            pass
