"""Request faults and clock skew as scenario actions (``server/fault_injection.py`` says what each does).

``inject_errors``: one request fault on the ``target`` broker, in force once the broker has applied it: ``api``
and one of ``errors`` (names or codes, popped one per request; ``count`` repeats the list), ``latency_ms``
(``count`` requests, or all), ``drop_response_nth``, ``close_connection_nth``; optionally ``topic`` +
``partition``; ``duration_s``: removed after that long; ``clear = true``: remove the broker's faults.

``clock_skew``: the ``target`` broker's wall clock ``offset_ms`` ahead, drifting ``drift_ppm``; ``duration_s``:
reset after that long.

Each is recorded as a ``nemesis`` info entry (``value``: the broker) with the fault's fields; heal removes every
request fault and resets every clock.  Nemesis menu entries: ``inject_errors`` (Produce NOT_LEADER_OR_FOLLOWER
twice on a random broker), ``request_latency`` (Produce answered 200 ms late on a random broker for a
drawn duration), ``clock_skew`` (a random broker 10 minutes ahead for a drawn duration).
"""
from __future__ import annotations

import threading

from kafkatier.cluster import request_faults
from kafkatier.cluster.manager import ClusterManager
from kafkatier.logsetup import get_logger, kv
from kafkatier.scenario.history import History
from kafkatier.zk.client import start_client

log = get_logger("scenario.request-faults")

ACTIONS = ("inject_errors", "clock_skew")
#: Nemesis menu entries (as schedule action fields) and those drawn a duration.
MENU = {
    "inject_errors": dict(action="inject_errors", target="random", api="Produce",
                          errors=("NOT_LEADER_OR_FOLLOWER",), count=2),
    "request_latency": dict(action="inject_errors", target="random", api="Produce", latency_ms=200.0),
    "clock_skew": dict(action="clock_skew", target="random", offset_ms=600_000.0),
}
TIMED = ("request_latency", "clock_skew")
MARKERS = ACTIONS


class RequestFaults:
    """Applies and heals a run's request faults through ``/kafkatier/faults/<brokerId>``."""

    def __init__(self, manager: ClusterManager, history: History):
        self.manager = manager
        self.history = history
        self._zk = None
        self._lock = threading.Lock()
        self._timers: list[threading.Timer] = []
        self._touched: set[int] = set()

    def _client(self):
        with self._lock:
            if self._zk is None:
                self._zk = start_client(self.manager.zookeeper, timeout=10.0, connect_timeout=30.0)
            return self._zk

    def apply(self, action, broker: int, duration_s: float = 0.0) -> None:
        zk = self._client()
        self._touched.add(broker)
        if action.action == "clock_skew":
            offset, drift = action.offset_ms or 0.0, action.drift_ppm or 0.0
            request_faults.set_clock(zk, broker, offset, drift)
            self.history.info("nemesis", "clock_skew", [broker], offset_ms=offset, drift_ppm=drift,
                              duration_s=duration_s or None)
            if duration_s:
                self._later(duration_s, lambda: self._reset_clock(broker))
            return
        if action.clear:
            request_faults.clear_faults(zk, broker)
            self.history.info("nemesis", "clear_request_faults", [broker])
            return
        faults = request_faults.build_faults(
            action.api, errors=list(action.errors) if action.errors else None, latency_ms=action.latency_ms,
            drop_response_nth=action.drop_response_nth, close_connection_nth=action.close_connection_nth,
            count=action.count, topic=action.topic, partition=action.partition if action.topic else None)
        request_faults.add_faults(zk, broker, faults)
        for f in faults:
            self.history.info("nemesis", "inject_errors", [broker], fault=f.id, summary=f.describe(),
                              duration_s=duration_s or None)
        if duration_s:
            ids = {f.id for f in faults}
            self._later(duration_s, lambda: self._remove(broker, ids))

    def _later(self, delay: float, fn) -> None:
        t = threading.Timer(delay, fn)
        t.daemon = True
        self._timers.append(t)
        t.start()

    def _reset_clock(self, broker: int) -> None:
        try:
            request_faults.set_clock(self._client(), broker)
            self.history.info("nemesis", "clock_reset", [broker])
        except Exception as e:  # noqa: BLE001 - heal resets it anyway
            log.warning("could not reset a clock %s", kv(broker=broker, error=repr(e)))

    def _remove(self, broker: int, ids: set[str]) -> None:

        try:
            request_faults.remove_faults(self._client(), broker, ids)
            self.history.info("nemesis", "clear_request_faults", [broker], faults=sorted(ids))
        except Exception as e:  # noqa: BLE001 - heal clears it anyway
            log.warning("could not remove request faults %s", kv(broker=broker, error=repr(e)))

    def heal(self) -> None:
        """Remove every request fault and clock skew this run set (brokers not registered pick it up at start)."""
        for t in self._timers:
            t.cancel()
        if not self._touched:
            return
        zk = self._client()
        for b in sorted(self._touched):
            try:
                request_faults.clear_all(zk, b, wait=False)
            except Exception as e:  # noqa: BLE001
                log.warning("could not clear request faults at heal %s", kv(broker=b, error=repr(e)))
        self.history.info("nemesis", "clear_request_faults", sorted(self._touched))

    def close(self) -> None:
        for t in self._timers:
            t.cancel()
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
            self._zk = None
