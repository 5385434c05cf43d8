"""Broker registration: the ephemeral ``/brokers/ids/{id}`` znode (Kafka's ``KafkaZkClient.registerBroker``).

Like Kafka, the node is created with a two-op multi (``create(path, b"", EPHEMERAL)`` then
``setData(path, data, 0)``) and the broker epoch is the node's ``czxid``.  Like Kafka's ``CheckedEphemeral``, a
create that finds the node already there looks at its ``ephemeralOwner``: if it is our own session (a create
retried after a connection loss had in fact been applied) the registration stands.

Deliberate difference: when the node belongs to *another* session, Kafka's broker exits at once ("node already
exists and owner ... does not match current session ...").  That is what a broker restarted right after a
``kill -9`` meets: its previous incarnation's session lives on in ZooKeeper until the session timeout passes.
Here the broker waits for that node to go away instead -- watching it, not polling -- for at most
``wait_s`` (the session timeout plus a margin, see :func:`stale_registration_wait_s`), logging that it waits and
for which session; past that bound the owner is a live broker with the same id and
:class:`BrokerIdConflictError` says so.  The same applies when a broker re-registers after its own session
expired.
"""
from __future__ import annotations

import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

from kafkatier.logsetup import get_logger, kv
from kafkatier.zk import paths
from kafkatier.zk.client import zk_retry

log = get_logger("zk")

# ZooKeeper expires sessions in buckets of one tick (2 s with ZooKeeper's default tickTime) after the timeout;
# the rest covers a loaded machine.
STALE_REGISTRATION_MARGIN_S = 5.0


class BrokerIdConflictError(RuntimeError):
    """``/brokers/ids/{id}`` stayed owned by another live ZooKeeper session for longer than the wait bound."""


def stale_registration_wait_s(session_timeout_ms: int) -> float:
    """How long a registration waits for another session's node: that session's timeout (assumed equal to
    ours: the previous incarnation of this broker ran with the same config) plus a margin."""
    return session_timeout_ms / 1000.0 + STALE_REGISTRATION_MARGIN_S


def register_broker(zk: KazooClient, broker_id: int, data: bytes, wait_s: float) -> int:
    """Create ``/brokers/ids/{broker_id}`` holding ``data`` (an encoded ``BrokerRegistration``) as an ephemeral
    of ``zk``'s session and return the broker epoch (the node's czxid).

    If another session owns the node, wait up to ``wait_s`` seconds for it to be deleted (the owner's session
    expires or it shuts down), then create it; raise :class:`BrokerIdConflictError` if it is still there.
    """
    path = paths.broker(broker_id)
    deadline = time.monotonic() + wait_s
    waiting_since: float | None = None
    while True:
        if _create(zk, path, data):
            stat = zk_retry(zk.exists, path)
            if stat is not None and stat.ephemeralOwner == _session_id(zk):
                return _registered(path, stat.czxid, waiting_since)
            continue  # deleted again already (our session expired meanwhile): try again
        changed = threading.Event()
        stat = zk_retry(zk.exists, path, watch=lambda event: changed.set())
        if stat is None:
            continue  # deleted between the create and the look
        session = _session_id(zk)
        if stat.ephemeralOwner == session:
            return _registered(path, stat.czxid, waiting_since)  # our own create, retried after a connection loss
        if stat.ephemeralOwner == 0:
            raise BrokerIdConflictError(f"{path} exists and is a persistent node, not a broker registration; "
                                        f"remove it (kafkatier zookeeper shell ... delete {path})")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BrokerIdConflictError(
                f"broker id {broker_id} is registered in ZooKeeper by another live session: {path} is owned by "
                f"session 0x{stat.ephemeralOwner:x}, ours is 0x{session:x}, and it was not released within "
                f"{wait_s:.1f}s (the session timeout plus {STALE_REGISTRATION_MARGIN_S:g}s); is another broker "
                f"with id {broker_id} running?")
        if waiting_since is None:
            waiting_since = time.monotonic()
            log.warning("broker id already registered by another session; waiting for it to expire %s", kv(
                path=path, owner_session=f"0x{stat.ephemeralOwner:x}", our_session=f"0x{session:x}",
                registered_czxid=stat.czxid, max_wait_s=f"{remaining:.1f}",
                reason="owned by another session: this broker's previous incarnation, until its session expires, "
                       "or another broker with this id"))
        changed.wait(remaining)


def _create(zk: KazooClient, path: str, data: bytes) -> bool:
    """The two-op multi; False if the node already exists."""
    def attempt() -> bool:
        t = zk.transaction()
        t.create(path, b"", ephemeral=True)
        t.set_data(path, data, 0)
        results = t.commit()
        if any(isinstance(r, NodeExistsError) for r in results):
            return False
        for r in results:
            if isinstance(r, Exception):
                raise r
        return True
    return zk_retry(attempt)


def _session_id(zk: KazooClient) -> int:
    client_id = zk.client_id
    return client_id[0] if client_id else -1


def _registered(path: str, czxid: int, waiting_since: float | None) -> int:
    fields = dict(path=path, broker_epoch=czxid)
    if waiting_since is not None:
        fields["waited_s"] = f"{time.monotonic() - waiting_since:.2f}"
    log.info("registered %s", kv(**fields))
    return czxid
