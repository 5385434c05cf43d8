"""The log owns its producer state (Kafka's UnifiedLog and its ProducerStateManager): appends through the log
de-duplicate retries and check producer epochs, truncation rebuilds the state, and a new log reads it back."""
from __future__ import annotations

import pytest

from batches import producer_batch_of_3 as batch

from kafkatier.log.errors import KafkaError
from kafkatier.log.log import Log
from kafkatier.log.producer_state import DuplicateAppend
from kafkatier.protocol.errors import Errors


def test_a_retried_batch_is_answered_with_its_offsets_and_not_appended(tmp_path):
    log = Log(str(tmp_path / "t-0"))
    first = log.append_records_as_leader(batch(7, 0, 0), leader_epoch=0)
    assert (first.first_offset, first.last_offset) == (0, 2)
    again = log.append_records_as_leader(batch(7, 0, 0), leader_epoch=0)
    assert again == DuplicateAppend(0, 2) and log.log_end_offset == 3


def test_an_older_producer_epoch_is_refused_by_the_log(tmp_path):
    log = Log(str(tmp_path / "t-0"))
    log.append_records_as_leader(batch(7, 3, 0), leader_epoch=0)
    with pytest.raises(KafkaError) as e:
        log.append_records_as_leader(batch(7, 2, 3), leader_epoch=0)
    assert e.value.error == Errors.INVALID_PRODUCER_EPOCH and log.log_end_offset == 3


def test_an_abort_marker_indexes_the_transaction_and_moves_the_last_stable_offset(tmp_path):
    log = Log(str(tmp_path / "t-0"))
    log.append_records_as_leader(batch(5, 0, 0, transactional=True), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 0                    # the open transaction holds it
    log.append_txn_marker(5, 0, coordinator_epoch=1, commit=False, leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset == 4
    assert [t.producer_id for t in log.collect_aborted_transactions(0, 4)] == [5]


def test_truncation_rebuilds_the_state_and_a_reopened_log_reads_it_back(tmp_path):
    path = str(tmp_path / "t-0")
    log = Log(path)
    for seq in (0, 3, 6):
        log.append_records_as_leader(batch(9, 2, seq), leader_epoch=0)
    log.truncate_to(6)                                       # the third batch is gone: no longer a duplicate
    assert isinstance(log.append_records_as_leader(batch(9, 2, 3), leader_epoch=0), DuplicateAppend)
    assert not isinstance(log.append_records_as_leader(batch(9, 2, 6), leader_epoch=0), DuplicateAppend)
    log.snapshot_producer_state()
    log.close()
    reopened = Log(path)
    assert reopened.append_records_as_leader(batch(9, 2, 6), leader_epoch=0) == DuplicateAppend(6, 8)


def test_shutdown_snapshots_only_a_state_that_was_built(tmp_path, monkeypatch):
    """At shutdown a log whose producer state was never built (no append since it was loaded) writes no snapshot
    and reads nothing; one that took appends writes its state at the log end."""
    from kafkatier.log.producer_state import ProducerStateManager, snapshot_offsets
    log = Log(str(tmp_path / "t-0"))
    log.append_records_as_leader(batch(5, 0, 0), leader_epoch=0)
    log.snapshot_producer_state(sync=False)
    assert snapshot_offsets(str(tmp_path / "t-0")) == [3]
    log.close()
    reopened = Log(str(tmp_path / "t-0"))
    rebuilds = []
    monkeypatch.setattr(ProducerStateManager, "rebuild", lambda self, lg: rebuilds.append(lg))
    reopened.snapshot_producer_state(sync=False)
    assert rebuilds == [] and snapshot_offsets(str(tmp_path / "t-0")) == [3]
    reopened.close()
