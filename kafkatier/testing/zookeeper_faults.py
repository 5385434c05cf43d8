"""ZooKeeper faults behind one interface, so a test can run against the embedded server and an ensemble alike.

``ZooKeeperUnderTest`` is what fault tests parametrize over:

- :class:`~kafkatier.testing.zookeeper_container.ZooKeeperEnsemble` implements it directly (pause every
  container with the cgroup freezer, stop every container and start new ones from the data);
- :class:`EmbeddedZooKeeperUnderTest` adapts the embedded server (one java process: SIGSTOP/SIGCONT, stop and
  start again on the same port and data directory).

:func:`expire_session` expires one kazoo client's session the way ZooKeeper's own tests do: a second connection
with the same session id and password closes the session; :func:`expire_session_id` does it for a session this
process does not own (a broker's), deriving the password as ZooKeeper does.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Protocol

from kazoo.client import KazooClient, KazooState

from kafkatier.logsetup import get_logger, kv
from kafkatier.waiting import wait_for
from kafkatier.cluster.embedded_zookeeper import EmbeddedZooKeeper

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


_JAVA_RANDOM_MULTIPLIER = 0x5DEECE66D
_MASK_48 = (1 << 48) - 1
_SUPER_SECRET = 0xB3415C00   # ZooKeeperServer.superSecret


def session_password(session_id: int) -> bytes:
    """The password ZooKeeper gave session ``session_id``.

    ZooKeeper derives it (ZooKeeperServer.generatePasswd) as 16 bytes of ``java.util.Random(id ^ superSecret)``,
    a documented "sanity check" rather than a secret -- which lets a test expire a session it does not own, such as
    a broker's (its id is the ``ephemeralOwner`` of ``/brokers/ids/<id>``).
    """
    seed = ((session_id ^ _SUPER_SECRET) ^ _JAVA_RANDOM_MULTIPLIER) & _MASK_48
    out = bytearray()
    while len(out) < 16:
        seed = (seed * _JAVA_RANDOM_MULTIPLIER + 0xB) & _MASK_48
        value = seed >> 16                                   # Random.nextInt(): the top 32 of 48 bits
        for _ in range(min(4, 16 - len(out))):
            out.append(value & 0xFF)
            value >>= 8
    return bytes(out)


def expire_session_id(connect_string: str, session_id: int, timeout: float = 30.0) -> None:
    """Close session ``session_id`` as if it had expired: its ephemerals go, its owner sees SESSION_EXPIRED.

    A twin connection attaches to the session and closes it.  Attaching moves the session to the twin's
    connection, so the owner's drops and it reconnects at once, taking the session back: if it does so before the
    twin's close, the twin's connection is the one dropped and the close never reaches ZooKeeper (seen on an
    ensemble, the controller's session surviving).  So the twin attaches again until ZooKeeper answers it with a
    session of its own: only then is the old one gone."""
    hosts = connect_string.split("/", 1)[0]
    deadline = time.monotonic() + timeout
    attached = 0

    def gone() -> bool:
        nonlocal attached
        twin = KazooClient(hosts=hosts, client_id=(session_id, session_password(session_id)), timeout=10.0)
        twin.start(timeout=max(1.0, deadline - time.monotonic()))
        try:
            if twin.client_id[0] != session_id:
                return True   # gone: ZooKeeper gave the twin a session of its own
            attached += 1
            return False
        finally:
            twin.stop()   # closes the shared session, unless its owner took it back first
            twin.close()
    wait_for(gone, timeout, interval=0.05, message=f"session {hex(session_id)} to close")
    if attached:
        log.info("session expired %s", kv(session=hex(session_id), attempts=attached))


def expire_session(client: KazooClient, timeout: float = 30.0) -> None:
    """Expire ``client``'s session now and wait until the client has seen it (state LOST), then reconnected."""
    lost = threading.Event()

    def listener(state) -> None:
        if state == KazooState.LOST:
            lost.set()

    session_id = client.client_id[0]
    client.add_listener(listener)
    try:
        expire_session_id(",".join(f"{host}:{port}" for host, port in client.hosts), session_id, timeout)
        if not lost.is_set():
            # an idle client notices only when it next talks to the server
            wait_for(lambda: lost.is_set() or client.exists("/") is None, timeout, ignore=(Exception,),
                     message="the client to see its session expire")
            wait_for(lost.is_set, timeout, message="the client to see its session expire")
        wait_for(lambda: client.connected and client.client_id[0] != session_id, timeout,
                 message="the client to connect with a new session")
    finally:
        client.remove_listener(listener)
