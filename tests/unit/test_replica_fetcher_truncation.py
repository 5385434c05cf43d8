"""A follower truncates to its high watermark only when the new leader answers, together with that answer's
records: a follower that never reaches the leader keeps its log (scenarios/isr-shrink-not-enough-replicas.toml
lost acknowledged acks=all records when the follower truncated first and was then elected)."""
from __future__ import annotations

import attrs

from kafkatier.server.replica_fetcher import FetchState, ReplicaFetcherThread


class FakeLog:
    def __init__(self, leo: int, hw: int):
        self.log_end_offset, self.high_watermark, self.log_start_offset = leo, hw, 0

    def maybe_increment_log_start_offset_as_follower(self, offset: int) -> None:
        pass

    def update_high_watermark(self, hw: int) -> None:
        self.high_watermark = hw


class FakePartition:
    def __init__(self, leo: int, hw: int):
        self.log = FakeLog(leo, hw)
        self.truncations: list[int] = []
        self.appended: list[bytes] = []

    def truncate_to(self, offset: int) -> None:
        self.truncations.append(offset)
        self.log.log_end_offset = offset

    def append_records_to_follower(self, records: bytes) -> None:
        self.appended.append(records)
        self.log.log_end_offset += 2          # the fake answer below carries two records


@attrs.define
class Answer:
    partition_index: int = 0
    error_code: int = 0
    records: bytes = b""
    high_watermark: int = 10
    log_start_offset: int = 0


def fetcher(part: FakePartition) -> ReplicaFetcherThread:
    t = ReplicaFetcherThread(2, 3, leader_address=lambda: None, partition_lookup=lambda topic, p: part)
    t.add_partition("t", 0, fetch_offset=8, leader_epoch=1, truncate_to=8)
    return t


def test_no_truncation_while_the_leader_is_unreachable():
    part = FakePartition(leo=10, hw=8)
    t = fetcher(part)
    try:
        t._fetch_once()                       # leader address unknown: the fetch fails
    except Exception:  # noqa: BLE001 - BrokerConnectionError, as in the fetcher loop
        pass
    assert part.truncations == [] and part.log.log_end_offset == 10


def test_truncation_with_the_leaders_first_answer_then_never_again():
    part = FakePartition(leo=10, hw=8)
    t = fetcher(part)
    sent = FetchState(8, 1, 8)
    t._process_partition("t", Answer(records=b"xx"), sent)
    assert part.truncations == [8] and part.appended == [b"xx"] and part.log.log_end_offset == 10
    assert t.partitions[("t", 0)] == FetchState(10, 1, None)
    t._process_partition("t", Answer(records=b"yy"), FetchState(10, 1, None))
    assert part.truncations == [8]


def test_an_error_answer_does_not_truncate():
    part = FakePartition(leo=10, hw=8)
    t = fetcher(part)
    t._process_partition("t", Answer(error_code=6), FetchState(8, 1, 8))   # NOT_LEADER_OR_FOLLOWER
    assert part.truncations == [] and t.partitions[("t", 0)].truncate_to == 8
