"""The Docker daemon as the tests use it: reached safely, and cleaned up by our own labels.

The rules every container made by :mod:`kafkatier.testing` follows (``scripts/docker.sh`` starts the daemon the
same way: ``dockerd --bridge=none --iptables=false``):

- host networking only (``network_mode="host"``), every port bound on 127.0.0.1 -- never a bridge network,
  never an address outside 127.0.0.0/8;
- testcontainers' reaper (Ryuk) is off (``TESTCONTAINERS_RYUK_DISABLED=true``): it needs a pulled image and a
  bridge port.  Instead every container carries the label ``kafkatier.testing=1`` plus the session and the pid
  that made it; a session removes its own containers (with their anonymous volumes) when it ends
  (:func:`remove_labelled`) and, when it starts, those of sessions whose process is gone -- the leftovers of an
  interrupted run -- without touching those of another live test run (:func:`remove_orphans`).
"""
from __future__ import annotations

import os
import uuid

from kafkatier.logsetup import get_logger, kv
from kafkatier.cluster.embedded_zookeeper import pid_alive

log = get_logger("docker")

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
LABEL = "kafkatier.testing"
SESSION_LABEL = "kafkatier.testing.session"
PID_LABEL = "kafkatier.testing.pid"

#: This process's session id: the value of ``SESSION_LABEL`` on the containers it creates.
SESSION_ID = uuid.uuid4().hex[:12]


class DockerUnavailableError(RuntimeError):
    """No usable Docker daemon; the message says why and how to start one."""


def configure_environment() -> None:
    """Point testcontainers at our daemon with Ryuk off (before its first container is constructed)."""
    os.environ["TESTCONTAINERS_RYUK_DISABLED"] = "true"
    # With DOCKER_HOST set, testcontainers does not look for a docker-in-docker network to join.
    os.environ.setdefault("DOCKER_HOST", DEFAULT_DOCKER_HOST)


def labels() -> dict[str, str]:
    """The labels every container of this session carries."""
    return {LABEL: "1", SESSION_LABEL: SESSION_ID, PID_LABEL: str(os.getpid())}


def docker_client(timeout: float = 30.0):
    """A ``docker.DockerClient`` that answered a ping; DockerUnavailableError otherwise."""
    configure_environment()
    try:
        import docker
        from docker.errors import DockerException
    except ImportError as e:  # the `test` extra is not installed
        raise DockerUnavailableError(f"the docker SDK is not installed ({e}); pip install -e '.[test]'") from None
    host = os.environ["DOCKER_HOST"]
    try:
        client = docker.DockerClient(base_url=host, timeout=int(timeout))
        client.ping()
    except DockerException as e:
        raise DockerUnavailableError(
            f"no Docker daemon at {host} ({e.__class__.__name__}: {str(e)[:200]}); start one with "
            "scripts/docker.sh") from None
    return client


def _owner_alive(container) -> bool:
    pid = container.labels.get(PID_LABEL, "")
    return pid.isdigit() and pid_alive(int(pid))


def remove_orphans(client) -> int:
    """Remove the containers of test sessions whose process is gone; returns how many."""
    return _remove(client, [c for c in client.containers.list(all=True, filters={"label": f"{LABEL}=1"})
                            if not _owner_alive(c)], f"{LABEL}=1 (orphans)")


def remove_labelled(client, session: str = SESSION_ID) -> int:
    """Force-remove the containers (and volumes) of ``session``, by default this one; returns how many."""
    selector = f"{SESSION_LABEL}={session}"
    removed = _remove(client, client.containers.list(all=True, filters={"label": selector}), selector)
    for volume in client.volumes.list(filters={"label": selector}):
        try:
            volume.remove(force=True)
        except Exception as e:  # noqa: BLE001
            log.warning("could not remove volume %s", kv(name=volume.name, error=e))
    return removed


def _remove(client, containers, selector: str) -> int:
    removed = 0
    for container in containers:
        try:
            container.remove(force=True, v=True)
            removed += 1
        except Exception as e:  # noqa: BLE001 - one stuck container must not keep the others alive
            log.warning("could not remove container %s", kv(name=container.name, error=e))
    if removed:
        log.info("removed containers %s", kv(count=removed, selector=selector))
    return removed
