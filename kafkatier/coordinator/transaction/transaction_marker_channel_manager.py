"""TransactionMarkerChannelManager: sends COMMIT / ABORT markers to the leaders of a transaction's partitions
with WriteTxnMarkers (API 27, v1) and, once every partition answered, hands the transaction back to the
coordinator to write its CompleteCommit / CompleteAbort record (Kafka's ``TransactionMarkerChannelManager`` and
``TransactionMarkerRequestCompletionHandler``).

A transaction's markers are sent as soon as they are added (once the sender has started): the current leader
of each partition is resolved (``leader_of``: None when the partition no longer exists -- it is dropped from the
transaction, as Kafka does --, -1 when it has no leader now -- retried), the markers are grouped by leader into one
request per broker, and the requests go out in parallel from a small pool (``send``: the broker's own client over
the Kafka protocol, also to itself), straight from the thread that added them; the answer that acknowledges a
transaction's last marker hands it back at once, in the thread that got it.  One sender thread sends again, every
``retry_backoff_ms``, whatever is still waiting after an error (a round: every waiting transaction not being sent
right now, the same grouping).  Sending from the adding thread saves a thread hand-off on every transaction's
critical path (measured: the hand-off to the sender thread was half of the 1-4 ms from "sending transaction
markers" to the requests leaving, on a loaded machine).
Per partition answers (Kafka's handling): NONE -- done; UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR and a lost connection -- sent again
next round (after ``retry_backoff_ms``); INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED -- this
coordinator gives the transaction up (a newer coordinator or epoch owns it; no Complete record is written here);
UNSUPPORTED_FOR_MESSAGE_FORMAT, UNSUPPORTED_VERSION -- the partition is dropped; anything else is logged as an
error and sent again next round (Kafka throws IllegalStateException, leaving the transaction pending: dropping the
partition instead would complete the transaction without its marker there, a hanging transaction).  Markers of a ``__transaction_state``
partition this broker stopped leading are removed (:meth:`remove_markers_for_txn_partition`).

Difference from Kafka: markers for partitions led by this broker go over the network too (Kafka does the same
through its own channel; only its request queueing differs).
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import attrs

from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol import codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.build import build
from kafkatier.protocol.errors import Errors

log = get_logger("coordinator.transaction.markers")

WRITE_TXN_MARKERS_VERSION = 1

RETRIABLE = frozenset({Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.NOT_LEADER_OR_FOLLOWER, Errors.NOT_ENOUGH_REPLICAS,
                       Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, Errors.REQUEST_TIMED_OUT,
                       Errors.KAFKA_STORAGE_ERROR})
FENCED = frozenset({Errors.INVALID_PRODUCER_EPOCH, Errors.TRANSACTION_COORDINATOR_FENCED})
DROPPED = frozenset({Errors.UNSUPPORTED_FOR_MESSAGE_FORMAT, Errors.UNSUPPORTED_VERSION})


@attrs.define(eq=False)
class PendingMarkers:
    """One transaction's markers: what to write, where, and the partitions not yet acknowledged."""
    transactional_id: str
    txn_partition: int            # its __transaction_state partition
    coordinator_epoch: int
    producer_id: int
    producer_epoch: int
    commit: bool
    waiting: set                  # of (topic, partition)
    on_complete: Callable[["PendingMarkers"], None]
    given_up: bool = False
    sending: int = 0              # sends of the first dispatch not yet answered (a round leaves it alone meanwhile)


class TransactionMarkerChannelManager:
    def __init__(self, broker_id: int, leader_of: Callable[[str, int], int | None],
                 send: Callable[[int, object, int], object], retry_backoff_ms: int = 100):
        self.broker_id = broker_id
        self.leader_of = leader_of
        self.send = send
        self.retry_backoff_ms = retry_backoff_ms
        self._lock = threading.Lock()
        self._pending: list[PendingMarkers] = []
        self._wake = threading.Event()
        self._retry = threading.Event()   # an error in a dispatch: the next round after the backoff
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="txn-marker-send")

    def startup(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"TxnMarkerSenderThread-{self.broker_id}", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def add_markers(self, pending: PendingMarkers) -> None:
        """Queue a transaction's markers and, once started, send them at once from this thread's pool."""
        direct = self._thread is not None and not self._stopped.is_set()
        with self._lock:
            self._pending.append(pending)
            if direct:
                pending.sending += 1      # held while dispatching: a round must not send them too
        if not direct:
            self._wake.set()
            return
        failed = True
        try:
            self._dispatch(pending)
            failed = False
        except Exception:  # noqa: BLE001 - e.g. a leader lookup failed: the sender thread sends them
            log.exception("marker dispatch failed %s", kv(transactional_id=pending.transactional_id))
        finally:
            if self._release([pending]) or failed:
                self._retry_later()

    def _dispatch(self, txn: PendingMarkers) -> None:
        by_broker, retry = self._targets([txn])
        for broker, entries in by_broker.items():
            with self._lock:
                txn.sending += 1
            try:
                self._pool.submit(self._send_dispatched, broker, entries)
            except RuntimeError:          # shut down meanwhile
                with self._lock:
                    txn.sending -= 1
                return
        if retry:
            self._retry_later()
        if not by_broker:
            self._maybe_complete(txn)

    def _send_dispatched(self, broker: int, entries: list[tuple[PendingMarkers, list[tuple[str, int]]]]) -> None:
        retry = True
        try:
            retry = self._send_to(broker, entries)
        except Exception as e:  # noqa: BLE001 - a lost connection: the sender thread sends again
            log.warning("cannot send markers %s", kv(broker=broker, reason=e))
        finally:
            retry = self._release([txn for txn, _tps in entries]) or retry
        if retry:
            self._retry_later()

    def _release(self, txns: list[PendingMarkers]) -> bool:
        """One send (or the dispatch itself) of each of ``txns`` is over; True when one of them is left with
        markers to send again and nothing in flight (the rounds skipped it meanwhile)."""
        with self._lock:
            for txn in txns:
                txn.sending -= 1
            return any(not txn.sending and txn.waiting and not txn.given_up and txn in self._pending for txn in txns)

    def _retry_later(self) -> None:
        self._retry.set()
        self._wake.set()

    def remove_markers_for_txn_partition(self, txn_partition: int) -> None:
        with self._lock:
            gone = [p for p in self._pending if p.txn_partition == txn_partition]
            for p in gone:
                p.given_up = True
            self._pending = [p for p in self._pending if p.txn_partition != txn_partition]
        if gone:
            log.info("dropped queued markers %s", kv(txn_partition=txn_partition, transactions=len(gone)))

    def pending_count(self) -> int:
        with self._lock:
            return len(self._pending)

    # --- the sender thread -----------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(timeout=1.0)
            self._wake.clear()
            if self._retry.is_set():      # a dispatch failed: back off before sending again
                self._retry.clear()
                self._stopped.wait(self.retry_backoff_ms / 1000.0)
            if self._stopped.is_set():
                return
            try:
                retry = self._send_round()
            except Exception:  # noqa: BLE001 - the sender must survive one bad round
                log.exception("marker round failed")
                retry = True
            if retry:
                self._retry_later()

    def _send_round(self) -> bool:
        """Send every waiting marker once; True when some must be sent again."""
        with self._lock:
            pending = [p for p in self._pending if not p.sending]
        if not pending:
            return False
        by_broker, retry = self._targets(pending)
        futures = {broker: self._pool.submit(self._send_to, broker, entries) for broker, entries in by_broker.items()}
        for broker, f in futures.items():
            try:
                retry = f.result() or retry
            except Exception as e:  # noqa: BLE001 - a lost connection: send again next round
                log.warning("cannot send markers %s", kv(broker=broker, reason=e))
                retry = True
        for txn in pending:
            self._maybe_complete(txn)
        return retry

    def _targets(self, pending: list[PendingMarkers]
                 ) -> tuple[dict[int, list[tuple[PendingMarkers, list[tuple[str, int]]]]], bool]:
        """The waiting markers of ``pending`` grouped by their partitions' current leaders, and whether some have
        no leader now (to be sent again); partitions that no longer exist are dropped."""
        by_broker: dict[int, list[tuple[PendingMarkers, list[tuple[str, int]]]]] = {}
        retry = False
        for txn in pending:
            targets: dict[int, list] = {}
            for tp in sorted(txn.waiting):
                leader = self.leader_of(*tp)
                if leader is None:
                    log.info("partition no longer exists; dropping it from the transaction's markers %s",
                             kv(transactional_id=txn.transactional_id, partition=f"{tp[0]}-{tp[1]}"))
                    txn.waiting.discard(tp)
                elif leader < 0:
                    retry = True
                else:
                    targets.setdefault(leader, []).append(tp)
            for broker, tps in targets.items():
                by_broker.setdefault(broker, []).append((txn, tps))
        return by_broker, retry

    def _send_to(self, broker: int, entries: list[tuple[PendingMarkers, list[tuple[str, int]]]]) -> bool:
        markers = []
        for txn, tps in entries:
            topics: dict[str, list[int]] = {}
            for t, p in tps:
                topics.setdefault(t, []).append(p)
            markers.append({"producer_id": txn.producer_id, "producer_epoch": txn.producer_epoch,
                            "transaction_result": txn.commit, "coordinator_epoch": txn.coordinator_epoch,
                            "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]})
        request = build(codec.request_class(ApiKeys.WRITE_TXN_MARKERS), WRITE_TXN_MARKERS_VERSION, {"markers": markers})
        response = self.send(broker, request, WRITE_TXN_MARKERS_VERSION)
        retry = False
        by_pid: dict[int, list] = {}
        for m in response.markers:
            by_pid.setdefault(m.producer_id, []).append(m)
        for txn, tps in entries:
            results: dict = {}
            for m in by_pid.get(txn.producer_id, []):
                for t in m.topics:
                    for p in t.partitions:
                        results[(t.name, p.partition_index)] = p.error_code
            for tp in tps:
                code = results.get(tp)
                retry = self._on_result(txn, tp, Errors.UNKNOWN_TOPIC_OR_PARTITION if code is None else Errors(code)) \
                    or retry
        for txn, _tps in entries:     # the last answer of a transaction completes it here, not after the round
            self._maybe_complete(txn)
        return retry

    def _on_result(self, txn: PendingMarkers, tp: tuple[str, int], error: Errors) -> bool:
        if error == Errors.NONE:
            txn.waiting.discard(tp)
            return False
        if error in RETRIABLE:
            log.info("marker not written yet; retrying %s", kv(transactional_id=txn.transactional_id,
                                                               partition=f"{tp[0]}-{tp[1]}", error=error.name))
            return True
        if error in FENCED:
            log.warning("marker fenced; giving the transaction up %s",
                        kv(transactional_id=txn.transactional_id, partition=f"{tp[0]}-{tp[1]}", error=error.name,
                           coordinator_epoch=txn.coordinator_epoch, producer_epoch=txn.producer_epoch))
            txn.given_up = True
            return False
        if error in DROPPED:
            log.warning("marker not supported by the partition; dropping it %s",
                        kv(transactional_id=txn.transactional_id, partition=f"{tp[0]}-{tp[1]}", error=error.name))
            txn.waiting.discard(tp)
            return False
        log.error("unexpected error writing a marker; sending it again %s",
                  kv(transactional_id=txn.transactional_id, partition=f"{tp[0]}-{tp[1]}", error=error.name))
        return True

    def _maybe_complete(self, txn: PendingMarkers) -> None:
        with self._lock:
            if txn not in self._pending:
                return
            if not txn.given_up and txn.waiting:
                return
            self._pending.remove(txn)
        if not txn.given_up:
            txn.on_complete(txn)
