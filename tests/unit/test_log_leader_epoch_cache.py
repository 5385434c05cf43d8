"""LeaderEpochFileCache semantics (assign, OffsetsForLeaderEpoch end offsets, truncation), persisted."""
from __future__ import annotations

import pytest

from kafkatier.log.leader_epoch_cache import EpochEntry, LeaderEpochFileCache


@pytest.fixture
def cache(tmp_path):
    return LeaderEpochFileCache(str(tmp_path / "leader-epoch-checkpoint"), "t-0")


def test_assign_persists_and_ignores_same_epoch(cache, tmp_path):
    cache.assign(0, 0)
    cache.assign(0, 5)  # same epoch, later offset: no change
    cache.assign(2, 10)
    assert cache.epoch_entries() == [EpochEntry(0, 0), EpochEntry(2, 10)]
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n2 10\n"
    assert LeaderEpochFileCache(str(tmp_path / "leader-epoch-checkpoint")).epoch_entries() == cache.epoch_entries()
    assert cache.latest_epoch == 2 and cache.earliest_entry == EpochEntry(0, 0)


def test_a_new_leaders_epoch_is_written_later_by_the_background_write_or_the_flush(cache, tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    cache.assign(0, 0)
    cache.assign(1, 7, write=False)  # what make_leader does
    assert cache.latest_epoch == 1 and path.read_text() == "0\n1\n0 0\n"
    cache.write_if_dirty()
    assert path.read_text() == "0\n2\n0 0\n1 7\n"
    cache.assign(2, 9, write=False)
    cache.flush()  # before the log moves its recovery point: written and synced
    assert LeaderEpochFileCache(str(path)).epoch_entries() == [EpochEntry(0, 0), EpochEntry(1, 7), EpochEntry(2, 9)]
    cache.assign(3, 9, write=False)
    cache.truncate_from_end(9)  # any later change writes every entry, the pending one included
    assert path.read_text() == "0\n2\n0 0\n1 7\n"


def test_assign_removes_contradicted_entries(cache):
    cache.assign(1, 0)
    cache.assign(3, 10)
    cache.assign(4, 20)
    cache.assign(2, 15)  # older epoch at a later offset: epochs >= 2 and offsets >= 15 go
    assert cache.epoch_entries() == [EpochEntry(1, 0), EpochEntry(2, 15)]
    with pytest.raises(ValueError):
        cache.assign(-1, 0)


def test_end_offset_for(cache):
    cache.assign(1, 0)
    cache.assign(3, 10)
    cache.assign(5, 20)
    leo = 30
    assert cache.end_offset_for(5, leo) == (5, 30)   # latest epoch ends at the log end offset
    assert cache.end_offset_for(3, leo) == (3, 20)
    assert cache.end_offset_for(4, leo) == (3, 20)   # unknown epoch: largest known below it
    assert cache.end_offset_for(0, leo) == (0, 0)    # below every known epoch
    assert cache.end_offset_for(6, leo) == (-1, -1)  # above the latest
    assert cache.end_offset_for(-1, leo) == (-1, -1)
    assert cache.epoch_for_offset(15) == 3 and cache.epoch_for_offset(20) == 5


def test_truncate_from_end_and_start(cache, tmp_path):
    cache.assign(1, 0)
    cache.assign(3, 10)
    cache.assign(5, 20)
    cache.truncate_from_end(20)
    assert cache.epoch_entries() == [EpochEntry(1, 0), EpochEntry(3, 10)]
    cache.truncate_from_start(12)
    assert cache.epoch_entries() == [EpochEntry(3, 12)]
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n1\n3 12\n"
    cache.clear_and_flush()
    assert cache.latest_epoch is None
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n0\n"
