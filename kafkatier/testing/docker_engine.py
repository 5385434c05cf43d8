"""The Docker daemon as the tests use it: reached safely, and cleaned up by our own labels.

The rules every container made by :mod:`kafkatier.testing` follows (``scripts/docker.sh`` starts the daemon the
same way: ``dockerd --bridge=none --iptables=false``):

- host networking only (``network_mode="host"``), every port bound on 127.0.0.1 -- never a bridge network,
  never an address outside 127.0.0.0/8;
- testcontainers' reaper (Ryuk) is off (``TESTCONTAINERS_RYUK_DISABLED=true``): it needs a pulled image and a
  bridge port.  Instead every container carries the label ``kafkatier.testing=1`` plus the session that made it,
  and :func:`remove_labelled` removes them (with their anonymous volumes) at the start of a session -- the
  leftovers of an interrupted run -- and at its end.
"""
from __future__ import annotations

import os
import uuid

from kafkatier.logsetup import get_logger, kv

log = get_logger("docker")

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
LABEL = "kafkatier.testing"
SESSION_LABEL = "kafkatier.testing.session"

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
    return {LABEL: "1", SESSION_LABEL: SESSION_ID}


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


def remove_labelled(client, session: str | None = None) -> int:
    """Force-remove our containers (of ``session``, or of every session) and their volumes; returns how many."""
    selector = f"{SESSION_LABEL}={session}" if session else f"{LABEL}=1"
    removed = 0
    for container in client.containers.list(all=True, filters={"label": selector}):
        try:
            container.remove(force=True, v=True)
            removed += 1
        except Exception as e:  # noqa: BLE001 - one stuck container must not keep the others alive
            log.warning("could not remove container %s", kv(name=container.name, error=e))
    for volume in client.volumes.list(filters={"label": selector}):
        try:
            volume.remove(force=True)
        except Exception as e:  # noqa: BLE001
            log.warning("could not remove volume %s", kv(name=volume.name, error=e))
    if removed:
        log.info("removed containers %s", kv(count=removed, selector=selector))
    return removed
