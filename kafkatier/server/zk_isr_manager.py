"""ZkIsrManager: a partition leader's ISR changes written to ZooKeeper, and the ``isr_change_notification``
znodes that tell the controller about them (Kafka's ZooKeeper-mode ``ZkIsrManager`` and
``ReplicaManager.maybePropagateIsrChanges``; docs/controller.md#isr-changes).

Writes: each ISR change is a conditional ``setData`` of the partition's ``state`` znode at the zkVersion the
leader knows (Kafka's ``LeaderAndIsr`` zkVersion: a write that finds another version fails, and the leader
waits for the controller's LeaderAndIsr).  Many changes found in one pass (a follower's fetch of thousands of
partitions after a restart, one ISR-expiration round) are written together, in ZooKeeper multis of 500
``setData`` ops, 10 pipelined: one request and reply per 500 partitions (a multi fails whole on a write that finds
another version; the rest of it is written again, and after three rounds the rest goes one write at a time,
pipelined, :func:`kafkatier.zk.client.set_many`).  Kafka writes each partition with its own conditional
``setData``; one reply per partition costs kazoo's Python under a busy broker's GIL.  A write that fails
with BADVERSION is re-read (in one multiRead for all of them): if the znode already holds exactly the state
written (our earlier, lost attempt) it counts as written.

Notifications: a written change only records the partition.  A scheduled task
(``isr-change-propagation``, every :attr:`IsrChangePropagationConfig.check_interval_ms`, 2,500 ms) writes the
recorded partitions as one sequential ``/isr_change_notification/isr_change_`` znode in Kafka's format
(``{"version":1,"partitions":[{"topic":..,"partition":..},..]}``) once no change was recorded for
``linger_ms`` (5,000) or the last propagation is ``max_delay_ms`` (60,000) old -- Kafka's values.

Deliberate differences from Kafka: a change of a partition being reassigned (the leader saw adding replicas in
its LeaderAndIsr) is propagated at the next check without lingering, since the controller completes the
reassignment on it (Kafka's controller watches those partitions' ``state`` znodes instead); and a propagation
of more than :data:`MAX_PARTITIONS_PER_NOTIFICATION` partitions is split over several znodes, each below
ZooKeeper's packet limit (Kafka writes one, which at 20,000 partitions nears ``jute.maxbuffer``).
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Callable, Iterable

import attrs
from kafkatier.zk.errors import BadVersionError, NoNodeError

from kafkatier.common.structs import TopicPartition
from kafkatier.logsetup import get_logger, kv
from kafkatier.zk import codecs, paths
from kafkatier.zk.client import ConditionalSet, get_many, set_many
from kafkatier.zk.fenced import first_failure

log = get_logger("server.isr-manager")

# A partition is ~40 bytes of the notification's JSON: 5,000 keep one znode near 200 KB.
MAX_PARTITIONS_PER_NOTIFICATION = 5000
# ISR writes go in multis of MULTI_SIZE setData ops, MULTIS_IN_FLIGHT pipelined, at most MULTI_ROUNDS rounds.
MULTI_SIZE = 500
MULTIS_IN_FLIGHT = 10
MULTI_ROUNDS = 3
# A batch of at least this many ISR writes logs one summary line (a restarted follower's rejoin).
BATCH_SUMMARY_MIN = 100


@attrs.frozen
class IsrChangePropagationConfig:
    """Kafka's ``IsrChangePropagationConfig`` (ZooKeeper mode): how often the task runs, how long the set of
    changed partitions must stay unchanged, and the longest a change waits."""

    check_interval_ms: int = 2500
    linger_ms: int = 5000
    max_delay_ms: int = 60000


@attrs.frozen
class IsrWrite:
    """One partition's new leader and ISR, written at ``expected_version`` (the leader's partition epoch)."""

    tp: TopicPartition
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    expected_version: int
    urgent: bool = False  # the partition is being reassigned: propagate without lingering


class ZkIsrManager:
    def __init__(self, zk, config: IsrChangePropagationConfig = IsrChangePropagationConfig(),
                 clock: Callable[[], float] = time.monotonic):
        self.zk = zk
        self.config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._changed: set[TopicPartition] = set()
        self._urgent = False
        now = clock()
        self._last_change = now
        self._last_propagation = now
        self.metrics = {"isr_writes": 0, "isr_write_conflicts": 0, "isr_notifications": 0}

    # --- writes ---------------------------------------------------------------------------------------------
    def write(self, writes: Iterable[IsrWrite]) -> dict[TopicPartition, int | None]:
        """Write every change, pipelined; per partition the new zkVersion, or None when the znode moved on (the
        controller changed it) or the write could not be made (then the leader keeps its ISR and tries again at
        its next check).  Never raises: each decided change must be completed by its partition."""
        writes = list(writes)
        if not writes:
            return {}
        if self.zk is None:  # no ZooKeeper (unit tests of the data path): every write succeeds
            out = {w.tp: w.expected_version + 1 for w in writes}
        else:
            t0 = self._clock()
            try:
                out = self._write(writes)
            except Exception as e:  # noqa: BLE001 - never leave a partition's change in flight: not written
                log.warning("ISR writes failed %s", kv(partitions=len(writes), error=repr(e)))
                out = {w.tp: None for w in writes}
            if len(writes) >= BATCH_SUMMARY_MIN:
                log.info("ISR writes %s", kv(partitions=len(writes), written=sum(v is not None for v in out.values()),
                                             ms=round((self._clock() - t0) * 1000, 1)))
        written = [w for w in writes if out.get(w.tp) is not None]
        self.metrics["isr_writes"] += len(written)
        if written:
            self.record_isr_changes(w.tp for w in written)
            if any(w.urgent for w in written):
                with self._lock:
                    self._urgent = True
        return out

    def _write(self, writes: list[IsrWrite]) -> dict[TopicPartition, int | None]:
        payloads = [self._payload(w) for w in writes]
        results = self._set_all([ConditionalSet(paths.partition_state(*w.tp), data, w.expected_version)
                                 for w, data in zip(writes, payloads)])
        out: dict[TopicPartition, int | None] = {}
        conflicts: list[tuple[IsrWrite, bytes]] = []
        for w, data, res in zip(writes, payloads, results):
            if isinstance(res, BadVersionError):
                conflicts.append((w, data))
            elif isinstance(res, NoNodeError):
                out[w.tp] = None
            elif isinstance(res, Exception):
                log.warning("ISR write failed %s", kv(partition=f"{w.tp[0]}-{w.tp[1]}", error=type(res).__name__))
                out[w.tp] = None
            else:
                out[w.tp] = res.version
        if conflicts:
            # Our own earlier attempt, lost with the connection, may be what moved the version: re-read them all.
            current = get_many(self.zk, [paths.partition_state(*w.tp) for w, _ in conflicts])
            for (w, _), res in zip(conflicts, current):
                out[w.tp] = self._already_written(w, res)
            self.metrics["isr_write_conflicts"] += len(conflicts)
        return out

    def _set_all(self, sets: list[ConditionalSet]) -> list:
        """Every conditional set, in multis of :data:`MULTI_SIZE` (:data:`MULTIS_IN_FLIGHT` pipelined): per write
        its new ``ZnodeStat`` or its error.  A multi fails whole on its first failing write (another
        version: the controller moved the partition), so a round writes the rest of a failed multi again; after
        :data:`MULTI_ROUNDS` rounds, or when a multi's outcome is unknown (the connection was lost), the remaining
        writes go one by one (pipelined ``setData``).  Inside a busy broker each reply costs kazoo's Python
        under the GIL: one per partition made a restarted follower's 3,333 expansions take 6.3 s at load 28."""
        out: list = [None] * len(sets)
        pending = list(range(len(sets)))
        singly: list[int] = []
        for _ in range(MULTI_ROUNDS):
            if not pending:
                break
            again: list[int] = []
            window: collections.deque = collections.deque()

            def collect_oldest() -> None:
                chunk, result = window.popleft()
                try:
                    results = result.get()
                except Exception:  # noqa: BLE001 - a lost commit may have applied: each write on its own
                    singly.extend(chunk)
                    return
                if len(results) != len(chunk):  # not a multi's answer: each write on its own
                    singly.extend(chunk)
                    return
                failure = first_failure(results)
                if failure is None:
                    for i, r in zip(chunk, results):
                        out[i] = r
                    return
                at, err = failure
                out[chunk[at]] = err
                again.extend(i for j, i in enumerate(chunk) if j != at)
            for start in range(0, len(pending), MULTI_SIZE):
                chunk = pending[start:start + MULTI_SIZE]
                if len(window) >= MULTIS_IN_FLIGHT:
                    collect_oldest()
                t = self.zk.transaction()
                for i in chunk:
                    t.set_data(sets[i].path, sets[i].data, version=sets[i].version)
                window.append((chunk, t.commit_async()))
            while window:
                collect_oldest()
            pending = again
        rest = sorted(singly + pending)
        if rest:
            for i, r in zip(rest, set_many(self.zk, [sets[i] for i in rest])):
                out[i] = r
        return out

    @staticmethod
    def _payload(w: IsrWrite) -> bytes:
        return codecs.LeaderIsrAndControllerEpoch(leader=w.leader, leader_epoch=w.leader_epoch, isr=w.isr,
                                                  controller_epoch=w.controller_epoch).encode()

    @staticmethod
    def _already_written(w: IsrWrite, res) -> int | None:
        if res is None:
            return None
        data, stat = res
        try:
            cur = codecs.decode_partition_state(data, stat)
        except codecs.MalformedZNodeError:
            return None
        if (cur.leader, cur.leader_epoch, tuple(cur.isr)) == (w.leader, w.leader_epoch, tuple(w.isr)):
            return stat.version
        return None

    # --- notifications --------------------------------------------------------------------------------------
    def record_isr_changes(self, tps: Iterable[TopicPartition]) -> None:
        tps = list(tps)
        if not tps:
            return
        with self._lock:
            self._changed.update(tps)
            self._last_change = self._clock()

    def pending(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._changed)

    def maybe_propagate_isr_changes(self, force: bool = False) -> int:
        """Kafka's ``maybePropagateIsrChanges``: write the recorded partitions as notifications when the set has
        been quiet for ``linger_ms``, or the last propagation is ``max_delay_ms`` old (or a reassigned
        partition changed, or ``force``).  Returns how many partitions were propagated."""
        now = self._clock()
        c = self.config
        with self._lock:
            if not self._changed:
                return 0
            if not (force or self._urgent or now - self._last_change >= c.linger_ms / 1000
                    or now - self._last_propagation >= c.max_delay_ms / 1000):
                return 0
            changed, self._changed, self._urgent = sorted(self._changed), set(), False
            self._last_propagation = now
        try:
            self._create_notifications(changed)
        except Exception:  # noqa: BLE001 - keep them for the next round
            log.warning("could not write the ISR change notification %s", kv(partitions=len(changed)),
                        exc_info=True)
            self.record_isr_changes(changed)
            return 0
        return len(changed)

    def _create_notifications(self, changed: list[TopicPartition]) -> None:
        if self.zk is None:
            return
        for i in range(0, len(changed), MAX_PARTITIONS_PER_NOTIFICATION):
            chunk = changed[i:i + MAX_PARTITIONS_PER_NOTIFICATION]
            path = self.zk.create(paths.ISR_CHANGE_NOTIFICATION + "/" + paths.ISR_CHANGE_PREFIX,
                                  codecs.IsrChangeNotification(set(chunk)).encode(), sequence=True, makepath=True)
            self.metrics["isr_notifications"] += 1
            log.debug("ISR change notification written %s", kv(path=path, partitions=len(chunk)))

