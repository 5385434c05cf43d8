"""ZkNodeChangeNotificationListener on a real ZooKeeper: order, baseline, resync, skipped errors, stop joins."""
from __future__ import annotations

import threading

import pytest

from kafkatier.server.acl import AclAuthorizer
from kafkatier.waiting import wait_for
from kafkatier.zk.node_change_notification_listener import NotificationError, ZkNodeChangeNotificationListener

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

ROOT = "/test-changes"


class Recorder:
    def __init__(self):
        self.seen: list[bytes] = []
        self.resyncs = 0

    def process_notification(self, path: str, data: bytes) -> None:
        if data == b"bad":
            raise NotificationError("bad notification")
        self.seen.append(data)

    def resync(self) -> None:
        self.resyncs += 1


def notify(zk, data: bytes) -> None:
    zk.create(f"{ROOT}/change_", data, sequence=True, makepath=True)


def test_new_notifications_in_order_errors_skipped_and_stop_joins_the_thread(zk):
    notify(zk, b"before")                                    # covered by the start-up resync, not replayed
    rec = Recorder()
    listener = ZkNodeChangeNotificationListener(zk, ROOT, "change_", rec, resync=rec.resync, name="test-listener")
    listener.start()
    try:
        assert rec.resyncs == 1 and rec.seen == []
        for data in (b"1", b"bad", b"2", b"3"):
            notify(zk, data)
        wait_for(lambda: rec.seen == [b"1", b"2", b"3"], 10, interval=0.01, message="the three good notifications")
        assert listener.error_count == 1
    finally:
        listener.stop()
    assert not any(t.name == "test-listener" for t in threading.enumerate())


def test_acl_authorizer_close_joins_its_listener_threads(zk):
    a = AclAuthorizer(zk)
    a.start()
    assert any(t.name.startswith("acl-changes") for t in threading.enumerate())
    a.close()
    assert not any(t.name.startswith("acl-changes") for t in threading.enumerate())
