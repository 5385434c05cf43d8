"""The cleanable range (Kafka's ``LogCleanerManager.cleanableOffsets``): the cleaner stops at the last stable
offset (an open transaction's first offset), at the active segment and at ``min.compaction.lag.ms``."""
from __future__ import annotations

from kafkatier.log.log import Log
from kafkatier.log.log_cleaner_manager import LogCleanerManager, cleanable_range

from tests.unit.test_log_cleaner import COMPACT, blob, records, txn_blob

NOW = 10**13


def keyed_log(tmp_path, config=COMPACT, batches=4, keys=3, ts=1_000) -> Log:
    lg = Log(str(tmp_path / "t-0"), dict(config), had_clean_shutdown=True)
    n = 0
    for _ in range(batches):
        lg.append_as_leader(blob([(f"k{(n + i) % keys}".encode(), f"v{n + i}".encode() * 20) for i in range(10)],
                                 ts=ts + n), leader_epoch=0)
        n += 10
    return lg


def test_an_open_transaction_stops_cleaning_at_its_first_offset(tmp_path):
    lg = keyed_log(tmp_path)
    txn = lg.append_as_leader(txn_blob([(b"k0", b"in-txn")], pid=9, seq=0), 0)
    for i in range(4):   # later values of the same keys, after the open transaction
        lg.append_as_leader(blob([(f"k{j}".encode(), f"late{i}-{j}".encode() * 20) for j in range(3)]), 0)
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)

    # The cleaner reads the log's own last stable offset (the log owns its producer state).
    assert lg.last_stable_offset == txn.first_offset < lg.high_watermark
    mgr = LogCleanerManager([str(tmp_path)], lambda: [lg], clock=lambda: NOW)
    todo = mgr.grab_filthiest_compacted_log()
    assert todo is not None and todo.first_uncleanable_offset <= txn.first_offset
    before = {o: (k, v) for o, k, v, _ in records(lg) if o >= txn.first_offset}
    end, _ = _clean(todo)
    mgr.done_cleaning(lg, end)
    assert end <= txn.first_offset
    after = {o: (k, v) for o, k, v, _ in records(lg) if o >= txn.first_offset}
    assert after == before   # nothing at or past the open transaction was cleaned (nor the transaction itself)
    # The whole segments below it were cleaned (one value per key left there).
    below = [(k, v) for o, k, v, _ in records(lg) if o < end]
    assert len(below) == len({k for k, _ in below}) == 3

    # The transaction commits: the LSO moves past it and the rest becomes cleanable.
    lg.append_txn_marker(9, 0, 0, True, 0)
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.last_stable_offset == lg.high_watermark
    todo = mgr.grab_filthiest_compacted_log()
    assert todo is not None and todo.first_dirty_offset == end and todo.first_uncleanable_offset > txn.first_offset
    _clean(todo)
    latest = {}
    for _, k, v, _ in records(lg):
        latest[k] = v
    assert latest == {f"k{j}".encode(): f"late3-{j}".encode() * 20 for j in range(3)}


def _clean(todo):
    from kafkatier.log.cleaner import Cleaner
    from kafkatier.log.cleaner_throttle import Throttler
    return Cleaner(0, 10_000, Throttler(float("inf")), clock=lambda: NOW).clean(todo)


def test_a_loaded_log_is_cleaned_no_further_than_its_checkpointed_high_watermark(tmp_path):
    """Before its partition exists, a log's high watermark is the one it was loaded with: the cleaner, reading
    ``Log.last_stable_offset``, never passes it."""
    lg = keyed_log(tmp_path)
    lg.roll()
    lg.update_high_watermark(15)
    mgr = LogCleanerManager([str(tmp_path)], lambda: [lg], clock=lambda: NOW)
    todo = mgr.grab_filthiest_compacted_log()
    assert todo is None or todo.first_uncleanable_offset <= 15
    lg.update_high_watermark(0)
    assert mgr.grab_filthiest_compacted_log() is None


def test_the_active_segment_and_the_high_watermark_bound_the_range(tmp_path):
    lg = keyed_log(tmp_path)   # no roll: the last batch is in the active segment
    lg.update_high_watermark(lg.log_end_offset)
    r = cleanable_range(lg, None, NOW)
    assert 0 < r.first_uncleanable_offset == lg.active_segment.base_offset < lg.high_watermark
    assert r.cleanable_bytes == sum(s.size for s in lg.log_segments()[:-1])
    lg.roll()
    lg.update_high_watermark(15)   # followers have not fetched past 15
    assert cleanable_range(lg, None, NOW).first_uncleanable_offset == 15


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path):
    lag = 60_000
    lg = keyed_log(tmp_path, dict(COMPACT, **{"min.compaction.lag.ms": str(lag)}), ts=NOW - 10 * lag)
    lg.roll()
    young = lg.append_as_leader(blob([(b"k0", b"young")], ts=NOW - lag // 2), 0)
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    r = cleanable_range(lg, None, NOW)
    assert r.first_uncleanable_offset == young.first_offset   # the young segment and after: not cleaned
    assert cleanable_range(lg, None, NOW + lag).first_uncleanable_offset == lg.active_segment.base_offset


def test_delete_records_on_a_compact_delete_log_then_cleaning(tmp_path):
    """DeleteRecords (``compact,delete``) moves the log start past the cleaner's checkpoint: the next cleaning
    starts at the new log start, nothing below it comes back, the latest value of every key above it stays."""
    lg = keyed_log(tmp_path, dict(COMPACT, **{"cleanup.policy": "compact,delete"}), batches=8)
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    mgr = LogCleanerManager([str(tmp_path)], lambda: [lg], clock=lambda: NOW)
    end, _ = _clean(mgr.grab_filthiest_compacted_log())
    mgr.done_cleaning(lg, end)
    for i in range(6):
        lg.append_as_leader(blob([(f"k{j}".encode(), f"late{i}-{j}".encode()) for j in range(3)]), 0)
    lg.append_as_leader(blob([(b"k0", b"after")]), 0)
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    start = end + 4                                  # DeleteRecords past the checkpoint
    lg.maybe_increment_log_start_offset(start)
    lg.delete_old_segments(now_ms=2_000)   # segments wholly below the new log start go (not retention by time)
    expected = {k: v for _, k, v, _ in records(lg)}
    todo = mgr.grab_filthiest_compacted_log()
    assert todo is not None and todo.first_dirty_offset == lg.log_start_offset == start
    mgr.done_cleaning(lg, _clean(todo)[0])
    got = records(lg)
    assert {k: v for _, k, v, _ in got} == expected and expected[b"k0"] == b"after"
    assert min(o for o, *_ in got) >= start and len(got) == 3
