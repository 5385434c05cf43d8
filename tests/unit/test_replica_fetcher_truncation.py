"""The follower's truncation phase (KIP-101 / KIP-279): one OffsetsForLeaderEpoch per round for the truncating
partitions, Kafka's truncation offsets, several rounds when the leader never had the follower's epoch, the high
watermark only when the leader knows no epoch, backoff on error answers, and no truncation before the leader
answers (scenarios/isr-shrink-not-enough-replicas.toml lost acks=all records when a follower truncated first and
was then elected).  Leader and follower epoch lineages are real ``LeaderEpochFileCache`` objects."""
from __future__ import annotations

from types import SimpleNamespace

import attrs
import pytest

from kafkatier.log.leader_epoch_cache import LeaderEpochFileCache
from kafkatier.protocol.errors import Errors
from kafkatier.server import replica_fetcher
from kafkatier.server.broker_client import BrokerConnectionError
from kafkatier.server.replica_fetcher import (EpochEndOffset, FetchState, OffsetTruncationState,
                                              ReplicaFetcherThread, offset_truncation_state)
from tests.unit.fakes import ManualClock


class FakeLog:
    """Offsets only, with a real epoch cache: ``epochs`` = [(epoch, start offset)]."""

    def __init__(self, leo: int, hw: int, epochs: list[tuple[int, int]]):
        self.log_end_offset, self.high_watermark, self.log_start_offset = leo, hw, 0
        self.leader_epoch_cache = LeaderEpochFileCache(None)
        for epoch, start in epochs:
            self.leader_epoch_cache.assign(epoch, start)

    @property
    def latest_epoch(self) -> int | None:
        return self.leader_epoch_cache.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.leader_epoch_cache.end_offset_for(epoch, self.log_end_offset)

    def truncate_to(self, offset: int) -> bool:
        self.leader_epoch_cache.truncate_from_end(min(offset, self.log_end_offset))
        if offset >= self.log_end_offset:
            return False
        self.log_end_offset, self.high_watermark = offset, min(self.high_watermark, offset)
        return True


class FakePartition:
    def __init__(self, log_: FakeLog):
        self.log = log_
        self.truncations: list[int] = []

    def truncate_to(self, offset: int) -> None:
        if self.log.truncate_to(offset):
            self.truncations.append(offset)


class Leader:
    """Answers OffsetsForLeaderEpoch from its own log, as ``offset_for_leader_epoch.py`` does."""

    def __init__(self, log_: FakeLog, error: int = Errors.NONE):
        self.log, self.error, self.requests = log_, error, []

    def __call__(self, epochs: dict) -> dict:
        self.requests.append(dict(epochs))
        if self.error != Errors.NONE:
            return {key: EpochEndOffset(int(self.error)) for key in epochs}
        out = {}
        for key, (_current, asked) in epochs.items():
            epoch, end = self.log.end_offset_for_epoch(asked)
            out[key] = EpochEndOffset(0, epoch, end) if end >= 0 else EpochEndOffset(0)
        return out


def follower(part: FakePartition, leader: Leader | None, leader_epoch: int = 9) -> ReplicaFetcherThread:
    t = ReplicaFetcherThread(2, 3, leader_address=lambda: None, partition_lookup=lambda topic, p: part)
    if leader is not None:
        t.client = object()                  # "connected": the leader's answers come from ``leader``
        t._fetch_epoch_end_offsets = leader
    t.add_partition("t", 0, fetch_offset=part.log.high_watermark, leader_epoch=leader_epoch)
    return t


def truncate_until_fetching(t: ReplicaFetcherThread, rounds: int = 5) -> int:
    for n in range(1, rounds + 1):
        t._maybe_truncate({k: attrs.evolve(st) for k, st in t.partitions.items()})
        if not t.partitions[("t", 0)].truncating:
            return n
    raise AssertionError("still truncating")


# --- Kafka's truncation offsets ---------------------------------------------------------------------------------
def lookup(epochs: list[tuple[int, int]], leo: int):
    return FakeLog(leo, 0, epochs).end_offset_for_epoch


@pytest.mark.parametrize("answer, expected", [
    (EpochEndOffset(0, 2, 15), OffsetTruncationState(15, True)),      # same epoch, leader ends earlier
    (EpochEndOffset(0, 2, 30), OffsetTruncationState(20, True)),      # leader ahead: keep the whole log
    (EpochEndOffset(0, 1, 12), OffsetTruncationState(10, True)),      # older epoch ends where ours says (10)
    (EpochEndOffset(0), OffsetTruncationState(7, True)),              # leader knows no epoch: high watermark
    (EpochEndOffset(0, -1, 12), OffsetTruncationState(12, True)),     # an answer without an epoch
])
def test_offset_truncation_state(answer, expected):
    assert offset_truncation_state(answer, 7, 20, lookup([(1, 0), (2, 10)], 20)) == expected


def test_an_epoch_the_follower_never_had_means_another_round():
    # Follower lineage 1@0, 4@10; the leader answers epoch 3, which the follower never had: cut at 10, ask again.
    assert offset_truncation_state(EpochEndOffset(0, 3, 14), 7, 20, lookup([(1, 0), (4, 10)], 20)) == \
        OffsetTruncationState(10, False)


def test_a_follower_that_did_not_track_that_epoch_takes_the_leaders_offset():
    # Its cache starts at epoch 1 (say, rebuilt from a tiered copy): it knows nothing past epoch 1's start.
    assert offset_truncation_state(EpochEndOffset(0, 2, 12), 7, 20, lookup([(1, 15)], 20)) == \
        OffsetTruncationState(12, True)


# --- the thread -------------------------------------------------------------------------------------------------
def test_kip101_a_follower_behind_its_own_high_watermark_keeps_every_record_the_leader_has():
    part = FakePartition(FakeLog(leo=20, hw=5, epochs=[(0, 0), (1, 8)]))
    leader = Leader(FakeLog(leo=25, hw=25, epochs=[(0, 0), (1, 8), (2, 25)]))
    t = follower(part, leader)
    assert truncate_until_fetching(t) == 1
    assert part.truncations == [] and t.partitions[("t", 0)] == FetchState(20, 9, False)
    assert leader.requests == [{("t", 0): (9, 1)}]       # (current leader epoch, the follower's latest epoch)


def test_kip101_divergent_tail_after_an_unclean_election_goes():
    # Follower wrote 10..19 in epoch 1 alone; the new leader took over at epoch 2 from offset 12.
    part = FakePartition(FakeLog(leo=20, hw=20, epochs=[(0, 0), (1, 10)]))
    leader = Leader(FakeLog(leo=30, hw=30, epochs=[(0, 0), (1, 10), (2, 12)]))
    t = follower(part, leader)
    truncate_until_fetching(t)
    assert part.truncations == [12] and t.partitions[("t", 0)].fetch_offset == 12


def test_kip279_the_follower_cuts_where_its_own_copy_of_the_leaders_epoch_ends():
    # KIP-279's example: the follower led epoch 2 (offset 1) alone; the leader never had epoch 2 and wrote
    # offset 1 in epoch 1 and offset 2 in epoch 3.  The leader's end of epoch 1 (2) is past the follower's (1).
    part = FakePartition(FakeLog(leo=2, hw=1, epochs=[(1, 0), (2, 1)]))
    leader = Leader(FakeLog(leo=3, hw=3, epochs=[(1, 0), (3, 2)]))
    t = follower(part, leader)
    assert truncate_until_fetching(t) == 1
    assert part.truncations == [1] and part.log.latest_epoch == 1
    assert t.partitions[("t", 0)] == FetchState(1, 9, False)


def test_kip279_an_epoch_neither_side_shares_needs_a_second_round():
    # The follower wrote 5..7 alone in epoch 4; the leader wrote 3..5 in epoch 3 (which the follower never had)
    # and leads epoch 5.  Round 1: epoch 3 is unknown here, cut where epoch 4 starts (5); round 2 asks epoch 1.
    part = FakePartition(FakeLog(leo=8, hw=2, epochs=[(1, 0), (4, 5)]))
    leader = Leader(FakeLog(leo=9, hw=9, epochs=[(1, 0), (3, 3), (5, 6)]))
    t = follower(part, leader)
    assert truncate_until_fetching(t) == 2
    assert part.truncations == [5, 3] and part.log.latest_epoch == 1
    assert [r[("t", 0)][1] for r in leader.requests] == [4, 1]
    assert t.partitions[("t", 0)] == FetchState(3, 9, False)


def test_an_empty_epoch_at_the_end_of_the_cache_goes_even_without_records_to_remove():
    # This broker led epoch 5 without writing; the leader never had it: the entry must not be asked again.
    part = FakePartition(FakeLog(leo=10, hw=10, epochs=[(1, 0), (5, 10)]))
    leader = Leader(FakeLog(leo=12, hw=12, epochs=[(1, 0), (6, 12)]))
    t = follower(part, leader)
    assert truncate_until_fetching(t) == 1
    assert part.truncations == [] and part.log.latest_epoch == 1 and t.partitions[("t", 0)].fetch_offset == 10


def test_the_leader_knowing_no_epoch_falls_back_to_the_high_watermark():
    part = FakePartition(FakeLog(leo=20, hw=5, epochs=[(7, 0)]))
    t = follower(part, Leader(FakeLog(leo=20, hw=20, epochs=[])))
    truncate_until_fetching(t)
    assert part.truncations == [5] and t.partitions[("t", 0)].fetch_offset == 5


def test_no_epoch_cache_truncates_to_the_high_watermark_without_asking():
    part = FakePartition(FakeLog(leo=20, hw=5, epochs=[]))
    leader = Leader(FakeLog(leo=20, hw=20, epochs=[(0, 0)]))
    t = follower(part, leader)
    truncate_until_fetching(t)
    assert part.truncations == [5] and leader.requests == []


def test_one_request_per_leader_for_all_truncating_partitions():
    parts = {("a", 0): FakePartition(FakeLog(10, 10, [(0, 0)])), ("b", 3): FakePartition(FakeLog(4, 4, [(0, 0)]))}
    leader = Leader(FakeLog(leo=30, hw=30, epochs=[(0, 0)]))
    t = ReplicaFetcherThread(2, 3, leader_address=lambda: None, partition_lookup=lambda topic, p: parts[(topic, p)])
    t.client, t._fetch_epoch_end_offsets = object(), leader
    for (topic, p), part in parts.items():
        t.add_partition(topic, p, part.log.high_watermark, leader_epoch=9)
    t._maybe_truncate({k: attrs.evolve(st) for k, st in t.partitions.items()})
    assert leader.requests == [{("a", 0): (9, 0), ("b", 3): (9, 0)}]
    assert not any(st.truncating for st in t.partitions.values())


def test_no_truncation_while_the_leader_is_unreachable():
    part = FakePartition(FakeLog(leo=20, hw=5, epochs=[(0, 0)]))
    t = follower(part, leader=None)
    with pytest.raises(BrokerConnectionError):       # the run loop backs off and tries again
        t._fetch_once()
    assert part.truncations == [] and part.log.log_end_offset == 20 and t.partitions[("t", 0)].truncating


@pytest.mark.parametrize("error", [Errors.NOT_LEADER_OR_FOLLOWER, Errors.UNKNOWN_LEADER_EPOCH,
                                   Errors.FENCED_LEADER_EPOCH])
def test_an_error_answer_backs_off_and_truncates_nothing(error, monkeypatch):
    clock = ManualClock(1000.0)    # the backoff is measured on this clock, so a slow machine cannot end it early
    monkeypatch.setattr(replica_fetcher, "time", SimpleNamespace(monotonic=clock))
    part = FakePartition(FakeLog(leo=20, hw=5, epochs=[(0, 0)]))
    leader = Leader(FakeLog(leo=3, hw=3, epochs=[(0, 0)]), error=error)
    t = follower(part, leader)
    t._fetch_once()
    st = t.partitions[("t", 0)]
    assert part.truncations == [] and st.truncating and st.failures == 1 and st.delayed_until > 0
    t._fetch_once()                                  # still delayed: waits out the backoff, asks nothing
    assert len(leader.requests) == 1
    clock.now = st.delayed_until
    t._fetch_once()
    assert len(leader.requests) == 2 and t.partitions[("t", 0)].failures == 2
    leader.error = Errors.NONE
    clock.now = t.partitions[("t", 0)].delayed_until
    t._fetch_once()
    assert part.truncations == [3] and not t.partitions[("t", 0)].truncating


def test_an_answer_for_a_replaced_state_is_ignored():
    part = FakePartition(FakeLog(leo=20, hw=5, epochs=[(0, 0)]))
    leader = Leader(FakeLog(leo=3, hw=3, epochs=[(0, 0)]))
    t = follower(part, leader)
    sent = {k: attrs.evolve(st) for k, st in t.partitions.items()}
    t.add_partition("t", 0, fetch_offset=5, leader_epoch=10)     # a newer LeaderAndIsr while in flight
    t._maybe_truncate(sent)
    assert part.truncations == [] and t.partitions[("t", 0)] == FetchState(5, 10, True)


def test_a_round_against_a_dead_leader_fails_at_the_connect_before_any_partition_work():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there: the leader is dead
    looked_up = []
    t = ReplicaFetcherThread(2, 3, leader_address=lambda: ("127.0.0.1", port),
                             partition_lookup=lambda topic, p: looked_up.append((topic, p)))
    for p in range(100):
        t.add_partition("t", p, fetch_offset=0, leader_epoch=1)
    with pytest.raises(BrokerConnectionError):
        t._fetch_once()
    assert looked_up == [] and t.client is None
