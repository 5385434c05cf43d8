"""kafkatier's pytest plugin (entry point ``pytest11``): ZooKeeper, ensembles in containers and broker clusters.

Installed with kafkatier, so a user's own test suite gets these fixtures with no conftest:

``zookeeper`` (session)
    The session's ZooKeeper, chosen with ``--kafkatier-zookeeper`` (or ``$KAFKATIER_ZOOKEEPER``):
    ``embedded`` (default: an :class:`~kafkatier.cluster.embedded_zookeeper.EmbeddedZooKeeper`), ``container``
    (one server in a container), ``ensemble`` (three), or ``HOST:PORT[,HOST:PORT...]`` (a ZooKeeper you run).
    Every value has ``.connect_string``.  Tests share it: each works in its own chroot (``zk_root``, ``zk``, the cluster
    fixtures), and tests that stop or freeze ZooKeeper make their own (``zookeeper_ensemble``,
    ``zookeeper_under_test``).
``zk_root`` / ``zk``
    ``(connect_string_with_chroot, client)`` / the client: a kazoo client chrooted to a fresh ``/t-<uuid>``.
``zookeeper_ensemble`` (function)
    A fresh 3-server ensemble in containers (own data directories; distinct client, quorum and election
    ports on 127.0.0.1) with the fault helpers of :class:`~kafkatier.testing.zookeeper_container.ZooKeeperEnsemble`
    and :class:`~kafkatier.testing.zookeeper_container.ZooKeeperServer`: ``pause``/``unpause``, ``kill``/
    ``restart``, ``stop``/``start`` from the data, ``leader()``.
``zookeeper_under_test`` (function, indirect parameter ``"embedded"`` or ``"ensemble"``)
    A fresh ZooKeeper of that kind behind :class:`~kafkatier.testing.zookeeper_faults.ZooKeeperUnderTest`, for
    faults that make sense on both.
``kafkatier_cluster`` (function)
    ``kafkatier_cluster(zookeeper=None, brokers=3, log_dirs=2, overrides=None, session_timeout_ms=6000)``:
    broker processes against any of the above (default: the session's ``zookeeper``), stopped after the test.
``cluster_factory`` / ``module_cluster_factory`` / ``cluster``
    Clusters on the session's ``zookeeper``: per test, per module, and one shared by a module's tests.
``expire_session``
    :func:`~kafkatier.testing.zookeeper_faults.expire_session`, as a fixture.

Docker: the container kinds need a daemon (``scripts/docker.sh`` starts one safely) and build the ZooKeeper
image on first use (``kafkatier zookeeper build-image``; cached).  Without a daemon their tests are skipped with
the reason -- unless ``$CI`` is set, where they fail, so CI never passes by skipping them.  Containers are
labelled and removed at the end of the session; those of a session that died are removed at the start of the
next (see :mod:`kafkatier.testing.docker_engine`).
"""
from __future__ import annotations

import os
import uuid

import attrs
import pytest
from kafkatier.zk.errors import KazooException

from kafkatier.testing import zookeeper_faults
from kafkatier.testing.clusters import RunningCluster, start_cluster, stop_cluster
from kafkatier.zk.client import start_client
from kafkatier.cluster.embedded_zookeeper import EmbeddedZooKeeper, parse_connect_string

OPTION = "--kafkatier-zookeeper"
ENV = "KAFKATIER_ZOOKEEPER"
KINDS = ("embedded", "container", "ensemble")


@attrs.frozen
class ExternalZooKeeper:
    """A ZooKeeper the user runs (``--kafkatier-zookeeper=HOST:PORT``)."""

    connect_string: str


def pytest_addoption(parser) -> None:
    group = parser.getgroup("kafkatier")
    group.addoption(OPTION, default=os.environ.get(ENV, "embedded"), metavar="KIND",
                    help="ZooKeeper for the `zookeeper` fixture: embedded (default), container, ensemble, or "
                         f"HOST:PORT[,HOST:PORT...] (env {ENV})")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "docker: needs a Docker daemon (ZooKeeper in containers)")
    kind = config.getoption(OPTION)
    if kind not in KINDS:
        try:
            parse_connect_string(kind)
        except ValueError as e:
            raise pytest.UsageError(f"{OPTION}: expected one of {', '.join(KINDS)} or HOST:PORT ({e})") from None


# ---------------------------------------------------------------------------------------------------------------
# Docker


@pytest.fixture(scope="session")
def kafkatier_docker():
    """A docker SDK client; skips (fails under ``$CI``) without a daemon.  Cleans up our containers."""
    from kafkatier.testing import docker_engine

    try:
        client = docker_engine.docker_client()
    except docker_engine.DockerUnavailableError as e:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs Docker for the container tests: {e}", pytrace=False)
        pytest.skip(f"Docker is not available: {e}")
    docker_engine.remove_orphans(client)
    yield client
    docker_engine.remove_labelled(client)
    client.close()


@pytest.fixture(scope="session")
def zookeeper_image(kafkatier_docker) -> str:
    """The ZooKeeper image's tag (built on first use, then reused while its inputs are unchanged)."""
    from kafkatier.testing.zookeeper_image import ImageBuildError, ensure_image

    try:
        result = ensure_image(progress=lambda line: None)
    except ImageBuildError as e:
        pytest.fail(f"could not build the ZooKeeper image: {e}", pytrace=False)
    return result.tag


def _ensemble(image: str, base_dir, size: int):
    from kafkatier.testing.zookeeper_container import ZooKeeperEnsemble

    return ZooKeeperEnsemble(image, base_dir, size=size).start()


# ---------------------------------------------------------------------------------------------------------------
# ZooKeeper


@pytest.fixture(scope="session")
def zookeeper(request, tmp_path_factory):
    """The session's ZooKeeper (see ``--kafkatier-zookeeper``), stopped at the end of the session."""
    kind = request.config.getoption(OPTION)
    if kind == "embedded":
        server = EmbeddedZooKeeper(tmp_path_factory.mktemp("zookeeper"))
        server.start(wait_timeout=60)
        yield server
        server.stop()
    elif kind in ("container", "ensemble"):
        image = request.getfixturevalue("zookeeper_image")
        ensemble = _ensemble(image, tmp_path_factory.mktemp("zookeeper"), 1 if kind == "container" else 3)
        yield ensemble
        ensemble.stop()
    else:
        yield ExternalZooKeeper(kind)


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


@pytest.fixture
def zookeeper_ensemble(zookeeper_image, tmp_path):
    """A fresh 3-server ZooKeeper ensemble in containers, removed after the test."""
    ensemble = _ensemble(zookeeper_image, tmp_path / "ensemble", 3)
    yield ensemble
    ensemble.stop()


@pytest.fixture
def zookeeper_under_test(request, tmp_path):
    """A fresh ZooKeeper of the kind given by indirect parametrization (``embedded`` or ``ensemble``)."""
    kind = getattr(request, "param", "embedded")
    if kind == "embedded":
        server = EmbeddedZooKeeper(tmp_path / "zookeeper")
        server.start(wait_timeout=60)
        under_test = zookeeper_faults.EmbeddedZooKeeperUnderTest(server)
    elif kind == "ensemble":
        under_test = _ensemble(request.getfixturevalue("zookeeper_image"), tmp_path / "ensemble", 3)
    else:
        raise ValueError(f"zookeeper_under_test: unknown kind {kind!r} (embedded or ensemble)")
    yield under_test
    under_test.stop()


@pytest.fixture
def expire_session():
    """``expire_session(kazoo_client)``: expire that client's session and wait until it has a new one."""
    return zookeeper_faults.expire_session


# ---------------------------------------------------------------------------------------------------------------
# Clusters: real broker processes, each cluster in its own chroot.


@pytest.fixture
def kafkatier_cluster(request, tmp_path):
    """``kafkatier_cluster(zookeeper=None, **kw)`` -> a running cluster against ``zookeeper`` (any object with
    ``.connect_string``; default the session's), stopped after the test."""
    made: list[RunningCluster] = []
    clients = []

    def factory(zookeeper=None, **kw) -> RunningCluster:
        if zookeeper is None:
            zookeeper = request.getfixturevalue("zookeeper")
        client = start_client(zookeeper.connect_string)
        clients.append(client)
        c = start_cluster(zookeeper.connect_string, client, tmp_path / f"kafkatier-cluster{len(made)}", **kw)
        made.append(c)
        return c
    yield factory
    for c in made:
        stop_cluster(c)
    for client in clients:
        client.stop()
        client.close()


@pytest.fixture
def cluster_factory(zookeeper, _zk_session_client, tmp_path):
    """``factory(brokers=3, log_dirs=2, overrides=None)`` -> a running cluster, stopped after the test."""
    yield from _clusters(zookeeper, _zk_session_client, lambda n: tmp_path / f"cluster{n}")


@pytest.fixture(scope="module")
def module_cluster_factory(zookeeper, _zk_session_client, tmp_path_factory):
    """Like ``cluster_factory``, for clusters shared by the tests of one module."""
    yield from _clusters(zookeeper, _zk_session_client, lambda n: tmp_path_factory.mktemp("cluster"))


def _clusters(zookeeper, client, data_dir):
    """A cluster factory (``data_dir(n)`` for the n-th cluster) whose clusters are stopped when it is done."""
    made = []

    def factory(**kw):
        c = start_cluster(zookeeper.connect_string, client, data_dir(len(made)), **kw)
        made.append(c)
        return c
    yield factory
    for c in made:
        stop_cluster(c)


@pytest.fixture(scope="module")
def cluster(zookeeper, _zk_session_client, tmp_path_factory):
    """A 3-broker cluster shared by the tests of one module (tests must not stop its brokers)."""
    c = start_cluster(zookeeper.connect_string, _zk_session_client, tmp_path_factory.mktemp("cluster"))
    yield c
    stop_cluster(c)
