"""Idempotent producers: a retried batch is recognised by producer id, epoch and sequences, also after the
state is rebuilt from the log's batch headers."""
from __future__ import annotations

from batches import producer_batch_of_3 as batch

from kafkatier.log.log import Log
from kafkatier.log.producer_state import ProducerStateManager


def test_retry_is_a_duplicate_with_its_first_offsets(tmp_path):
    log = Log(str(tmp_path / "t-0"))
    ps = ProducerStateManager()
    first = log.append_as_leader(batch(7, 0, 0), leader_epoch=0)
    ps.update(first.records)
    second = log.append_as_leader(batch(7, 0, 3), leader_epoch=0)
    ps.update(second.records)
    dup = ps.find_duplicate(batch(7, 0, 0))
    assert dup is not None and (dup.first_offset, dup.last_offset) == (0, 2)
    assert ps.find_duplicate(batch(7, 0, 6)) is None          # the next batch is new
    assert ps.find_duplicate(batch(7, 1, 0)) is None          # a new producer epoch is new
    assert ps.find_duplicate(batch(8, 0, 0)) is None          # another producer
    assert ps.find_duplicate(batch(-1, -1, -1)) is None       # not idempotent: never a duplicate


def test_state_is_rebuilt_from_the_log_and_follows_truncation(tmp_path):
    log = Log(str(tmp_path / "t-0"))
    for seq in (0, 3, 6):
        log.append_as_leader(batch(9, 2, seq), leader_epoch=0)
    ps = ProducerStateManager()
    ps.rebuild(log)
    assert ps.find_duplicate(batch(9, 2, 3)).first_offset == 3
    log.truncate_to(6)
    ps.rebuild(log)
    assert ps.find_duplicate(batch(9, 2, 6)) is None
    assert ps.find_duplicate(batch(9, 2, 3)) is not None


def test_only_the_last_five_batches_are_remembered(tmp_path):
    log = Log(str(tmp_path / "t-0"))
    ps = ProducerStateManager()
    for i in range(7):
        ps.update(log.append_as_leader(batch(1, 0, i * 3), leader_epoch=0).records)
    assert ps.find_duplicate(batch(1, 0, 0)) is None
    assert ps.find_duplicate(batch(1, 0, 18)) is not None
