"""Controller writes fenced by the controller epoch (docs/zookeeper.md#controller-election,
docs/zookeeper.md#fenced-controller-writes).

Every write made through :class:`FencedZkWriter` is one ZooKeeper multi whose first op is
``check("/controller_epoch", epoch_zk_version)``.  If another broker has been elected since, that check fails
and the write raises :class:`ControllerMovedError` without changing anything.

Retries: a commit that fails with a connection loss (or operation timeout) is retried a bounded number of
times with backoff.  Its outcome is unknown — the first attempt may have been applied — so when a retried
commit fails on one of our own ops the writer checks whether the tree already holds what the multi would have
produced (created nodes exist with our data, and our ephemeral owner; set nodes hold our data at the expected
version; deleted nodes are gone; checked nodes not written by the multi still have the checked version).  If
so, the earlier attempt is taken as the one that succeeded and its results are rebuilt from the tree.
Multis containing a *sequential* create are never retried after a connection loss (a retry could create a
second node); the ``ConnectionLoss`` reaches the caller.
"""
from __future__ import annotations

import collections
import logging
import posixpath
from typing import Any, Callable, Iterable, Sequence, TypeVar

import attrs
from kazoo.client import KazooClient
from kazoo.exceptions import (BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError, NotEmptyError,
                              OperationTimeoutError, RolledBackError, RuntimeInconsistency, ZookeeperError)
from kazoo.protocol.states import ZnodeStat
from tenacity import (Retrying, before_sleep_log, retry_if_exception, retry_if_exception_type,
                      stop_after_attempt, wait_exponential)

from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import NotControllerError
from kafkatier.zk import paths
from kafkatier.zk.codecs import ControllerZNode, MalformedZNodeError, decode_controller_epoch, encode_int
from kafkatier.zk.limits import check_znode_size

log = get_logger("zk.fenced")

T = TypeVar("T")

# Errors after which the request may or may not have been applied and a retry is worthwhile.
RETRYABLE = (ConnectionLoss, OperationTimeoutError)
MATCH_ANY_VERSION = -1        # Kafka's ZkVersion.MatchAnyVersion: unconditional
DEFAULT_ATTEMPTS = 5
# Fenced multis in flight at once in :meth:`FencedZkWriter.multi_many` (Kafka's controller pipelines its batches
# of conditional writes the same way, bounded by ``zookeeper.max.in.flight.requests``, default 10).
MAX_MULTIS_IN_FLIGHT = 10


class ControllerMovedError(NotControllerError):
    """The controller epoch moved on: this broker is no longer the controller (Kafka's
    ``ControllerMovedException``; error code NOT_CONTROLLER).  The caller must resign."""


def _bytes(data: bytes | None) -> bytes:
    return b"" if data is None else bytes(data)


@attrs.frozen
class Create:
    path: str
    data: bytes = attrs.field(default=b"", converter=_bytes)
    ephemeral: bool = False
    sequence: bool = False

    def add_to(self, t: Any) -> None:
        check_znode_size(self.data, self.path)
        t.create(self.path, self.data, ephemeral=self.ephemeral, sequence=self.sequence)


@attrs.frozen
class SetData:
    path: str
    data: bytes = attrs.field(converter=_bytes)
    version: int = MATCH_ANY_VERSION

    def add_to(self, t: Any) -> None:
        check_znode_size(self.data, self.path)
        t.set_data(self.path, self.data, version=self.version)


@attrs.frozen
class Delete:
    path: str
    version: int = MATCH_ANY_VERSION

    def add_to(self, t: Any) -> None:
        t.delete(self.path, version=self.version)


@attrs.frozen
class Check:
    path: str
    version: int

    def add_to(self, t: Any) -> None:
        t.check(self.path, self.version)


Op = Create | SetData | Delete | Check


def _retrying(attempts: int, retry_on: Callable[[BaseException], bool] | None = None) -> Retrying:
    return Retrying(
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=0.05, min=0.05, max=2.0),
        retry=retry_if_exception(retry_on) if retry_on else retry_if_exception_type(RETRYABLE),
        reraise=True,
        before_sleep=before_sleep_log(log, logging.WARNING),
    )


def read_retrying(fn: Callable[..., T], *args: Any, attempts: int = DEFAULT_ATTEMPTS) -> T:
    """Call the idempotent read ``fn(*args)``, retried (bounded, with backoff) on connection loss."""
    return _retrying(attempts)(fn, *args)


def first_failure(results: Sequence[Any]) -> tuple[int, Exception] | None:
    """Index and error of the op that made a multi fail (the others report RolledBack/RuntimeInconsistency)."""
    failed = None
    for i, r in enumerate(results):
        if isinstance(r, Exception):
            if not isinstance(r, (RolledBackError, RuntimeInconsistency)):
                return i, r
            failed = failed or (i, r)
    return failed


def _op_error(op: Any, err: Exception, index: int) -> ZookeeperError:
    cls = type(err) if isinstance(err, ZookeeperError) else ZookeeperError
    e = cls(f"{op!r} failed in fenced transaction: {type(err).__name__}")
    e.op = op               # type: ignore[attr-defined]
    e.op_index = index      # type: ignore[attr-defined]
    return e


class FencedZkWriter:
    """Writes fenced by ``check("/controller_epoch", epoch_zk_version)``; one multi per call.

    Results: :meth:`create` returns the created path (with the sequence suffix for sequential nodes),
    :meth:`set_data` the new ``ZnodeStat``; :meth:`multi` one result per op (path, ZnodeStat, or True).
    A failed fence raises :class:`ControllerMovedError`; a failed op raises its kazoo error (NodeExistsError,
    BadVersionError, NoNodeError, ...) with ``.op`` / ``.op_index`` naming the op.
    """

    def __init__(self, client: KazooClient, epoch_zk_version: int, *, max_attempts: int = DEFAULT_ATTEMPTS):
        if epoch_zk_version < 0:
            raise ValueError(f"epoch_zk_version must be a real znode version, got {epoch_zk_version}")
        self._client = client
        self._epoch_zk_version = epoch_zk_version
        self._max_attempts = max_attempts

    @property
    def client(self) -> KazooClient:
        return self._client

    @property
    def epoch_zk_version(self) -> int:
        return self._epoch_zk_version

    # ------------------------------------------------------------------------------------------ the primitive

    def multi(self, ops: Iterable[Op]) -> list[Any]:
        """Apply ``ops`` atomically after the fence check; an empty list only checks the fence."""
        ops = list(ops)
        retry_safe = not any(isinstance(op, Create) and op.sequence for op in ops)
        ambiguous = False

        def attempt() -> list[Any]:
            nonlocal ambiguous
            try:
                results = self._commit(ops)
            except RETRYABLE:
                ambiguous = True
                raise
            try:
                return self._interpret(ops, results)
            except ControllerMovedError:
                raise
            except ZookeeperError:
                if ambiguous:
                    replayed = self._already_applied(ops)
                    if replayed is not None:
                        log.info("fenced transaction applied by an earlier attempt %s", kv(ops=len(ops)))
                        return replayed
                raise

        return _retrying(self._max_attempts, lambda e: retry_safe and isinstance(e, RETRYABLE))(attempt)

    def multi_many(self, batches: Sequence[Sequence[Op]],
                   max_in_flight: int = MAX_MULTIS_IN_FLIGHT) -> list[list[Any] | ZookeeperError]:
        """Several fenced multis pipelined on the session, at most ``max_in_flight`` outstanding: ZooKeeper
        applies one session's requests in order, so this is a sequence of :meth:`multi` calls without a round
        trip each.  Every batch carries its own fence check.

        Returns, per batch, its results or the op error it failed with (``op`` / ``op_index`` set; nothing of
        that batch applied): the caller decides, since a conditional update that lost a race is not fatal.  A
        failed fence raises :class:`ControllerMovedError` once the batches in flight are collected (no batch
        after the fence moved can apply: each checks it).  A batch whose commit was lost with the connection is
        committed again through :meth:`multi`, with its retry and ambiguity handling.
        """
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        batches = [list(b) for b in batches]
        out: list[Any] = [None] * len(batches)
        window: collections.deque = collections.deque()
        lost: list[int] = []
        moved: list[ControllerMovedError] = []

        def collect_oldest() -> None:
            i, pending = window.popleft()
            try:
                results = pending.get()
            except RETRYABLE:
                lost.append(i)
                return
            try:
                out[i] = self._interpret(batches[i], results)
            except ControllerMovedError as e:
                moved.append(e)
            except ZookeeperError as e:
                out[i] = e

        for i, ops in enumerate(batches):
            if len(window) >= max_in_flight:
                collect_oldest()
            if moved:
                break
            t = self._client.transaction()
            t.check(paths.CONTROLLER_EPOCH, self._epoch_zk_version)
            for op in ops:
                op.add_to(t)
            window.append((i, t.commit_async()))
        while window:
            collect_oldest()
        if moved:
            raise moved[0]
        for i in lost:
            try:
                out[i] = self.multi(batches[i])
            except ZookeeperError as e:
                out[i] = e
        return out

    def _commit(self, ops: Sequence[Op]) -> list[Any]:
        t = self._client.transaction()
        t.check(paths.CONTROLLER_EPOCH, self._epoch_zk_version)
        for op in ops:
            op.add_to(t)
        return t.commit()

    def _interpret(self, ops: Sequence[Op], results: Sequence[Any]) -> list[Any]:
        failure = first_failure(results)
        if failure is None:
            if len(results) != len(ops) + 1:
                raise ZookeeperError(f"fenced transaction returned {len(results)} results for {len(ops) + 1} ops")
            return list(results[1:])
        index, err = failure
        if index == 0:
            if isinstance(err, (BadVersionError, NoNodeError)):
                raise ControllerMovedError(
                    f"controller moved: /controller_epoch no longer at version {self._epoch_zk_version} "
                    f"({type(err).__name__})")
            raise _op_error(Check(paths.CONTROLLER_EPOCH, self._epoch_zk_version), err, -1)
        raise _op_error(ops[index - 1], err, index - 1)

    def _already_applied(self, ops: Sequence[Op]) -> list[Any] | None:
        """Rebuild the results if the tree already shows the effect of ``ops``, else None."""
        written = {op.path for op in ops if not isinstance(op, Check)}
        last: dict[str, Op] = {}
        for op in ops:
            if not isinstance(op, Check):
                last[op.path] = op
        session = (self._client.client_id or (None,))[0]
        stats: dict[str, ZnodeStat | None] = {}
        try:
            for path, op in last.items():
                stat = read_retrying(self._client.exists, path, attempts=self._max_attempts)
                stats[path] = stat
                if isinstance(op, Delete):
                    if stat is not None:
                        return None
                    continue
                if stat is None:
                    return None
                data, stat = read_retrying(self._client.get, path, attempts=self._max_attempts)
                stats[path] = stat
                if data != op.data:
                    return None
                if isinstance(op, Create) and op.ephemeral and stat.ephemeralOwner != session:
                    return None
                if isinstance(op, SetData) and op.version >= 0 and stat.version != op.version + 1:
                    return None
            for op in ops:
                if isinstance(op, Check) and op.path not in written and op.version >= 0:
                    stat = read_retrying(self._client.exists, op.path, attempts=self._max_attempts)
                    if stat is None or stat.version != op.version:
                        return None
        except NoNodeError:
            return None
        out: list[Any] = []
        for op in ops:
            if isinstance(op, Create):
                out.append(op.path)
            elif isinstance(op, SetData):
                out.append(stats[op.path])
            else:
                out.append(True)
        return out

    # ---------------------------------------------------------------------------------------- single writes

    def create(self, path: str, data: bytes | None = b"", *, ephemeral: bool = False, sequence: bool = False,
               create_parents: bool = False) -> str:
        """Create ``path``; with ``create_parents`` the missing parents (null data) are created in the same
        fenced transaction.  Returns the created path."""
        node = Create(path, data, ephemeral, sequence)
        if not create_parents:
            return self.multi([node])[0]

        def attempt() -> str:
            parents = self._missing_parents(path)
            return self.multi([Create(p) for p in parents] + [node])[-1]

        def parent_race(e: BaseException) -> bool:
            # A parent appeared or vanished between our exists() and the commit: recompute and try again.
            idx = getattr(e, "op_index", None)
            last = getattr(e, "op", None) is node
            return (isinstance(e, NodeExistsError) and idx is not None and not last) or \
                (isinstance(e, NoNodeError) and idx is not None)

        return _retrying(self._max_attempts, parent_race)(attempt)

    def _missing_parents(self, path: str) -> list[str]:
        missing = []
        parent = posixpath.dirname(path.rstrip("/"))
        while parent not in ("", "/"):
            if read_retrying(self._client.exists, parent, attempts=self._max_attempts) is not None:
                break
            missing.append(parent)
            parent = posixpath.dirname(parent)
        return list(reversed(missing))

    def set_data(self, path: str, data: bytes | None, version: int = MATCH_ANY_VERSION) -> ZnodeStat:
        """Set ``path``'s data (conditional on ``version`` unless -1); returns the new stat."""
        return self.multi([SetData(path, data, version)])[0]

    def delete(self, path: str, version: int = MATCH_ANY_VERSION) -> None:
        """Delete ``path`` (conditional on ``version`` unless -1)."""
        self.multi([Delete(path, version)])

    def delete_recursive(self, path: str) -> None:
        """Delete ``path`` and everything below it, children first, each delete in its own fenced multi.

        Not atomic (like Kafka's recursive delete): a crash or a :class:`ControllerMovedError` part way leaves
        a partial tree that the next controller must finish.  Nodes that vanish concurrently are fine; a child
        created concurrently is deleted on a bounded retry.
        """
        if path.rstrip("/") == "":
            raise ValueError("refusing to delete the root znode recursively")

        def attempt() -> None:
            try:
                children = read_retrying(self._client.get_children, path, attempts=self._max_attempts)
            except NoNodeError:
                return
            for child in sorted(children):
                self.delete_recursive(posixpath.join(path, child))
            try:
                self.delete(path)
            except NoNodeError:
                return

        _retrying(self._max_attempts, lambda e: isinstance(e, NotEmptyError))(attempt)


# ------------------------------------------------------------------------------------------------ election

def read_controller_epoch(client: KazooClient, *, create_if_missing: bool = True,
                          attempts: int = DEFAULT_ATTEMPTS) -> tuple[int, int]:
    """``(epoch, epoch_zk_version)`` of ``/controller_epoch``; a missing node is created with ``0`` first
    (unless ``create_if_missing`` is False, then NoNodeError).  Raises MalformedZNodeError if it is not an
    integer."""
    try:
        data, stat = read_retrying(client.get, paths.CONTROLLER_EPOCH, attempts=attempts)
    except NoNodeError:
        if not create_if_missing:
            raise
        try:
            _retrying(attempts)(client.create, paths.CONTROLLER_EPOCH, encode_int(0))
        except NodeExistsError:
            pass            # another broker (or our earlier, lost attempt) created it
        data, stat = read_retrying(client.get, paths.CONTROLLER_EPOCH, attempts=attempts)
    return decode_controller_epoch(data), stat.version


def register_controller_and_increment_epoch(client: KazooClient, broker_id: int, timestamp_ms: int, *,
                                            attempts: int = DEFAULT_ATTEMPTS) -> tuple[int, int]:
    """Kafka's election multi (docs/zookeeper.md#controller-election): create ephemeral ``/controller`` naming
    ``broker_id`` and bump ``/controller_epoch`` conditionally, atomically.  Returns ``(new_epoch,
    epoch_zk_version)``.

    Raises :class:`ControllerMovedError` when another broker holds ``/controller`` or won the epoch race.
    After a lost reply (connection loss) the *same* multi is retried; its NODEEXISTS/BADVERSION then leads to
    re-reading ``/controller``, which names us (with our session as ephemeral owner) if the first attempt won.
    """
    cur_epoch, cur_version = read_controller_epoch(client, attempts=attempts)
    new_epoch = cur_epoch + 1
    payload = ControllerZNode(broker_id, timestamp_ms).encode()

    def attempt() -> tuple[int, int]:
        t = client.transaction()
        t.create(paths.CONTROLLER, payload, ephemeral=True)
        t.set_data(paths.CONTROLLER_EPOCH, encode_int(new_epoch), version=cur_version)
        results = t.commit()
        failure = first_failure(results)
        if failure is None:
            return new_epoch, results[1].version
        index, err = failure
        if isinstance(err, (NodeExistsError, BadVersionError)):
            return _check_controller_and_epoch(client, broker_id, new_epoch, attempts)
        op = ("create /controller", "setData /controller_epoch")[index] if index < 2 else f"op {index}"
        raise _op_error(op, err, index)

    epoch, version = _retrying(attempts)(attempt)
    log.debug("elected controller %s", kv(broker=broker_id, epoch=epoch, epoch_zk_version=version))
    return epoch, version


def _check_controller_and_epoch(client: KazooClient, broker_id: int, new_epoch: int,
                                attempts: int) -> tuple[int, int]:
    try:
        data, stat = read_retrying(client.get, paths.CONTROLLER, attempts=attempts)
    except NoNodeError:
        raise ControllerMovedError("controller moved: /controller vanished during the election") from None
    try:
        holder = ControllerZNode.decode(data).broker_id
    except MalformedZNodeError as e:
        raise ControllerMovedError(f"controller moved: /controller is unreadable ({e.reason})") from None
    session = (client.client_id or (None,))[0]
    if holder == broker_id and stat.ephemeralOwner == session:
        epoch_data, epoch_stat = read_retrying(client.get, paths.CONTROLLER_EPOCH, attempts=attempts)
        if decode_controller_epoch(epoch_data) == new_epoch:
            return new_epoch, epoch_stat.version
    raise ControllerMovedError(f"controller moved: broker {holder} is the controller")
