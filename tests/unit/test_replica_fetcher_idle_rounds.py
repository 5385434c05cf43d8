"""An idle follower's fetch round is O(changes), not O(partitions) (issue 27: idle CPU at 20,000 partitions):
the fetcher reuses its last round's copies and requests, patched for the partitions whose state changed, and
rebuilds from every partition when partitions come or go, one of them truncates or backs off, or every
ROUND_REFRESH_S."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from kafkatier.server import replica_fetcher
from kafkatier.server.replica_fetcher import FetchState, ReplicaFetcherThread


class _Log:
    def __init__(self):
        self.log_end_offset = self.log_start_offset = self.high_watermark = 0

    def maybe_increment_log_start_offset_as_follower(self, offset):
        self.log_start_offset = max(self.log_start_offset, offset)

    def update_high_watermark(self, hw):
        self.high_watermark = hw


class _Leader:
    """Answers each Fetch with the next scripted list of answered partitions (None: every partition asked)."""

    def __init__(self):
        self.script: list[list[int] | None] = []
        self.asked: list[int] = []   # partitions listed per request

    def send_encoded(self, key, version, body):
        return body

    def decode(self, raw, version):
        answer = self.script.pop(0)
        parts = [SimpleNamespace(partition_index=p, error_code=0, records=b"", log_start_offset=0,
                                 high_watermark=0) for p in (answer if answer is not None else range(self.n))]
        return SimpleNamespace(error_code=0, session_id=7, responses=[SimpleNamespace(topic="t", partitions=parts)])


@pytest.fixture
def fetcher(monkeypatch):
    leader = _Leader()
    leader.n = 50
    logs = {("t", p): SimpleNamespace(log=_Log()) for p in range(leader.n)}
    looked_up = []

    def lookup(topic, partition):
        looked_up.append((topic, partition))
        return logs.get((topic, partition))
    monkeypatch.setattr(replica_fetcher, "FetchResponse", leader)
    sent = []
    real_encode = replica_fetcher.fetch_codec.encode_fetch_request_v11
    monkeypatch.setattr(replica_fetcher.fetch_codec, "encode_fetch_request_v11",
                        lambda *a: sent.append(sum(len(ps) for _t, ps in a[7])) or real_encode(*a))
    t = ReplicaFetcherThread(2, 1, lambda: ("127.0.0.1", 1), lookup)
    t.client = leader
    t.add_partitions({("t", p): FetchState(0, 5, False) for p in range(leader.n)})
    return t, leader, looked_up, sent


def test_idle_rounds_touch_no_partition_and_a_change_only_its_own(fetcher):
    t, leader, looked_up, sent = fetcher
    leader.script = [None, [], [], [3], []]
    t._fetch_once()          # full fetch: every partition asked, every answer processed
    assert len(looked_up) == 100 and sent == [50]
    looked_up.clear()
    t._fetch_once()          # the answered partitions' states were written: re-asked, not re-listed
    assert len(looked_up) == 50 and sent[-1] == 0
    looked_up.clear()
    t._fetch_once()          # idle: nothing changed
    assert looked_up == [] and sent[-1] == 0
    t._fetch_once()          # idle again; the leader answers partition 3
    assert looked_up == [("t", 3)]
    looked_up.clear()
    t._fetch_once()          # only partition 3's state changed
    assert looked_up == [("t", 3)] and sent[-1] == 0   # same offsets: nothing to list


def test_a_moved_fetch_offset_is_listed_and_added_partitions_rebuild_the_round(fetcher):
    t, leader, looked_up, sent = fetcher
    leader.script = [None, [], [], []]
    t._fetch_once()
    t._fetch_once()
    t.partitions[("t", 4)].fetch_offset = 9   # as a processed answer with records does, under the lock
    t._mark_dirty(("t", 4))
    looked_up.clear()
    t._fetch_once()
    assert looked_up == [("t", 4)] and sent[-1] == 1
    t.add_partitions({("t", 50): FetchState(0, 5, False)})
    looked_up.clear()
    t._fetch_once()
    assert len(looked_up) == 51 and sent[-1] == 1   # the new partition, found by a pass over all


def test_the_round_is_rebuilt_from_every_partition_when_the_refresh_is_due(fetcher, monkeypatch):
    t, leader, looked_up, sent = fetcher
    leader.script = [None, [], [], []]
    t._fetch_once()
    t._fetch_once()
    looked_up.clear()
    t._round_until = 0.0   # ROUND_REFRESH_S passed
    t._fetch_once()
    assert len(looked_up) == 50
    looked_up.clear()
    t._fetch_once()
    assert looked_up == []
