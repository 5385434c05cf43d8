"""``/brokers/ids/{id}`` registration against a real ZooKeeper: a node left by a killed process's session is
waited for (watched) until the session expires; a node held by a live session fails with a clear error after the
bound; a node the holder releases is taken at once."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from kafkatier.zk import paths
from kafkatier.zk.broker_registration import BrokerIdConflictError, register_broker
from kafkatier.zk.client import start_client

pytestmark = pytest.mark.integration

HOLDER = """
import sys, time
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1], timeout=float(sys.argv[2]))
zk.start(timeout=30)
zk.create("/brokers/ids/1", b"old", ephemeral=True)
print(zk.exists("/brokers/ids/1").czxid, flush=True)
time.sleep(600)
"""


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def ids(zk):
    zk.ensure_path(paths.BROKER_IDS)
    return zk


def test_a_killed_incarnations_node_is_waited_for_until_its_session_expires(zk_root, ids):
    connect, zk = zk_root
    session_timeout_s = 2.0
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, connect, str(session_timeout_s)],
                              stdout=subprocess.PIPE, text=True)
    try:
        old_czxid = int(holder.stdout.readline())
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    killed_at = time.monotonic()
    records = _Records()
    logger = logging.getLogger("kafkatier.zk")
    logger.addHandler(records)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        epoch = register_broker(zk, 1, b"new", wait_s=session_timeout_s + 5)
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
    waited = time.monotonic() - killed_at
    data, stat = zk.get(paths.broker(1))
    assert (data, stat.ephemeralOwner, stat.czxid) == (b"new", zk.client_id[0], epoch) and epoch > old_czxid
    assert any("waiting for it to expire" in m and "reason=" in m for m in records.messages)
    assert any(m.startswith("registered ") and "waited_s=" in m for m in records.messages)
    assert 1.0 <= waited < session_timeout_s + 5  # the server grants at least our 2 s, give or take one tick


def test_a_live_owner_makes_registration_fail_after_the_bound(zk_root, ids):
    connect, zk = zk_root
    other = start_client(connect)
    try:
        other.create(paths.broker(1), b"other", ephemeral=True)
        t0 = time.monotonic()
        with pytest.raises(BrokerIdConflictError) as e:
            register_broker(zk, 1, b"new", wait_s=1.0)
        assert time.monotonic() - t0 >= 1.0
        session = f"0x{other.client_id[0]:x}"
        assert str(e.value).startswith(f"broker id 1 is registered in ZooKeeper by another live session: "
                                       f"/brokers/ids/1 is owned by session {session}")
        assert "is another broker with id 1 running?" in str(e.value)
        assert zk.get(paths.broker(1))[0] == b"other"
    finally:
        other.stop()
        other.close()


def test_a_released_node_is_taken_when_the_watch_fires(zk_root, ids):
    connect, zk = zk_root
    other = start_client(connect)
    other.create(paths.broker(1), b"other", ephemeral=True)
    released = threading.Timer(0.5, lambda: (other.stop(), other.close()))
    released.start()
    t0 = time.monotonic()
    register_broker(zk, 1, b"new", wait_s=30.0)
    assert time.monotonic() - t0 < 10.0  # not the 30 s bound: woken by the deletion
    released.join()
    assert zk.get(paths.broker(1))[0] == b"new"


def test_our_own_node_counts_as_registered(ids):
    ids.create(paths.broker(1), b"mine", ephemeral=True)
    assert register_broker(ids, 1, b"new", wait_s=0.0) == ids.exists(paths.broker(1)).czxid


def test_a_persistent_node_is_refused_at_once(ids):
    ids.create(paths.broker(1), b"")
    with pytest.raises(BrokerIdConflictError, match="persistent node"):
        register_broker(ids, 1, b"new", wait_s=30.0)
