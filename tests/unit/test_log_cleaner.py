"""The log cleaner on real segment files: latest value per key, tombstones, offsets kept, crash recovery."""
from __future__ import annotations

import os

import pytest
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from kafkatier.log.cleaner import Cleaner
from kafkatier.log.cleaner_throttle import Throttler
from kafkatier.log.log import Log
from kafkatier.log.log_cleaner import CleanerConfig, LogCleaner
from kafkatier.log.log_cleaner_manager import CLEANER_OFFSET_CHECKPOINT, LogCleanerManager, cleanable_range

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01",
           "delete.retention.ms": "86400000"}


def blob(pairs, *, ts=1_000, compression=0):
    b = MemoryRecordsBuilder(2, compression, 1 << 20)
    for i, (k, v) in enumerate(pairs):
        b.append(ts + i, k, v, headers=[])
    b.close()
    return bytes(b.buffer())


def records(lg: Log):
    out = []
    data = lg.read(lg.log_start_offset, 1 << 24).records
    off = lg.log_start_offset
    while off < lg.log_end_offset:
        data = lg.read(off, 1 << 24).records
        if not data:
            break
        recs = MemoryRecords(bytes(data))
        last = off
        while recs.has_next():
            batch = recs.next_batch()
            assert batch.validate_crc()
            if batch.is_control_batch:
                continue
            for r in batch:
                out.append((r.offset, r.key, r.value, r.timestamp))
            last = batch.base_offset + batch.last_offset_delta if hasattr(batch, "last_offset_delta") else last
        nxt = (out[-1][0] + 1) if out and out[-1][0] >= off else off + 1
        off = max(nxt, last + 1)
    return out


def make_log(tmp_path, config=COMPACT, batches=8, keys=5, compression=0):
    lg = Log(str(tmp_path / "t-0"), dict(config), had_clean_shutdown=True)
    n = 0
    for b in range(batches):
        pairs = [(f"k{(n + i) % keys}".encode(), f"v{n + i}".encode() * 20) for i in range(10)]
        n += 10
        lg.append_as_leader(blob(pairs, ts=1_000 + n, compression=compression), leader_epoch=0)
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    return lg


def clean_once(lg: Log, checkpointed=None, slots=10_000, now=10**13):
    todo = cleanable_range(lg, checkpointed, now_ms=now)
    return Cleaner(0, slots, Throttler(float("inf")), clock=lambda: now).clean(todo)


@pytest.mark.parametrize("compression", [0, 1])
def test_latest_value_per_key_survives_offsets_kept(tmp_path, compression):
    lg = make_log(tmp_path, compression=compression)
    before = records(lg)
    latest = {}
    for off, k, v, ts in before:
        latest[k] = (off, v, ts)
    size_before = lg.size
    end, stats = clean_once(lg)
    assert end == lg.active_segment.base_offset
    after = records(lg)
    assert sorted((k, o, v, t) for o, k, v, t in after) == sorted((k, *latest[k]) for k in latest)
    assert [o for o, *_ in after] == sorted(o for o, *_ in after)
    assert lg.size < size_before and stats.bytes_written < stats.bytes_read
    assert lg.log_end_offset == 80
    assert not [f for f in os.listdir(lg.dir) if f.endswith((".cleaned", ".swap", ".deleted"))]
    # Reloaded from disk (indexes rebuilt or kept): the same records.
    lg.close()
    again = Log(lg.dir, dict(COMPACT), had_clean_shutdown=False)
    assert records(again) == after
    assert again.read(latest[b"k3"][0], 100).records


def test_tombstones_kept_then_removed_after_delete_retention(tmp_path):
    cfg = dict(COMPACT, **{"delete.retention.ms": "1000"})
    lg = make_log(tmp_path, config=cfg)
    lg.append_as_leader(blob([(b"k1", None)]), 0)
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    end, _ = clean_once(lg)
    assert (b"k1", None) in [(k, v) for _, k, v, _ in records(lg)]  # first cleaning: kept
    _, stats = clean_once(lg, checkpointed=end, now=10**13 + 500)  # horizon = first cleaning + 1000 ms: kept
    assert stats.next_delete_horizon == 10**13 + 1000
    got = records(lg)
    assert (b"k1", None) in [(k, v) for _, k, v, _ in got]
    assert [t for _, k, _, t in got if k == b"k1"] == [1_000]  # the record's timestamp survives the rebasing
    _, stats = clean_once(lg, checkpointed=end, now=10**13 + 1_000)
    after = [(k, v) for _, k, v, _ in records(lg)]
    assert b"k1" not in [k for k, _ in after] and len(after) == 4
    assert stats.next_delete_horizon == 2**63 - 1


def test_map_full_cleans_a_prefix_only(tmp_path):
    lg = make_log(tmp_path, keys=1000)
    segs = lg.cleanable_segments()
    end, _ = clean_once(lg, slots=15)
    assert segs[0].next_offset() <= end < lg.active_segment.base_offset


def test_crash_after_swap_rename_is_completed_at_load(tmp_path, monkeypatch):
    lg = make_log(tmp_path)
    expected = {}
    for off, k, v, ts in records(lg):
        expected[k] = v
    from kafkatier.log import log as log_module

    def crash(name):
        if name == "cleaner-after-old-segments-removed":
            raise SystemExit("crash")
    monkeypatch.setattr(log_module, "crash_point", crash)
    with pytest.raises(SystemExit):
        clean_once(lg)
    names = os.listdir(lg.dir)
    assert any(n.endswith(".log.swap") for n in names)
    monkeypatch.undo()
    again = Log(lg.dir, dict(COMPACT), had_clean_shutdown=False)
    got = {}
    for off, k, v, ts in records(again):
        got[k] = v
    assert got == expected
    assert not [f for f in os.listdir(lg.dir) if f.endswith((".cleaned", ".swap", ".deleted"))]


def test_leftover_cleaned_files_deleted_at_load(tmp_path):
    lg = make_log(tmp_path)
    before = records(lg)
    lg.close()
    with open(os.path.join(lg.dir, "00000000000000000000.log.cleaned"), "wb") as f:
        f.write(b"garbage")
    again = Log(lg.dir, dict(COMPACT), had_clean_shutdown=True)
    assert records(again) == before
    assert not [f for f in os.listdir(lg.dir) if f.endswith(".cleaned")]


def test_manager_picks_dirtiest_and_checkpoints(tmp_path):
    a = make_log(tmp_path / "d")
    mgr = LogCleanerManager([str(tmp_path / "d")], lambda: [a], clock=lambda: 10**13)
    todo = mgr.grab_filthiest_compacted_log()
    assert todo is not None and todo.log is a and todo.cleanable_ratio == 1.0
    assert mgr.grab_filthiest_compacted_log() is None  # in progress
    mgr.done_cleaning(a, 70)
    assert mgr.all_checkpoints() == {("t", 0): 70}
    assert os.path.exists(tmp_path / "d" / CLEANER_OFFSET_CHECKPOINT)


def test_log_cleaner_thread_cleans(tmp_path):
    lg = make_log(tmp_path / "d")
    cleaner = LogCleaner(CleanerConfig(backoff_ms=10), [str(tmp_path / "d")], lambda: [lg], clock=lambda: 10**13)
    cleaner.startup()
    try:
        import time
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not cleaner.threads[0].logs_cleaned:
            cleaner.stop_event.wait(0.05)
        d = cleaner.describe()
        assert d["threads"][0]["logs_cleaned"] >= 1 and d["threads"][0]["bytes_read"] > 0
    finally:
        cleaner.shutdown()
    assert len({k for _, k, _, _ in records(lg)}) == len(records(lg))


def txn_blob(pairs, pid, seq, transactional=True):
    b = MemoryRecordsBuilder(2, 0, 1 << 20, transactional=transactional, producer_id=pid, producer_epoch=0,
                             base_sequence=seq)
    for i, (k, v) in enumerate(pairs):
        b.append(2_000 + i, k, v, headers=[])
    b.close()
    return bytes(b.buffer())


def test_aborted_data_removed_marker_after_horizon_and_producer_last_batch_kept(tmp_path):
    from kafkatier.log.record_batch import end_transaction_marker
    from kafkatier.log.transaction_index import AbortedTxn
    lg = Log(str(tmp_path / "t-0"), dict(COMPACT, **{"delete.retention.ms": "1000"}), had_clean_shutdown=True)
    a = lg.append_as_leader(txn_blob([(b"a", b"aborted")], pid=7, seq=0), 0)
    m = lg.append_as_leader(end_transaction_marker(7, 0, 0, False, 2_000), 0, from_coordinator=True)
    lg.append_aborted_txn(AbortedTxn(7, a.first_offset, m.first_offset, m.first_offset + 1))
    lg.append_as_leader(txn_blob([(b"b", b"old")], pid=8, seq=0, transactional=False), 0)
    lg.append_as_leader(blob([(b"b", b"new")]), 0)  # supersedes producer 8's only (so last) batch
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    end, stats = clean_once(lg)
    got = records(lg)
    assert [(k, v) for _, k, v, _ in got] == [(b"b", b"new")]  # aborted data gone, b's old value gone
    from kafkatier.log.record_batch import iter_batches
    data = lg.read(0, 1 << 20).records
    kinds = [(h.producer_id, h.records_count, bool(h.attributes & 0x20)) for _, h in iter_batches(data)]
    assert (8, 0, False) in kinds  # producer 8's last batch kept, empty
    assert (7, 1, True) in kinds  # the marker: kept until its delete horizon
    assert stats.next_delete_horizon == 10**13 + 1000
    clean_once(lg, checkpointed=end, now=10**13 + 1000)
    data = lg.read(0, 1 << 20).records
    assert not [h for _, h in iter_batches(data) if h.attributes & 0x20]
    assert [(k, v) for _, k, v, _ in records(lg)] == [(b"b", b"new")]


def test_corrupt_segment_fails_the_cleaning_and_changes_nothing(tmp_path):
    from kafkatier.log.errors import CorruptRecordError
    lg = make_log(tmp_path)
    seg = lg.cleanable_segments()[3]
    with open(seg.log_path, "r+b") as f:  # flip a byte inside a record: the batch CRC no longer matches
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0xFF]))
    files_before = sorted(os.listdir(lg.dir))
    sizes = [s.size for s in lg.log_segments()]
    with pytest.raises(CorruptRecordError):
        clean_once(lg)
    assert sorted(os.listdir(lg.dir)) == files_before and [s.size for s in lg.log_segments()] == sizes
    assert lg.read(0, 1 << 20).records  # still readable
