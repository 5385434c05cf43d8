"""The transaction coordinator alone: the ``__transaction_state`` record codec, the state machine, and the
coordinator's flows against a fake log, a fake marker channel and a manual timer (unit tests of one package)."""
from __future__ import annotations

import itertools
import struct

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kafkatier.coordinator.transaction import transaction_log
from kafkatier.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from kafkatier.coordinator.transaction.transaction_log import (MalformedTransactionRecordError,
                                                               TransactionLogValue)
from kafkatier.coordinator.transaction.transaction_metadata import (IllegalTransitionError, TransactionMetadata,
                                                                    TransactionState)
from kafkatier.coordinator.transaction.transaction_state_manager import (TransactionConfig, build_record,
                                                                         parse_partition)
from kafkatier.log.record_batch import rewrite_base_offset
from kafkatier.protocol.errors import Errors
from tests.unit.fakes import ManualTimer

S = TransactionState
TP0, TP1 = ("t", 0), ("t", 1)


# --- records --------------------------------------------------------------------------------------------------
def test_key_and_value_round_trip_in_kafkas_layout():
    key = transaction_log.key_bytes("my-id")
    assert key == struct.pack(">hh", 0, 5) + b"my-id"
    assert transaction_log.read_key(key) == "my-id"
    v = TransactionLogValue(1000, 3, 60000, int(S.ONGOING), frozenset({TP0, TP1, ("u", 2)}), 111, 100)
    raw = transaction_log.value_bytes(v)
    assert raw[:2] == b"\x00\x00"                                       # value version 0
    assert struct.unpack_from(">qhib", raw, 2) == (1000, 3, 60000, 1)
    assert transaction_log.read_value(raw) == v


def test_empty_state_writes_null_partitions_and_a_tombstone_reads_as_none():
    v = TransactionLogValue(5, 0, 1000, int(S.EMPTY), frozenset(), 7, -1)
    raw = transaction_log.value_bytes(v)
    assert struct.unpack_from(">i", raw, 2 + 8 + 2 + 4 + 1)[0] == -1      # null array
    assert transaction_log.read_value(raw) == v
    assert transaction_log.read_value(None) is None


@pytest.mark.parametrize("bad", [b"", b"\x00", struct.pack(">h", 1) + b"\x00\x01a", struct.pack(">hh", 0, 9) + b"ab"])
def test_malformed_keys_are_refused(bad):
    with pytest.raises(MalformedTransactionRecordError):
        transaction_log.read_key(bad)


def test_partition_for_is_kafkas_java_hash():
    def java_hash(s: str) -> int:
        h = 0
        for ch in s:
            h = (31 * h + ord(ch)) & 0xFFFFFFFF
        return h - (1 << 32) if h >= 1 << 31 else h
    for tid in ("a", "transactional-id", "tx-" + "x" * 40, "ü", "my-group"):
        assert transaction_log.partition_for(tid, 50) == abs(java_hash(tid)) % 50   # Kafka's Utils.abs
    assert java_hash("my-group") < 0 and transaction_log.partition_for("my-group", 50) == 12


def _numbered(chunks: list[bytes]) -> list[bytes]:
    out = []
    for i, c in enumerate(chunks):
        b = bytearray(c)
        rewrite_base_offset(b, 0, i)
        out.append(bytes(b))
    return out


def test_loading_keeps_the_last_value_drops_tombstones_and_skips_malformed_records():
    v1 = TransactionLogValue(1, 0, 1000, int(S.EMPTY), frozenset(), 1, -1)
    v2 = TransactionLogValue(1, 0, 1000, int(S.ONGOING), frozenset({TP0}), 2, 2)
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    b.append(0, timestamp=0, key=struct.pack(">hh", 7, 1) + b"x", value=b"zz", headers=[])
    loaded = parse_partition(_numbered([build_record("a", v1, 0), build_record("a", v2, 0),
                                        build_record("b", v1, 0), build_record("b", None, 0),
                                        bytes(b.build())]))
    assert loaded.values == {"a": v2} and loaded.skipped == 1     # the key of an unknown version is skipped


# --- state machine --------------------------------------------------------------------------------------------
def meta(state=S.EMPTY, epoch=0, partitions=()) -> TransactionMetadata:
    return TransactionMetadata("id", 100, -1, epoch, -1, 60000, state, set(partitions), -1 if state is S.EMPTY else 5, 5)


def test_a_transaction_goes_through_ongoing_prepare_and_complete():
    m = meta()
    m.complete_transition(m.prepare_add_partitions({TP0}, 10))
    assert m.state is S.ONGOING and m.topic_partitions == {TP0} and m.txn_start_timestamp == 10
    m.complete_transition(m.prepare_add_partitions({TP1}, 11))
    assert m.topic_partitions == {TP0, TP1} and m.txn_start_timestamp == 10     # the start stays
    m.complete_transition(m.prepare_abort_or_commit(S.PREPARE_COMMIT, 12))
    t = m.prepare_complete(13)
    assert t.txn_state is S.COMPLETE_COMMIT and m.pending_state is S.COMPLETE_COMMIT
    m.complete_transition(t)
    assert m.state is S.COMPLETE_COMMIT and not m.topic_partitions and m.pending_state is None


@pytest.mark.parametrize("state,target", [(S.EMPTY, S.PREPARE_COMMIT), (S.EMPTY, S.COMPLETE_ABORT),
                                          (S.ONGOING, S.EMPTY), (S.PREPARE_COMMIT, S.ONGOING),
                                          (S.COMPLETE_COMMIT, S.PREPARE_ABORT)])
def test_invalid_transitions_are_refused(state, target):
    m = meta(state, partitions={TP0})
    with pytest.raises(IllegalTransitionError):
        m._prepare(target, now_ms=20)
    assert m.pending_state is None


def test_a_second_transition_while_one_is_pending_is_refused():
    m = meta()
    m.prepare_add_partitions({TP0}, 10)
    with pytest.raises(IllegalTransitionError):
        m.prepare_add_partitions({TP1}, 11)


def test_epoch_bump_retry_and_fencing_of_init_producer_id():
    m = meta(S.COMPLETE_COMMIT, epoch=4)
    err, t = m.prepare_increment_producer_epoch(60000, None, 20)
    assert err is None and (t.producer_epoch, t.last_producer_epoch) == (5, -1)
    m.complete_transition(t)
    err, t = m.prepare_increment_producer_epoch(60000, 5, 21)             # KIP-360: expected == current
    assert err is None and (t.producer_epoch, t.last_producer_epoch) == (6, 5)
    m.complete_transition(t)
    err, t = m.prepare_increment_producer_epoch(60000, 5, 22)             # a retry of that: no second bump
    assert err is None and t.producer_epoch == 6
    m.pending_state = None
    assert m.prepare_increment_producer_epoch(60000, 2, 23) == (Errors.PRODUCER_FENCED, None)


def test_fencing_an_ongoing_transaction_bumps_the_epoch_once_even_after_a_failed_fence():
    m = meta(S.ONGOING, epoch=3, partitions={TP0})
    assert m.prepare_fence_producer_epoch(30).producer_epoch == 4
    m.pending_state = None
    m.has_failed_epoch_fence = True
    assert m.prepare_fence_producer_epoch(31).producer_epoch == 3


def test_completion_checks_what_was_prepared():
    m = meta(S.ONGOING, partitions={TP0})
    t = m.prepare_abort_or_commit(S.PREPARE_ABORT, 40)
    m.topic_partitions.add(TP1)                    # changed under the pending write
    with pytest.raises(IllegalTransitionError):
        m.complete_transition(t)


# --- the coordinator ------------------------------------------------------------------------------------------
class FakeTxnLog:
    def __init__(self) -> None:
        self.data: dict[int, list[bytes]] = {}
        self.fail_with = 0

    def append(self, partition, records, timeout_ms, callback):
        if not self.fail_with:
            self.data.setdefault(partition, []).append(records)
        callback(self.fail_with)

    def read(self, partition, offset, max_bytes):
        chunks = _numbered(self.data.get(partition, []))
        data = b"".join(chunks[offset:])
        return data, len(chunks)


class FakeMarkers:
    def __init__(self) -> None:
        self.sent = []

    def startup(self):
        pass

    def shutdown(self):
        pass

    def add_markers(self, pending):
        self.sent.append(pending)

    def remove_markers_for_txn_partition(self, p):
        self.sent = [m for m in self.sent if m.txn_partition != p]

    def ack_all(self):
        sent, self.sent = self.sent, []
        for m in sent:
            m.waiting.clear()
            m.on_complete(m)
        return sent


class Answers:
    def __init__(self):
        self.got = []

    def __call__(self, *args):
        self.got.append(args if len(args) > 1 else args[0])

    @property
    def last(self):
        return self.got[-1]


def started_coordinator(**config) -> TransactionCoordinator:
    """A coordinator leading the 3 partitions of its state log, on fakes kept as ``timer_``, ``log_``,
    ``markers_``; producer ids from 1000."""
    timer, tlog, markers = ManualTimer(), FakeTxnLog(), FakeMarkers()
    ids = itertools.count(1000)
    c = TransactionCoordinator(1, TransactionConfig(transaction_state_log_num_partitions=3, **config),
                               tlog, markers, lambda: next(ids), timer, timer.time_ms)
    c.startup()
    for p in range(3):
        c.on_election(p, 1)
    timer.advance(0)
    c.timer_, c.log_, c.markers_ = timer, tlog, markers
    return c


@pytest.fixture
def coord():
    return started_coordinator(transaction_max_timeout_ms=60000)


def init(c, tid="tx", timeout=10000, expected=None):
    a = Answers()
    c.handle_init_producer_id(tid, timeout, expected, a)
    return a.last


def ask_commit(c) -> Answers:
    """Transaction ``tx`` (producer 1000, epoch 0) adds TP0 and asks to commit; its markers are not acknowledged
    yet.  The Answers of both requests."""
    assert init(c) == (Errors.NONE, 1000, 0)
    a = Answers()
    c.handle_add_partitions("tx", 1000, 0, [TP0], a)
    c.handle_end_transaction("tx", 1000, 0, True, a)
    return a


def committing(**config) -> tuple[TransactionCoordinator, Answers]:
    """A started coordinator after :func:`ask_commit`."""
    c = started_coordinator(**config)
    return c, ask_commit(c)


def test_init_add_commit_markers_complete(coord):
    assert init(coord) == (Errors.NONE, 1000, 0)
    a = Answers()
    coord.handle_add_partitions("tx", 1000, 0, [TP0, TP1], a)
    assert a.last == Errors.NONE
    coord.handle_add_partitions("tx", 1000, 0, [TP0], a)          # already in the transaction: no write
    assert a.last == Errors.NONE
    coord.handle_end_transaction("tx", 1000, 0, True, a)
    assert a.last == Errors.NONE                                    # answered before the markers
    [pending] = coord.markers_.sent
    assert pending.commit and pending.waiting == {TP0, TP1} and pending.coordinator_epoch == 1
    answered = len(a.got)
    coord.handle_add_partitions("tx", 1000, 0, [TP0], a)
    assert len(a.got) == answered                                   # markers pending: held ...
    coord.timer_.advance(coord.config.kafkatier_transaction_add_partitions_hold_ms)
    assert a.last == Errors.CONCURRENT_TRANSACTIONS                 # ... then answered as Kafka does
    coord.handle_end_transaction("tx", 1000, 0, True, a)
    assert a.last == Errors.CONCURRENT_TRANSACTIONS
    coord.markers_.ack_all()
    assert coord.describe("tx")[1].state is S.COMPLETE_COMMIT
    coord.handle_end_transaction("tx", 1000, 0, True, a)            # an idempotent retry
    assert a.last == Errors.NONE
    coord.handle_end_transaction("tx", 1000, 0, False, a)
    assert a.last == Errors.INVALID_TXN_STATE
    # The state survives a reload of the partition (a new coordinator).
    p = coord.partition_for("tx")
    coord.on_resignation(p)
    assert coord.describe("tx")[0] == Errors.NOT_COORDINATOR
    coord.on_election(p, 2)
    assert coord.describe("tx")[0] == Errors.COORDINATOR_LOAD_IN_PROGRESS
    coord.timer_.advance(0)
    err, m = coord.describe("tx")
    assert err is None and m.state is S.COMPLETE_COMMIT and m.producer_epoch == 0


def test_bad_requests_get_kafkas_errors(coord):
    assert init(coord, tid="")[0] == Errors.INVALID_REQUEST
    assert init(coord, timeout=0)[0] == Errors.INVALID_TRANSACTION_TIMEOUT
    assert init(coord, timeout=60001)[0] == Errors.INVALID_TRANSACTION_TIMEOUT
    a = Answers()
    coord.handle_end_transaction("unknown", 1, 0, True, a)
    assert a.last == Errors.INVALID_PRODUCER_ID_MAPPING
    assert init(coord) == (Errors.NONE, 1000, 0)
    coord.handle_add_partitions("tx", 999, 0, [TP0], a)
    assert a.last == Errors.INVALID_PRODUCER_ID_MAPPING
    coord.handle_add_partitions("tx", 1000, 7, [TP0], a)
    assert a.last == Errors.PRODUCER_FENCED
    coord.handle_end_transaction("tx", 1000, 0, True, a)            # nothing to commit
    assert a.last == Errors.INVALID_TXN_STATE


def test_a_second_init_fences_an_ongoing_transaction(coord):
    assert init(coord) == (Errors.NONE, 1000, 0)
    a = Answers()
    coord.handle_add_partitions("tx", 1000, 0, [TP0], a)
    assert init(coord)[0] == Errors.CONCURRENT_TRANSACTIONS         # abort under way, epoch 1
    [pending] = coord.markers_.sent
    assert not pending.commit and pending.producer_epoch == 1
    coord.handle_end_transaction("tx", 1000, 0, True, a)            # the zombie
    assert a.last == Errors.PRODUCER_FENCED
    assert init(coord)[0] == Errors.CONCURRENT_TRANSACTIONS         # markers still pending
    coord.markers_.ack_all()
    assert init(coord) == (Errors.NONE, 1000, 2)
    coord.handle_add_partitions("tx", 1000, 0, [TP0], a)
    assert a.last == Errors.PRODUCER_FENCED


def test_timed_out_transactions_are_aborted_with_a_bumped_epoch(coord):
    assert init(coord, timeout=1000) == (Errors.NONE, 1000, 0)
    a = Answers()
    coord.handle_add_partitions("tx", 1000, 0, [TP0], a)
    assert coord.abort_timed_out_transactions() == 0
    coord.timer_.now += 1001
    assert coord.abort_timed_out_transactions() == 1
    [pending] = coord.markers_.sent
    assert not pending.commit and pending.producer_epoch == 1
    coord.markers_.ack_all()
    err, m = coord.describe("tx")
    assert m.state is S.COMPLETE_ABORT and m.producer_epoch == 1
    coord.handle_end_transaction("tx", 1000, 0, True, a)
    assert a.last == Errors.PRODUCER_FENCED


def test_a_failed_write_clears_the_pending_state_and_translates_the_error(coord):
    assert init(coord) == (Errors.NONE, 1000, 0)
    coord.log_.fail_with = int(Errors.NOT_ENOUGH_REPLICAS)
    a = Answers()
    coord.handle_add_partitions("tx", 1000, 0, [TP0], a)
    assert a.last == Errors.COORDINATOR_NOT_AVAILABLE
    coord.log_.fail_with = int(Errors.NOT_LEADER_OR_FOLLOWER)
    coord.handle_add_partitions("tx", 1000, 0, [TP0], a)
    assert a.last == Errors.NOT_COORDINATOR
    coord.log_.fail_with = 0
    coord.handle_add_partitions("tx", 1000, 0, [TP0], a)
    assert a.last == Errors.NONE


def test_a_prepared_transaction_is_completed_by_the_next_coordinator(coord):
    assert init(coord) == (Errors.NONE, 1000, 0)
    a = Answers()
    coord.handle_add_partitions("tx", 1000, 0, [TP0], a)
    coord.handle_end_transaction("tx", 1000, 0, False, a)
    p = coord.partition_for("tx")
    coord.on_resignation(p)                     # the coordinator moves before the markers are acknowledged
    assert coord.markers_.sent == []
    coord.on_election(p, 5)
    coord.timer_.advance(0)
    [pending] = coord.markers_.sent             # re-sent with the new coordinator epoch
    assert not pending.commit and pending.coordinator_epoch == 5
    coord.markers_.ack_all()
    assert coord.describe("tx")[1].state is S.COMPLETE_ABORT


def test_verification_answers_without_writing(coord):
    assert init(coord) == (Errors.NONE, 1000, 0)
    a = Answers()
    coord.handle_add_partitions("tx", 1000, 0, [TP0], a)
    written = sum(len(v) for v in coord.log_.data.values())
    assert coord.handle_verify_partitions("tx", 1000, 0, [TP0, TP1]) == {
        TP0: Errors.NONE, TP1: Errors.TRANSACTION_ABORTABLE}
    assert coord.handle_verify_partitions("tx", 1000, 1, [TP0]) == {TP0: Errors.PRODUCER_FENCED}
    assert coord.handle_verify_partitions("tx", 7, 0, [TP0]) == {TP0: Errors.INVALID_PRODUCER_ID_MAPPING}
    assert coord.handle_verify_partitions("other", 1000, 0, [TP0]) == {TP0: Errors.INVALID_PRODUCER_ID_MAPPING}
    coord.handle_end_transaction("tx", 1000, 0, True, a)
    assert coord.handle_verify_partitions("tx", 1000, 0, [TP0]) == {TP0: Errors.CONCURRENT_TRANSACTIONS}
    assert sum(len(v) for v in coord.log_.data.values()) == written + 1     # only the EndTxn's record


def test_verification_in_process_only_where_this_broker_coordinates_the_id(coord):
    """A partition leader on the coordinator's broker asks it in process; another id's leader gets None (it asks
    over the network)."""
    init(coord)
    coord.handle_add_partitions("tx", 1000, 0, [TP0], Answers())
    assert coord.verify_if_coordinator("tx", 1000, 0, [TP0, TP1]) == {
        TP0: Errors.NONE, TP1: Errors.TRANSACTION_ABORTABLE}
    coord.on_resignation(coord.partition_for("tx"))
    assert coord.verify_if_coordinator("tx", 1000, 0, [TP0]) is None
    assert coord.verify_if_coordinator("", 1000, 0, [TP0]) is None


def test_a_newer_epoch_of_the_same_leader_reloads_and_nothing_stays_pending(coord):
    ask_commit(coord)
    assert len(coord.markers_.sent) == 1                 # markers queued at epoch 1
    p = coord.partition_for("tx")
    coord.on_election(p, 2)                              # the controller bumped the leader epoch (an ISR shrink)
    coord.timer_.advance(0)
    [pending] = coord.markers_.sent                      # the old queue dropped, the markers sent again
    assert pending.coordinator_epoch == 2
    coord.markers_.ack_all()
    err, m = coord.describe("tx")
    assert m.state is S.COMPLETE_COMMIT and m.pending_state is None
    assert init(coord) == (Errors.NONE, 1000, 1)


def test_add_partitions_waits_for_the_previous_markers_then_succeeds(coord):
    """kafkatier's hold (``kafkatier.transaction.add.partitions.hold.ms``): back-to-back transactions wait for the
    markers, not for the client's backoff after CONCURRENT_TRANSACTIONS; answered once, never twice."""
    ask_commit(coord)
    held = Answers()
    coord.handle_add_partitions("tx", 1000, 0, [TP1], held)
    assert held.got == []
    coord.markers_.ack_all()                                        # CompleteCommit written: handled again
    assert held.got == [Errors.NONE]
    coord.timer_.advance(1000)
    assert held.got == [Errors.NONE]                                # the expiry finds nothing left to answer
    err, m = coord.describe("tx")
    assert m.state is S.ONGOING and m.topic_partitions == {TP1}


def _records(chunk: bytes) -> list[TransactionLogValue | None]:
    batch = MemoryRecords(chunk).next_batch()
    return [transaction_log.read_value(r.value) for r in batch]


def test_held_add_partitions_go_into_the_completion_write():
    """Requests held for the markers are written with the Complete record, in one batch (one replicated write
    instead of two in a row): Complete first, then the next transaction's Ongoing with every held partition; each
    is answered once, and a reload of the partition finds the Ongoing transaction."""
    c, a = committing()
    held1, held2 = Answers(), Answers()
    c.handle_add_partitions("tx", 1000, 0, [TP1], held1)
    c.handle_add_partitions("tx", 1000, 0, [TP0, TP1], held2)
    p = c.partition_for("tx")
    writes = len(c.log_.data[p])
    c.markers_.ack_all()
    assert held1.got == [Errors.NONE] and held2.got == [Errors.NONE]
    assert len(c.log_.data[p]) == writes + 1
    complete, ongoing = _records(c.log_.data[p][-1])
    assert complete.state_id == S.COMPLETE_COMMIT and complete.topic_partitions == frozenset()
    assert ongoing.state_id == S.ONGOING and ongoing.topic_partitions == {TP0, TP1}
    assert ongoing.txn_start_timestamp >= complete.txn_last_update_timestamp
    err, m = c.describe("tx")
    assert m.state is S.ONGOING and m.topic_partitions == {TP0, TP1} and m.pending_state is None
    c.timer_.advance(1000)                                          # the hold's expiry finds nothing to answer
    assert held1.got == [Errors.NONE] and held2.got == [Errors.NONE]
    c.handle_end_transaction("tx", 1000, 0, False, a)               # and the next transaction goes on as usual
    assert a.last == Errors.NONE
    [pending] = c.markers_.sent
    assert not pending.commit and pending.waiting == {TP0, TP1}
    c.on_resignation(p)
    c.on_election(p, 2)
    c.timer_.advance(0)
    [resent] = c.markers_.sent
    assert not resent.commit and resent.coordinator_epoch == 2


def test_a_reload_after_a_completion_write_with_the_next_transaction_finds_it_ongoing():
    c = started_coordinator()
    assert init(c) == (Errors.NONE, 1000, 0)
    a = Answers()
    c.handle_add_partitions("tx", 1000, 0, [TP0], a)
    c.handle_end_transaction("tx", 1000, 0, False, a)               # an abort: CompleteAbort then Ongoing
    held = Answers()
    c.handle_add_partitions("tx", 1000, 0, [TP1], held)
    c.markers_.ack_all()
    assert held.got == [Errors.NONE]
    p = c.partition_for("tx")
    assert [v.state_id for v in _records(c.log_.data[p][-1])] == [S.COMPLETE_ABORT, S.ONGOING]
    c.on_resignation(p)
    c.on_election(p, 2)
    c.timer_.advance(0)
    err, m = c.describe("tx")
    assert m.state is S.ONGOING and m.topic_partitions == {TP1} and c.markers_.sent == []


def test_a_failed_completion_write_answers_the_held_requests_as_the_state_is():
    """The log is unavailable for the Complete record: nothing is applied, the held request is answered
    CONCURRENT_TRANSACTIONS (the client retries) and the completion alone is retried."""
    c, a = committing()
    held = Answers()
    c.handle_add_partitions("tx", 1000, 0, [TP1], held)
    c.log_.fail_with = int(Errors.NOT_ENOUGH_REPLICAS)
    c.markers_.ack_all()
    assert held.got == [Errors.CONCURRENT_TRANSACTIONS]
    err, m = c.describe("tx")
    assert m.state is S.PREPARE_COMMIT and m.pending_state is S.COMPLETE_COMMIT
    c.log_.fail_with = 0
    c.timer_.advance(100)                                           # the completion's retry
    err, m = c.describe("tx")
    assert m.state is S.COMPLETE_COMMIT and m.pending_state is None
    p = c.partition_for("tx")
    assert [v.state_id for v in _records(c.log_.data[p][-1])] == [S.COMPLETE_COMMIT]
    assert held.got == [Errors.CONCURRENT_TRANSACTIONS]
    c.handle_add_partitions("tx", 1000, 0, [TP1], held)
    assert held.got[-1] == Errors.NONE


def test_a_completion_write_refused_for_good_hands_the_held_requests_back():
    c, a = committing()
    held = Answers()
    c.handle_add_partitions("tx", 1000, 0, [TP1], held)
    c.log_.fail_with = int(Errors.NOT_LEADER_OR_FOLLOWER)          # NOT_COORDINATOR: this broker lost the log
    c.markers_.ack_all()
    assert len(held.got) == 1 and held.got[0] != Errors.NONE
    c.timer_.advance(1000)
    assert len(held.got) == 1


def test_ongoing_after_a_completion_is_prepared_only_while_that_completion_is_pending():
    m = meta(S.ONGOING, partitions={TP0})
    m.complete_transition(m.prepare_abort_or_commit(S.PREPARE_COMMIT, 12))
    t = m.prepare_complete(13)
    nxt = m.prepare_add_partitions_after(t, {TP1}, 14)
    assert nxt.txn_state is S.ONGOING and nxt.topic_partitions == {TP1} and nxt.txn_start_timestamp == 14
    m.complete_transitions([t, nxt])
    assert m.state is S.ONGOING and m.topic_partitions == {TP1} and m.pending_state is None
    with pytest.raises(IllegalTransitionError):
        m.prepare_add_partitions_after(t, {TP1}, 15)                # nothing pending any more


def test_add_partitions_hold_zero_is_kafkas_immediate_answer():
    c, a = committing(kafkatier_transaction_add_partitions_hold_ms=0)
    c.handle_add_partitions("tx", 1000, 0, [TP1], a)
    assert a.last == Errors.CONCURRENT_TRANSACTIONS


def test_a_held_add_partitions_of_an_unloaded_partition_is_answered_once(coord):
    """The coordinator resigns while an AddPartitionsToTxn waits for markers: answered NOT_COORDINATOR at once (the
    client finds the new coordinator), never a second time when the hold would have expired."""
    ask_commit(coord)
    held = Answers()
    coord.handle_add_partitions("tx", 1000, 0, [TP1], held)
    coord.on_resignation(coord.partition_for("tx"))
    assert held.got == [Errors.NOT_COORDINATOR]
    coord.timer_.advance(coord.config.kafkatier_transaction_add_partitions_hold_ms)
    assert held.got == [Errors.NOT_COORDINATOR]
    coord.handle_add_partitions("tx", 1000, 0, [TP1], held)
    assert held.got[-1] == Errors.NOT_COORDINATOR
    coord.timer_.advance(1000)
    assert len(held.got) == 2


def test_add_partitions_from_an_unknown_id_or_a_fenced_epoch(coord):
    a = Answers()
    coord.handle_add_partitions("nobody", 1000, 0, [TP0], a)
    assert a.last == Errors.INVALID_PRODUCER_ID_MAPPING
    assert init(coord) == (Errors.NONE, 1000, 0)
    assert init(coord) == (Errors.NONE, 1000, 1)                  # a second instance
    coord.handle_add_partitions("tx", 1000, 0, [TP0], a)
    assert a.last == Errors.PRODUCER_FENCED
    coord.handle_add_partitions("", 1000, 1, [TP0], a)
    assert a.last == Errors.INVALID_REQUEST


def test_the_completion_line_says_where_the_transaction_time_went(caplog):
    c, a = committing()
    with caplog.at_level("INFO", logger="kafkatier.coordinator.transaction"):
        c.markers_.ack_all()
    [line] = [r.getMessage() for r in caplog.records if "transaction completed" in r.getMessage()]
    assert "state=CompleteCommit next_partitions=0 prepare_ms=" in line and "markers_ms=" in line \
        and "complete_ms=" in line
