"""CopyProgress: how far replica copies have got during a run, for the timeline's progress bars.

Two copies are followed, both from the brokers' log directories (every broker of a run is on this machine):

- a **KIP-113 move** (AlterReplicaLogDirs): while the future replica ``<topic>-<p>.<id>-future`` exists on a
  broker, ``copied`` is its segments' bytes and ``total`` those of the current replica on the same broker;
- a **reassignment** (KIP-455): for each replica the observer sees being added (``adding`` in the topic's
  znode), ``copied`` is that broker's segment bytes of the partition and ``total`` the leader's.

Each change is an ``observe`` entry of process ``observer`` (``kind`` ``move`` or ``reassign``, with ``tp``,
``broker``, ``copied``, ``total``), and ``done: true`` once the copy ended (the future replica replaced the
current one, or the broker left ``adding``).  The entries are for people reading the report; no checker judges
them.  Sampling (every ``interval_s``) rather than watching: a copy shorter than one interval shows as done only.
"""
from __future__ import annotations

import os
import threading
from typing import Callable

from kafkatier.logsetup import get_logger
from kafkatier.scenario.history import History

log = get_logger("scenario.copy_progress")

INTERVAL_S = 0.5
COPY_ACTIONS = ("move_replica", "reassign")


def _segment_bytes(path: str) -> int:
    try:
        return sum(e.stat().st_size for e in os.scandir(path) if e.name.endswith(".log"))
    except OSError:
        return 0


class CopyProgress:
    """``log_dirs()``: broker id -> its log dirs; ``partitions()``: (topic, p) -> the observer's latest partition
    state (``leader``, ``adding``)."""

    def __init__(self, log_dirs: Callable[[], dict[int, list[str]]], partitions: Callable[[], dict], topics,
                 history: History, interval_s: float = INTERVAL_S):
        self.log_dirs = log_dirs
        self.partitions = partitions
        self.topics = set(topics)
        self.history = history
        self.interval_s = interval_s
        self._last: dict[tuple, tuple[int, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scenario-copy-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a picture's data must never stop the run
                log.exception("copy progress sample failed")

    def _replicas(self) -> dict[int, dict[tuple[str, int], dict[str, str]]]:
        """broker -> (topic, p) -> kind (current / future) -> its directory."""
        from kafkatier.log.dir_names import MalformedDirNameError, parse_partition_dir
        out: dict[int, dict] = {}
        for broker, dirs in self.log_dirs().items():
            mine = out.setdefault(broker, {})
            for d in dirs:
                try:
                    names = os.listdir(d)
                except OSError:
                    continue
                for name in names:
                    path = os.path.join(d, name)
                    try:
                        parsed = parse_partition_dir(path)
                    except (MalformedDirNameError, ValueError):
                        continue
                    if parsed.topic in self.topics and parsed.kind in ("current", "future"):
                        mine.setdefault((parsed.topic, parsed.partition), {})[parsed.kind] = path
        return out

    def sample(self) -> None:
        replicas = self._replicas()
        now: dict[tuple, tuple[int, int]] = {}
        for broker, tps in replicas.items():
            for (topic, p), kinds in tps.items():
                if "future" in kinds:
                    now[("move", topic, p, broker)] = (_segment_bytes(kinds["future"]),
                                                       _segment_bytes(kinds.get("current", "")))
        for (topic, p), st in self.partitions().items():
            if topic not in self.topics or not st.get("adding"):
                continue
            leader_dir = replicas.get(st.get("leader"), {}).get((topic, p), {}).get("current")
            total = _segment_bytes(leader_dir) if leader_dir else 0
            for b in st["adding"]:
                here = replicas.get(b, {}).get((topic, p), {}).get("current")
                now[("reassign", topic, p, b)] = (_segment_bytes(here) if here else 0, total)
        for key, (copied, total) in now.items():
            if self._last.get(key) != (copied, total):
                self._record(key, copied=copied, total=total)
        for key in set(self._last) - set(now):
            copied, total = self._last[key]
            self._record(key, copied=max(copied, total), total=total, done=True)
        self._last = now

    def _record(self, key: tuple, **value) -> None:
        kind, topic, p, broker = key
        self.history.info("observer", "observe", {"kind": kind, "tp": f"{topic}/{p}", "broker": broker, **value})
