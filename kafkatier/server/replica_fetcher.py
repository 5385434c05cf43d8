"""Follower replication: one fetcher thread per leader broker, fetching with the Fetch API (v11, replica id
set) and appending the leader's record batches as they are (offsets kept).

On becoming a follower a partition's log is truncated to its high watermark (see README "Differences from
Kafka": Kafka truncates by leader epoch via OffsetsForLeaderEpoch; truncating to the high watermark never
drops a committed record the leader has, it may only re-fetch a few).  The truncation waits for the new
leader's first answer (``FetchState.truncate_to``) and is applied together with the records of that answer:
a follower that never reaches the leader (it died) keeps its log, so when it is elected next it still holds
the records acknowledged under the old leader -- its own high watermark can lag the one it acknowledged with
(found by scenarios/isr-shrink-not-enough-replicas.toml).  The follower's high watermark and log start offset
follow the leader's values in each fetch response.

Replication throttle (Kafka's ``shouldFollowerThrottle``): a partition listed in
``follower.replication.throttled.replicas`` for this broker is left out of a fetch while it is out of sync (its
last answer left it behind the leader's high watermark) and the follower quota is exceeded; the bytes fetched for
throttled partitions are recorded against the quota.  The check is :meth:`ReplicaFetcherThread._throttled`.
"""
from __future__ import annotations

import threading
from typing import Callable

import attrs
import tenacity
from kafka.protocol.consumer import FetchRequest, FetchResponse

from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import Errors
from kafkatier.server.broker_client import BrokerClient, BrokerConnectionError
from kafkatier.server.replication_quota_manager import ReplicationQuotaManager

log = get_logger("server.replica-fetcher")

FETCH_VERSION = 11


@attrs.define
class FetchState:
    fetch_offset: int
    leader_epoch: int
    truncate_to: int | None = None   # truncate here when the leader first answers (see module docstring)
    # leader high watermark - fetch offset after the last answer (None: none yet); the throttle's in-sync test
    lag: int | None = attrs.field(default=None, eq=False)

    @property
    def is_replica_in_sync(self) -> bool:
        return self.lag is not None and self.lag <= 0


class ReplicaFetcherThread(threading.Thread):
    def __init__(self, broker_id: int, leader_id: int, leader_address: Callable[[], tuple[str, int] | None],
                 partition_lookup: Callable[[str, int], object], max_wait_ms: int = 500,
                 max_bytes: int = 10 * 1024 * 1024, partition_max_bytes: int = 1048576,
                 on_fetched: Callable[[object], None] | None = None,
                 on_offset_moved_to_tiered_storage: Callable[[object], bool] | None = None, login=None,
                 quota: ReplicationQuotaManager | None = None):
        super().__init__(name=f"ReplicaFetcherThread-0-{leader_id}", daemon=True)
        self.login = login  # the inter-broker SASL login (server/sasl.SaslLogin) when the listener needs one
        self.broker_id = broker_id
        self.leader_id = leader_id
        self.leader_address = leader_address
        self.partition_lookup = partition_lookup
        self.max_wait_ms = max_wait_ms
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.on_fetched = on_fetched
        # Tiered storage: rebuild a follower that fell below the leader's local log start offset; True if done.
        self.on_offset_moved_to_tiered_storage = on_offset_moved_to_tiered_storage
        self.quota = quota  # the follower replication throttle (None: unthrottled)
        self.partitions: dict[tuple[str, int], FetchState] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.has_partitions = threading.Event()
        self.client: BrokerClient | None = None
        self.metrics = {"fetches": 0, "bytes": 0, "errors": 0}

    def add_partition(self, topic: str, partition: int, fetch_offset: int, leader_epoch: int,
                      truncate_to: int | None = None) -> None:
        with self.lock:
            self.partitions[(topic, partition)] = FetchState(fetch_offset, leader_epoch, truncate_to)
            self.has_partitions.set()

    def remove_partition(self, topic: str, partition: int) -> None:
        with self.lock:
            self.partitions.pop((topic, partition), None)
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
                if self.client:
                    self.client.close()
                    self.client = None
                delay = backoff(_state(failures))
                log.debug("fetch from leader %s failed (%s); retrying in %.2fs", self.leader_id, e, delay)
                self.stopped.wait(delay)
            except Exception:  # noqa: BLE001
                failures += 1
                self.metrics["errors"] += 1
                log.exception("fetcher error %s", kv(leader=self.leader_id))
                self.stopped.wait(min(1.0, 0.05 * failures))

    def _fetch_once(self) -> None:
        with self.lock:
            snapshot = dict(self.partitions)
        if not snapshot:
            return
        if self.client is None:
            addr = self.leader_address()
            if addr is None:
                raise BrokerConnectionError(f"leader {self.leader_id} address unknown")
            self.client = BrokerClient(addr[0], addr[1], client_id=f"broker-{self.broker_id}-fetcher-{self.leader_id}",
                                       timeout_s=max(30.0, self.max_wait_ms / 1000.0 + 10), login=self.login)
        throttled = {k for k, st in snapshot.items() if self._throttled(k, st)}
        if throttled:
            snapshot = {k: st for k, st in snapshot.items() if k not in throttled}
            if not snapshot:
                self.stopped.wait(min(max(self.quota.wait_time(), 0.001), self.max_wait_ms / 1000.0))
                return
        by_topic: dict[str, list] = {}
        for (t, p), st in sorted(snapshot.items()):
            part = self.partition_lookup(t, p)
            lso = part.log.log_start_offset if part is not None else -1
            by_topic.setdefault(t, []).append(FetchRequest.FetchTopic.FetchPartition(
                version=FETCH_VERSION, partition=p, current_leader_epoch=st.leader_epoch,
                fetch_offset=st.fetch_offset, log_start_offset=lso, partition_max_bytes=self.partition_max_bytes))
        req = FetchRequest[FETCH_VERSION](
            replica_id=self.broker_id, max_wait_ms=self.max_wait_ms, min_bytes=1, max_bytes=self.max_bytes,
            isolation_level=0, session_id=0, session_epoch=-1,
            topics=[FetchRequest.FetchTopic(version=FETCH_VERSION, topic=t, partitions=ps) for t, ps in by_topic.items()],
            forgotten_topics_data=[], rack_id="")
        resp = self.client.send(req, FetchResponse, FETCH_VERSION)
        self.metrics["fetches"] += 1
        for tr in resp.responses:
            for pd in tr.partitions:
                self._process_partition(tr.topic, pd, snapshot.get((tr.topic, pd.partition_index)))

    def _process_partition(self, topic: str, pd, sent: FetchState | None) -> None:
        key = (topic, pd.partition_index)
        with self.lock:
            cur = self.partitions.get(key)
        if cur is None or sent is None or cur.fetch_offset != sent.fetch_offset or cur.leader_epoch != sent.leader_epoch:
            return  # removed or changed while the fetch was in flight
        part = self.partition_lookup(topic, pd.partition_index)
        if part is None:
            return
        err = pd.error_code
        if err == Errors.NONE and sent.truncate_to is not None:
            if part.log.log_end_offset > sent.truncate_to:
                log.info("truncating to the high watermark on the leader's first answer %s",
                         kv(partition=f"{topic}-{pd.partition_index}", log_end_offset=part.log.log_end_offset,
                            to=sent.truncate_to))
                part.truncate_to(sent.truncate_to)
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
                    self.partitions[key].truncate_to = None
                    self.partitions[key].lag = max(0, pd.high_watermark - plog.log_end_offset)
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
                    self.partitions[key].truncate_to = None
        elif err in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.FENCED_LEADER_EPOCH, Errors.UNKNOWN_LEADER_EPOCH,
                     Errors.UNKNOWN_TOPIC_OR_PARTITION):
            # Wait for the controller's LeaderAndIsr; keep fetching at a slow pace.
            self.stopped.wait(0.1)
        else:
            log.warning("fetch error %s", kv(partition=f"{topic}-{pd.partition_index}", error=Errors(err).name))

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
                self.partitions[(topic, pd.partition_index)].truncate_to = None


def _state(attempt: int):
    rs = tenacity.RetryCallState(retry_object=None, fn=None, args=(), kwargs={})
    rs.attempt_number = attempt
    return rs


class ReplicaFetcherManager:
    def __init__(self, broker_id: int, leader_address: Callable[[int], tuple[str, int] | None],
                 partition_lookup: Callable[[str, int], object], on_fetched: Callable[[object], None] | None = None,
                 on_offset_moved_to_tiered_storage: Callable[[object], bool] | None = None, max_wait_ms: int = 500,
                 partition_max_bytes: int = 1048576, quota: ReplicationQuotaManager | None = None, login=None):
        self.broker_id = broker_id
        self.leader_address = leader_address
        self.partition_lookup = partition_lookup
        self.on_fetched = on_fetched
        self.max_wait_ms = max_wait_ms
        self.login = login
        self.partition_max_bytes = partition_max_bytes  # replica.fetch.max.bytes
        self.quota = quota
        self.threads: dict[int, ReplicaFetcherThread] = {}
        self.on_offset_moved_to_tiered_storage = on_offset_moved_to_tiered_storage
        self.assignment: dict[tuple[str, int], int] = {}
        self.lock = threading.Lock()

    def add_fetcher(self, topic: str, partition: int, leader_id: int, fetch_offset: int, leader_epoch: int,
                    truncate_to: int | None = None) -> None:
        with self.lock:
            self._remove_locked(topic, partition)
            t = self.threads.get(leader_id)
            if t is None or not t.is_alive():
                t = ReplicaFetcherThread(self.broker_id, leader_id, lambda: self.leader_address(leader_id),
                                         self.partition_lookup, max_wait_ms=self.max_wait_ms,
                                         on_fetched=self.on_fetched,
                                         on_offset_moved_to_tiered_storage=self.on_offset_moved_to_tiered_storage,
                                         partition_max_bytes=self.partition_max_bytes, quota=self.quota,
                                         login=self.login)
                self.threads[leader_id] = t
                t.start()
            t.add_partition(topic, partition, fetch_offset, leader_epoch, truncate_to)
            self.assignment[(topic, partition)] = leader_id

    def remove_fetcher(self, topic: str, partition: int) -> None:
        with self.lock:
            self._remove_locked(topic, partition)

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
