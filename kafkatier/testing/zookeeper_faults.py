"""ZooKeeper faults behind one interface, so a test can run against the embedded server and an ensemble alike.

``ZooKeeperUnderTest`` is what fault tests parametrize over:

- :class:`~kafkatier.testing.zookeeper_container.ZooKeeperEnsemble` implements it directly (pause every
  container with the cgroup freezer, stop every container and start new ones from the data);
- :class:`EmbeddedZooKeeperUnderTest` adapts the embedded server (one java process: SIGSTOP/SIGCONT, stop and
  start again on the same port and data directory).

:func:`expire_session` expires one kazoo client's session the way ZooKeeper's own tests do: a second connection
with the same session id and password closes the session.
"""
from __future__ import annotations

import os
import signal
import threading
from typing import Protocol

from kazoo.client import KazooClient, KazooState

from kafkatier.logsetup import get_logger, kv
from kafkatier.waiting import wait_for
from kafkatier.zk.embedded import EmbeddedZooKeeper

log = get_logger("zookeeper")


class ZooKeeperUnderTest(Protocol):
    @property
    def connect_string(self) -> str: ...

    def pause_all(self) -> None:
        """Freeze every server: no replies, no timers, connections stay open."""

    def unpause_all(self) -> None: ...

    def stop(self) -> None:
        """Stop every server; the data stays."""

    def start(self) -> object:
        """Start every server from its data and wait until it serves."""

    def restart_from_data(self) -> None: ...


class EmbeddedZooKeeperUnderTest:
    """The embedded server as a :class:`ZooKeeperUnderTest` (keeps its port and data across stop/start)."""

    def __init__(self, server: EmbeddedZooKeeper) -> None:
        self.server = server

    @property
    def connect_string(self) -> str:
        return self.server.connect_string

    def pause_all(self) -> None:
        self.server.send_signal(signal.SIGSTOP)
        log.info("embedded ZooKeeper paused %s", kv(pid=self.server.pid))

    def unpause_all(self) -> None:
        self.server.send_signal(signal.SIGCONT)
        log.info("embedded ZooKeeper unpaused %s", kv(pid=self.server.pid))

    def stop(self) -> None:
        if self.server.pid is not None:
            try:
                os.kill(self.server.pid, signal.SIGCONT)  # a stopped process cannot handle SIGTERM
            except ProcessLookupError:
                pass
        self.server.stop()

    def start(self) -> "EmbeddedZooKeeperUnderTest":
        self.server.start(wait_timeout=60)
        return self

    def restart_from_data(self) -> None:
        self.stop()
        self.start()

    def __repr__(self) -> str:
        return f"EmbeddedZooKeeperUnderTest({self.server!r})"


def expire_session(client: KazooClient, timeout: float = 30.0) -> None:
    """Expire ``client``'s session now and wait until the client has seen it (state LOST), then reconnected."""
    lost = threading.Event()

    def listener(state) -> None:
        if state == KazooState.LOST:
            lost.set()

    session_id, password = client.client_id
    client.add_listener(listener)
    try:
        hosts = ",".join(f"{host}:{port}" for host, port in client.hosts)
        twin = KazooClient(hosts=hosts, client_id=(session_id, password),
                           timeout=client._session_timeout / 1000)
        twin.start(timeout=timeout)
        twin.stop()   # closes the shared session
        twin.close()
        if not lost.wait(timeout):
            # an idle client notices only when it next talks to the server
            wait_for(lambda: client.exists("/") is not None or lost.is_set(), timeout, ignore=(Exception,),
                     message="the client to see its session expire")
            wait_for(lost.is_set, timeout, message="the client to see its session expire")
        wait_for(lambda: client.connected and client.client_id[0] != session_id, timeout,
                 message="the client to connect with a new session")
    finally:
        client.remove_listener(listener)
    log.info("session expired %s", kv(session=hex(session_id)))
