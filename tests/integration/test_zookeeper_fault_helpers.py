"""The plugin's session-expiry helpers on the session's ZooKeeper: ZooKeeper's derived session password,
expiring a client's own session, and expiring a session this process does not own."""
from __future__ import annotations

import pytest

from kafkatier.testing.zookeeper_faults import expire_session_id, session_password
from kafkatier.waiting import wait_for
from kafkatier.zk.client import start_client

pytestmark = pytest.mark.integration


def test_the_session_password_is_the_one_zookeeper_gave(zookeeper):
    client = start_client(zookeeper.connect_string)
    try:
        session_id, password = client.client_id
        assert session_password(session_id) == password
    finally:
        client.stop()
        client.close()


def test_expire_session_gives_the_client_a_new_session_and_drops_its_ephemerals(zk_root, expire_session):
    connect, zk = zk_root
    zk.create("/mine", ephemeral=True)
    old = zk.client_id[0]
    expire_session(zk)
    assert zk.client_id[0] != old
    assert zk.exists("/mine") is None


def test_expire_session_id_expires_a_session_owned_by_another_client(zk_root):
    connect, zk = zk_root
    other = start_client(connect)
    try:
        other.create("/theirs", ephemeral=True)
        expire_session_id(connect, zk.exists("/theirs").ephemeralOwner)
        wait_for(lambda: zk.exists("/theirs") is None, 10, message="the other session's ephemeral to go")
    finally:
        other.stop()
        other.close()
