"""The ZooKeeper a sweep's seeds share on one executor: an empty chroot per seed, removed after it; one server
for every lease; stopped by the driver's stop file, or by itself once idle (reuse: docs/scenarios.md)."""
from __future__ import annotations

import os

import pytest

from kafkatier.scenario.executor_zookeeper import ExecutorZooKeeper, _pid_alive, _read_pid
from kafkatier.waiting import wait_for
from kafkatier.zk.client import start_client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_leases_share_one_server_each_in_its_own_chroot(tmp_path):
    ezk = ExecutorZooKeeper("t1", base=str(tmp_path))
    try:
        with ezk.lease(1) as a, ezk.lease(2) as b:
            server_a, chroot_a = a.split("/", 1)
            server_b, chroot_b = b.split("/", 1)
            assert server_a == server_b and chroot_a != chroot_b and chroot_a.startswith("sweep-1-")
            zk = start_client(a, timeout=10.0, connect_timeout=30.0)
            try:
                zk.create("/brokers/ids/1", b"x", makepath=True)
                assert zk.get_children("/brokers/ids") == ["1"]
            finally:
                zk.stop()
                zk.close()
            assert len(os.listdir(os.path.join(ezk.dir, "leases"))) == 2
        root = start_client(server_a, timeout=10.0, connect_timeout=30.0)
        try:
            assert not [c for c in root.get_children("/") if c.startswith("sweep-")]   # chroots removed
        finally:
            root.stop()
            root.close()
        assert os.listdir(os.path.join(ezk.dir, "leases")) == []
        keeper = _read_pid(os.path.join(ezk.dir, "keeper.pid"))
        assert _pid_alive(keeper)
    finally:
        ezk.stop()
    assert not _pid_alive(keeper) and not os.path.exists(ezk.dir)


def test_an_idle_keeper_stops_its_server(tmp_path):
    ezk = ExecutorZooKeeper("t2", base=str(tmp_path), idle_s=1.0)
    with ezk.lease(1):
        keeper = _read_pid(os.path.join(ezk.dir, "keeper.pid"))
    wait_for(lambda: not _pid_alive(keeper), 60, interval=0.2, message="the idle keeper to stop")
    assert not os.path.exists(os.path.join(ezk.dir, "connect"))
    # The next seed on this machine starts a new one.
    try:
        with ezk.lease(2) as c:
            assert c.split("/", 1)[1].startswith("sweep-2-")
            assert _read_pid(os.path.join(ezk.dir, "keeper.pid")) != keeper
    finally:
        ezk.stop()
