"""The broker's side of ``/kafkatier/faults/<brokerId>``: keeps its
:class:`~kafkatier.server.fault_injection.FaultRegistry` and clock skew in step with the znode, and records what it
applied and consumed in ``/kafkatier/fault_state/<brokerId>`` (``zk_schemas/fault_state.json``).

The faults znode is read by a kazoo ``DataWatch``, whose first read happens in its constructor: started before the
socket server, the faults in force when the broker starts apply to its first request.  A malformed znode is logged
and skipped (the faults in force stay).  The state znode is written off the request threads, coalescing
consumptions; at start the broker reads it back so faults consumed by its previous incarnation are not replayed.
"""
from __future__ import annotations

import threading
from typing import Callable, Mapping

from kafkatier.zk.errors import NodeExistsError, NoNodeError
from kafkatier.zk.watchers import DataWatch

from kafkatier.common.wake_loop import run_on_wake_ups
from kafkatier.logsetup import get_logger, kv
from kafkatier.server.fault_injection import ClockSkew, FaultRegistry, FaultSpec, FaultState
from kafkatier.zk import codecs, paths

log = get_logger("server.faults")

#: At most this often the fault state znode is rewritten (a fault consumed per request would otherwise write per
#: request).
STATE_WRITE_INTERVAL_S = 0.05


class FaultsWatcher:
    """Keeps a :class:`FaultRegistry` in step with ``/kafkatier/faults/<brokerId>`` and writes
    ``/kafkatier/fault_state/<brokerId>`` after each change and each consumption (coalesced, off the request
    threads).  ``on_clock(skew)`` is called whenever the spec's clock skew changes."""

    def __init__(self, zk, broker_id: int, registry: FaultRegistry,
                 on_clock: Callable[[ClockSkew], None] | None = None):
        self._zk = zk
        self._broker_id = broker_id
        self._registry = registry
        self._on_clock = on_clock
        self._spec_path = paths.request_faults(broker_id)
        self._state_path = paths.fault_state(broker_id)
        self._dirty = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._write_loop, name=f"fault-state-writer-{broker_id}", daemon=True)
        self._clock = ClockSkew()

    def start(self) -> None:
        self._zk.ensure_path(self._spec_path.rsplit("/", 1)[0])
        self._zk.ensure_path(self._state_path.rsplit("/", 1)[0])
        self._thread.start()
        DataWatch(self._zk, self._spec_path, self._on_data)

    def stop(self) -> None:
        self._stopped.set()
        self._dirty.set()

    def mark_dirty(self) -> None:
        self._dirty.set()

    def _on_data(self, data, stat, event=None) -> bool:
        if self._stopped.is_set():
            return False
        if stat is None or not data:
            spec, version = FaultSpec(), (stat.version if stat is not None else -1)
        else:
            try:
                spec, version = FaultSpec.decode(data, self._spec_path), stat.version
            except codecs.MalformedZNodeError as e:
                log.warning("skipping malformed request faults znode %s", kv(path=self._spec_path, reason=e))
                return True
        consumed = None
        if self._registry.spec_version < 0:
            consumed = self._read_state()
        self._registry.replace(spec, version, consumed)
        if spec.clock != self._clock:
            self._clock = spec.clock
            if self._on_clock is not None:
                self._on_clock(spec.clock)
        self._dirty.set()
        return True

    def _read_state(self) -> Mapping[str, int | None] | None:
        """Remaining counts a previous incarnation of this broker recorded (not replayed after a restart)."""
        try:
            data, _ = self._zk.get(self._state_path)
            return FaultState.decode(data, self._state_path).remaining
        except NoNodeError:
            return None
        except codecs.MalformedZNodeError as e:
            log.warning("ignoring malformed fault state znode %s", kv(path=self._state_path, reason=e))
            return None

    def _write_loop(self) -> None:
        run_on_wake_ups(self._dirty, self._stopped, self._write_state)

    def _write_state(self) -> None:
        data = self._registry.state().encode()
        try:
            try:
                self._zk.set(self._state_path, data)
            except NoNodeError:
                try:
                    self._zk.create(self._state_path, data, makepath=True)
                except NodeExistsError:
                    self._zk.set(self._state_path, data)
        except Exception as e:  # noqa: BLE001 - ZooKeeper trouble: try again shortly
            log.warning("could not write the fault state %s", kv(path=self._state_path, error=repr(e)))
            self._stopped.wait(0.5)
            self._dirty.set()
            return
        self._stopped.wait(STATE_WRITE_INTERVAL_S)  # consumptions meanwhile go in the next write


__all__ = ["FaultsWatcher"]
