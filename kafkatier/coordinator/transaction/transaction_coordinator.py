"""TransactionCoordinator: InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn (as
AddPartitionsToTxn of the group's ``__consumer_offsets`` partition), EndTxn, the abort of timed-out transactions,
and the loading of ``__transaction_state`` partitions (Kafka's ``TransactionCoordinator``).

Flow of a transaction: InitProducerId writes Empty (epoch bumped); AddPartitionsToTxn writes Ongoing with the union
of partitions; EndTxn writes PrepareCommit / PrepareAbort, answers the client at once, and queues the markers
(``transaction_marker_channel_manager.py``); when every partition acknowledged its marker the CompleteCommit /
CompleteAbort record is written.  Until then the id answers CONCURRENT_TRANSACTIONS.  The order of checks and the
error codes are Kafka's (the README's Transactions section).

Fencing: InitProducerId while a transaction is Ongoing bumps the epoch (PrepareEpochFence, in memory), aborts the
transaction with the bumped epoch (the markers fence the old producer on every partition) and answers
CONCURRENT_TRANSACTIONS; the client's retry then gets a second bump.  The timed-out transaction task
(``transaction.abort.timed.out.transaction.cleanup.interval.ms``) takes the same path.

Every answer is delivered through a callback, outside the coordinator's lock; log appends are made outside it.
Idle ids expire after ``transactional.id.expiration.ms`` (a tombstone, every
``transaction.remove.expired.transaction.cleanup.interval.ms``).  DescribeTransactions and ListTransactions read
the cache.

Deliberate differences from Kafka: an AddPartitionsToTxn (or AddOffsetsToTxn) arriving while the previous
transaction of the same producer waits for its markers is held, up to
``kafkatier.transaction.add.partitions.hold.ms`` (default 1000, 0 = Kafka's behaviour), instead of answering
CONCURRENT_TRANSACTIONS at once: clients back off 20 ms on that error (Java, librdkafka), more than the markers
take here, so back-to-back transactions would wait on the client's timer rather than on the markers; if the
markers take longer the request is answered CONCURRENT_TRANSACTIONS, as Kafka does.  When the markers are written,
the held requests go into the Complete record's write: one batch of CompleteCommit / CompleteAbort then the next
transaction's Ongoing, answered once it is replicated -- one replicated write instead of the two in a row Kafka
makes (its log holds the same two records, in two batches).  One lock for all transactional ids (Kafka locks
per id); tombstones of expired ids are written one record per id (Kafka batches them per partition);
AddPartitionsToTxn v4+ (broker verification, KIP-890 part 1) is answered for VerifyOnly requests only
(:meth:`handle_verify_partitions`), and in process for a leader on this broker
(:meth:`verify_if_coordinator`).
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Iterable, Protocol, Sequence

import attrs

from kafkatier.common.faults import crash_point
from kafkatier.coordinator.transaction.transaction_marker_channel_manager import (PendingMarkers,
                                                                                  TransactionMarkerChannelManager)
from kafkatier.coordinator.transaction.transaction_metadata import (NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
                                                                    IllegalTransitionError, TransactionMetadata,
                                                                    TransactionState, TxnTransitMetadata,
                                                                    is_epoch_exhausted)
from kafkatier.coordinator.transaction.transaction_state_manager import (TransactionConfig, TransactionStateManager,
                                                                         TransactionTopicLog, append_error)
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import Errors

log = get_logger("coordinator.transaction")

S = TransactionState
InitCallback = Callable[[Errors, int, int], None]        # (error, producer id, producer epoch)
ErrorCallback = Callable[[Errors], None]


class Timer(Protocol):
    def schedule(self, name: str, fn: Callable[[], object], delay_ms: float = 0, period_ms: float = -1) -> None: ...


@attrs.frozen
class StepTimes:
    """When an EndTxn's steps happened (``time.monotonic()``), for the "transaction completed" log line: where a
    transaction's time goes (the Prepare write, the markers, the Complete write)."""
    received: float      # the EndTxn (or the abort of a fence / a timeout)
    prepared: float      # its Prepare record replicated

    def durations(self, markers_written: float) -> dict[str, float]:
        now = time.monotonic()
        return {"prepare_ms": round((self.prepared - self.received) * 1000, 1),
                "markers_ms": round((markers_written - self.prepared) * 1000, 1),
                "complete_ms": round((now - markers_written) * 1000, 1)}


@attrs.define(eq=False)
class HeldAddPartitions:
    """An AddPartitionsToTxn (or AddOffsetsToTxn) waiting for the previous transaction's markers."""
    producer_id: int
    producer_epoch: int
    partitions: frozenset
    callback: ErrorCallback


class TransactionCoordinator:
    def __init__(self, broker_id: int, config: TransactionConfig, topic_log: TransactionTopicLog,
                 markers: TransactionMarkerChannelManager, generate_producer_id: Callable[[], int], timer: Timer,
                 time_ms: Callable[[], int] = lambda: int(time.time() * 1000)):
        self.broker_id = broker_id
        self.config = config
        self.markers = markers
        self.generate_producer_id = generate_producer_id
        self.timer = timer
        self.time_ms = time_ms
        self.state = TransactionStateManager(topic_log, config, time_ms)
        self._lock = threading.RLock()
        self._active = False
        self._held: dict[str, list[HeldAddPartitions]] = {}   # transactional id -> waiting for its markers
        self._held_seq = 0

    # --- lifecycle ----------------------------------------------------------------------------------------
    def startup(self) -> None:
        self._active = True
        self.markers.startup()
        interval = self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms
        if interval > 0:
            self.timer.schedule("transaction-abort", self.abort_timed_out_transactions, interval, interval)
        interval = self.config.transaction_remove_expired_transaction_cleanup_interval_ms
        if interval > 0:
            self.timer.schedule("transactionalId-expiration", self.remove_expired_transactional_ids, interval,
                                interval)
        log.info("transaction coordinator started %s", kv(broker=self.broker_id,
                                                         partitions=self.state.num_partitions))

    def shutdown(self) -> None:
        with self._lock:
            self._active = False
            held = [h for p in list(self.state.owned) for h in self._unload(p)]
        self._answer_not_coordinator(held)
        self.markers.shutdown()

    def partition_for(self, transactional_id: str) -> int:
        return self.state.partition_for(transactional_id)

    # --- leadership of __transaction_state (Kafka's onElection / onResignation) -----------------------------
    def on_election(self, partition: int, coordinator_epoch: int) -> None:
        """Load ``partition`` at ``coordinator_epoch``.  A newer epoch of a partition already led here (the
        controller shrank its ISR) reloads it too, as Kafka does: writes in flight at the old epoch answer
        NOT_COORDINATOR (clients retry) and queued markers are sent again with the new epoch."""
        with self._lock:
            current = self.state.owned.get(partition)
            if current is not None and current >= coordinator_epoch:
                return
            self.markers.remove_markers_for_txn_partition(partition)
            self.state.owned[partition] = coordinator_epoch
            self.state.loading.add(partition)
        self.timer.schedule(f"load-txns-{partition}", lambda: self._load(partition, coordinator_epoch), 0)

    def on_resignation(self, partition: int, coordinator_epoch: int | None = None) -> None:
        with self._lock:
            current = self.state.owned.get(partition)
            if current is None or (coordinator_epoch is not None and coordinator_epoch >= 0
                                   and current > coordinator_epoch):
                return
            held = self._unload(partition)
        self._answer_not_coordinator(held)

    def _unload(self, partition: int) -> list[HeldAddPartitions]:
        """Under the lock: forget ``partition``; returns the AddPartitionsToTxn requests held for its ids, to be
        answered NOT_COORDINATOR outside the lock (the client finds the new coordinator)."""
        self.state.owned.pop(partition, None)
        self.state.loading.discard(partition)
        dropped = self.state.metadata.pop(partition, {})
        held = []
        for tid in [t for t in self._held if self.partition_for(t) == partition]:
            held.extend(self._held.pop(tid))
        self.markers.remove_markers_for_txn_partition(partition)
        log.info("unloaded transaction partition %s", kv(partition=partition, transactional_ids=len(dropped)))
        return held

    @staticmethod
    def _answer_not_coordinator(held: Sequence[HeldAddPartitions]) -> None:
        for h in held:
            h.callback(Errors.NOT_COORDINATOR)

    def _load(self, partition: int, coordinator_epoch: int) -> None:
        start = self.time_ms()
        try:
            loaded = self.state.read_partition(partition)
        except Exception as e:  # noqa: BLE001 - lost leadership meanwhile, or the log is gone
            log.warning("cannot load transaction partition %s", kv(partition=partition, reason=e))
            with self._lock:
                if self.state.owned.get(partition) == coordinator_epoch:
                    self.state.loading.discard(partition)
                    self.state.owned.pop(partition, None)
            return
        resend = []
        with self._lock:
            if self.state.owned.get(partition) != coordinator_epoch:
                return
            cache = {tid: TransactionMetadata.from_log(tid, v) for tid, v in loaded.values.items()}
            self.state.metadata[partition] = cache
            self.state.loading.discard(partition)
            now = self.time_ms()
            for m in cache.values():
                if m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                    resend.append((m, m.prepare_complete(now)))
        for m, transit in resend:
            self._send_markers(coordinator_epoch, m, transit)
        log.info("loaded transaction partition %s", kv(partition=partition, coordinator_epoch=coordinator_epoch,
                                                       transactional_ids=len(loaded.values), skipped=loaded.skipped,
                                                       markers_resent=len(resend), ms=self.time_ms() - start))

    # --- appends ------------------------------------------------------------------------------------------
    def _append(self, transactional_id: str, coordinator_epoch: int, metadata: TransactionMetadata,
                transit: TxnTransitMetadata | Sequence[TxnTransitMetadata], callback: ErrorCallback,
                retry_on_unavailable: bool = False) -> None:
        """Kafka's ``appendTransactionToLog``: write, then complete the transition if this broker still
        coordinates the id at the same epoch; ``callback(error)`` outside the lock.  Several transitions (a
        CompleteCommit and the next Ongoing) are written in one batch and applied in order."""
        transits = [transit] if isinstance(transit, TxnTransitMetadata) else list(transit)

        def written(code: int) -> None:
            error = append_error(code)
            with self._lock:
                err, epoch, current = self.state.get_transaction_state(transactional_id)
                if error == Errors.NONE:
                    if err is not None or current is not metadata or epoch != coordinator_epoch:
                        error = Errors.NOT_COORDINATOR
                        log.info("transaction coordinator changed during a write %s",
                                 kv(transactional_id=transactional_id, coordinator_epoch=coordinator_epoch))
                    else:
                        try:
                            metadata.complete_transitions(transits)
                        except IllegalTransitionError as e:
                            log.error("cannot complete transition %s", kv(reason=e))
                            metadata.pending_state = None
                            error = Errors.UNKNOWN_SERVER_ERROR
                else:
                    log.warning("transaction state write failed %s",
                                kv(transactional_id=transactional_id, state=transits[-1].txn_state.state_name,
                                   error=error.name))
                    if epoch == coordinator_epoch and current is metadata and not (
                            retry_on_unavailable and error == Errors.COORDINATOR_NOT_AVAILABLE):
                        metadata.pending_state = None
            callback(error)
        try:
            self.state.write(transactional_id, transits, written)
        except Exception:  # noqa: BLE001
            log.exception("transaction state write failed %s", kv(transactional_id=transactional_id))
            with self._lock:
                metadata.pending_state = None
            callback(Errors.UNKNOWN_SERVER_ERROR)

    # --- InitProducerId -----------------------------------------------------------------------------------
    def handle_init_producer_id(self, transactional_id: str, txn_timeout_ms: int,
                                expected: tuple[int, int] | None, callback: InitCallback) -> None:
        """``expected``: the (producer id, epoch) a KIP-360 client sends, or None."""
        if not transactional_id:
            return callback(Errors.INVALID_REQUEST, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        if not self.state.validate_transaction_timeout_ms(txn_timeout_ms):
            return callback(Errors.INVALID_TRANSACTION_TIMEOUT, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        with self._lock:
            err, epoch, m = self.state.get_transaction_state(transactional_id)
            if err is None and not self._active:
                err = Errors.COORDINATOR_NOT_AVAILABLE
            if err is None and m is None:
                try:
                    pid = self.generate_producer_id()
                except Exception as e:  # noqa: BLE001 - no producer id block could be claimed yet
                    log.warning("no producer id available %s", kv(reason=e))
                    err = Errors.COORDINATOR_LOAD_IN_PROGRESS
                else:
                    m = self.state.put_if_absent(TransactionMetadata(
                        transactional_id, pid, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, txn_timeout_ms,
                        S.EMPTY, set(), -1, self.time_ms()))
            if err is not None:
                transit = None
            else:
                err, transit = self._prepare_init_producer_id(m, txn_timeout_ms, expected)
        if err is not None:
            return callback(err, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        if transit.txn_state is S.PREPARE_EPOCH_FENCE:
            log.info("fencing the producer of an ongoing transaction %s",
                     kv(transactional_id=transactional_id, producer_id=transit.producer_id,
                        new_epoch=transit.producer_epoch))
            return self._end_transaction(transactional_id, transit.producer_id, transit.producer_epoch, False,
                                         from_client=False,
                                         callback=lambda e: callback(e if e != Errors.NONE else
                                                                     Errors.CONCURRENT_TRANSACTIONS,
                                                                     NO_PRODUCER_ID, NO_PRODUCER_EPOCH))
        self._append(transactional_id, epoch, m, transit,
                     lambda e: callback(e, transit.producer_id if e == Errors.NONE else NO_PRODUCER_ID,
                                        transit.producer_epoch if e == Errors.NONE else NO_PRODUCER_EPOCH))

    def _prepare_init_producer_id(self, m: TransactionMetadata, txn_timeout_ms: int,
                                  expected: tuple[int, int] | None) -> tuple[Errors | None, TxnTransitMetadata | None]:
        if m.pending_transition_in_progress:
            return Errors.CONCURRENT_TRANSACTIONS, None
        if expected is not None and not self._valid_expected_producer(m, expected):
            return Errors.PRODUCER_FENCED, None
        now = self.time_ms()
        try:
            if m.state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
                return Errors.CONCURRENT_TRANSACTIONS, None
            if m.state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT, S.EMPTY):
                if m.is_producer_epoch_exhausted and (expected is None or expected[1] == m.producer_epoch):
                    return None, m.prepare_producer_id_rotation(self.generate_producer_id(), txn_timeout_ms, now,
                                                                expected is not None)
                return m.prepare_increment_producer_epoch(txn_timeout_ms, None if expected is None else expected[1],
                                                          now)
            if m.state is S.ONGOING:
                return None, m.prepare_fence_producer_epoch(now)
            return Errors.UNKNOWN_SERVER_ERROR, None   # Dead / PrepareEpochFence: never a current state here
        except IllegalTransitionError as e:
            log.error("illegal transition %s", kv(reason=e))
            return Errors.UNKNOWN_SERVER_ERROR, None

    @staticmethod
    def _valid_expected_producer(m: TransactionMetadata, expected: tuple[int, int]) -> bool:
        pid, epoch = expected
        return (m.producer_epoch == NO_PRODUCER_EPOCH or pid == m.producer_id
                or (pid == m.last_producer_id and is_epoch_exhausted(epoch)))

    # --- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------------------
    def handle_add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              partitions: Iterable[tuple[str, int]], callback: ErrorCallback,
                              hold: bool = True) -> None:
        """``hold``: wait (bounded) for the previous transaction's markers rather than answering
        CONCURRENT_TRANSACTIONS at once (see the module docstring)."""
        partitions = set(partitions)
        if not transactional_id:
            return callback(Errors.INVALID_REQUEST)
        with self._lock:
            err, epoch, m = self.state.get_transaction_state(transactional_id)
            transit = None
            if err is None:
                if m is None or m.producer_id != producer_id:
                    err = Errors.INVALID_PRODUCER_ID_MAPPING
                elif m.producer_epoch != producer_epoch:
                    err = Errors.PRODUCER_FENCED
                elif m.pending_transition_in_progress or m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                    err = Errors.CONCURRENT_TRANSACTIONS
                    hold_ms = self.config.kafkatier_transaction_add_partitions_hold_ms
                    if hold and hold_ms > 0 and m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                        self._hold(transactional_id, hold_ms, HeldAddPartitions(
                            producer_id, producer_epoch, frozenset(partitions), callback))
                        return
                elif m.state is S.ONGOING and partitions <= m.topic_partitions:
                    err = Errors.NONE
                else:
                    try:
                        transit = m.prepare_add_partitions(partitions, self.time_ms())
                    except IllegalTransitionError as e:
                        log.error("illegal transition %s", kv(reason=e))
                        err = Errors.UNKNOWN_SERVER_ERROR
        if transit is None:
            return callback(err)
        self._append(transactional_id, epoch, m, transit, callback)

    def _hold(self, transactional_id: str, hold_ms: int, entry: HeldAddPartitions) -> None:
        """Park a request until the Complete record is written (:meth:`_markers_written` takes it into that write
        or :meth:`_release` handles it again) or ``hold_ms`` passed (CONCURRENT_TRANSACTIONS); whichever comes
        first takes it from the list and answers it, once."""
        self._held.setdefault(transactional_id, []).append(entry)
        self._held_seq += 1

        def expire() -> None:
            with self._lock:
                waiting = self._held.get(transactional_id, [])
                if entry not in waiting:
                    return
                waiting.remove(entry)
            entry.callback(Errors.CONCURRENT_TRANSACTIONS)
        self.timer.schedule(f"add-partitions-hold-{self._held_seq}", expire, hold_ms)

    def _take_held(self, transactional_id: str, completion: TxnTransitMetadata) -> list[HeldAddPartitions]:
        """Under the lock: the held requests of the producer the completion belongs to, taken off the list (the
        others stay, to be handled again by :meth:`_release`)."""
        waiting = self._held.get(transactional_id, [])
        taken = [h for h in waiting
                 if (h.producer_id, h.producer_epoch) == (completion.producer_id, completion.producer_epoch)]
        if taken:
            self._held[transactional_id] = [h for h in waiting if h not in taken]
        return taken

    def _release(self, transactional_id: str, entries: Sequence[HeldAddPartitions] = ()) -> None:
        """Handle the held requests (and ``entries``, taken before) again, now that nothing is pending."""
        with self._lock:
            waiting = list(entries) + self._held.pop(transactional_id, [])
        for h in waiting:
            self.handle_add_partitions(transactional_id, h.producer_id, h.producer_epoch, h.partitions, h.callback,
                                       hold=False)

    def handle_verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                 partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], Errors]:
        """KIP-890 part 1 (AddPartitionsToTxn v4+ with VerifyOnly, from a partition leader): NONE for a partition
        in the ongoing transaction, TRANSACTION_ABORTABLE for one that is not; nothing is written and the pending
        state is not checked (Kafka's ``handleVerifyPartitionsInTransaction``)."""
        partitions = list(partitions)
        if not transactional_id:
            return {tp: Errors.INVALID_REQUEST for tp in partitions}
        with self._lock:
            err, _epoch, m = self.state.get_transaction_state(transactional_id)
            if err is None:
                if m is None or m.producer_id != producer_id:
                    err = Errors.INVALID_PRODUCER_ID_MAPPING
                elif m.producer_epoch != producer_epoch:
                    err = Errors.PRODUCER_FENCED
                elif m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                    err = Errors.CONCURRENT_TRANSACTIONS
            if err is not None:
                return {tp: err for tp in partitions}
            return {tp: Errors.NONE if tp in m.topic_partitions else Errors.TRANSACTION_ABORTABLE
                    for tp in partitions}

    def verify_if_coordinator(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], Errors] | None:
        """:meth:`handle_verify_partitions` for a partition leader on this broker (KIP-890 part 1 without the
        network), or None when this broker does not coordinate ``transactional_id`` (the leader asks over the
        network whichever broker the metadata names)."""
        if not transactional_id or not self._active:
            return None
        with self._lock:
            if self.state.get_transaction_state(transactional_id)[0] == Errors.NOT_COORDINATOR:
                return None
            return self.handle_verify_partitions(transactional_id, producer_id, producer_epoch, partitions)

    # --- EndTxn -------------------------------------------------------------------------------------------
    def handle_end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                               callback: ErrorCallback) -> None:
        self._end_transaction(transactional_id, producer_id, producer_epoch, commit, True, callback)

    def _end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                         from_client: bool, callback: ErrorCallback) -> None:
        if not transactional_id:
            return callback(Errors.INVALID_REQUEST)
        with self._lock:
            err, coordinator_epoch, m = self.state.get_transaction_state(transactional_id)
            transit = None
            if err is None:
                err, transit = self._prepare_end(m, producer_id, producer_epoch, commit, from_client)
        if transit is None:
            return callback(err)
        is_fence = not from_client
        received = time.monotonic()

        def prepared(error: Errors) -> None:
            if error != Errors.NONE:
                if is_fence and error not in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE,
                                              Errors.COORDINATOR_LOAD_IN_PROGRESS):
                    with self._lock:
                        m.has_failed_epoch_fence = True
                return callback(error)
            with self._lock:
                e2, epoch2, m2 = self.state.get_transaction_state(transactional_id)
                if e2 is not None or m2 is not m or epoch2 != coordinator_epoch:
                    e = Errors.NOT_COORDINATOR
                elif m.producer_id != producer_id:
                    e = Errors.INVALID_PRODUCER_ID_MAPPING
                elif m.producer_epoch != transit.producer_epoch:
                    e = Errors.PRODUCER_FENCED
                elif m.pending_transition_in_progress:
                    e = Errors.CONCURRENT_TRANSACTIONS
                else:
                    e = Errors.NONE
                    complete = m.prepare_complete(self.time_ms())
            if e == Errors.NONE:
                # Crash tests: the Prepare record is written, the client has no answer, no marker is sent.
                crash_point("txn-coordinator-after-prepare")
            callback(e)
            if e == Errors.NONE:
                self._send_markers(coordinator_epoch, m, complete, StepTimes(received, time.monotonic()))
        self._append(transactional_id, coordinator_epoch, m, transit, prepared)

    def _prepare_end(self, m: TransactionMetadata | None, producer_id: int, producer_epoch: int, commit: bool,
                     from_client: bool) -> tuple[Errors | None, TxnTransitMetadata | None]:
        if m is None or m.producer_id != producer_id:
            return Errors.INVALID_PRODUCER_ID_MAPPING, None
        pending_fence = m.pending_state is S.PREPARE_EPOCH_FENCE
        fence_epoch = m.producer_epoch
        if pending_fence:
            fence_epoch = producer_epoch     # the bumped epoch, not applied yet
        if (from_client and producer_epoch != m.producer_epoch) or (
                not pending_fence and producer_epoch < m.producer_epoch):
            return Errors.PRODUCER_FENCED, None
        if m.pending_transition_in_progress and not pending_fence:
            return Errors.CONCURRENT_TRANSACTIONS, None
        state = m.state
        if state is S.ONGOING:
            target = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
            if target is S.PREPARE_ABORT and pending_fence:
                m.pending_state = None
                m.producer_epoch = fence_epoch
                m.last_producer_epoch = NO_PRODUCER_EPOCH
            try:
                return None, m.prepare_abort_or_commit(target, self.time_ms())
            except IllegalTransitionError as e:
                log.error("illegal transition %s", kv(reason=e))
                return Errors.UNKNOWN_SERVER_ERROR, None
        if state is S.COMPLETE_COMMIT:
            return (Errors.NONE if commit else Errors.INVALID_TXN_STATE), None
        if state is S.COMPLETE_ABORT:
            return (Errors.INVALID_TXN_STATE if commit else Errors.NONE), None
        if state is S.PREPARE_COMMIT:
            return (Errors.CONCURRENT_TRANSACTIONS if commit else Errors.INVALID_TXN_STATE), None
        if state is S.PREPARE_ABORT:
            return (Errors.INVALID_TXN_STATE if commit else Errors.CONCURRENT_TRANSACTIONS), None
        if pending_fence:
            m.pending_state = None
        return Errors.INVALID_TXN_STATE, None

    # --- markers ------------------------------------------------------------------------------------------
    def _send_markers(self, coordinator_epoch: int, m: TransactionMetadata, complete: TxnTransitMetadata,
                      times: StepTimes | None = None) -> None:
        commit = complete.txn_state is S.COMPLETE_COMMIT
        pending = PendingMarkers(m.transactional_id, self.partition_for(m.transactional_id), coordinator_epoch,
                                 m.producer_id, m.producer_epoch, commit, set(m.topic_partitions),
                                 lambda _p: self._markers_written(coordinator_epoch, m, complete, times))
        log.info("sending transaction markers %s", kv(transactional_id=m.transactional_id, producer_id=m.producer_id,
                                                      producer_epoch=m.producer_epoch,
                                                      result="COMMIT" if commit else "ABORT",
                                                      partitions=len(pending.waiting)))
        self.markers.add_markers(pending)

    def _markers_written(self, coordinator_epoch: int, m: TransactionMetadata, complete: TxnTransitMetadata,
                         times: StepTimes | None = None) -> None:
        """Every marker is written: record CompleteCommit / CompleteAbort (retried while the log is
        unavailable).  AddPartitionsToTxn requests of the same producer held meanwhile are taken into the same
        write: the next transaction's Ongoing record follows the Complete one in the batch, and they are answered
        when it is replicated (one write instead of two in a row)."""
        with self._lock:
            err, epoch, current = self.state.get_transaction_state(m.transactional_id)
            if (err is not None or current is not m or epoch != coordinator_epoch
                    or m.pending_state is not complete.txn_state):
                log.info("not completing a transaction this broker no longer coordinates %s",
                         kv(transactional_id=m.transactional_id))
                return
            held = self._take_held(m.transactional_id, complete)
            transits = [complete]
            if held:
                partitions = frozenset().union(*(h.partitions for h in held))
                transits.append(m.prepare_add_partitions_after(complete, partitions, self.time_ms()))
        written = time.monotonic()

        def done(error: Errors) -> None:
            if error == Errors.NONE:
                log.info("transaction completed %s", kv(transactional_id=m.transactional_id,
                                                        state=complete.txn_state.state_name,
                                                        next_partitions=len(transits[-1].topic_partitions)
                                                        if held else 0,
                                                        **(times.durations(written) if times else {})))
                for h in held:
                    h.callback(Errors.NONE)
                self._release(m.transactional_id)
                return
            if error == Errors.COORDINATOR_NOT_AVAILABLE:
                log.info("retrying the completion record %s", kv(transactional_id=m.transactional_id))
                self.timer.schedule(f"txn-complete-{m.transactional_id}",
                                    lambda: self._markers_written(coordinator_epoch, m, complete, times), 100)
                for h in held:      # not taken into the retry: answered as the state is now (CONCURRENT_...)
                    self.handle_add_partitions(m.transactional_id, h.producer_id, h.producer_epoch, h.partitions,
                                               h.callback, hold=False)
                return
            log.warning("completion record not written %s", kv(transactional_id=m.transactional_id,
                                                                error=error.name))
            self._release(m.transactional_id, held)
        self._append(m.transactional_id, coordinator_epoch, m, transits, done, retry_on_unavailable=True)

    # --- timeouts -----------------------------------------------------------------------------------------
    def abort_timed_out_transactions(self) -> int:
        """Abort (with an epoch bump that fences the producer) every Ongoing transaction older than its
        timeout (Kafka's ``abortTimedOutTransactions``); returns how many were started."""
        now = self.time_ms()
        todo = []
        with self._lock:
            if not self._active:
                return 0
            for _epoch, m in self.state.all_metadata():
                if (m.state is S.ONGOING and not m.pending_transition_in_progress
                        and m.txn_start_timestamp + m.txn_timeout_ms < now):
                    try:
                        transit = m.prepare_fence_producer_epoch(now)
                    except IllegalTransitionError as e:
                        log.error("cannot fence a timed out transaction %s", kv(reason=e))
                        continue
                    todo.append((m.transactional_id, transit))
        for tid, transit in todo:
            log.info("aborting a timed out transaction %s", kv(transactional_id=tid, producer_id=transit.producer_id,
                                                               new_epoch=transit.producer_epoch))
            self._end_transaction(tid, transit.producer_id, transit.producer_epoch, False, False,
                                  lambda e, tid=tid: e != Errors.NONE and log.warning(
                                      "timed out transaction not aborted %s", kv(transactional_id=tid,
                                                                                 error=e.name)))
        return len(todo)

    # --- transactional id expiration ---------------------------------------------------------------------
    def remove_expired_transactional_ids(self) -> int:
        """Write a tombstone for every id idle (Empty, CompleteCommit, CompleteAbort, nothing pending) for
        ``transactional.id.expiration.ms``, then drop it from the cache (Kafka's
        ``removeExpiredTransactionalIds``); returns how many were started."""
        now = self.time_ms()
        horizon = now - self.config.transactional_id_expiration_ms
        todo = []
        with self._lock:
            if not self._active:
                return 0
            for epoch, m in self.state.all_metadata():
                if (m.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) and not m.pending_transition_in_progress
                        and m.txn_last_update_timestamp <= horizon):
                    todo.append((epoch, m, m.prepare_dead(now)))
        for epoch, m, transit in todo:
            def done(error: Errors, m=m) -> None:
                if error != Errors.NONE:
                    return
                with self._lock:
                    cache = self.state.metadata.get(self.partition_for(m.transactional_id), {})
                    if cache.get(m.transactional_id) is m and m.state is S.DEAD:
                        del cache[m.transactional_id]
                log.info("transactional id expired %s", kv(transactional_id=m.transactional_id))
            self._append(m.transactional_id, epoch, m, transit, done)
        return len(todo)

    # --- describe -----------------------------------------------------------------------------------------
    def describe(self, transactional_id: str) -> tuple[Errors | None, TransactionMetadata | None]:
        """DescribeTransactions of one id: TRANSACTIONAL_ID_NOT_FOUND for an unknown or Dead id."""
        if not transactional_id:
            return Errors.INVALID_REQUEST, None
        with self._lock:
            if not self._active:
                return Errors.COORDINATOR_NOT_AVAILABLE, None
            err, _epoch, m = self.state.get_transaction_state(transactional_id)
            if err is None and (m is None or m.state is S.DEAD):
                return Errors.TRANSACTIONAL_ID_NOT_FOUND, None
            return err, m

    def list_transactions(self, states: set[str], producer_ids: set[int],
                          duration_filter_ms: int = -1) -> tuple[Errors | None, list[TransactionMetadata], list[str]]:
        """ListTransactions: ``(error, matching ids, unknown state filters)`` (Kafka's ``listTransactionStates``)."""
        known = {s.state_name for s in TransactionState}
        unknown = sorted(s for s in states if s not in known)
        with self._lock:
            if not self._active:
                return Errors.COORDINATOR_NOT_AVAILABLE, [], unknown
            if self.state.loading:
                return Errors.COORDINATOR_LOAD_IN_PROGRESS, [], unknown
            now = self.time_ms()
            out = [m for _e, m in self.state.all_metadata()
                   if m.state is not S.DEAD
                   and (not states or m.state.state_name in states)
                   and (not producer_ids or m.producer_id in producer_ids)
                   and (duration_filter_ms < 0 or (m.txn_start_timestamp >= 0
                                                   and now - m.txn_start_timestamp > duration_filter_ms))]
            return None, out, unknown
