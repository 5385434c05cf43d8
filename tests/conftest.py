"""Shared pytest fixtures.

Sections: the ``kafkatier`` command line; ZooKeeper.  Add new fixtures under a section header of their own.
"""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import attrs
import pytest
from kazoo.exceptions import KazooException

from kafkatier.zk.client import start_client
from kafkatier.zk.embedded import EmbeddedZooKeeper

REPO_ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------------------------
# The ``kafkatier`` command line


@attrs.frozen
class KafkatierCli:
    """How to run the ``kafkatier`` console script of this checkout in a subprocess."""

    argv: tuple[str, ...]
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 60.0, env: dict[str, str] | None = None,
            **kwargs) -> subprocess.CompletedProcess:
        """Run ``kafkatier ARGS...`` to completion, capturing text output."""
        return subprocess.run([*self.argv, *args], env={**self.env, **(env or {})}, capture_output=True,
                              text=True, timeout=timeout, **kwargs)

    def popen(self, *args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
        return subprocess.Popen([*self.argv, *args], env={**self.env, **(env or {})}, **kwargs)


@pytest.fixture(scope="session")
def kafkatier_cli() -> KafkatierCli:
    script = Path(sys.executable).with_name("kafkatier")
    argv = (str(script),) if script.exists() else (sys.executable, "-m", "kafkatier")
    # Import this checkout whatever state the venv's editable install is in.
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return KafkatierCli(argv=argv, env=env)


# ---------------------------------------------------------------------------------------------------------------
# ZooKeeper
#
# One embedded server for the whole session; each test gets its own chroot so tests never see each other's
# znodes.  Tests that stop, kill or restart ZooKeeper must start their own EmbeddedZooKeeper instead.


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory) -> EmbeddedZooKeeper:
    """A running embedded ZooKeeper (``.connect_string``), stopped at the end of the session."""
    server = EmbeddedZooKeeper(tmp_path_factory.mktemp("zookeeper"))
    server.start(wait_timeout=60)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def _zk_session_client(zookeeper):
    client = start_client(zookeeper.connect_string)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def zk_root(zookeeper, _zk_session_client):
    """``(connect_string_with_chroot, client)``: a started kazoo client chrooted to a fresh ``/t-<uuid>``."""
    root = f"/t-{uuid.uuid4().hex[:12]}"
    _zk_session_client.create(root)
    connect = zookeeper.connect_string + root
    client = start_client(connect)
    yield connect, client
    client.stop()
    client.close()
    try:
        _zk_session_client.delete(root, recursive=True)
    except KazooException:
        pass  # leftovers in a throw-away server are harmless


@pytest.fixture
def zk(zk_root):
    """A started kazoo client chrooted to a fresh path (the same one as ``zk_root``)."""
    return zk_root[1]


# ---------------------------------------------------------------------------------------------------------------
# Clusters: real broker processes on the session's ZooKeeper, each cluster in its own chroot.

@attrs.define
class RunningCluster:
    manager: object
    zk: object  # kazoo client chrooted like the brokers

    @property
    def bootstrap_servers(self) -> str:
        return self.manager.bootstrap_servers

    @property
    def zookeeper(self) -> str:
        return self.manager.zookeeper

    @property
    def data_dir(self) -> str:
        return self.manager.data_dir

    def controller_id(self) -> int | None:
        import json as _json
        try:
            return _json.loads(self.zk.get("/controller")[0])["brokerid"]
        except Exception:  # noqa: BLE001
            return None

    def broker_ids(self) -> list[int]:
        return [b["id"] for b in self.manager.state["brokers"]]


def _start_cluster(zookeeper, client, tmp_path, brokers=3, log_dirs=2, overrides=None, session_timeout_ms=6000):
    from kafkatier.cluster.manager import ClusterManager
    root = f"/cluster-{uuid.uuid4().hex[:10]}"
    client.create(root)
    connect = zookeeper.connect_string + root
    m = ClusterManager(str(tmp_path))
    m.up(brokers=brokers, log_dirs_per_broker=log_dirs, zookeeper=connect, overrides=overrides or {},
         session_timeout_ms=session_timeout_ms)
    return RunningCluster(m, start_client(connect))


def _stop_cluster(c: RunningCluster) -> None:
    try:
        c.zk.stop()
        c.zk.close()
    finally:
        c.manager.down()


@pytest.fixture
def cluster_factory(zookeeper, _zk_session_client, tmp_path):
    """``factory(brokers=3, log_dirs=2, overrides=None)`` -> a running cluster, stopped after the test."""
    made = []

    def factory(**kw):
        c = _start_cluster(zookeeper, _zk_session_client, tmp_path / f"cluster{len(made)}", **kw)
        made.append(c)
        return c
    yield factory
    for c in made:
        _stop_cluster(c)


@pytest.fixture(scope="module")
def module_cluster_factory(zookeeper, _zk_session_client, tmp_path_factory):
    """Like ``cluster_factory``, for clusters shared by the tests of one module."""
    made = []

    def factory(**kw):
        c = _start_cluster(zookeeper, _zk_session_client, tmp_path_factory.mktemp("cluster"), **kw)
        made.append(c)
        return c
    yield factory
    for c in made:
        _stop_cluster(c)


@pytest.fixture(scope="module")
def cluster(zookeeper, _zk_session_client, tmp_path_factory):
    """A 3-broker cluster shared by the tests of one module (tests must not stop its brokers)."""
    c = _start_cluster(zookeeper, _zk_session_client, tmp_path_factory.mktemp("cluster"))
    yield c
    _stop_cluster(c)


# ---------------------------------------------------------------------------------------------------------------
# Spark: one local session for the whole test session (start-up costs seconds), ``kafkatier`` data source
# registered.


@pytest.fixture(scope="session")
def spark():
    from kafkatier.spark.jobs import spark_session
    session = spark_session("local[2]", app_name="kafkatier-tests",
                            conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()
