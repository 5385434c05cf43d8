"""A run's history: every client operation, fault and observed ZooKeeper change, in Jepsen's model.

Each entry is one JSON object per line of ``history.jsonl``::

    {"index": 12, "time": 1532000000, "type": "invoke", "process": "producer-0", "f": "send", "value": ...}

``type`` is ``invoke`` / ``ok`` / ``fail`` / ``info`` (Jepsen: ``info`` is indeterminate, or not a client
operation at all: faults are ``info`` entries of process ``nemesis``, ZooKeeper observations ``info`` entries of
process ``observer`` with ``f = "observe"``).  ``time`` is nanoseconds since the start of the run.  Extra keys
(``partition``, ``offset``, ``error``...) are allowed and listed per operation in the checkers.

Recording is on the producer's hot path, so :meth:`History.record` only appends a tuple (clock reading
included) to a deque, atomic under the GIL; a producer records one untracked tuple per acknowledgement and
nothing at send time (the invoke is rebuilt at flush from the latency librdkafka measured, see
:meth:`register_expander`).  JSON is written by :meth:`flush`, which the runner calls between phases (after the
workload phase, after heal, at the end), never while clients are measured: serialising costs ~10x more than
recording and would steal the GIL from the clients under test.  Each flush sorts its entries by time, so
indexes follow real time within a phase: an ``ok`` always follows its ``invoke``.

:func:`to_jepsen` exports the client operations in the shape of Jepsen's Kafka workload (``:f :send`` /
``:f :poll``, values as micro-operation lists), as JSON that elle-cli and Jepsen's checker can be fed after
keyword conversion.
"""
from __future__ import annotations

import json
import threading
import time
from collections import deque
from typing import Any, Iterable, Iterator

from kafkatier.common.atomic_file import atomic_write

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
HISTORY_FILE = "history.jsonl"


class History:
    """Append-only, thread-safe recording of one run, flushed to ``path`` (or kept in memory when None)."""

    def __init__(self, path: str | None = None, enabled: bool = True, clock=time.monotonic_ns):
        self.path = path
        self.enabled = enabled
        self._clock = clock
        self._t0 = clock()
        self._pending: deque[tuple] = deque()
        self._append = self._pending.append
        self._expanders: dict[str, Any] = {}
        self._entries: list[dict] = []   # only kept when path is None (tests, the benchmark)
        self._index = 0
        self._flush_lock = threading.Lock()
        if path:
            open(path, "w").close()

    def clock(self) -> int:
        """The raw clock reading entries are recorded with (see :meth:`record_at`)."""
        return self._clock()

    def now(self) -> int:
        return self._clock() - self._t0

    def seconds(self) -> float:
        return self.now() / 1e9

    def record(self, type_: str, process: str, f: str, value: Any = None, **extra: Any) -> None:
        if self.enabled:
            self._append((self._clock(), type_, process, f, value, extra))

    def register_expander(self, name: str, expand) -> None:
        """``expand(obj) -> (value, extra, earlier)``, applied at flush to entries recorded with ``name`` as their
        extra; ``earlier`` is a list of ``(time_ns, type, value, extra)`` entries of the same process and ``f``
        that happened before (a send's invoke, reconstructed from the client's measured latency)."""
        self._expanders[name] = expand

    def raw_appender(self):
        """For the hottest paths: ``(append, clock)`` to record ``append((clock(), type, process, f, obj, name))``
        with ``obj`` a tuple of ints, strs and bytes and ``name`` a registered expander -- no call, no dict, and
        a tuple the garbage collector stops tracking (keeping client objects alive makes every collection slower
        as the history grows) -- or None when recording is off."""
        return (self._append, self._clock) if self.enabled else None

    def record_at(self, t_ns: int, type_: str, process: str, f: str, value: Any = None, **extra: Any) -> None:
        """:meth:`record` with a clock reading taken earlier (same clock)."""
        if self.enabled:
            self._append((t_ns, type_, process, f, value, extra))

    def info(self, process: str, f: str, value: Any = None, **extra: Any) -> None:
        self.record(INFO, process, f, value, **extra)

    def flush(self) -> None:
        with self._flush_lock:
            pending = self._pending
            if not pending:
                return
            batch = []
            for _ in range(len(pending)):  # deque.popleft is atomic; later appends wait for the next flush
                t, type_, process, f, value, extra = pending.popleft()
                if type(extra) is str:
                    value, extra, earlier = self._expanders[extra](value)
                    batch.extend((et, etype, process, f, evalue, eextra) for et, etype, evalue, eextra in earlier)
                batch.append((t, type_, process, f, value, extra))
            batch.sort(key=lambda x: x[0])   # real-time order (stable: same-time entries keep append order)
            out = []
            t0 = self._t0
            for t, type_, process, f, value, extra in batch:
                entry = {"index": self._index, "time": t - t0, "type": type_, "process": process, "f": f,
                         "value": value}
                if extra:
                    entry.update(extra)
                self._index += 1
                out.append(entry)
            if self.path is None:
                self._entries.extend(out)
                return
            with open(self.path, "a") as fh:
                fh.write("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in out))

    def entries(self) -> list[dict]:
        """Everything recorded so far (flushes first)."""
        self.flush()
        if self.path is None:
            return list(self._entries)
        return read(self.path)


def read(path: str) -> list[dict]:
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not a JSON history entry ({e.msg})") from None
    return out


def pairs(entries: Iterable[dict], f: str | None = None) -> Iterator[tuple[dict, dict | None]]:
    """``(invoke, completion)`` per client operation (completion None if the run ended first).  A process has
    at most one operation outstanding, except producers, whose sends are matched by ``value``."""
    open_ops: dict[tuple, dict] = {}
    for e in entries:
        if f is not None and e.get("f") != f:
            continue
        if e["process"] in ("nemesis", "observer", "final"):
            continue
        key = (e["process"], e["f"], _key(e.get("value")) if e["f"] == "send" else None)
        if e["type"] == INVOKE:
            open_ops[key] = e
        elif key in open_ops:
            yield open_ops.pop(key), e
    for inv in open_ops.values():
        yield inv, None


def _key(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def to_jepsen(entries: Iterable[dict]) -> list[dict]:
    """Client operations as Jepsen Kafka-workload operations (JSON; keywords as strings)."""
    out = []
    for e in entries:
        if e["process"] in ("observer", "final"):
            continue
        if e["process"] == "nemesis":
            out.append({"type": "info", "process": "nemesis", "f": e["f"], "value": e.get("value"),
                        "time": e["time"], "index": len(out)})
            continue
        if e["f"] == "send":
            key, value = e["value"][0], e["value"][1]
            k = f"{e.get('topic', '')}/{e.get('partition', key if key is not None else 0)}"
            mop = ["send", k, [e["offset"], value] if "offset" in e else value]
            out.append({"type": e["type"], "process": e["process"], "f": "send", "value": [mop],
                        "time": e["time"], "index": len(out)})
        elif e["f"] == "poll":
            polled = {k: v for k, v in (e.get("value") or {}).items()} if e["type"] == OK else None
            out.append({"type": e["type"], "process": e["process"], "f": "poll", "value": [["poll", polled]],
                        "time": e["time"], "index": len(out)})
    return out


def write_jepsen(entries: Iterable[dict], path: str) -> None:
    atomic_write(path, json.dumps(to_jepsen(entries)).encode())
