"""DynamicConfigManager on a real ZooKeeper: changes reach the handler, bad notifications are skipped, old ones
are purged."""
from __future__ import annotations

import logging
import threading
import time

import pytest

from kafkatier.admin.admin_zk_client import AdminZkClient
from kafkatier.server.dynamic_config_manager import DynamicConfigManager
from kafkatier.waiting import wait_for
from kafkatier.zk import codecs, paths
from kafkatier.zk.client import start_client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

NOTIFY = paths.CONFIG_CHANGES + "/" + paths.CONFIG_CHANGE_PREFIX


class Recorder:
    """A handler that records its calls; ``fail_on`` names entities whose handling raises."""

    def __init__(self, fail_on: tuple[str, ...] = ()):
        self.calls: list[tuple[str, dict]] = []
        self.fail_on = fail_on
        self.lock = threading.Lock()

    def __call__(self, name: str, config: dict) -> None:
        with self.lock:
            self.calls.append((name, config))
        if name in self.fail_on:
            raise RuntimeError(f"cannot apply config of {name}")

    def names(self) -> list[str]:
        with self.lock:
            return [n for n, _ in self.calls]


@pytest.fixture
def admin(zk):
    reg = codecs.BrokerRegistration.create(1, ["PLAINTEXT://127.0.0.1:9091"], {"PLAINTEXT": "PLAINTEXT"}, 1)
    zk.create(paths.broker(1), reg.encode(), ephemeral=True, makepath=True)
    return AdminZkClient(zk)


@pytest.fixture
def managers():
    started: list[DynamicConfigManager] = []
    yield started
    for m in started:
        m.stop()


def start(zk, handlers, managers, **kw) -> DynamicConfigManager:
    m = DynamicConfigManager(zk, handlers, **kw)
    managers.append(m)
    m.start()
    return m


def test_alter_reaches_the_handler_with_the_new_config(admin, zk, managers):
    admin.create_topic("t", 1, 1)
    topics, brokers = Recorder(), Recorder()
    m = start(zk, {"topics": topics, "brokers": brokers}, managers)
    admin.alter_topic_config("t", {"retention.ms": "1000"})
    wait_for(lambda: topics.calls, 10, message="topic handler call")
    assert topics.calls == [("t", {"retention.ms": "1000"})]
    admin.alter_topic_config("t", {}, delete=["retention.ms"])
    wait_for(lambda: len(topics.calls) == 2, 10, message="second call")
    assert topics.calls[1] == ("t", {})
    assert brokers.calls == [] and m.error_count == 0
    assert m.last_processed == paths.sequence_number(sorted(zk.get_children(paths.CONFIG_CHANGES))[-1])


def test_old_notifications_are_not_replayed_and_v1_is_read(admin, zk, managers):
    admin.create_topic("old", 1, 1)
    admin.alter_topic_config("old", {"retention.ms": "1"})       # before the manager starts
    rec = Recorder()
    start(zk, {"topics": rec}, managers)
    zk.create(paths.topic_config("v1"), codecs.EntityConfig({"segment.ms": "5"}).encode())
    zk.create(NOTIFY, b'{"version":1,"entity_type":"topics","entity_name":"v1"}', sequence=True)
    wait_for(lambda: rec.calls, 10, message="v1 notification handled")
    assert rec.calls == [("v1", {"segment.ms": "5"})]


def test_malformed_notifications_are_skipped_without_stopping_the_listener(admin, zk, managers, caplog):
    caplog.set_level(logging.INFO, logger="kafkatier")
    admin.create_topic("t", 1, 1)
    rec = Recorder(fail_on=("boom",))
    m = start(zk, {"topics": rec}, managers)
    for payload in (b"not json", b'{"version":2}', b'{"version":2,"entity_path":"nonsense/x"}',
                    b'{"version":2,"entity_path":"topics/a/../b"}', b'{"version":2,"entity_path":"topics/x\\ud800"}',
                    b"", b'{"version":2,"entity_path":"topics/boom"}'):
        zk.create(NOTIFY, payload, sequence=True)
    zk.create(paths.topic_config("bad"), b"{garbage")
    zk.create(NOTIFY, b'{"version":2,"entity_path":"topics/bad"}', sequence=True)
    admin.alter_topic_config("t", {"retention.ms": "1000"})
    wait_for(lambda: "t" in rec.names(), 10, message="the valid notification after the bad ones")
    assert rec.names() == ["boom", "t"]
    assert m.error_count == 8
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 8 and all("error processing change notification" in r.getMessage() for r in errors)
    # Still listening.
    admin.alter_topic_config("t", {"retention.ms": "2000"})
    wait_for(lambda: rec.calls[-1] == ("t", {"retention.ms": "2000"}), 10, message="listener alive")


def test_every_broker_applies_the_change_and_expired_notifications_are_purged(zk_root, admin, zk, managers):
    admin.create_topic("t", 1, 1)
    other = start_client(zk_root[0])
    clock = {"offset_ms": 0}

    def clock_ms() -> int:
        return int(time.time() * 1000) + clock["offset_ms"]

    try:
        recs = [Recorder(), Recorder()]
        ms = [start(client, {"topics": rec}, managers, clock_ms=clock_ms) for client, rec in zip((zk, other), recs)]
        admin.alter_topic_config("t", {"retention.ms": "1000"})
        wait_for(lambda: all(r.calls for r in recs), 10, message="both brokers applied the change")
        assert all(r.calls == [("t", {"retention.ms": "1000"})] for r in recs)
        assert len(zk.get_children(paths.CONFIG_CHANGES)) == 1          # younger than 15 minutes: kept

        clock["offset_ms"] = 16 * 60 * 1000                              # 16 minutes later
        for m in ms:                                                     # both try to purge; one finds NoNode
            m.trigger()
        wait_for(lambda: zk.get_children(paths.CONFIG_CHANGES) == [], 10, message="notification purged")
        assert all(m.error_count == 0 for m in ms)
        admin.alter_topic_config("t", {"retention.ms": "2000"})          # numbering goes on after a purge
        wait_for(lambda: all(len(r.calls) == 2 for r in recs), 10, message="next change applied")
    finally:
        for m in managers:
            m.stop()
        other.stop()
        other.close()
