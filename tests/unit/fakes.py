"""Fakes shared by the unit tests (aiokafka's ``_testutil`` idea): one in-memory ZooKeeper, the tiered-storage
partition stand-in, the tiered test log, a manual clock and a manual timer.  A test module defines a fake of its own only for behaviour none of
these has (a fault on the n-th call, a broker answering control requests)."""
from __future__ import annotations

import heapq
import itertools
from types import SimpleNamespace

import attrs
from kafka.record.memory_records import MemoryRecordsBuilder

from kafkatier.log.log import Log
from kafkatier.log.log_config import LogConfig
from kafkatier.zk.errors import BadVersionError, NodeExistsError, NoNodeError

TOPIC_ID = "LWgrMmVrT0a__7a4SasuPA"
NOW = 1_700_000_000_000


class ManualClock:
    """A clock the test sets by hand: calling it returns :attr:`now` (seconds or milliseconds, whichever the code
    under test reads)."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self):
        return self.now


class ManualTimer:
    """A clock and a scheduler (``KafkaScheduler``'s ``schedule``) that the test moves by hand: :meth:`advance`
    runs what falls due, in order, repeating the periodic tasks."""

    def __init__(self) -> None:
        self.now = 1_000_000
        self._heap: list = []
        self._seq = itertools.count()

    def time_ms(self) -> int:
        return self.now

    def schedule(self, name, fn, delay_ms=0, period_ms=-1):
        heapq.heappush(self._heap, (self.now + delay_ms, next(self._seq), fn, period_ms))

    def advance(self, ms: int) -> None:
        end = self.now + ms
        while self._heap and self._heap[0][0] <= end:
            due, _, fn, period = heapq.heappop(self._heap)
            self.now = max(self.now, due)
            fn()
            if period and period > 0:
                self.schedule("periodic", fn, period, period)
        self.now = end


class FakeZk:
    """The kazoo client calls kafkatier makes, over a dict of path -> bytes: ``get`` / ``get_children`` /
    ``exists`` / ``create`` (``makepath``, ``sequence``) / ``set`` / ``delete`` / ``ensure_path`` / ``sync`` /
    ``retry``.  ``created`` records every create call as ``(path asked, data, sequence)``; ``reads`` counts the
    ``get`` calls.  Versions count the ``set``s; a ``set`` at another version raises ``BadVersionError``."""

    def __init__(self, nodes: dict[str, bytes] | None = None):
        self.nodes: dict[str, bytes] = dict(nodes or {})
        self.versions: dict[str, int] = {}
        self.created: list[tuple[str, bytes, bool]] = []
        self.reads = 0
        self._seq = 0

    def _stat(self, path: str):
        return SimpleNamespace(version=self.versions.get(path, 0), czxid=0, ephemeralOwner=0)

    def get(self, path: str, watch=None):
        self.reads += 1
        if path not in self.nodes:
            raise NoNodeError(path)
        return self.nodes[path], self._stat(path)

    def get_children(self, path: str, watch=None) -> list[str]:
        path = path.rstrip("/") or "/"
        kids = sorted({p[len(path):].lstrip("/").split("/")[0] for p in self.nodes
                       if p.startswith(path.rstrip("/") + "/")})
        if not kids and path not in self.nodes:
            raise NoNodeError(path)
        return kids

    def exists(self, path: str, watch=None):
        return self._stat(path) if path in self.nodes else None

    def create(self, path: str, value: bytes = b"", acl=None, ephemeral=False, sequence=False, makepath=False):
        self.created.append((path, value, sequence))
        if sequence:
            path = f"{path}{self._seq:010d}"
            self._seq += 1
        if path in self.nodes:
            raise NodeExistsError(path)
        self.nodes[path] = value   # parents are not checked: no test here depends on makepath
        self.versions[path] = 0
        return path

    def set(self, path: str, value: bytes, version: int = -1):
        if path not in self.nodes:
            raise NoNodeError(path)
        if version != -1 and version != self.versions.get(path, 0):
            raise BadVersionError(path)
        self.nodes[path] = value
        self.versions[path] = self.versions.get(path, 0) + 1
        return self._stat(path)

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        if path not in self.nodes:
            raise NoNodeError(path)
        del self.nodes[path]
        if recursive:
            for p in [p for p in self.nodes if p.startswith(path + "/")]:
                del self.nodes[p]

    def ensure_path(self, path: str) -> None:
        self.nodes.setdefault(path, b"")

    def sync(self, path: str) -> None:
        pass

    def retry(self, fn, *args, **kw):
        return fn(*args, **kw)


@attrs.define
class FakePartition:
    """What the remote log manager's tasks read of ``server.partition.Partition``."""
    log: Log
    broker_id: int = 1
    leader_id: int = 1
    leader_epoch: int = 0
    topic: str = "orders"
    partition: int = 0
    topic_id: str = TOPIC_ID

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id


def tiered_log(tmp_path, name: str = "orders-0", clock=None, **props) -> Log:
    """A tiered log with tiny segments (320 bytes: two 2-record batches) and ``local.retention.bytes=1``;
    ``props`` override configs (``segment_bytes=...`` for ``segment.bytes``)."""
    base = {"segment.bytes": "320", "local.retention.bytes": "1", "remote.storage.enable": "true",
            "file.delete.delay.ms": "0", "index.interval.bytes": "1"}
    base.update({k.replace("_", "."): str(v) for k, v in props.items()})
    d = tmp_path / name.split("/")[0]
    d.mkdir(exist_ok=True)
    return Log(str(d / name.split("/")[-1]), LogConfig.from_props(base), remote_log_enabled=True,
               clock=clock or (lambda: NOW))


def record_batch(n: int, first: int = 0, ts: int = NOW, value_size: int = 40, keyed: bool = False) -> bytes:
    """One v2 batch of ``n`` records with values ``v<first>``, ``v<first+1>``... padded to ``value_size`` (0: not
    padded), keyless or (``keyed``) with keys ``k<first>``, ``k<first+1>``..."""
    b = MemoryRecordsBuilder(2, 0, 1 << 20)
    for i in range(n):
        key = f"k{first + i}".encode() if keyed else None
        b.append(ts + i, key, f"v{first + i}".encode().ljust(value_size, b"."))
    b.close()
    return bytes(b.buffer())
