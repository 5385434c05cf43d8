"""Incremental fetch sessions, the leader's side (KIP-227): Kafka's ``FetchSession.scala`` -- the
``FetchSessionCache``, the ``FetchManager`` that turns a Fetch request into a fetch context, and the contexts.

Why: a follower of thousands of partitions would otherwise list every one of them in every Fetch, every
``replica.fetch.wait.max.ms``, and the leader would parse and answer each one even when nothing moved.  With a
session the leader remembers what the fetcher asked (offset, log start offset, epoch, max bytes) and what it
last answered (high watermark, log start offset); the fetcher then sends only what changed, and the leader
answers only the partitions with something new.

A request becomes one of four contexts (:meth:`FetchManager.new_context`, Kafka's ``FetchManager.newContext``):

* **sessionless** -- Fetch before v7, or a full fetch with epoch -1 (librdkafka): the partitions listed, answered
  all, session id 0; a session id given with epoch -1 is closed;
* **full** -- epoch 0: the partitions listed, answered all; the answer creates a session holding them (its id
  in the response) unless the cache is full and nothing may be evicted (then session id 0); a session id given
  is closed first;
* **incremental** -- a session id and the epoch the session expects: the listed partitions are added or
  updated, ``forgotten_topics_data`` removed, and the leader reads EVERY partition of the session (so the
  follower's fetch state, the high watermark and the ISR move as with a full fetch) but answers only those
  with records, a new high watermark or log start offset, or an error (:meth:`CachedPartition.must_respond`);
  a partition that returned records moves to the end of the session, so a ``max_bytes`` budget rotates;
* **session error** -- an unknown id (FETCH_SESSION_ID_NOT_FOUND, 70) or a wrong epoch
  (INVALID_FETCH_SESSION_EPOCH, 71): nothing read, the error at the top level.

The cache (``max.incremental.fetch.session.cache.slots``, default 1000) evicts as Kafka's: first the session
unused longest if it is older than ``min.incremental.fetch.session.eviction.ms`` (default 120000); else the
least valuable *evictable* session if the new one is worth at least as much (followers' sessions are
privileged and outrank consumers'; then more partitions outrank fewer).  A session is evictable by anyone once
it has lived longer than the eviction time, and by a follower's session at any time if it is a consumer's.

Threads: requests run on several handler threads and a long-poll fetch answers from the purgatory; one lock
guards the cache and every session in it (Kafka locks the cache and each session apart; ours is the same order
of operations with a coarser lock).  An incremental fetch answered after a later request of the same session
moved the epoch gets INVALID_FETCH_SESSION_EPOCH, as Kafka's.

Topic ids (KIP-516, Fetch v13+): a session created by a v13+ request names its partitions by topic id and
partition (:class:`TopicIdKey`), one created below v13 by name; an incremental request of the other kind is
FETCH_SESSION_TOPIC_ID_ERROR (106), as Kafka's.  A partition whose topic id the broker does not know stays in the
session without a name (answered UNKNOWN_TOPIC_ID by ``KafkaApis``) and gets its name when the metadata learns
the id (Kafka's ``maybeResolveUnknownName``).  A topic deleted and re-created under the same name keeps its old
id in the session, so its reads are INCONSISTENT_TOPIC_ID (``KafkaApis`` compares it with the log's id).

Differences from Kafka: session ids are positive (Kafka's are any int32 but 0; kafka-python reads -1 as "throttled"); no KIP-219
throttled responses; the metrics are counters in the broker's describe rather than JMX meters.
"""
from __future__ import annotations

import random
import threading
import time
from typing import Callable, Iterable

import attrs

from kafkatier.common.structs import TopicPartition
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import Errors
from kafkatier.protocol.fetch_metadata import (FINAL_EPOCH, INVALID_SESSION_ID, LEGACY, FetchMetadata,
                                               next_epoch)
from kafkatier.server.config import broker_setting
from kafkatier.server.replica_manager import FetchPartitionData, FetchPartitionResult
from kafkatier.zk.codecs import topic_id_str

log = get_logger("server.fetch-session")

DEFAULT_CACHE_SLOTS = 1000          # max.incremental.fetch.session.cache.slots
DEFAULT_EVICTION_MS = 120000        # min.incremental.fetch.session.eviction.ms
FIRST_SESSION_VERSION = 7           # Fetch v7 added session ids and epochs
TOPIC_IDS_VERSION = 13              # Fetch v13 names topics by id (KIP-516)
_MAX_SESSION_ID = 2**31 - 1

#: Resolves a topic id (22-char base64) to the topic's name, None when unknown (the metadata cache's).
TopicNames = Callable[[str], "str | None"]


@attrs.frozen
class TopicIdKey:
    """A partition of a session that uses topic ids (Kafka's ``CachedPartition`` equality then ignores the
    name, which may be unknown)."""
    topic_id: str
    partition: int


#: A session's key for a partition: its TopicPartition (Fetch < v13) or its :class:`TopicIdKey` (v13+).
SessionKey = "TopicPartition | TopicIdKey"


def session_key(fp: FetchPartitionData):
    """The key ``fp`` has in a session and in a context's answers."""
    return fp.tp if fp.topic_id is None else TopicIdKey(fp.topic_id, fp.tp.partition)


def fetch_replica_id(req, version: int) -> int:
    """The fetching replica's broker id, -1 for a consumer (Kafka's ``FetchRequest.replicaId``): from v15
    (KIP-903) in the tagged ``ReplicaState``, before in ``ReplicaId``."""
    if version < 15:
        return req.replica_id
    state = getattr(req, "replica_state", None)
    return -1 if state is None else state.replica_id


@attrs.frozen
class FetchRequestData:
    """What a Fetch request asks, as the session layer reads it."""
    metadata: FetchMetadata
    partitions: list[FetchPartitionData]
    forgotten: list  # of session keys (TopicPartition, or TopicIdKey with topic ids)
    uses_topic_ids: bool = False


def fetch_request_data(req, version: int, topic_name: TopicNames | None = None) -> FetchRequestData:
    """Read a kafka-python Fetch request: the partitions listed, those to forget, the session metadata.  From
    v13 topics are ids, resolved to names with ``topic_name`` (an unknown id leaves the name None)."""
    if version >= TOPIC_IDS_VERSION:
        return _fetch_request_data_by_id(req, version, topic_name or (lambda _tid: None))
    parts = [FetchPartitionData(
        TopicPartition(t.topic, p.partition), p.fetch_offset, p.partition_max_bytes,
        current_leader_epoch=getattr(p, "current_leader_epoch", -1) if version >= 9 else -1,
        log_start_offset=getattr(p, "log_start_offset", -1) if version >= 5 else -1)
        for t in req.topics for p in t.partitions]
    if version < FIRST_SESSION_VERSION:
        return FetchRequestData(LEGACY, parts, [])
    forgotten = [TopicPartition(t.topic, p) for t in (req.forgotten_topics_data or []) for p in t.partitions]
    return FetchRequestData(FetchMetadata(req.session_id, req.session_epoch), parts, forgotten)


def _fetch_request_data_by_id(req, version: int, topic_name: TopicNames) -> FetchRequestData:
    parts = []
    for t in req.topics:
        tid = topic_id_str(t.topic_id)
        name = topic_name(tid)
        parts.extend(FetchPartitionData(
            TopicPartition(name, p.partition), p.fetch_offset, p.partition_max_bytes,
            current_leader_epoch=p.current_leader_epoch, log_start_offset=p.log_start_offset, topic_id=tid)
            for p in t.partitions)
    forgotten = [TopicIdKey(topic_id_str(t.topic_id), p)
                 for t in (req.forgotten_topics_data or []) for p in t.partitions]
    return FetchRequestData(FetchMetadata(req.session_id, req.session_epoch), parts, forgotten, uses_topic_ids=True)


@attrs.define(eq=False)
class CachedPartition:
    """One partition of a session: what the fetcher last asked, and what the leader last answered."""
    request: FetchPartitionData
    high_watermark: int = -1     # -1: never answered, or the last answer was an error (so the next one is sent)
    log_start_offset: int = -1   # the leader's, as last answered
    last_stable_offset: int = -1  # read_committed answers only (-1 otherwise)

    def must_respond(self, r: FetchPartitionResult, update: bool = True) -> bool:
        """Kafka's ``CachedPartition.maybeUpdateResponseData``: does an incremental response carry this answer?
        With ``update`` the answer becomes the cached state."""
        respond = bool(r.records)
        if self.high_watermark != r.high_watermark:
            respond = True
            if update:
                self.high_watermark = r.high_watermark
        if self.log_start_offset != r.log_start_offset:
            respond = True
            if update:
                self.log_start_offset = r.log_start_offset
        if self.last_stable_offset != r.last_stable_offset:
            respond = True
            if update:
                self.last_stable_offset = r.last_stable_offset
        if r.preferred_read_replica >= 0:
            respond = True   # KIP-392: the consumer must learn where to fetch from
        if r.error != Errors.NONE:
            respond = True
            if update:
                self.high_watermark = -1  # once the error clears, the partition is answered again
        return respond


class FetchSession:
    """Kafka's ``FetchSession``: the partitions in fetch order, the epoch the next request must carry."""

    def __init__(self, session_id: int, privileged: bool, partitions: dict, now_ms: int,
                 uses_topic_ids: bool = False):
        self.id = session_id
        self.privileged = privileged
        self.partitions = partitions   # session key -> CachedPartition, in fetch order
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(0)
        # Kept by the cache at each touch (Kafka's lastUsed / evictable maps, as flags and the size then).
        self.cached_size = -1
        self.evictable_by_privileged = False
        self.evictable_by_all = False
        # A follower's session whose last answer, read from every partition, had nothing in it: the replica
        # manager's change number then (``ReplicaManager.change_seq``) and until when (monotonic) a request that
        # changes nothing may be answered without reading (kafka_apis.py); None: not quiet.
        self.quiet_seq: int | None = None
        self.quiet_until = 0.0

    @property
    def size(self) -> int:
        return len(self.partitions)

    def evictable_key(self) -> tuple[bool, int, int]:
        """Kafka's ``EvictableKey``: less valuable sorts first (consumers before followers, then fewer
        partitions)."""
        return (self.privileged, self.cached_size, self.id)

    def update(self, fetch_data: Iterable[FetchPartitionData], to_forget: Iterable
               ) -> tuple[int, int, int]:
        """Apply an incremental request: partitions listed are added or updated, forgotten ones (session keys)
        removed.  Returns how many were added, updated and removed."""
        added = updated = removed = 0
        for fp in fetch_data:
            key = session_key(fp)
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = CachedPartition(fp)
                added += 1
            else:
                cached.request = fp
                updated += 1
        for tp in to_forget:
            if self.partitions.pop(tp, None) is not None:
                removed += 1
        return added, updated, removed

    def resolve_names(self, topic_name: TopicNames) -> None:
        """Name the partitions whose topic id was unknown when they joined, if the id is known now (Kafka's
        ``maybeResolveUnknownName``)."""
        for cp in self.partitions.values():
            fp = cp.request
            if fp.tp.topic is None and fp.topic_id is not None:
                name = topic_name(fp.topic_id)
                if name is not None:
                    cp.request = attrs.evolve(fp, tp=TopicPartition(name, fp.tp.partition))

    def __repr__(self) -> str:
        return (f"FetchSession(id={self.id}, privileged={self.privileged}, partitions={self.size}, "
                f"uses_topic_ids={self.uses_topic_ids}, epoch={self.epoch})")


@attrs.frozen
class FetchSessionResponse:
    """What a fetch context answers: the top-level error, the session id, and the partitions to send (in
    order)."""
    error: Errors
    session_id: int
    partitions: dict  # session key (TopicPartition, or TopicIdKey with topic ids) -> FetchPartitionResult


class FetchSessionCache:
    """Kafka's ``FetchSessionCache``: at most ``max_entries`` sessions, evicted as the module docstring says."""

    def __init__(self, max_entries: int = DEFAULT_CACHE_SLOTS, eviction_ms: int = DEFAULT_EVICTION_MS, *,
                 clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None):
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self._clock = clock
        self._rng = rng or random.Random()
        self.lock = threading.RLock()
        self._sessions: dict[int, FetchSession] = {}
        self.num_partitions = 0  # partitions cached over all sessions (as of each session's last touch)
        self.evictions = 0

    @classmethod
    def from_props(cls, props) -> FetchSessionCache:
        """From the broker's settings (Kafka's names and defaults), typed and checked by their definitions
        (server/config.py)."""
        return cls(broker_setting(props, "max.incremental.fetch.session.cache.slots"),
                   broker_setting(props, "min.incremental.fetch.session.eviction.ms"))

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        with self.lock:
            return self._sessions.get(session_id)

    def maybe_create_session(self, privileged: bool, size: int, partitions: Callable[[], dict],
                             uses_topic_ids: bool = False) -> int:
        """A new session's id, or 0 when the cache is full and no session may be evicted for it."""
        with self.lock:
            now = self.now_ms()
            if len(self._sessions) >= self.max_entries and not self._try_evict(privileged, size, now):
                log.debug("no fetch session created %s", kv(privileged=privileged, partitions=size))
                return INVALID_SESSION_ID
            session = FetchSession(self._new_session_id(), privileged, partitions(), now, uses_topic_ids)
            self._sessions[session.id] = session
            self.touch(session, now)
            log.debug("created fetch session %s", kv(session=session.id, privileged=privileged, partitions=session.size))
            return session.id

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """Kafka's ``touch``: mark the session used now, and record its size and whether it may be evicted."""
        with self.lock:
            session.last_used_ms = now_ms
            if session.cached_size != -1:
                self.num_partitions -= session.cached_size
            session.cached_size = session.size
            self.num_partitions += session.cached_size
            old = now_ms - session.creation_ms > self.eviction_ms
            session.evictable_by_privileged = (not session.privileged) or old
            session.evictable_by_all = old

    def remove(self, session_id: int) -> FetchSession | None:
        with self.lock:
            session = self._sessions.pop(session_id, None)
            if session is not None and session.cached_size != -1:
                self.num_partitions -= session.cached_size
            return session

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        sessions = self._sessions.values()
        if not sessions:
            return False
        stalest = min(sessions, key=lambda s: (s.last_used_ms, s.id))
        if now_ms - stalest.last_used_ms > self.eviction_ms:
            victim = stalest
        else:
            candidates = [s for s in sessions if (s.evictable_by_privileged if privileged else s.evictable_by_all)]
            if not candidates:
                return False
            victim = min(candidates, key=FetchSession.evictable_key)
            if (privileged, size, 0) < victim.evictable_key():
                return False  # the new session is worth less than any we could evict
        self.remove(victim.id)
        self.evictions += 1
        log.info("evicted a fetch session %s", kv(session=victim.id, privileged=victim.privileged,
                                                  partitions=victim.size, for_privileged=privileged, for_size=size))
        return True

    def _new_session_id(self) -> int:
        while True:
            sid = self._rng.randint(1, _MAX_SESSION_ID)
            if sid not in self._sessions:
                return sid


class FetchContext:
    """Kafka's ``FetchContext``: which partitions a request reads, and what its response carries."""
    kind = "sessionless"

    def partitions(self) -> list[FetchPartitionData]:
        """The partitions to read (Kafka's ``foreachPartition``)."""
        raise NotImplementedError

    def response(self, results: dict) -> FetchSessionResponse:
        """The response for ``results`` (every partition read, by :func:`session_key`, in order; Kafka's
        ``updateAndGenerateResponseData``)."""
        raise NotImplementedError


class SessionErrorContext(FetchContext):
    kind = "error"

    def __init__(self, error: Errors):
        self.error = error

    def partitions(self) -> list[FetchPartitionData]:
        return []

    def response(self, results):
        return FetchSessionResponse(self.error, INVALID_SESSION_ID, {})


class SessionlessFetchContext(FetchContext):
    kind = "sessionless"

    def __init__(self, fetch_data: list[FetchPartitionData]):
        self.fetch_data = fetch_data

    def partitions(self) -> list[FetchPartitionData]:
        return self.fetch_data

    def response(self, results):
        return FetchSessionResponse(Errors.NONE, INVALID_SESSION_ID, results)


class FullFetchContext(FetchContext):
    kind = "full"

    def __init__(self, cache: FetchSessionCache, fetch_data: list[FetchPartitionData], privileged: bool,
                 uses_topic_ids: bool = False):
        self.cache = cache
        self.fetch_data = fetch_data
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids

    def partitions(self) -> list[FetchPartitionData]:
        return self.fetch_data

    def response(self, results):
        requested = {session_key(fp): fp for fp in self.fetch_data}

        def cached() -> dict:
            return {k: CachedPartition(requested[k], r.high_watermark, r.log_start_offset, r.last_stable_offset)
                    for k, r in results.items() if k in requested}
        session_id = self.cache.maybe_create_session(self.privileged, len(results), cached, self.uses_topic_ids)
        return FetchSessionResponse(Errors.NONE, session_id, results)


class IncrementalFetchContext(FetchContext):
    kind = "incremental"

    def __init__(self, cache: FetchSessionCache, session: FetchSession, expected_epoch: int,
                 topic_name: TopicNames | None = None):
        self.cache = cache
        self.session = session
        self.expected_epoch = expected_epoch  # the session's epoch once this request was accepted
        self.topic_name = topic_name

    def partitions(self) -> list[FetchPartitionData]:
        with self.cache.lock:
            if self.session.uses_topic_ids and self.topic_name is not None:
                self.session.resolve_names(self.topic_name)
            return [cp.request for cp in self.session.partitions.values()]

    def quiet_at(self, seq: int) -> bool:
        """Whether the session's last answer, read from every partition, found nothing new while the replica
        manager's change number was ``seq``, and is recent enough (``quiet_for_s`` of :meth:`response`)."""
        session = self.session
        return session.quiet_seq == seq and time.monotonic() < session.quiet_until

    def response(self, results, quiet_seq: int | None = None, quiet_for_s: float = 0.0):
        """``quiet_seq`` (an idle follower's request): the replica manager's change number when the request
        arrived; an answer with nothing in it marks the session quiet at that number for ``quiet_for_s`` (read
        from every partition: ``results`` answers them all) unless it was already (a quiet answer, nothing
        read)."""
        session = self.session
        with self.cache.lock:
            if session.epoch != self.expected_epoch:
                # A later request of the session was accepted while this one waited in the purgatory.
                log.info("fetch session epoch moved while the fetch waited %s",
                         kv(session=session.id, expected=self.expected_epoch, epoch=session.epoch))
                return FetchSessionResponse(Errors.INVALID_FETCH_SESSION_EPOCH, session.id, {})
            out = {}
            cached = session.partitions
            for tp, r in results.items():
                cp = cached.get(tp)
                if cp is None or not cp.must_respond(r):
                    continue
                out[tp] = r
                if r.records:  # to the end of the session: the next read budget starts with the others
                    cached[tp] = cached.pop(tp)
            if quiet_seq is None or out:
                session.quiet_seq = None
            elif results:
                session.quiet_seq, session.quiet_until = quiet_seq, time.monotonic() + quiet_for_s
            return FetchSessionResponse(Errors.NONE, session.id, out)


class FetchManager:
    """Kafka's ``FetchManager``: turns each Fetch request into a :class:`FetchContext`; counts what it served."""

    def __init__(self, cache: FetchSessionCache):
        self.cache = cache
        self.metrics = {"full": 0, "incremental": 0, "sessionless": 0, "error": 0}

    def new_context(self, request: FetchRequestData, privileged: bool,
                    topic_name: TopicNames | None = None) -> FetchContext:
        """The context of ``request``; ``topic_name`` resolves the topic ids of a v13+ session's partitions
        that were unknown when they joined it."""
        ctx = self._new_context(request, privileged, topic_name)
        with self.cache.lock:
            self.metrics[ctx.kind] += 1
        return ctx

    def _new_context(self, request: FetchRequestData, privileged: bool,
                     topic_name: TopicNames | None) -> FetchContext:
        md = request.metadata
        cache = self.cache
        if md.is_full:
            if md.session_id != INVALID_SESSION_ID and cache.remove(md.session_id) is not None:
                log.debug("full fetch closed its fetch session %s", kv(session=md.session_id))
            if md.epoch == FINAL_EPOCH:
                return SessionlessFetchContext(request.partitions)
            return FullFetchContext(cache, request.partitions, privileged, request.uses_topic_ids)
        with cache.lock:
            session = cache.get(md.session_id)
            if session is None:
                log.debug("fetch session not found %s", kv(session=md.session_id))
                return SessionErrorContext(Errors.FETCH_SESSION_ID_NOT_FOUND)
            if session.epoch != md.epoch:
                log.debug("fetch session epoch mismatch %s", kv(session=md.session_id, expected=session.epoch,
                                                                got=md.epoch))
                return SessionErrorContext(Errors.INVALID_FETCH_SESSION_EPOCH)
            if session.uses_topic_ids != request.uses_topic_ids:
                log.debug("fetch session topic id use mismatch %s", kv(
                    session=md.session_id, session_uses_ids=session.uses_topic_ids,
                    request_uses_ids=request.uses_topic_ids))
                return SessionErrorContext(Errors.FETCH_SESSION_TOPIC_ID_ERROR)
            session.update(request.partitions, request.forgotten)
            if not session.partitions:
                cache.remove(session.id)  # nothing left to follow: the session ends, the request is answered
                return SessionlessFetchContext(request.partitions)
            cache.touch(session, cache.now_ms())
            session.epoch = next_epoch(session.epoch)
            return IncrementalFetchContext(cache, session, session.epoch, topic_name)

    def describe(self) -> dict:
        """For ``kafkatier cluster describe``: sessions cached, partitions in them, fetches served by kind."""
        with self.cache.lock:
            return {"sessions": len(self.cache), "partitions_cached": self.cache.num_partitions,
                    "evictions": self.cache.evictions, "slots": self.cache.max_entries,
                    "fetches": dict(self.metrics)}
