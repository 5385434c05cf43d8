"""ZooKeeperObserver: what the cluster's durable state is, as seen from ZooKeeper during a run.

A thread polls ZooKeeper (every ``interval_s``) and records each change as an ``observe`` entry of process
``observer`` in the history, with the znode's version and modification zxid so checkers can order writes and
tell a missed intermediate value (version jumped by more than one) from an invalid transition:

- ``controller``: ``/controller``'s broker and czxid with ``/controller_epoch``'s value and mzxid, read
  consistently (the epoch is read before and after ``/controller``; the pair is kept only if the epoch's
  version did not change in between -- both are written by the same election multi);
- ``brokers``: ``/brokers/ids`` children and their czxids (the broker epochs);
- ``partition``: every partition ``state`` (leader, leader epoch, ISR, controller epoch) with the topic's
  replica assignment (and ``adding`` / ``removing`` while a reassignment runs);
- ``tiered``: ``tieredstorage/tiered_epoch`` and ``state`` of each scenario topic;
- ``topic_config``: ``/config/topics/{t}``.

Polling (rather than watches) keeps working through ZooKeeper pauses and restarts: a failed poll records one
``zk_unavailable`` entry and the thread tries again.  Tiered ``state`` znodes additionally have a data watch,
so a short-lived DISABLING is seen even between polls.  :meth:`wait_until` lets the runner block on a
condition over the latest snapshot (``when`` steps).
"""
from __future__ import annotations

import json
import threading
from typing import Callable

import attrs
from kafkatier.zk.errors import KazooException, NoNodeError
from kafkatier.zk.watchers import DataWatch

from kafkatier.logsetup import get_logger
from kafkatier.scenario.history import History
from kafkatier.zk import codecs, paths
from kafkatier.zk.client import start_client

log = get_logger("scenario.observer")


@attrs.define
class Snapshot:
    """The latest observed state (mutated only by the observer thread, under its lock)."""

    controller: int | None = None
    controller_epoch: int = 0
    brokers: dict[int, int] = attrs.field(factory=dict)                      # id -> czxid
    partitions: dict[tuple[str, int], dict] = attrs.field(factory=dict)      # (topic, p) -> state
    tiered: dict[str, dict] = attrs.field(factory=dict)                      # topic -> {epoch, state, ...}
    configs: dict[str, dict] = attrs.field(factory=dict)
    controller_changes: int = 0
    acked: int = 0                                                          # maintained by the runner

    def leader(self, topic: str, partition: int) -> int | None:
        st = self.partitions.get((topic, partition))
        return st["leader"] if st and st["leader"] >= 0 else None

    def replicas(self, topic: str, partition: int) -> list[int]:
        st = self.partitions.get((topic, partition))
        return list(st["replicas"]) if st else []


class ZooKeeperObserver:
    def __init__(self, connect: str, topics: list[str], history: History, interval_s: float = 0.1):
        self.connect = connect
        self.topics = list(topics)
        self.history = history
        self.interval_s = interval_s
        self.snapshot = Snapshot()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scenario-observer", daemon=True)
        self._zk = None
        self._last: dict[tuple, object] = {}
        self._available = True
        self._watched: set[str] = set()

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._zk = start_client(self.connect, timeout=10.0, connect_timeout=30.0)
        self.poll_once()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if self._zk is not None:
            try:
                self._zk.stop()
                self._zk.close()
            except Exception:  # noqa: BLE001 - best effort at shutdown
                pass

    @property
    def zk(self):
        return self._zk

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.poll_once()

    # -- conditions --------------------------------------------------------------------------------------------
    def wait_until(self, predicate: Callable[[Snapshot], bool], timeout: float,
                   cancelled: threading.Event | None = None) -> bool:
        """Block until ``predicate(snapshot)`` holds (True) or ``timeout`` passes (False)."""
        import time
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.snapshot):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (cancelled is not None and cancelled.is_set()):
                    return False
                self._cond.wait(min(remaining, 0.2))
            return True

    def notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # -- polling -----------------------------------------------------------------------------------------------
    def poll_once(self) -> None:
        try:
            self._poll()
            if not self._available:
                self._available = True
                self.history.info("observer", "zk_available")
        except (KazooException, OSError) as e:
            if self._available:
                self._available = False
                self.history.info("observer", "zk_unavailable", {"error": type(e).__name__})
        except Exception:  # noqa: BLE001 - a malformed znode must not stop the observer
            log.exception("observer poll failed")
        self.notify()

    def _changed(self, key: tuple, value) -> bool:
        if self._last.get(key) == value:
            return False
        self._last[key] = value
        return True

    def _poll(self) -> None:
        zk = self._zk
        snap = self.snapshot
        # controller + epoch, consistently
        try:
            _, s1 = zk.get(paths.CONTROLLER_EPOCH)
        except NoNodeError:
            s1 = None
        try:
            cdata, cstat = zk.get(paths.CONTROLLER)
            cid, czxid = codecs.ControllerZNode.decode(cdata).broker_id, cstat.czxid
        except NoNodeError:
            cid, czxid = None, None
        try:
            e2, s2 = zk.get(paths.CONTROLLER_EPOCH)
        except NoNodeError:
            e2, s2 = None, None
        if s1 is not None and s2 is not None and s1.version == s2.version:
            epoch = int(e2)
            value = {"kind": "controller", "broker": cid, "czxid": czxid, "epoch": epoch, "epoch_mzxid": s2.mzxid}
            if self._changed(("controller",), (cid, czxid, epoch)):
                with self._cond:
                    if cid is not None and cid != snap.controller:
                        snap.controller_changes += 1
                    snap.controller, snap.controller_epoch = cid, epoch
                self.history.info("observer", "observe", value)
        # brokers
        brokers = {}
        for c in zk.get_children(paths.BROKER_IDS):
            try:
                brokers[int(c)] = zk.exists(paths.broker(int(c))).czxid
            except (AttributeError, ValueError):
                continue
        if self._changed(("brokers",), brokers):
            with self._cond:
                snap.brokers = brokers
            self.history.info("observer", "observe", {"kind": "brokers", "ids": {str(k): v for k, v in brokers.items()}})
        # topics
        for t in self.topics:
            self._poll_topic(zk, t)

    def _poll_topic(self, zk, topic: str) -> None:
        snap = self.snapshot
        try:
            data, _ = zk.get(paths.topic(topic))
        except NoNodeError:
            return
        decoded = codecs.TopicAssignment.decode(data)
        assignment = decoded.partitions
        for p, replicas in sorted(assignment.items()):
            try:
                sdata, st = zk.get(paths.partition_state(topic, p))
            except NoNodeError:
                continue
            js = json.loads(sdata)
            state = {"kind": "partition", "topic": topic, "partition": p, "leader": js["leader"],
                     "leader_epoch": js["leader_epoch"], "isr": js["isr"], "replicas": list(replicas),
                     "controller_epoch": js["controller_epoch"], "version": st.version, "mzxid": st.mzxid}
            adding, removing = decoded.adding.get(p, ()), decoded.removing.get(p, ())
            if adding or removing:   # a reassignment in progress (RS = ORS + TRS)
                state.update(adding=list(adding), removing=list(removing))
            if self._changed(("partition", topic, p), (st.version, tuple(replicas), tuple(adding), tuple(removing))):
                with self._cond:
                    snap.partitions[(topic, p)] = state
                self.history.info("observer", "observe", state)
        try:
            cdata, cst = zk.get(paths.entity_config("topics", topic))
            config = json.loads(cdata).get("config", {})
            if self._changed(("config", topic), cst.version):
                with self._cond:
                    snap.configs[topic] = config
                self.history.info("observer", "observe", {"kind": "topic_config", "topic": topic,
                                                          "config": config, "version": cst.version})
        except NoNodeError:
            pass
        self._read_tiered(zk, topic)
        if topic not in self._watched and zk.exists(paths.tiered_state(topic)):
            self._watched.add(topic)
            DataWatch(zk, paths.tiered_state(topic), func=lambda *a, t=topic: self._on_tiered_watch(t))

    def _on_tiered_watch(self, topic: str) -> bool:
        if self._stop.is_set():
            return False
        try:
            self._read_tiered(self._zk, topic)
        except (KazooException, OSError):
            pass
        except Exception:  # noqa: BLE001
            log.exception("observer tiered watch failed")
        self.notify()
        return True

    def _read_tiered(self, zk, topic: str) -> None:
        try:
            sdata, sst = zk.get(paths.tiered_state(topic))
            edata, est = zk.get(paths.tiered_epoch(topic))
        except NoNodeError:
            return
        state = codecs.TieredState.decode(sdata).state
        epoch = codecs.decode_tiered_epoch(edata)
        value = {"kind": "tiered", "topic": topic, "epoch": epoch, "state": state, "version": sst.version,
                 "epoch_version": est.version, "mzxid": sst.mzxid}
        with self._cond:
            if not self._changed(("tiered", topic), (sst.version, est.version)):
                return
            prev = self.snapshot.tiered.get(topic)
            if prev is not None and prev["version"] > sst.version:
                return  # an older read arriving after a newer one (watch thread vs poll thread)
            self.snapshot.tiered[topic] = value
            self.history.info("observer", "observe", value)
