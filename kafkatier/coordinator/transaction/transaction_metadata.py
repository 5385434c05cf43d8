"""TransactionMetadata: one transactional id's state on its coordinator, and the state machine (Kafka's
``TransactionMetadata.scala``).

Every change is two-phase, as in Kafka: a ``prepare_*`` method checks that the target state may follow the
current one, sets ``pending_state`` and returns the :class:`TxnTransitMetadata` to write to
``__transaction_state``; once that write is replicated, :meth:`TransactionMetadata.complete_transition` applies
it (after checking it still fits), else the pending state is cleared.  While a transition is pending most
requests get CONCURRENT_TRANSACTIONS.

States and their valid previous states (``VALID_PREVIOUS_STATES``): Empty (Empty, CompleteCommit, CompleteAbort),
Ongoing (Ongoing, Empty, CompleteCommit, CompleteAbort), PrepareCommit (Ongoing), PrepareAbort (Ongoing,
PrepareEpochFence), CompleteCommit (PrepareCommit), CompleteAbort (PrepareAbort), Dead (Empty, CompleteCommit,
CompleteAbort), PrepareEpochFence (Ongoing; in memory only, replaced by PrepareAbort with the bumped epoch).

Not thread safe: the TransactionCoordinator's lock guards every instance.
"""
from __future__ import annotations

import enum

import attrs

from kafkatier.coordinator.transaction.transaction_log import TransactionLogValue
from kafkatier.protocol.errors import Errors

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: Kafka's ``isEpochExhausted``: Short.MaxValue - 1.
MAX_PRODUCER_EPOCH = 32767


class TransactionState(enum.IntEnum):
    """The state ids written in ``__transaction_state`` (Kafka's ``TransactionState.id``)."""
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def state_name(self) -> str:
        """Kafka's name, as DescribeTransactions / ListTransactions show it."""
        return _NAMES[self]


_NAMES = {TransactionState.EMPTY: "Empty", TransactionState.ONGOING: "Ongoing",
          TransactionState.PREPARE_COMMIT: "PrepareCommit", TransactionState.PREPARE_ABORT: "PrepareAbort",
          TransactionState.COMPLETE_COMMIT: "CompleteCommit", TransactionState.COMPLETE_ABORT: "CompleteAbort",
          TransactionState.DEAD: "Dead", TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence"}

S = TransactionState
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


def is_epoch_exhausted(epoch: int) -> bool:
    return epoch >= MAX_PRODUCER_EPOCH - 1


class IllegalTransitionError(Exception):
    """A transition the state machine does not allow (Kafka's IllegalStateException)."""


@attrs.frozen
class TxnTransitMetadata:
    """What a transition writes (Kafka's ``TxnTransitMetadata``)."""
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    txn_state: TransactionState
    topic_partitions: frozenset
    txn_start_timestamp: int
    txn_last_update_timestamp: int

    def to_log_value(self) -> TransactionLogValue:
        return TransactionLogValue(self.producer_id, self.producer_epoch, self.txn_timeout_ms, int(self.txn_state),
                                   self.topic_partitions, self.txn_last_update_timestamp, self.txn_start_timestamp)


class TransactionMetadata:
    def __init__(self, transactional_id: str, producer_id: int, last_producer_id: int, producer_epoch: int,
                 last_producer_epoch: int, txn_timeout_ms: int, state: TransactionState,
                 topic_partitions: set | frozenset = frozenset(), txn_start_timestamp: int = -1,
                 txn_last_update_timestamp: int = -1):
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.last_producer_id = last_producer_id
        self.producer_epoch = producer_epoch
        self.last_producer_epoch = last_producer_epoch
        self.txn_timeout_ms = txn_timeout_ms
        self.state = state
        self.topic_partitions: set = set(topic_partitions)
        self.txn_start_timestamp = txn_start_timestamp
        self.txn_last_update_timestamp = txn_last_update_timestamp
        self.pending_state: TransactionState | None = None
        self.has_failed_epoch_fence = False

    @classmethod
    def from_log(cls, transactional_id: str, v: TransactionLogValue) -> "TransactionMetadata":
        return cls(transactional_id, v.producer_id, NO_PRODUCER_ID, v.producer_epoch, NO_PRODUCER_EPOCH,
                   v.txn_timeout_ms, TransactionState(v.state_id), v.topic_partitions, v.txn_start_timestamp,
                   v.txn_last_update_timestamp)

    def __repr__(self) -> str:
        return (f"TransactionMetadata(transactionalId={self.transactional_id}, producerId={self.producer_id}, "
                f"producerEpoch={self.producer_epoch}, state={self.state.state_name}, "
                f"pendingState={self.pending_state.state_name if self.pending_state is not None else None}, "
                f"partitions={sorted(self.topic_partitions)})")

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    # --- prepare ------------------------------------------------------------------------------------------
    def _prepare(self, state: TransactionState, *, producer_id: int | None = None, last_producer_id: int | None = None,
                 producer_epoch: int | None = None, last_producer_epoch: int | None = None,
                 txn_timeout_ms: int | None = None, topic_partitions: frozenset | None = None,
                 txn_start_timestamp: int | None = None, now_ms: int) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalTransitionError(f"Preparing transaction state transition to {state.state_name} while it "
                                         f"already a pending state {self.pending_state.state_name}")
        pid = self.producer_id if producer_id is None else producer_id
        epoch = self.producer_epoch if producer_epoch is None else producer_epoch
        if pid < 0:
            raise IllegalTransitionError(f"Illegal new producer id {pid}")
        if epoch < 0 and state is not TransactionState.EMPTY:
            raise IllegalTransitionError(f"Illegal new producer epoch {epoch}")
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalTransitionError(f"Preparing transaction state transition to {state.state_name} failed "
                                         f"since the target state is not a valid previous state of the current "
                                         f"state {self.state.state_name}")
        transit = TxnTransitMetadata(
            pid, self.last_producer_id if last_producer_id is None else last_producer_id, epoch,
            self.last_producer_epoch if last_producer_epoch is None else last_producer_epoch,
            self.txn_timeout_ms if txn_timeout_ms is None else txn_timeout_ms, state,
            frozenset(self.topic_partitions) if topic_partitions is None else topic_partitions,
            self.txn_start_timestamp if txn_start_timestamp is None else txn_start_timestamp, now_ms)
        self.pending_state = state
        return transit

    def prepare_no_transit(self) -> TxnTransitMetadata:
        """The current state, unchanged (a retried InitProducerId)."""
        return TxnTransitMetadata(self.producer_id, self.last_producer_id, self.producer_epoch,
                                  self.last_producer_epoch, self.txn_timeout_ms, self.state,
                                  frozenset(self.topic_partitions), self.txn_start_timestamp,
                                  self.txn_last_update_timestamp)

    def prepare_fence_producer_epoch(self, now_ms: int) -> TxnTransitMetadata:
        if self.producer_epoch == MAX_PRODUCER_EPOCH:
            raise IllegalTransitionError(f"Cannot fence producer with epoch equal to {MAX_PRODUCER_EPOCH} since "
                                         f"this would overflow")
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(TransactionState.PREPARE_EPOCH_FENCE, producer_epoch=bumped, now_ms=now_ms)

    def prepare_increment_producer_epoch(self, txn_timeout_ms: int, expected_epoch: int | None,
                                         now_ms: int) -> tuple[Errors | None, TxnTransitMetadata | None]:
        if self.is_producer_epoch_exhausted:
            raise IllegalTransitionError(f"Cannot allocate any more producer epochs for producerId {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch   # a retry: no second bump
        else:
            return Errors.PRODUCER_FENCED, None
        return None, self._prepare(TransactionState.EMPTY, producer_epoch=epoch, last_producer_epoch=last,
                                   txn_timeout_ms=txn_timeout_ms, topic_partitions=frozenset(),
                                   txn_start_timestamp=-1, now_ms=now_ms)

    def prepare_producer_id_rotation(self, new_producer_id: int, txn_timeout_ms: int, now_ms: int,
                                     record_last_epoch: bool) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalTransitionError("Cannot rotate producer ids while a transaction is still pending")
        return self._prepare(TransactionState.EMPTY, producer_id=new_producer_id, last_producer_id=self.producer_id,
                             producer_epoch=0,
                             last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                             txn_timeout_ms=txn_timeout_ms, topic_partitions=frozenset(), txn_start_timestamp=-1,
                             now_ms=now_ms)

    def prepare_add_partitions(self, partitions, now_ms: int) -> TxnTransitMetadata:
        start = now_ms if self.state in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT) else self.txn_start_timestamp
        return self._prepare(TransactionState.ONGOING,
                             topic_partitions=frozenset(self.topic_partitions) | set(partitions),
                             txn_start_timestamp=start, now_ms=now_ms)

    def prepare_add_partitions_after(self, completion: TxnTransitMetadata, partitions,
                                     now_ms: int) -> TxnTransitMetadata:
        """The Ongoing transition that :meth:`prepare_add_partitions` would give once ``completion`` (the pending
        CompleteCommit / CompleteAbort) is applied; written right behind it, in the same batch, it is completed
        after it with :meth:`complete_transition`."""
        if self.pending_state is not completion.txn_state or completion.txn_state not in (S.COMPLETE_COMMIT,
                                                                                           S.COMPLETE_ABORT):
            raise IllegalTransitionError(f"Preparing an Ongoing transition after {completion.txn_state.state_name} "
                                         f"while the pending state is {self.pending_state}")
        return TxnTransitMetadata(completion.producer_id, completion.last_producer_id, completion.producer_epoch,
                                  completion.last_producer_epoch, completion.txn_timeout_ms, S.ONGOING,
                                  frozenset(partitions), now_ms, max(now_ms, completion.txn_last_update_timestamp))

    def prepare_abort_or_commit(self, state: TransactionState, now_ms: int) -> TxnTransitMetadata:
        return self._prepare(state, now_ms=now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        state = S.COMPLETE_COMMIT if self.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return self._prepare(state, topic_partitions=frozenset(), now_ms=now_ms)

    def prepare_dead(self, now_ms: int) -> TxnTransitMetadata:
        return self._prepare(TransactionState.DEAD, topic_partitions=frozenset(), now_ms=now_ms)

    # --- complete -----------------------------------------------------------------------------------------
    def complete_transitions(self, transits) -> None:
        """Apply transitions written in one batch, in order: each after the first becomes pending as the one
        before it is applied (a CompleteCommit and the Ongoing of the next transaction)."""
        for i, t in enumerate(transits):
            if i:
                self.pending_state = t.txn_state
            self.complete_transition(t)

    def complete_transition(self, t: TxnTransitMetadata) -> None:
        """Apply a transition whose record was written (Kafka's ``completeTransitionTo``)."""
        to = self.pending_state
        if to is None or to is not t.txn_state:
            raise IllegalTransitionError(f"Completing transaction state transition to {t.txn_state.state_name} "
                                         f"while its pending state is "
                                         f"{to.state_name if to is not None else None}")
        if t.txn_last_update_timestamp < self.txn_last_update_timestamp:
            self._throw(t, "the update timestamp went backwards")
        if to is S.EMPTY:
            ok_epoch = (t.producer_epoch in (self.producer_epoch, self.producer_epoch + 1)
                        or (t.producer_epoch == 0 and t.producer_id != self.producer_id))
            if not ok_epoch or t.topic_partitions:
                self._throw(t, "bad epoch or partitions for Empty")
            if t.txn_start_timestamp != -1:
                self._throw(t, "a start time for Empty")
            self.producer_id, self.last_producer_id = t.producer_id, t.last_producer_id
            self.producer_epoch, self.last_producer_epoch = t.producer_epoch, t.last_producer_epoch
            self.txn_timeout_ms, self.txn_start_timestamp = t.txn_timeout_ms, t.txn_start_timestamp
            self.topic_partitions = set()
        elif to is S.ONGOING:
            if not self._same_producer(t) or not self.topic_partitions <= t.topic_partitions \
                    or t.txn_timeout_ms != self.txn_timeout_ms:
                self._throw(t, "a different producer, timeout, or lost partitions for Ongoing")
            self.txn_start_timestamp = t.txn_start_timestamp
            self.topic_partitions = set(t.topic_partitions)
        elif to in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            if (t.txn_timeout_ms != self.txn_timeout_ms or set(t.topic_partitions) != self.topic_partitions
                    or t.txn_start_timestamp != self.txn_start_timestamp):
                self._throw(t, "a changed timeout, partitions or start time for a prepare")
            self.producer_epoch, self.last_producer_epoch = t.producer_epoch, t.last_producer_epoch
        elif to in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT):
            if not self._same_producer(t) or t.txn_timeout_ms != self.txn_timeout_ms or t.txn_start_timestamp == -1:
                self._throw(t, "a different producer or timeout, or no start time, for a completion")
            self.topic_partitions = set()
        elif to is S.DEAD:
            self.topic_partitions = set()
        else:
            self._throw(t, "no completion for this state")
        self.txn_last_update_timestamp = t.txn_last_update_timestamp
        self.state = to
        self.pending_state = None

    def _same_producer(self, t: TxnTransitMetadata) -> bool:
        return self.producer_id == t.producer_id and self.producer_epoch == t.producer_epoch

    def _throw(self, t: TxnTransitMetadata, why: str) -> None:
        raise IllegalTransitionError(f"TransactionalId {self.transactional_id} failed transition to state {t} "
                                     f"from {self!r}: {why}")
