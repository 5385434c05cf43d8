"""Producer state snapshots (``<offset>.snapshot``, Kafka's format version 1): written at roll and shutdown,
loaded at rebuild so only the log after them is read, open transactions (currentTxnFirstOffset) included; a
snapshot above the log end or a corrupt one is never used."""
from __future__ import annotations

import os
import struct

import pytest

from batches import producer_batch as batch

from kafkatier.log import producer_state
from kafkatier.log.log import Log
from kafkatier.log.producer_state import (CorruptSnapshotError, ProducerStateManager, SnapshotEntry,
                                          decode_snapshot, encode_snapshot, snapshot_offsets, snapshot_path)
from kafkatier.log.record_batch import end_transaction_marker


def marker(pid: int, epoch: int, commit: bool) -> bytes:
    return end_transaction_marker(pid, epoch, 3, commit, 1_700_000_000_000)


def append(log: Log, ps: ProducerStateManager, records: bytes, coordinator: bool = False) -> None:
    ps.update(log.append_as_leader(records, leader_epoch=0, from_coordinator=coordinator).records,
              3 if coordinator else None)


def state(ps: ProducerStateManager) -> dict:
    return {pid: (p.producer_epoch, p.last_sequence, p.coordinator_epoch, p.current_txn_start_offset)
            for pid, p in ps.active_producers().items()}


def test_format_is_kafkas_version_1_with_a_crc():
    entries = [SnapshotEntry(5, 2, 9, 41, 1, 1_700_000_000_001, 3, 40), SnapshotEntry(6, 0, -1, -1, 0, -1, -1, -1)]
    data = encode_snapshot(entries)
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count, len(data)) == (1, 2, 10 + 2 * 46)
    assert decode_snapshot(data) == entries
    with pytest.raises(CorruptSnapshotError, match="CRC"):
        decode_snapshot(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(CorruptSnapshotError, match="version"):
        decode_snapshot(struct.pack(">h", 2) + data[2:])
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(data[:5])


def test_rebuild_reads_only_the_log_after_the_snapshot_and_keeps_open_transactions(tmp_path, monkeypatch):
    log = Log(str(tmp_path / "t-0"))
    ps = ProducerStateManager()
    append(log, ps, batch(5, 0, 0, transactional=True))          # 0-1: txn of 5 open
    append(log, ps, batch(6, 1, 0))                               # 2-3: idempotent 6
    append(log, ps, batch(7, 0, 0, transactional=True))           # 4-5: txn of 7 open
    append(log, ps, marker(7, 0, False), coordinator=True)         # 6: 7 aborted
    log.roll()
    path = ps.take_snapshot(log.dir, log.log_end_offset)
    assert os.path.basename(path) == "00000000000000000007.snapshot"
    append(log, ps, batch(6, 1, 2))                               # 7-8
    append(log, ps, batch(8, 0, 0, transactional=True))           # 9-10: txn of 8 open
    expected = state(ps)
    assert ps.first_unstable_offset(log.log_end_offset) == 0

    scanned = []
    real = producer_state._scan_headers
    monkeypatch.setattr(producer_state, "_scan_headers", lambda p: scanned.append(p) or real(p))
    again = ProducerStateManager()
    again.rebuild(log)
    assert state(again) == expected
    assert again.ongoing_first_offset(5) == 0 and again.ongoing_first_offset(8) == 9
    assert again.first_unstable_offset(log.log_end_offset) == 0
    assert [os.path.basename(p) for p in scanned] == ["00000000000000000007.log"]   # not the first segment
    # the last batch of a producer is still recognised as a duplicate after a restart
    assert again.find_duplicate(batch(6, 1, 2)) is not None


def test_a_snapshot_above_the_log_end_is_deleted_and_a_corrupt_one_ignored(tmp_path, caplog):
    log = Log(str(tmp_path / "t-0"))
    ps = ProducerStateManager()
    append(log, ps, batch(5, 0, 0, transactional=True))
    log.roll()
    ps.take_snapshot(log.dir, log.log_end_offset)                  # at 2: 5's transaction open
    append(log, ps, marker(5, 0, True), coordinator=True)         # 2: committed
    ps.take_snapshot(log.dir, log.log_end_offset)                  # at 3
    assert snapshot_offsets(log.dir) == [2, 3]
    log.truncate_to(2)                                             # the marker is gone: the snapshot at 3 is wrong
    again = ProducerStateManager()
    again.rebuild(log)
    assert snapshot_offsets(log.dir) == [2]
    assert again.ongoing_first_offset(5) == 0
    with open(snapshot_path(log.dir, 2), "r+b") as f:
        f.seek(-1, os.SEEK_END)
        f.write(b"\xff")
    with caplog.at_level("WARNING"):
        third = ProducerStateManager()
        third.rebuild(log)                                         # the whole log again
    assert third.ongoing_first_offset(5) == 0
    assert "unreadable producer state snapshot" in caplog.text


def test_only_the_newest_snapshots_are_kept(tmp_path):
    log = Log(str(tmp_path / "t-0"))
    ps = ProducerStateManager()
    for i in range(4):
        append(log, ps, batch(5, 0, 2 * i))
        ps.take_snapshot(log.dir, log.log_end_offset)
    assert snapshot_offsets(log.dir) == [6, 8]
