"""Remote log metadata managers: the plugin interface (Kafka's ``RemoteLogMetadataManager``) and the default,
durable store shared by all brokers, kept in ZooKeeper.

Store choice (**Project**).  Kafka's default keeps segment metadata as events in the internal topic
``__remote_log_metadata``; this project keeps the current state of each segment in one znode::

    /kafkatier/remote_log_metadata/<topic>-<partition>-<topicId>/<startOffset, 20 digits>-<segmentId>

with the JSON payload of ``zk_schemas/remote_log_segment_metadata.json``.  Why ZooKeeper rather than files in
the remote storage directory:

* every state change is a compare-and-set on the znode version, so two brokers (an old and a new leader)
  can never both win a transition, and an invalid transition is never written;
* a transition can share one ZooKeeper multi with ``check`` ops on other znodes (``fence``): the copy task
  publishes COPY_SEGMENT_FINISHED only if the partition state znode (leader, leader epoch) and the topic's
  ``tiered_epoch`` znode are unchanged, which is exactly the fencing KIP-950's ZooKeeper design needs;
* it is durable and shared by every broker process, and ZooKeeper is already the cluster's control plane;
  a plain directory would need cross-process locking and could not fence atomically.

Children are named by start offset, so listing a partition is one ``get_children`` plus pipelined reads, and
finding the segment for an offset reads only the candidates at or below it.  A segment's znode is deleted when
it reaches DELETE_SEGMENT_FINISHED (Kafka's cache forgets it then too).  Malformed znodes are logged and
skipped.
"""
from __future__ import annotations

import abc
import re
import threading
from typing import Any, Iterable, Mapping, Sequence

from kafkatier.zk.errors import BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError, OperationTimeoutError
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from kafkatier.common.structs import TopicIdPartition
from kafkatier.log.remote.remote_log_segment_metadata import (
    RemoteLogMetadataError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    is_valid_transition,
)
from kafkatier.log.remote.remote_storage_manager import RemoteResourceNotFoundError, RemoteStorageError
from kafkatier.logsetup import get_logger, kv
from kafkatier.zk.fenced import first_failure, read_retrying

log = get_logger("remote.metadata")

ROOT = "/kafkatier/remote_log_metadata"
_PARTITION_NODE = re.compile(r"([a-zA-Z0-9._-]+)-(\d+)-([a-zA-Z0-9_-]{22})")
_SEGMENT_NODE = re.compile(r"(\d{20})-([a-zA-Z0-9_-]{22})")
_RETRYABLE = (ConnectionLoss, OperationTimeoutError)
_ATTEMPTS = 5
_READ_TIMEOUT_S = 30.0

#: States whose segments count for size retention (KAFKA-17062: never dangling copies).
SIZED_STATES = frozenset({RemoteLogSegmentState.COPY_SEGMENT_FINISHED, RemoteLogSegmentState.DELETE_SEGMENT_STARTED})


class RemoteLogMetadataFencedError(RemoteStorageError):
    """A fence check of an update failed: the leader, its epoch or the topic's tiered epoch moved on."""


def _check_new_segment(metadata: RemoteLogSegmentMetadata) -> None:
    """A segment is added in COPY_SEGMENT_STARTED (Kafka's message for anything else)."""
    if metadata.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
        raise RemoteLogMetadataError(f"Given remoteLogSegmentMetadata should have state as "
                                     f"{RemoteLogSegmentState.COPY_SEGMENT_STARTED.name} but it contains state "
                                     f"as: {metadata.state.name}")


class RemoteLogMetadataManager(abc.ABC):
    """Where segment metadata lives; shared by all brokers.  Implementations must be thread-safe.

    ``fence`` arguments are preconditions that must hold atomically with the write; for the ZooKeeper store
    they are :class:`kafkatier.zk.fenced.Check` ops.  A failed precondition raises
    :class:`RemoteLogMetadataFencedError`.
    """

    def configure(self, configs: Mapping[str, Any]) -> None:  # noqa: B027 - optional hook
        """Receive the ``rlmm.config.*`` properties (prefix removed) plus ``broker.id``."""

    @abc.abstractmethod
    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata, fence: Sequence[Any] = ()
                                        ) -> None:
        """Record a new segment; its state must be COPY_SEGMENT_STARTED."""

    @abc.abstractmethod
    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate,
                                           fence: Sequence[Any] = (),
                                           expected_state: RemoteLogSegmentState | None = None
                                           ) -> RemoteLogSegmentMetadata | None:
        """Apply a state change; returns the new metadata, or None when the transition is invalid (the event
        is dropped with a log line and nothing changes) or the segment is not in ``expected_state`` (if
        given).  Unknown id: :class:`RemoteResourceNotFoundError`."""

    @abc.abstractmethod
    def list_remote_log_segments(self, tip: TopicIdPartition, leader_epoch: int | None = None, *,
                                 tiered_epoch: int | None = None,
                                 states: Iterable[RemoteLogSegmentState] | None = None
                                 ) -> list[RemoteLogSegmentMetadata]:
        """Segments sorted by start offset; optionally only those holding ``leader_epoch``, stamped with
        ``tiered_epoch`` or in ``states``."""

    def list_remote_log_segments_of(self, tips: Sequence[TopicIdPartition]
                                    ) -> dict[TopicIdPartition, list[RemoteLogSegmentMetadata]]:
        """:meth:`list_remote_log_segments` of several partitions (a store may pipeline the reads)."""
        return {tip: self.list_remote_log_segments(tip) for tip in tips}

    @abc.abstractmethod
    def remote_log_segment_metadata(self, tip: TopicIdPartition, offset: int, leader_epoch: int | None = None
                                    ) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` (and ``leader_epoch`` if given)."""

    @abc.abstractmethod
    def segment_metadata(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentMetadata | None:
        """The current metadata of one segment (None if it is unknown or fully deleted)."""

    def highest_offset_for_epoch(self, tip: TopicIdPartition, leader_epoch: int | None = None, *,
                                 tiered_epoch: int | None = None) -> int | None:
        """Highest end offset of the COPY_SEGMENT_FINISHED segments (holding ``leader_epoch`` if given)."""
        segs = self.list_remote_log_segments(tip, leader_epoch, tiered_epoch=tiered_epoch,
                                             states=[RemoteLogSegmentState.COPY_SEGMENT_FINISHED])
        return max((s.end_offset for s in segs), default=None)

    def remote_log_size(self, tip: TopicIdPartition, leader_epoch: int | None = None) -> int:
        """Bytes of the segments in COPY_SEGMENT_FINISHED or DELETE_SEGMENT_STARTED."""
        return sum(s.segment_size_in_bytes for s in self.list_remote_log_segments(tip, leader_epoch,
                                                                                  states=SIZED_STATES))

    @abc.abstractmethod
    def list_partitions(self, topic: str | None = None) -> list[TopicIdPartition]:
        """Partitions that have metadata (optionally of one topic)."""

    @abc.abstractmethod
    def delete_partition_metadata(self, tip: TopicIdPartition) -> None:
        """Forget a partition whose segments were all deleted (topic deletion)."""

    def on_partition_leadership_changes(self, leaders: Iterable[TopicIdPartition],  # noqa: B027
                                        followers: Iterable[TopicIdPartition]) -> None:
        pass

    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:  # noqa: B027
        pass

    def close(self) -> None:  # noqa: B027
        pass


def _retrying() -> Retrying:
    return Retrying(stop=stop_after_attempt(_ATTEMPTS), wait=wait_exponential(multiplier=0.05, max=1.0),
                    retry=retry_if_exception_type(_RETRYABLE), reraise=True)


class ZkRemoteLogMetadataManager(RemoteLogMetadataManager):
    """The ZooKeeper-backed store (see the module docstring).  ``zk`` is a started kazoo client on the Kafka
    chroot; it may also come from ``configure({"zookeeper.client": zk})``."""

    def __init__(self, zk=None, broker_id: int = -1):
        self.zk = zk
        self.broker_id = broker_id

    def configure(self, configs: Mapping[str, Any]) -> None:
        if configs.get("zookeeper.client") is not None:
            self.zk = configs["zookeeper.client"]
        if configs.get("broker.id") is not None:
            self.broker_id = int(configs["broker.id"])
        if self.zk is None:
            raise RemoteStorageError("ZkRemoteLogMetadataManager needs a ZooKeeper client (zookeeper.client)")

    # --- paths ------------------------------------------------------------------------------------------------
    @staticmethod
    def partition_path(tip: TopicIdPartition) -> str:
        return f"{ROOT}/{tip.topic}-{tip.partition}-{tip.topic_id}"

    @classmethod
    def segment_path(cls, metadata: RemoteLogSegmentMetadata) -> str:
        return f"{cls.partition_path(metadata.topic_id_partition)}/{metadata.start_offset:020d}-{metadata.segment_id}"

    # --- writes -----------------------------------------------------------------------------------------------
    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata, fence: Sequence[Any] = ()
                                        ) -> None:
        _check_new_segment(metadata)
        ppath = self.partition_path(metadata.topic_id_partition)
        path = self.segment_path(metadata)
        data = metadata.to_json()
        _retrying()(self.zk.ensure_path, ppath)

        def attempt() -> None:
            t = self.zk.transaction()
            for op in fence:
                op.add_to(t)
            t.create(path, data)
            failure = first_failure(t.commit())
            if failure is None:
                return
            idx, err = failure
            if idx < len(fence):
                raise RemoteLogMetadataFencedError(f"fence check failed on {fence[idx].path}: "
                                                   f"{type(err).__name__}")
            if isinstance(err, NodeExistsError):
                existing, _ = read_retrying(self.zk.get, path)
                if existing == data:
                    return  # an earlier attempt went through before the connection dropped
            raise err
        _retrying()(attempt)
        log.info(kv(event="remote_segment_metadata_added", segment=metadata.segment_id,
                    partition=metadata.topic_id_partition, start_offset=metadata.start_offset,
                    end_offset=metadata.end_offset, tiered_epoch=metadata.tiered_epoch))

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate,
                                           fence: Sequence[Any] = (),
                                           expected_state: RemoteLogSegmentState | None = None
                                           ) -> RemoteLogSegmentMetadata | None:
        seen: list[bool] = []

        def attempt() -> RemoteLogSegmentMetadata | None:
            found = self._find(update.remote_log_segment_id)
            if found is None:
                if seen and update.state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                    return None  # an earlier attempt deleted it before the connection dropped
                raise RemoteResourceNotFoundError(
                    f"No remote log segment metadata found for :{update.remote_log_segment_id}")
            seen.append(True)
            path, current, stat = found
            if expected_state is not None and current.state != expected_state and current.state != update.state:
                log.info(kv(event="segment_state_changed_meanwhile", segment=update.remote_log_segment_id.id,
                            expected=expected_state.name, found=current.state.name, target=update.state.name))
                return None
            if not is_valid_transition(current.state, update.state):
                log.warning(f"Current state: {current.state.name} can not be transitioned to target state: "
                            f"{update.state.name}, segmentId: {update.remote_log_segment_id.id}. Dropping the event")
                return None
            new = current.create_with_update(update)
            t = self.zk.transaction()
            for op in fence:
                op.add_to(t)
            if update.state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                t.delete(path, version=stat.version)
            else:
                t.set_data(path, new.to_json(), version=stat.version)
            failure = first_failure(t.commit())
            if failure is None:
                return new
            idx, err = failure
            if idx < len(fence):
                raise RemoteLogMetadataFencedError(f"fence check failed on {fence[idx].path}: "
                                                   f"{type(err).__name__}")
            raise err  # BadVersion / NoNode: a concurrent change; retried from a fresh read

        retrying = Retrying(stop=stop_after_attempt(_ATTEMPTS), wait=wait_exponential(multiplier=0.02, max=0.5),
                            retry=retry_if_exception_type(_RETRYABLE + (BadVersionError, NoNodeError)),
                            reraise=True)
        result = retrying(attempt)
        if result is not None:
            log.info(kv(event="remote_segment_metadata_updated", segment=update.remote_log_segment_id.id,
                        partition=update.remote_log_segment_id.topic_id_partition, state=update.state.name))
        return result

    def delete_partition_metadata(self, tip: TopicIdPartition) -> None:
        try:
            _retrying()(self.zk.delete, self.partition_path(tip), recursive=True)
        except NoNodeError:
            pass

    # --- reads ------------------------------------------------------------------------------------------------
    def _children(self, tip: TopicIdPartition) -> list[tuple[int, str, str]]:
        """``(start offset, segment id, node name)`` of the partition's segment znodes, sorted."""
        matches = self._matching_children(self.partition_path(tip), _SEGMENT_NODE, warn_unexpected=True)
        return sorted((int(m.group(1)), m.group(2), m.string) for m in matches)

    def _matching_children(self, path: str, pattern: re.Pattern, warn_unexpected: bool) -> list[re.Match]:
        """The names of ``path``'s children that ``pattern`` fully matches, as matches ([] when ``path`` does
        not exist); the others are skipped, with a warning when ``warn_unexpected``."""
        try:
            names = read_retrying(self.zk.get_children, path)
        except NoNodeError:
            return []
        out = []
        for n in names:
            m = pattern.fullmatch(n)
            if m is not None:
                out.append(m)
            elif warn_unexpected:
                log.warning(kv(event="unexpected_znode_skipped", path=f"{path}/{n}"))
        return out

    def _read(self, tip: TopicIdPartition, names: Sequence[str]) -> list[tuple[str, RemoteLogSegmentMetadata, Any]]:
        """Pipelined reads of the named znodes: ``(path, metadata, stat)``, vanished/malformed ones skipped."""
        ppath = self.partition_path(tip)
        paths = [f"{ppath}/{n}" for n in names]

        def read_all() -> list[tuple[str, RemoteLogSegmentMetadata, Any]]:
            pending = [(p, self.zk.get_async(p)) for p in paths]
            out = []
            for p, res in pending:
                try:
                    data, stat = res.get(timeout=_READ_TIMEOUT_S)
                except NoNodeError:
                    continue
                try:
                    out.append((p, RemoteLogSegmentMetadata.from_json(data), stat))
                except RemoteLogMetadataError as e:
                    log.warning(kv(event="malformed_segment_metadata_skipped", path=p, error=e))
            return out
        return _retrying()(read_all)

    def _find(self, segment_id: RemoteLogSegmentId) -> tuple[str, RemoteLogSegmentMetadata, Any] | None:
        names = [n for _, sid, n in self._children(segment_id.topic_id_partition) if sid == segment_id.id]
        found = self._read(segment_id.topic_id_partition, names)
        return found[0] if found else None

    def segment_metadata(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentMetadata | None:
        found = self._find(segment_id)
        return found[1] if found else None

    def list_remote_log_segments(self, tip: TopicIdPartition, leader_epoch: int | None = None, *,
                                 tiered_epoch: int | None = None,
                                 states: Iterable[RemoteLogSegmentState] | None = None
                                 ) -> list[RemoteLogSegmentMetadata]:
        wanted = frozenset(states) if states is not None else None
        out = []
        for _, md, _ in self._read(tip, [n for _, _, n in self._children(tip)]):
            if md.topic_id_partition != tip:
                log.warning(kv(event="segment_metadata_of_other_partition_skipped", segment=md.segment_id))
                continue
            if leader_epoch is not None and leader_epoch not in md.leader_epochs:
                continue
            if tiered_epoch is not None and md.tiered_epoch != tiered_epoch:
                continue
            if wanted is not None and md.state not in wanted:
                continue
            out.append(md)
        return sorted(out, key=lambda m: (m.start_offset, m.end_offset, m.segment_id))

    def list_remote_log_segments_of(self, tips: Sequence[TopicIdPartition]
                                    ) -> dict[TopicIdPartition, list[RemoteLogSegmentMetadata]]:
        """Every partition's listing in two pipelined rounds: all ``get_children``, then all segment reads."""
        def list_all() -> dict[TopicIdPartition, list[RemoteLogSegmentMetadata]]:
            children = [(tip, self.zk.get_children_async(self.partition_path(tip))) for tip in tips]
            reads = []
            for tip, res in children:
                try:
                    names = res.get(timeout=_READ_TIMEOUT_S)
                except NoNodeError:
                    names = []
                ppath = self.partition_path(tip)
                for n in sorted(names):
                    if _SEGMENT_NODE.fullmatch(n) is None:
                        log.warning(kv(event="unexpected_znode_skipped", path=f"{ppath}/{n}"))
                        continue
                    reads.append((tip, f"{ppath}/{n}", self.zk.get_async(f"{ppath}/{n}")))
            out: dict[TopicIdPartition, list[RemoteLogSegmentMetadata]] = {tip: [] for tip in tips}
            for tip, path, res in reads:
                try:
                    data, _ = res.get(timeout=_READ_TIMEOUT_S)
                except NoNodeError:
                    continue
                try:
                    md = RemoteLogSegmentMetadata.from_json(data)
                except RemoteLogMetadataError as e:
                    log.warning(kv(event="malformed_segment_metadata_skipped", path=path, error=e))
                    continue
                if md.topic_id_partition != tip:
                    log.warning(kv(event="segment_metadata_of_other_partition_skipped", segment=md.segment_id))
                    continue
                out[tip].append(md)
            return {tip: sorted(segs, key=lambda m: (m.start_offset, m.end_offset, m.segment_id))
                    for tip, segs in out.items()}
        return _retrying()(list_all)

    def remote_log_segment_metadata(self, tip: TopicIdPartition, offset: int, leader_epoch: int | None = None
                                    ) -> RemoteLogSegmentMetadata | None:
        candidates = [n for start, _, n in reversed(self._children(tip)) if start <= offset]
        batch = 4  # read a few candidates at a time, nearest first
        for i in range(0, len(candidates), batch):
            for _, md, _ in self._read(tip, candidates[i:i + batch]):
                if (md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED and md.contains_offset(offset)
                        and (leader_epoch is None or leader_epoch in md.leader_epochs)):
                    return md
        return None

    def list_partitions(self, topic: str | None = None) -> list[TopicIdPartition]:
        out = []
        for m in self._matching_children(ROOT, _PARTITION_NODE, warn_unexpected=False):
            tip = TopicIdPartition(m.group(3), m.group(1), int(m.group(2)))
            if topic is None or tip.topic == topic:
                out.append(tip)
        return sorted(out, key=lambda t: (t.topic, t.partition, t.topic_id))


class InMemoryRemoteLogMetadataManager(RemoteLogMetadataManager):
    """A process-local store with the same semantics (tests, single-process tools).  ``fence`` items are
    callables returning whether the precondition holds."""

    def __init__(self) -> None:
        self._segments: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
        self._lock = threading.RLock()

    @staticmethod
    def _check(fence: Sequence[Any]) -> None:
        for i, cond in enumerate(fence):
            if callable(cond) and not cond():
                raise RemoteLogMetadataFencedError(f"fence check {i} failed")

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata, fence: Sequence[Any] = ()
                                        ) -> None:
        _check_new_segment(metadata)
        with self._lock:
            self._check(fence)
            self._segments[metadata.remote_log_segment_id] = metadata

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate,
                                           fence: Sequence[Any] = (),
                                           expected_state: RemoteLogSegmentState | None = None
                                           ) -> RemoteLogSegmentMetadata | None:
        with self._lock:
            current = self._segments.get(update.remote_log_segment_id)
            if current is None:
                raise RemoteResourceNotFoundError(
                    f"No remote log segment metadata found for :{update.remote_log_segment_id}")
            if expected_state is not None and current.state not in (expected_state, update.state):
                return None
            if not is_valid_transition(current.state, update.state):
                log.warning(f"Current state: {current.state.name} can not be transitioned to target state: "
                            f"{update.state.name}, segmentId: {update.remote_log_segment_id.id}. Dropping the event")
                return None
            self._check(fence)
            new = current.create_with_update(update)
            if update.state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                del self._segments[update.remote_log_segment_id]
            else:
                self._segments[update.remote_log_segment_id] = new
            return new

    def segment_metadata(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentMetadata | None:
        with self._lock:
            return self._segments.get(segment_id)

    def list_remote_log_segments(self, tip: TopicIdPartition, leader_epoch: int | None = None, *,
                                 tiered_epoch: int | None = None,
                                 states: Iterable[RemoteLogSegmentState] | None = None
                                 ) -> list[RemoteLogSegmentMetadata]:
        wanted = frozenset(states) if states is not None else None
        with self._lock:
            segs = [m for m in self._segments.values() if m.topic_id_partition == tip
                    and (leader_epoch is None or leader_epoch in m.leader_epochs)
                    and (tiered_epoch is None or m.tiered_epoch == tiered_epoch)
                    and (wanted is None or m.state in wanted)]
        return sorted(segs, key=lambda m: (m.start_offset, m.end_offset, m.segment_id))

    def remote_log_segment_metadata(self, tip: TopicIdPartition, offset: int, leader_epoch: int | None = None
                                    ) -> RemoteLogSegmentMetadata | None:
        for md in reversed(self.list_remote_log_segments(tip, leader_epoch,
                                                         states=[RemoteLogSegmentState.COPY_SEGMENT_FINISHED])):
            if md.contains_offset(offset):
                return md
        return None

    def list_partitions(self, topic: str | None = None) -> list[TopicIdPartition]:
        with self._lock:
            tips = {m.topic_id_partition for m in self._segments.values()}
        return sorted(t for t in tips if topic is None or t.topic == topic)

    def delete_partition_metadata(self, tip: TopicIdPartition) -> None:
        with self._lock:
            for sid in [k for k, m in self._segments.items() if m.topic_id_partition == tip]:
                del self._segments[sid]
