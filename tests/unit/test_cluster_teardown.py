"""Tearing a cluster down never fails because a broker exited on its own at the last moment (a run that had its
verdict would otherwise end as one that could not complete)."""
from __future__ import annotations

import signal

from kafkatier.cluster import manager as manager_module
from kafkatier.cluster.manager import ClusterManager


def test_down_and_stop_broker_take_a_broker_that_exits_meanwhile(tmp_path, monkeypatch):
    sent = []

    def gone(pid, sig):   # the process exited between the check and the signal
        sent.append(sig)
        raise ProcessLookupError(3, "No such process")
    # Seen running until SIGKILL was asked for: the deadlines pass, the last signal finds no process.
    monkeypatch.setattr(manager_module, "pid_alive", lambda pid: signal.SIGKILL not in sent)
    monkeypatch.setattr(manager_module.os, "kill", gone)
    m = ClusterManager(str(tmp_path))
    m.state = {"brokers": [{"id": 1, "pid": 4242}], "zookeeper": "127.0.0.1:1", "zookeeper_pid": None}
    m.down(timeout=0.1)
    assert m.state["brokers"][0]["pid"] is None and sent == [signal.SIGINT, signal.SIGKILL]
    sent.clear()
    m.state["brokers"][0]["pid"] = 4242
    m.stop_broker(1, timeout=0.1)
    assert sent == [signal.SIGTERM, signal.SIGKILL]
