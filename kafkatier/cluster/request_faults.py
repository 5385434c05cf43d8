"""The tools' side of request faults and clock skew: edit ``/kafkatier/faults/<brokerId>`` and wait until the
broker has it in force (its ``/kafkatier/fault_state/<brokerId>`` names that znode version).

Used by ``kafkatier cluster inject-errors`` / ``clock`` (``cli/faults.py``), the scenario engine
(``scenario/request_faults.py``) and the pytest plugin's cluster objects.  The broker side, and what each fault
does, is ``server/fault_injection.py``.

An edit is a read-modify-write conditional on the znode's version, retried (bounded) when another tool wrote in
between.  Waiting only happens while the broker is registered: a stopped broker picks its faults up when it
starts (and does not replay what it had consumed before).
"""
from __future__ import annotations

import uuid
from typing import Callable

import attrs
import tenacity
from kafkatier.zk.errors import BadVersionError, NodeExistsError, NoNodeError

from kafkatier.common.errors import UsageError
from kafkatier.logsetup import get_logger, kv
from kafkatier.server import fault_injection as fi
from kafkatier.server.fault_injection import ClockSkew, FaultSpec, FaultState, RequestFault
from kafkatier.waiting import wait_for
from kafkatier.zk import codecs, paths

log = get_logger("cluster.request-faults")

APPLY_TIMEOUT_S = 15.0


def new_fault_id(api_key: int) -> str:
    return f"f{api_key}-{uuid.uuid4().hex[:8]}"


def build_faults(api: str | int, *, errors: str | list | None = None, latency_ms: float | None = None,
                 drop_response_nth: int | None = None, close_connection_nth: int | None = None,
                 count: int | None = None, topic: str | None = None, partition: int | None = None) -> list:
    """The fault asked by these options (one), or :class:`UsageError` naming what is wrong."""
    try:
        api_key = fi.parse_api(api)
        common = dict(id=new_fault_id(api_key), api_key=api_key, topic=topic, partition=partition)
        if errors is not None:
            names = errors.split(",") if isinstance(errors, str) else list(errors)
            codes = tuple(fi.parse_error(e) for e in names if str(e).strip())
            if count is not None and count < 1:
                raise fi.FaultSpecError("--count must be at least 1")
            return [fi.RequestFault(kind=fi.ERRORS, errors=codes, count=count, **common)]
        if latency_ms is not None:
            return [fi.RequestFault(kind=fi.LATENCY, latency_ms=latency_ms, count=count, **common)]
        if drop_response_nth is not None:
            return [fi.RequestFault(kind=fi.DROP_RESPONSE, nth=drop_response_nth, count=count, **common)]
        if close_connection_nth is not None:
            return [fi.RequestFault(kind=fi.CLOSE_CONNECTION, nth=close_connection_nth, count=count, **common)]
    except (fi.FaultSpecError, ValueError, TypeError) as e:
        raise UsageError(str(e)) from None
    raise UsageError("one of --errors, --latency-ms, --drop-response-nth, --close-connection-nth is required")


def read_spec(zk, broker_id: int) -> tuple[FaultSpec, int]:
    """The broker's faults znode and its version (``-1``: none yet).  A malformed znode reads as empty (it is
    then overwritten by the next edit)."""
    path = paths.request_faults(broker_id)
    try:
        data, stat = zk.get(path)
    except NoNodeError:
        return FaultSpec(), -1
    if not data:
        return FaultSpec(), stat.version
    try:
        return FaultSpec.decode(data, path), stat.version
    except codecs.MalformedZNodeError as e:
        log.warning("replacing a malformed request faults znode %s", kv(path=path, reason=e))
        return FaultSpec(), stat.version


def read_state(zk, broker_id: int) -> FaultState | None:
    path = paths.fault_state(broker_id)
    try:
        data, _ = zk.get(path)
        return FaultState.decode(data, path)
    except NoNodeError:
        return None
    except codecs.MalformedZNodeError as e:
        log.warning("malformed fault state %s", kv(path=path, reason=e))
        return None


def edit(zk, broker_id: int, change: Callable[[FaultSpec], FaultSpec], wait: bool = True,
         timeout: float = APPLY_TIMEOUT_S) -> FaultSpec:
    """Apply ``change`` to the broker's faults znode; with ``wait``, return once the broker, if registered, has
    it in force."""
    path = paths.request_faults(broker_id)
    version = -1
    for attempt in tenacity.Retrying(retry=tenacity.retry_if_exception_type((BadVersionError, NodeExistsError)),
                                     stop=tenacity.stop_after_attempt(20), wait=tenacity.wait_random(0.01, 0.1),
                                     reraise=True):
        with attempt:
            current, current_version = read_spec(zk, broker_id)
            new = change(current)
            if current_version < 0:
                zk.ensure_path(paths.FAULTS_ROOT)
                zk.create(path, new.encode())
                version = 0
            else:
                version = zk.set(path, new.encode(), version=current_version).version
    if wait and zk.exists(paths.broker(broker_id)) is not None:
        def applied():
            state = read_state(zk, broker_id)
            return state is not None and state.spec_version >= version
        wait_for(applied, timeout, interval=0.05,
                 message=f"broker {broker_id} to apply its request faults (znode version {version})")
    return new


def add_faults(zk, broker_id: int, faults: list[RequestFault], wait: bool = True) -> FaultSpec:
    """Add ``faults`` to the broker's; faults the broker reports spent are dropped on the way."""
    state = read_state(zk, broker_id)
    spent = {i for i, n in state.remaining.items() if n == 0} if state is not None else set()
    return edit(zk, broker_id, lambda s: attrs.evolve(
        s, faults=tuple(f for f in s.faults if f.id not in spent) + tuple(faults)), wait)


def clear_faults(zk, broker_id: int, api_key: int | None = None, wait: bool = True) -> FaultSpec:
    """Remove the broker's request faults (only those of ``api_key`` when given); the clock skew stays."""
    return edit(zk, broker_id, lambda s: attrs.evolve(
        s, faults=tuple(f for f in s.faults if api_key is not None and f.api_key != api_key)), wait)


def remove_faults(zk, broker_id: int, ids: set[str], wait: bool = True) -> FaultSpec:
    """Remove the faults with these ids (the others and the clock skew stay)."""
    return edit(zk, broker_id, lambda s: attrs.evolve(s, faults=tuple(f for f in s.faults if f.id not in ids)), wait)


def clear_all(zk, broker_id: int, wait: bool = True) -> FaultSpec:
    """No request fault and no clock skew."""
    return edit(zk, broker_id, lambda s: FaultSpec(), wait)


def set_clock(zk, broker_id: int, offset_ms: float = 0.0, drift_ppm: float = 0.0, wait: bool = True) -> FaultSpec:
    """Skew the broker's wall clock (0, 0: back to the system clock)."""
    skew = ClockSkew(offset_ms=offset_ms, drift_ppm=drift_ppm)
    return edit(zk, broker_id, lambda s: attrs.evolve(s, clock=skew), wait)


def describe(zk, broker_id: int) -> dict:
    """The faults asked of a broker with what the broker reports left of each."""
    spec, version = read_spec(zk, broker_id)
    state = read_state(zk, broker_id)
    remaining = state.remaining if state is not None else {}
    return {"spec_version": version, "applied_version": state.spec_version if state else None,
            "clock": spec.clock.to_json(),
            "faults": [dict(f.to_json(), summary=f.describe(), remaining=remaining.get(f.id, f.total))
                       for f in spec.faults]}


__all__ = ["build_faults", "read_spec", "read_state", "edit", "add_faults", "clear_faults", "remove_faults",
           "clear_all", "set_clock", "describe",
           "new_fault_id", "APPLY_TIMEOUT_S"]
