"""Follower replication: one fetcher thread per leader broker (Kafka's ``ReplicaFetcherThread`` with
``AbstractFetcherThread``), fetching with the Fetch API (v11, replica id set) and appending the leader's record
batches as they are (offsets kept).

Truncation by leader epoch (KIP-101, KIP-279).  A partition added to a fetcher starts in the *truncating*
state at its high watermark (the initial offset) and is left out of fetches.  Each round, the thread sends the
leader ONE OffsetsForLeaderEpoch (key 23, v3, this broker's id as ``replica_id``) for all its truncating
partitions, asking where the follower's latest epoch ends on the leader, and then, per answer
(:func:`offset_truncation_state`, Kafka's ``getOffsetTruncationState``):

* the leader answers the epoch asked, or an earlier one the follower has too: truncate to min(the leader's end
  offset, the follower's own end offset of that epoch, the log end offset) and start *fetching* there;
* the leader answers an earlier epoch the follower does not have (divergent logs across several leader changes,
  KIP-279): truncate to where the follower's largest epoch below it ends, which also truncates its epoch cache,
  and ask again; the next round asks about that epoch;
* the leader knows no epoch at all (``UNDEFINED_EPOCH_OFFSET``) or answers without an epoch (an old message
  format): truncate to the initial offset (the high watermark), as before KIP-101.

A follower whose epoch cache is empty truncates to its high watermark without asking, as Kafka.  Truncation
waits for the leader's answer: a follower that never reaches the leader keeps its log, so when it is elected
next it still holds the records acknowledged under the old leader (scenarios/isr-shrink-not-enough-replicas.toml).
An answer is applied only if the partition is still in this fetcher at the same leader epoch.  Error answers
(NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH, ...) delay that partition with a bounded exponential
backoff and it asks again; the controller's next LeaderAndIsr replaces its state.  Kafka since Fetch v12
(KIP-595's ``DivergingEpoch``) truncates from the fetch response instead; we fetch with v11, so we always take
the OffsetsForLeaderEpoch path, as Kafka's ZooKeeper-mode brokers before IBP 2.7.  Difference from Kafka: a
partition fenced by the leader (FENCED_LEADER_EPOCH) is retried with backoff rather than marked failed until the
next LeaderAndIsr.  Truncation itself is ``Partition.truncate_to``: log, leader-epoch cache, producer state and
the JBOD future log.

The follower's high watermark and log start offset follow the leader's values in each fetch response.

Incremental fetch sessions (KIP-227, ``server/fetch_session_handler.py``): the first fetch lists every partition
and the leader answers with a session id; later fetches list only the partitions whose fetch offset, log start
offset or epoch changed (plus added ones) and forget the removed ones, and the leader answers only partitions
with something new -- an omitted partition keeps its state.  A session error, an answer that fails the
handler's checks or any failed request (the connection is reset) makes the next fetch a full one.

Replication throttle (Kafka's ``shouldFollowerThrottle``): a partition listed in
``follower.replication.throttled.replicas`` for this broker is left out of a fetch while it is out of sync (its
last answer left it behind the leader's high watermark) and the follower quota is exceeded; the bytes fetched for
throttled partitions are recorded against the quota.  The check is :meth:`ReplicaFetcherThread._throttled`.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import attrs
import tenacity
from kafka.protocol.consumer import FetchResponse, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse

from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol import fetch_codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.errors import Errors
from kafkatier.server.broker_client import BrokerClient, BrokerConnectionError
from kafkatier.server.fetch_session_handler import FetchSessionHandler, PartitionData
from kafkatier.server.replication_quota_manager import ReplicationQuotaManager

log = get_logger("server.replica-fetcher")

FETCH_VERSION = fetch_codec.FOLLOWER_VERSION   # 11
OFFSET_FOR_LEADER_EPOCH_VERSION = 3  # the first version with replica_id (Kafka 2.3+)
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
# A truncation phase or a full fetch of at least this many partitions logs one summary line (a restart's first rounds).
TRUNCATION_SUMMARY_MIN = 100
# A round built from every partition's state and log at least this often (``_fetch_unchanged`` patches the last
# one in between).  Every change of a fetch state marks it dirty; the refresh only carries a log start offset the
# follower's own retention moved (the leader's low watermark for DeleteRecords), so it need not be frequent: a
# rebuild of thousands of partitions every 5 s was a fifth of an idle follower's work at 20,000 partitions
# (issue 27).  30 s: Kafka's replica.lag.time.max.ms.
ROUND_REFRESH_S = 30.0
# A partition whose truncation answer was an error asks again after this backoff (seconds, per partition).
_partition_backoff = tenacity.wait_exponential(multiplier=0.05, max=1.0)


@attrs.define
class FetchState:
    """Kafka's ``PartitionFetchState``: while ``truncating``, ``fetch_offset`` is the initial offset (the high
    watermark) the partition falls back to when the leader knows no epoch."""
    fetch_offset: int
    leader_epoch: int
    truncating: bool = False
    # leader high watermark - fetch offset after the last answer (None: none yet); the throttle's in-sync test
    lag: int | None = attrs.field(default=None, eq=False)
    failures: int = attrs.field(default=0, eq=False)            # error answers in a row (the backoff's attempt)
    delayed_until: float = attrs.field(default=0.0, eq=False)   # time.monotonic() before which it is left out

    def copy(self) -> FetchState:
        """``attrs.evolve(self)`` without its per-field introspection: the fetcher copies every state each round."""
        return FetchState(self.fetch_offset, self.leader_epoch, self.truncating, self.lag, self.failures,
                          self.delayed_until)

    @property
    def is_replica_in_sync(self) -> bool:
        return self.lag is not None and self.lag <= 0


@attrs.frozen
class EpochEndOffset:
    """The leader's OffsetsForLeaderEpoch answer for one partition."""
    error: int
    leader_epoch: int = UNDEFINED_EPOCH
    end_offset: int = UNDEFINED_EPOCH_OFFSET


@attrs.frozen
class OffsetTruncationState:
    """Where to truncate, and whether that ends the truncation phase (False: ask the leader again)."""
    offset: int
    truncation_completed: bool


def offset_truncation_state(leader: EpochEndOffset, initial_offset: int, log_end_offset: int,
                            end_offset_for_epoch: Callable[[int], tuple[int, int]]) -> OffsetTruncationState:
    """Kafka's ``AbstractFetcherThread.getOffsetTruncationState`` for an error-free answer.

    ``end_offset_for_epoch`` is the follower log's own ``(epoch, end offset)`` lookup (the largest epoch <= the
    one asked, -1/-1 when unknown)."""
    if leader.end_offset == UNDEFINED_EPOCH_OFFSET:
        return OffsetTruncationState(initial_offset, True)            # the leader knows no such epoch
    if leader.leader_epoch == UNDEFINED_EPOCH:
        return OffsetTruncationState(min(leader.end_offset, log_end_offset), True)  # no epoch in the answer
    follower_epoch, follower_end = end_offset_for_epoch(leader.leader_epoch)
    if follower_end == UNDEFINED_EPOCH_OFFSET:
        # The follower did not track epochs that far back: the leader's offset is safe (KIP-101 without 279).
        return OffsetTruncationState(min(leader.end_offset, log_end_offset), True)
    if follower_epoch != leader.leader_epoch:
        # KIP-279: the follower never had the leader's epoch; cut back to where its own earlier epoch ends
        # (its epoch cache goes too) and ask again about that epoch.
        return OffsetTruncationState(min(follower_end, log_end_offset), False)
    return OffsetTruncationState(min(follower_end, leader.end_offset, log_end_offset), True)


class ReplicaFetcherThread(threading.Thread):
    def __init__(self, broker_id: int, leader_id: int, leader_address: Callable[[], tuple[str, int] | None],
                 partition_lookup: Callable[[str, int], object], max_wait_ms: int = 500,
                 max_bytes: int = 10 * 1024 * 1024, partition_max_bytes: int = 1048576,
                 on_fetched: Callable[[object], None] | None = None,
                 on_offset_moved_to_tiered_storage: Callable[[object], bool] | None = None, login=None,
                 quota: ReplicationQuotaManager | None = None, min_bytes: int = 1):
        super().__init__(name=f"ReplicaFetcherThread-0-{leader_id}", daemon=True)
        self.login = login  # the inter-broker SASL login (server/sasl.SaslLogin) when the listener needs one
        self.broker_id = broker_id
        self.leader_id = leader_id
        self.leader_address = leader_address
        self.partition_lookup = partition_lookup
        self.max_wait_ms = max_wait_ms
        self.min_bytes = max(1, min_bytes)  # replica.fetch.min.bytes: the leader answers once this much is there
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.on_fetched = on_fetched
        # Tiered storage: rebuild a follower that fell below the leader's local log start offset; True if done.
        self.on_offset_moved_to_tiered_storage = on_offset_moved_to_tiered_storage
        self.quota = quota  # the follower replication throttle (None: unthrottled)
        self.partitions: dict[tuple[str, int], FetchState] = {}
        self.lock = threading.Lock()
        # An idle round is O(changes), not O(partitions): the last round's copies of the states and what it
        # asked for each (``_round``) are reused, patched for the partitions whose state changed since
        # (``_dirty``; None: partitions were added or removed, everything is copied again).  Every
        # ROUND_REFRESH_S the round starts over from every state and log (a follower's log start offset moved by
        # its own retention reaches the leader then).
        self._dirty: set[tuple[str, int]] | None = None
        self._round: tuple[dict, dict] | None = None   # (copies of the states, what was asked per partition)
        self._round_until = 0.0
        self.stopped = threading.Event()
        self.has_partitions = threading.Event()
        self.client: BrokerClient | None = None
        self.session = FetchSessionHandler(leader_id)  # KIP-227: full fetch first, then only what changed
        self.metrics = {"fetches": 0, "bytes": 0, "errors": 0, "full_fetches": 0, "incremental_fetches": 0,
                        "session_errors": 0, "session_id": 0, "last_fetch_partitions": 0}

    def add_partition(self, topic: str, partition: int, fetch_offset: int, leader_epoch: int,
                      truncating: bool = True) -> None:
        """Start replicating a partition: truncating first (``fetch_offset``: its high watermark), or fetching
        right away at ``fetch_offset`` (a log just rebuilt from the leader's remote tier)."""
        self.add_partitions({(topic, partition): FetchState(fetch_offset, leader_epoch, truncating)})

    def add_partitions(self, states: dict[tuple[str, int], FetchState]) -> None:
        """Start replicating many partitions under one lock (Kafka's ``addPartitions``): a LeaderAndIsr of
        thousands added one at a time waited on this thread's lock, held by its rounds, once per partition."""
        with self.lock:
            self.partitions.update(states)
            self._dirty = None
            if self.partitions:
                self.has_partitions.set()

    def remove_partition(self, topic: str, partition: int) -> None:
        self.remove_partitions([(topic, partition)])

    def remove_partitions(self, partitions) -> None:
        with self.lock:
            for tp in partitions:
                self.partitions.pop(tp, None)
            self._dirty = None
            if not self.partitions:
                self.has_partitions.clear()

    def shutdown(self) -> None:
        self.stopped.set()
        self.has_partitions.set()
        if self.client:
            self.client.close()

    def run(self) -> None:
        backoff = tenacity.wait_exponential(multiplier=0.05, max=1.0)
        failures = 0
        while not self.stopped.is_set():
            self.has_partitions.wait()
            if self.stopped.is_set():
                return
            try:
                self._fetch_once()
                failures = 0
            except BrokerConnectionError as e:
                failures += 1
                self.metrics["errors"] += 1
                self.session.handle_error()  # a new connection starts with a full fetch
                if self.client:
                    self.client.close()
                    self.client = None
                delay = backoff(_state(failures))
                log.debug("fetch from leader %s failed (%s); retrying in %.2fs", self.leader_id, e, delay)
                self.stopped.wait(delay)
            except Exception:  # noqa: BLE001
                failures += 1
                self.metrics["errors"] += 1
                self.session.handle_error()
                log.exception("fetcher error %s", kv(leader=self.leader_id))
                self.stopped.wait(min(1.0, 0.05 * failures))

    def _fetch_once(self) -> None:
        """One round (Kafka's ``doWork``): the truncation phase for the truncating partitions, then one fetch for
        the others.  Partitions delayed by an error answer sit out until their backoff ends."""
        # Connected first: a leader that died fails the round here, not after every partition's state was
        # copied and its request built (each retry of a fetcher of thousands of partitions, until the new
        # controller moves them).
        self._ensure_client()
        if self._fetch_unchanged():
            return
        with self.lock:  # copies: a state replaced or moved on during the round no longer equals its copy
            snapshot = {key: st.copy() for key, st in self.partitions.items()}
            self._dirty = set()
        self._round = None
        if not snapshot:
            return
        now = time.monotonic()
        ready = {k: st for k, st in snapshot.items() if st.delayed_until <= now}
        if not ready:
            self.stopped.wait(min(st.delayed_until for st in snapshot.values()) - now)
            return
        self._ensure_client()
        truncating = {k: st for k, st in ready.items() if st.truncating}
        if truncating:
            self._maybe_truncate(truncating)
        fetching = {k: st for k, st in ready.items() if not st.truncating}
        if fetching:
            wanted = self._fetch(fetching)
            if len(fetching) == len(snapshot) and wanted is not None:
                self._round = (snapshot, wanted)   # every partition fetched: the next rounds may reuse it
                self._round_until = now + ROUND_REFRESH_S

    def _fetch_unchanged(self) -> bool:
        """A round from the last one's copies and requests, patched for the partitions whose state changed since
        (the incremental fetch then lists only those); False when it cannot be (partitions added or removed,
        a changed one truncating or backing off, the refresh is due, no round to start from): the caller copies
        every state.  Kafka's fetcher builds every round from all its partitions; here that is a pass over
        thousands of partitions twice a second per leader, most of an idle follower's work."""
        if self._round is None or time.monotonic() >= self._round_until:
            return False
        snapshot, wanted = self._round
        with self.lock:
            dirty = self._dirty
            if dirty is None:
                return False
            self._dirty = set()
            for key in dirty:
                st = self.partitions.get(key)
                if st is None or st.truncating or st.delayed_until > 0:
                    self._dirty = None
                    return False
                snapshot[key] = st.copy()
        for key in dirty:
            part = self.partition_lookup(*key)
            st = snapshot[key]
            wanted[key] = PartitionData(st.fetch_offset, part.log.log_start_offset if part is not None else -1,
                                        self.partition_max_bytes, st.leader_epoch)
        self._fetch(snapshot, wanted, changed=dirty)
        return True

    def _ensure_client(self) -> BrokerClient:
        if self.client is None:
            addr = self.leader_address()
            if addr is None:
                raise BrokerConnectionError(f"leader {self.leader_id} address unknown")
            client = BrokerClient(addr[0], addr[1], client_id=f"broker-{self.broker_id}-fetcher-{self.leader_id}",
                                  timeout_s=max(30.0, self.max_wait_ms / 1000.0 + 10), login=self.login)
            client.connect()
            self.client = client
        return self.client

    # --- truncation phase (KIP-101 / KIP-279) ---------------------------------------------------------------
    def _maybe_truncate(self, truncating: dict[tuple[str, int], FetchState]) -> None:
        """Kafka's ``maybeTruncate``: partitions without an epoch cache go to their high watermark; the others
        ask the leader, all in one OffsetsForLeaderEpoch."""
        asking: dict[tuple[str, int], tuple[FetchState, object, int]] = {}
        for key, st in truncating.items():
            part = self.partition_lookup(*key)
            if part is None:
                self._delay(key, st, "partition not hosted")
                continue
            latest = part.log.latest_epoch
            if latest is None:
                self._truncate(key, st, part, OffsetTruncationState(st.fetch_offset, True), reason="no epoch cache")
            else:
                asking[key] = (st, part, latest)
        if not asking:
            return
        t0 = time.monotonic()
        answers = self._fetch_epoch_end_offsets({key: (st.leader_epoch, latest) for key, (st, _, latest)
                                                 in asking.items()})
        asked_ms = (time.monotonic() - t0) * 1000
        for key, (st, part, latest) in asking.items():
            answer = answers.get(key, EpochEndOffset(int(Errors.UNKNOWN_SERVER_ERROR)))
            if answer.error != Errors.NONE:
                self._delay(key, st, f"OffsetsForLeaderEpoch answered {Errors(answer.error).name}")
                continue
            plog = part.log
            state = offset_truncation_state(answer, st.fetch_offset, plog.log_end_offset, plog.end_offset_for_epoch)
            self._truncate(key, st, part, state, reason=f"asked epoch {latest}, leader answered epoch "
                                                        f"{answer.leader_epoch} ending at {answer.end_offset}")
        if len(asking) >= TRUNCATION_SUMMARY_MIN:
            log.info("truncation phase done %s", kv(leader=self.leader_id, partitions=len(asking),
                                                   request_ms=round(asked_ms, 1),
                                                   ms=round((time.monotonic() - t0) * 1000, 1)))

    def _fetch_epoch_end_offsets(self, epochs: dict[tuple[str, int], tuple[int, int]]
                                 ) -> dict[tuple[str, int], EpochEndOffset]:
        """One OffsetsForLeaderEpoch to the leader: ``(current leader epoch, epoch asked)`` per partition."""
        T = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
        by_topic: dict[str, list] = {}
        for (t, p), (current, asked) in sorted(epochs.items()):
            by_topic.setdefault(t, []).append(T.OffsetForLeaderPartition(
                partition=p, current_leader_epoch=current, leader_epoch=asked))
        req = OffsetForLeaderEpochRequest(version=OFFSET_FOR_LEADER_EPOCH_VERSION, replica_id=self.broker_id,
                                          topics=[T(topic=t, partitions=ps) for t, ps in by_topic.items()])
        resp = self._ensure_client().send(req, OffsetForLeaderEpochResponse, OFFSET_FOR_LEADER_EPOCH_VERSION)
        return {(t.topic, p.partition): EpochEndOffset(p.error_code, p.leader_epoch, p.end_offset)
                for t in resp.topics for p in t.partitions}

    def _truncate(self, key: tuple[str, int], sent: FetchState, part, state: OffsetTruncationState,
                  reason: str) -> None:
        """Apply one truncation if the partition is still here as it was asked about; fetching starts at the
        resulting log end offset once the phase is complete.  Under the fetcher's lock, as Kafka's
        ``partitionMapLock``: the replica manager removes a partition (before making this broker its leader)
        only between truncations, never during one."""
        with self.lock:
            cur = self.partitions.get(key)
            if cur != sent:
                return  # removed or re-added (a newer LeaderAndIsr) while the request was in flight
            plog = part.log
            if state.offset < plog.log_end_offset:
                log.info("truncating by leader epoch %s", kv(
                    partition=f"{key[0]}-{key[1]}", leader=self.leader_id, log_end_offset=plog.log_end_offset,
                    to=state.offset, high_watermark=plog.high_watermark, completed=state.truncation_completed,
                    why=reason))
            part.truncate_to(state.offset)
            cur.fetch_offset = plog.log_end_offset
            cur.truncating = not state.truncation_completed
            cur.failures, cur.delayed_until = 0, 0.0
            self._mark_dirty(key)

    def _delay(self, key: tuple[str, int], sent: FetchState, why: str) -> None:
        with self.lock:
            cur = self.partitions.get(key)
            if cur != sent:
                return
            cur.failures += 1
            failures = cur.failures
            delay = _partition_backoff(_state(failures))
            cur.delayed_until = time.monotonic() + delay
            self._mark_dirty(key)
        # Once at info (a leader that has not had its LeaderAndIsr yet answers UNKNOWN_LEADER_EPOCH for a while).
        log.log(logging.INFO if failures == 1 else logging.DEBUG, "retrying the partition later %s",
                kv(partition=f"{key[0]}-{key[1]}", leader=self.leader_id, why=why, failures=failures,
                   backoff_s=round(delay, 3)))

    # --- fetching -------------------------------------------------------------------------------------------
    def _fetch(self, snapshot: dict[tuple[str, int], FetchState], wanted: dict | None = None,
               changed: set | None = None) -> dict | None:
        """One Fetch of ``snapshot``'s partitions; returns what it asked per partition when that was every one of
        them (no throttle held any back), else None.  ``wanted`` and ``changed`` (:meth:`_fetch_unchanged`):
        the requests already built, of which only ``changed`` differ from the last round's."""
        q = self.quota  # no throttle set (the usual case): no per-partition check each round
        throttled = ({k for k, st in snapshot.items() if self._throttled(k, st)}
                     if q is not None and not q.unlimited else ())
        complete = not throttled
        if throttled:
            snapshot = {k: st for k, st in snapshot.items() if k not in throttled}
            wanted = changed = None
            if not snapshot:
                self.stopped.wait(min(max(self.quota.wait_time(), 0.001), self.max_wait_ms / 1000.0))
                return None
        if wanted is None:
            wanted = {}
            for key, st in sorted(snapshot.items()):
                part = self.partition_lookup(*key)
                wanted[key] = PartitionData(st.fetch_offset, part.log.log_start_offset if part is not None else -1,
                                            self.partition_max_bytes, st.leader_epoch)
        data = self.session.build(wanted, changed)
        by_topic: dict[str, list] = {}
        for (t, p), pd in data.to_send.items():
            by_topic.setdefault(t, []).append((p, pd.current_leader_epoch, pd.fetch_offset, pd.log_start_offset,
                                               pd.max_bytes))
        forgotten: dict[str, list] = {}
        for t, p in data.to_forget:
            forgotten.setdefault(t, []).append(p)
        # Encoded by the purpose-built Fetch v11 encoder (protocol/fetch_codec.py), not kafka-python's message
        # objects (160 us -> 2 us per round of three partitions); the answer by kafka-python's decoder.
        body = fetch_codec.encode_fetch_request_v11(
            self.broker_id, self.max_wait_ms, self.min_bytes, self.max_bytes, 0, data.metadata.session_id,
            data.metadata.epoch, list(by_topic.items()), list(forgotten.items()))
        t0 = time.monotonic()
        raw = self.client.send_encoded(ApiKeys.FETCH, FETCH_VERSION, body)  # a failure: run() resets the session
        if data.metadata.is_full and len(data.to_send) >= TRUNCATION_SUMMARY_MIN:
            log.info("full fetch answered %s", kv(leader=self.leader_id, partitions=len(data.to_send),
                                                  ms=round((time.monotonic() - t0) * 1000, 1)))
        try:
            resp = FetchResponse.decode(raw, version=FETCH_VERSION)
        except Exception as e:  # noqa: BLE001 - the generated decoder raises struct.error, IndexError, ...
            self.client.close()
            raise BrokerConnectionError(f"malformed fetch response from broker {self.leader_id}: {e}") from e
        m = self.metrics
        m["fetches"] += 1
        m["incremental_fetches" if not data.metadata.is_full else "full_fetches"] += 1
        m["last_fetch_partitions"] = len(data.to_send)
        answered = {(tr.topic, pd.partition_index) for tr in resp.responses for pd in tr.partitions}
        if not self.session.handle_response(resp.error_code, resp.session_id, answered):
            m["session_errors"] += 1
            return wanted if complete else None  # nothing in it is used; the next round is a full fetch
        m["session_id"] = self.session.session_id
        for tr in resp.responses:
            for pd in tr.partitions:
                self._process_partition(tr.topic, pd, snapshot.get((tr.topic, pd.partition_index)))
        return wanted if complete else None

    def _process_partition(self, topic: str, pd, sent: FetchState | None) -> None:
        key = (topic, pd.partition_index)
        with self.lock:
            cur = self.partitions.get(key)
        if cur is None or sent is None or cur != sent:
            return  # removed or changed while the fetch was in flight
        part = self.partition_lookup(topic, pd.partition_index)
        if part is None:
            return
        err = pd.error_code
        if err == Errors.NONE:
            records = pd.records
            if records:
                part.append_records_to_follower(records)
                self.metrics["bytes"] += len(records)
                if self.quota is not None and self.quota.is_throttled(*key):
                    self.quota.record(len(records))
            plog = part.log
            plog.maybe_increment_log_start_offset_as_follower(pd.log_start_offset)
            plog.update_high_watermark(min(pd.high_watermark, plog.log_end_offset))
            with self.lock:
                if key in self.partitions:
                    self.partitions[key].fetch_offset = plog.log_end_offset
                    self.partitions[key].lag = max(0, pd.high_watermark - plog.log_end_offset)
                    self._mark_dirty(key)
            if self.on_fetched:
                self.on_fetched(part)
        elif err == Errors.OFFSET_OUT_OF_RANGE:
            self._handle_out_of_range(topic, pd, part)
        elif err == Errors.OFFSET_MOVED_TO_TIERED_STORAGE:
            # Behind the leader's local log start offset: rebuild from the remote tier (tiered topics only).
            if self.on_offset_moved_to_tiered_storage is None or not self.on_offset_moved_to_tiered_storage(part):
                self.stopped.wait(0.2)
            with self.lock:
                if key in self.partitions:
                    self.partitions[key].fetch_offset = part.log.log_end_offset
                    self._mark_dirty(key)
        elif err in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.FENCED_LEADER_EPOCH, Errors.UNKNOWN_LEADER_EPOCH,
                     Errors.UNKNOWN_TOPIC_OR_PARTITION):
            # Wait for the controller's LeaderAndIsr; keep fetching at a slow pace.
            self.stopped.wait(0.1)
        else:
            log.warning("fetch error %s", kv(partition=f"{topic}-{pd.partition_index}", error=Errors(err).name))

    def _mark_dirty(self, key: tuple[str, int]) -> None:
        """Under the lock: ``key``'s state changed, the next round copies and asks it again."""
        if self._dirty is not None:
            self._dirty.add(key)

    def _throttled(self, key: tuple[str, int], st: FetchState) -> bool:
        """Kafka's ``shouldFollowerThrottle``: an out-of-sync throttled partition while the quota is exceeded."""
        q = self.quota
        return (q is not None and not q.unlimited and not st.is_replica_in_sync and q.is_throttled(*key)
                and q.is_quota_exceeded())

    def _handle_out_of_range(self, topic: str, pd, part) -> None:
        plog = part.log
        leader_start = pd.log_start_offset
        with self.lock:
            st = self.partitions.get((topic, pd.partition_index))
        if st is None:
            return
        if leader_start >= 0 and st.fetch_offset < leader_start:
            log.info("follower behind the leader's log start offset; truncating fully %s",
                     kv(partition=f"{topic}-{pd.partition_index}", fetch_offset=st.fetch_offset,
                        leader_log_start_offset=leader_start))
            part.truncate_fully_and_start_at(leader_start)
        else:
            # Ahead of the leader (an unclean election): truncate to the leader's high watermark.
            target = max(min(pd.high_watermark, plog.log_end_offset), plog.log_start_offset)
            log.info("follower ahead of the leader; truncating %s", kv(partition=f"{topic}-{pd.partition_index}",
                                                                       to=target))
            part.truncate_to(target)
        with self.lock:
            if (topic, pd.partition_index) in self.partitions:
                self.partitions[(topic, pd.partition_index)].fetch_offset = plog.log_end_offset
                self._mark_dirty((topic, pd.partition_index))


def _state(attempt: int):
    rs = tenacity.RetryCallState(retry_object=None, fn=None, args=(), kwargs={})
    rs.attempt_number = attempt
    return rs


class ReplicaFetcherManager:
    def __init__(self, broker_id: int, leader_address: Callable[[int], tuple[str, int] | None],
                 partition_lookup: Callable[[str, int], object], on_fetched: Callable[[object], None] | None = None,
                 on_offset_moved_to_tiered_storage: Callable[[object], bool] | None = None, max_wait_ms: int = 500,
                 partition_max_bytes: int = 1048576, quota: ReplicationQuotaManager | None = None, login=None,
                 min_bytes: int = 1):
        self.broker_id = broker_id
        self.leader_address = leader_address
        self.partition_lookup = partition_lookup
        self.on_fetched = on_fetched
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes  # replica.fetch.min.bytes
        self.login = login
        self.partition_max_bytes = partition_max_bytes  # replica.fetch.max.bytes
        self.quota = quota
        self.threads: dict[int, ReplicaFetcherThread] = {}
        self.on_offset_moved_to_tiered_storage = on_offset_moved_to_tiered_storage
        self.assignment: dict[tuple[str, int], int] = {}
        self.lock = threading.Lock()

    def add_fetcher(self, topic: str, partition: int, leader_id: int, fetch_offset: int, leader_epoch: int,
                    truncating: bool = True) -> None:
        with self.lock:
            self._remove_locked(topic, partition)
            self._thread_for(leader_id).add_partition(topic, partition, fetch_offset, leader_epoch, truncating)
            self.assignment[(topic, partition)] = leader_id

    def add_fetchers(self, partitions: dict[tuple[str, int], tuple[int, int, int]]) -> None:
        """Kafka's ``addFetcherForPartitions``: ``(leader, high watermark, leader epoch)`` per partition, each
        truncating first; one lock and one hand-over per leader's thread."""
        by_leader: dict[int, dict[tuple[str, int], FetchState]] = {}
        with self.lock:
            self._remove_many_locked(partitions)
            for tp, (leader_id, fetch_offset, leader_epoch) in partitions.items():
                by_leader.setdefault(leader_id, {})[tp] = FetchState(fetch_offset, leader_epoch, True)
                self.assignment[tp] = leader_id
            for leader_id, states in by_leader.items():
                self._thread_for(leader_id).add_partitions(states)

    def _thread_for(self, leader_id: int) -> ReplicaFetcherThread:
        t = self.threads.get(leader_id)
        if t is None or not t.is_alive():
            t = ReplicaFetcherThread(self.broker_id, leader_id, lambda: self.leader_address(leader_id),
                                     self.partition_lookup, max_wait_ms=self.max_wait_ms,
                                     min_bytes=self.min_bytes,
                                     on_fetched=self.on_fetched,
                                     on_offset_moved_to_tiered_storage=self.on_offset_moved_to_tiered_storage,
                                     partition_max_bytes=self.partition_max_bytes, quota=self.quota,
                                     login=self.login)
            self.threads[leader_id] = t
            t.start()
        return t

    def remove_fetcher(self, topic: str, partition: int) -> None:
        with self.lock:
            self._remove_locked(topic, partition)

    def remove_fetchers(self, partitions) -> None:
        """Kafka's ``removeFetcherForPartitions``: one lock for all of them."""
        with self.lock:
            self._remove_many_locked(partitions)

    def _remove_many_locked(self, partitions) -> None:
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for tp in partitions:
            leader = self.assignment.pop(tp, None)
            if leader is not None and leader in self.threads:
                by_leader.setdefault(leader, []).append(tp)
        for leader, tps in by_leader.items():
            self.threads[leader].remove_partitions(tps)

    def _remove_locked(self, topic: str, partition: int) -> None:
        leader = self.assignment.pop((topic, partition), None)
        if leader is not None and leader in self.threads:
            self.threads[leader].remove_partition(topic, partition)

    def shutdown(self) -> None:
        with self.lock:
            for t in self.threads.values():
                t.shutdown()
            self.threads.clear()

    def describe(self) -> dict:
        with self.lock:
            return {leader: {"partitions": len(t.partitions), **t.metrics} for leader, t in self.threads.items()}
