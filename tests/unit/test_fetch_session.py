"""Incremental fetch sessions (KIP-227): the leader's session cache and fetch contexts
(``server/fetch_session.py``) and the fetcher's session handler (``server/fetch_session_handler.py``), alone and
talking to each other: session ids and epochs, errors 70/71, eviction, forgotten partitions, and responses that
omit the partitions with nothing new."""
from __future__ import annotations

import random

import pytest

from kafkatier.common.structs import TopicPartition
from kafkatier.protocol.errors import Errors
from kafkatier.protocol.fetch_metadata import INITIAL, LEGACY, FetchMetadata, next_epoch
from kafkatier.server.fetch_session import (FetchManager, FetchRequestData, FetchSessionCache,
                                            IncrementalFetchContext)
from kafkatier.server.fetch_session_handler import FetchSessionHandler, PartitionData
from kafkatier.server.replica_manager import FetchPartitionData, FetchPartitionResult

T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)


class Clock:
    def __init__(self):
        self.s = 1000.0

    def __call__(self) -> float:
        return self.s

    def advance_ms(self, ms: int) -> None:
        self.s += ms / 1000.0


def manager(slots: int = 10, eviction_ms: int = 120000) -> tuple[FetchManager, Clock]:
    clock = Clock()
    return FetchManager(FetchSessionCache(slots, eviction_ms, clock=clock, rng=random.Random(7))), clock


def fp(tp: TopicPartition, offset: int = 0) -> FetchPartitionData:
    return FetchPartitionData(tp, offset, 1024)


def ok(hw: int = 10, lso: int = 0, records: bytes = b"") -> FetchPartitionResult:
    return FetchPartitionResult(Errors.NONE, hw, lso, records)


def request(session_id: int, epoch: int, *parts: FetchPartitionData, forget=()) -> FetchRequestData:
    return FetchRequestData(FetchMetadata(session_id, epoch), list(parts), list(forget))


def start_session(m: FetchManager, *tps: TopicPartition, privileged: bool = True) -> int:
    ctx = m.new_context(request(0, 0, *(fp(tp) for tp in tps)), privileged)
    return ctx.response({tp: ok() for tp in tps}).session_id


# --- leader: contexts -----------------------------------------------------------------------------------------
def test_sessionless_fetch_answers_every_partition_and_creates_no_session():
    m, _ = manager()
    ctx = m.new_context(FetchRequestData(LEGACY, [fp(T0), fp(T1)], []), privileged=False)
    assert [p.tp for p in ctx.partitions()] == [T0, T1]
    answer = ctx.response({T0: ok(), T1: ok()})
    assert (answer.error, answer.session_id, list(answer.partitions)) == (Errors.NONE, 0, [T0, T1])
    assert len(m.cache) == 0 and m.metrics["sessionless"] == 1


def test_full_fetch_creates_a_session_and_answers_every_partition():
    m, _ = manager()
    ctx = m.new_context(request(0, 0, fp(T0), fp(T1)), privileged=True)
    answer = ctx.response({T0: ok(), T1: ok()})
    assert answer.session_id != 0 and list(answer.partitions) == [T0, T1]
    session = m.cache.get(answer.session_id)
    assert session.epoch == 1 and set(session.partitions) == {T0, T1}
    assert m.describe()["sessions"] == 1 and m.describe()["partitions_cached"] == 2


def test_incremental_fetch_reads_every_partition_but_answers_only_those_with_news():
    m, _ = manager()
    sid = start_session(m, T0, T1, T2)
    ctx = m.new_context(request(sid, 1), privileged=True)      # an idle follower lists nothing
    assert isinstance(ctx, IncrementalFetchContext)
    assert [p.tp for p in ctx.partitions()] == [T0, T1, T2]  # every partition of the session is read
    assert ctx.response({T0: ok(), T1: ok(), T2: ok()}).partitions == {}  # nothing new: nothing answered
    ctx = m.new_context(request(sid, 2), privileged=True)
    answer = ctx.response({T0: ok(records=b"x"), T1: ok(hw=11), T2: ok(lso=3)})
    assert list(answer.partitions) == [T0, T1, T2] and answer.session_id == sid
    ctx = m.new_context(request(sid, 3), privileged=True)
    assert ctx.response({T0: ok(), T1: ok(hw=11), T2: ok(lso=3)}).partitions == {}
    assert m.metrics == {"full": 1, "incremental": 3, "sessionless": 0, "error": 0}


def test_an_errored_partition_is_answered_until_it_recovers_and_once_more_after():
    m, _ = manager()
    sid = start_session(m, T0)
    fenced = FetchPartitionResult(Errors.FENCED_LEADER_EPOCH, 10, 0)
    for epoch in (1, 2):
        assert list(m.new_context(request(sid, epoch), True).response({T0: fenced}).partitions) == [T0]
    assert list(m.new_context(request(sid, 3), True).response({T0: ok()}).partitions) == [T0]
    assert m.new_context(request(sid, 4), True).response({T0: ok()}).partitions == {}


def test_listed_partitions_update_the_session_and_forgotten_ones_leave_it():
    m, _ = manager()
    sid = start_session(m, T0, T1)
    ctx = m.new_context(request(sid, 1, fp(T0, 5), fp(T2, 0), forget=[T1]), True)
    by_tp = {p.tp: p for p in ctx.partitions()}
    assert set(by_tp) == {T0, T2} and by_tp[T0].fetch_offset == 5
    # A new partition is always answered once (its cached high watermark is unknown).
    assert list(ctx.response({T0: ok(), T2: ok()}).partitions) == [T2]


def test_forgetting_every_partition_closes_the_session():
    m, _ = manager()
    sid = start_session(m, T0)
    ctx = m.new_context(request(sid, 1, forget=[T0]), True)
    assert ctx.partitions() == [] and ctx.response({}).session_id == 0
    assert m.cache.get(sid) is None


def test_partitions_that_returned_records_move_to_the_end_of_the_session():
    m, _ = manager()
    sid = start_session(m, T0, T1, T2)
    m.new_context(request(sid, 1), True).response({T0: ok(records=b"x"), T1: ok(), T2: ok()})
    assert [p.tp for p in m.new_context(request(sid, 2), True).partitions()] == [T1, T2, T0]


def test_unknown_session_id_is_error_70_and_wrong_epoch_is_error_71():
    m, _ = manager()
    sid = start_session(m, T0)
    ctx = m.new_context(request(sid + 1, 1), True)
    assert ctx.partitions() == []
    assert (ctx.response({}).error, ctx.response({}).session_id) == (Errors.FETCH_SESSION_ID_NOT_FOUND, 0)
    assert m.new_context(request(sid, 5), True).response({}).error == Errors.INVALID_FETCH_SESSION_EPOCH
    assert m.new_context(request(0, 3), True).response({}).error == Errors.FETCH_SESSION_ID_NOT_FOUND
    assert m.metrics["error"] == 3
    # The session survives a wrong epoch: the right one still works.
    assert m.new_context(request(sid, 1), True).response({T0: ok()}).error == Errors.NONE


def test_a_fetch_answered_after_a_later_request_of_its_session_gets_error_71():
    m, _ = manager()
    sid = start_session(m, T0)
    waiting = m.new_context(request(sid, 1), True)          # long-polls in the purgatory...
    m.new_context(request(sid, 2), True).response({T0: ok()})  # ...while the fetcher retried
    answer = waiting.response({T0: ok(records=b"x")})
    assert (answer.error, answer.partitions) == (Errors.INVALID_FETCH_SESSION_EPOCH, {})


def test_a_full_fetch_naming_a_session_closes_it():
    m, _ = manager()
    sid = start_session(m, T0)
    new = m.new_context(request(sid, 0, fp(T0)), True).response({T0: ok()}).session_id
    assert m.cache.get(sid) is None and new not in (0, sid)
    m.new_context(request(new, -1, fp(T0)), True).response({T0: ok()})  # epoch -1: close, no new session
    assert len(m.cache) == 0


def test_epochs_wrap_to_one():
    assert next_epoch(2**31 - 1) == 1 and next_epoch(-1) == -1 and next_epoch(0) == 1


# --- leader: the cache's eviction rules -------------------------------------------------------------------------
def test_a_full_cache_refuses_a_new_session_while_every_session_is_young_and_worth_more():
    m, clock = manager(slots=2)
    start_session(m, T0, T1)
    start_session(m, T0, T1)
    assert start_session(m, T0, privileged=True) == 0    # fewer partitions than the sessions cached
    assert start_session(m, T0, T1, T2, privileged=False) == 0  # a consumer never evicts a young follower
    assert m.cache.evictions == 0 and len(m.cache) == 2


def test_a_follower_session_evicts_a_consumer_session_at_once():
    m, _ = manager(slots=1)
    consumer = start_session(m, T0, T1, T2, privileged=False)
    follower = start_session(m, T0, privileged=True)
    assert follower != 0 and m.cache.get(consumer) is None and m.cache.evictions == 1


def test_a_stale_session_is_evicted_first():
    m, clock = manager(slots=2, eviction_ms=1000)
    stale = start_session(m, T0, T1, T2)
    clock.advance_ms(600)
    fresh = start_session(m, T0, T1, T2)
    clock.advance_ms(600)
    new = start_session(m, T0, privileged=False)
    assert new != 0 and m.cache.get(stale) is None and m.cache.get(fresh) is not None


def test_an_old_session_may_be_evicted_by_a_bigger_one():
    m, clock = manager(slots=1, eviction_ms=1000)
    small = start_session(m, T0)
    for epoch in (1, 2, 3):   # kept in use, so never stale, and touched once it is old
        clock.advance_ms(600)
        m.new_context(request(small, epoch), True).response({T0: ok()})
    assert start_session(m, T0, T1) != 0 and m.cache.get(small) is None


def test_session_ids_are_positive_and_distinct():
    m, _ = manager(slots=100)
    ids = {start_session(m, T0) for _ in range(100)}
    assert len(ids) == 100 and min(ids) > 0


# --- fetcher: the session handler -------------------------------------------------------------------------------
def pd(offset: int, epoch: int = 1) -> PartitionData:
    return PartitionData(offset, 0, 1024, epoch)


def test_handler_sends_everything_first_then_only_what_changed():
    h = FetchSessionHandler(1)
    first = h.build({T0: pd(0), T1: pd(0)})
    assert first.metadata == INITIAL and list(first.to_send) == [T0, T1]
    assert h.handle_response(0, 42, {T0, T1})
    idle = h.build({T0: pd(0), T1: pd(0)})
    assert idle.metadata == FetchMetadata(42, 1) and idle.to_send == {} and idle.to_forget == []
    assert h.handle_response(0, 42, set())
    moved = h.build({T0: pd(5), T2: pd(0)})
    assert moved.metadata == FetchMetadata(42, 2)
    assert moved.to_send == {T0: pd(5), T2: pd(0)} and moved.to_forget == [T1]


@pytest.mark.parametrize("error, after", [(Errors.FETCH_SESSION_ID_NOT_FOUND, INITIAL),
                                          (Errors.INVALID_FETCH_SESSION_EPOCH, FetchMetadata(42, 0))])
def test_handler_goes_back_to_a_full_fetch_after_a_session_error(error, after):
    h = FetchSessionHandler(1)
    h.build({T0: pd(0)})
    h.handle_response(0, 42, {T0})
    h.build({T0: pd(0)})
    assert not h.handle_response(int(error), 0, set())
    again = h.build({T0: pd(0)})
    assert again.metadata == after and list(again.to_send) == [T0]


def test_handler_after_a_failed_request_sends_a_full_fetch_closing_the_session():
    h = FetchSessionHandler(1)
    h.build({T0: pd(0)})
    h.handle_response(0, 42, {T0})
    h.build({T0: pd(0)})
    h.handle_error()
    assert h.build({T0: pd(0)}).metadata == FetchMetadata(42, 0)


def test_handler_refuses_a_full_response_missing_a_partition_and_an_incremental_one_with_a_stranger():
    h = FetchSessionHandler(1)
    h.build({T0: pd(0), T1: pd(0)})
    assert not h.handle_response(0, 42, {T0})
    assert h.build({T0: pd(0), T1: pd(0)}).metadata == INITIAL
    h.handle_response(0, 42, {T0, T1})
    h.build({T0: pd(0), T1: pd(0)})
    assert not h.handle_response(0, 42, {T2})
    assert h.build({T0: pd(0)}).metadata == FetchMetadata(42, 0)


def test_handler_starts_over_when_the_leader_ends_the_session():
    h = FetchSessionHandler(1)
    h.build({T0: pd(0)})
    h.handle_response(0, 0, {T0})   # the leader's cache was full: no session
    assert h.build({T0: pd(0)}).metadata == INITIAL


# --- both sides -----------------------------------------------------------------------------------------------
def test_fetcher_and_leader_keep_a_session_through_changes_and_errors():
    m, _ = manager()
    h = FetchSessionHandler(1)
    hw = {T0: 10, T1: 10}

    def round_trip(wanted: dict) -> dict:
        data = h.build(wanted)
        req = FetchRequestData(data.metadata, [FetchPartitionData(tp, p.fetch_offset, p.max_bytes, p.current_leader_epoch,
                                                                  p.log_start_offset) for tp, p in data.to_send.items()],
                               list(data.to_forget))
        ctx = m.new_context(req, privileged=True)
        answer = ctx.response({p.tp: ok(hw=hw[p.tp]) for p in ctx.partitions()})
        assert h.handle_response(int(answer.error), answer.session_id, set(answer.partitions))
        return answer.partitions

    assert set(round_trip({T0: pd(0), T1: pd(0)})) == {T0, T1}
    assert round_trip({T0: pd(0), T1: pd(0)}) == {}
    hw[T1] = 11
    assert set(round_trip({T0: pd(0), T1: pd(0)})) == {T1}
    assert round_trip({T0: pd(0)}) == {}               # T1 forgotten
    m.cache.remove(h.session_id)                       # e.g. the leader restarted: error 70, then a full fetch
    data = h.build({T0: pd(0)})
    ctx = m.new_context(FetchRequestData(data.metadata, [], []), True)
    assert not h.handle_response(int(ctx.response({}).error), 0, set())
    assert set(round_trip({T0: pd(0)})) == {T0}


def test_request_fields_are_read_from_the_wire_message():
    from kafka.protocol.consumer import FetchRequest
    from kafkatier.server.fetch_session import fetch_request_data

    def fetch(version: int):
        P = FetchRequest.FetchTopic.FetchPartition
        return FetchRequest[version](
            replica_id=2, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=42,
            session_epoch=3, rack_id="",
            topics=[FetchRequest.FetchTopic(version=version, topic="t", partitions=[P(
                version=version, partition=1, current_leader_epoch=4, fetch_offset=7, log_start_offset=2,
                partition_max_bytes=1024)])],
            forgotten_topics_data=[FetchRequest.ForgottenTopic(version=version, topic="t", partitions=[0, 2])]
            if version >= 7 else [])
    req = fetch_request_data(FetchRequest[11].decode(fetch(11).encode(version=11), version=11), 11)
    assert req.metadata == FetchMetadata(42, 3) and req.forgotten == [T0, T2]
    assert req.partitions == [FetchPartitionData(T1, 7, 1024, current_leader_epoch=4, log_start_offset=2)]
    legacy = fetch_request_data(FetchRequest[6].decode(fetch(6).encode(version=6), version=6), 6)
    assert legacy.metadata == LEGACY and legacy.forgotten == [] and legacy.partitions[0].fetch_offset == 7


def test_a_follower_session_answered_empty_from_every_partition_is_quiet_at_that_change_number(monkeypatch):
    """An idle follower (kafka_apis.py): a session whose last answer, read from every partition, had nothing in
    it is quiet at the replica manager's change number then, for the time given; a quiet answer keeps it, news
    or that time passing end it."""
    from kafkatier.server import fetch_session
    now = [100.0]
    monkeypatch.setattr(fetch_session.time, "monotonic", lambda: now[0])
    m, _ = manager()
    sid = start_session(m, T0, T1)
    ctx = m.new_context(request(sid, 1), privileged=True)
    assert not ctx.quiet_at(7)
    assert ctx.response({T0: ok(), T1: ok()}, 7, 5.0).partitions == {}
    assert ctx.quiet_at(7) and not ctx.quiet_at(8)
    ctx = m.new_context(request(sid, 2), privileged=True)
    assert ctx.response({}, 7).partitions == {}   # the quiet answer: nothing read, still quiet
    now[0] += 5.0
    assert not ctx.quiet_at(7)                                 # read from every partition again
    ctx = m.new_context(request(sid, 3), privileged=True)
    ctx.response({T0: ok(hw=12), T1: ok()}, 9, 5.0)            # news: not quiet
    assert not ctx.quiet_at(9)
