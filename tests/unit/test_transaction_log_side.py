"""The log side of transactions: end transaction markers, producer state of open transactions, the last stable
offset, the aborted transaction index (``.txnindex``) and its use by a read_committed read."""
from __future__ import annotations

import os
import struct
import threading

import pytest
from kafka.record.memory_records import MemoryRecords

from batches import producer_batch as batch

from kafkatier.log.log import Log
from kafkatier.log.producer_state import ABORT, COMMIT, ProducerStateManager, control_record_type
from kafkatier.log.record_batch import end_transaction_marker, is_valid_batch
from kafkatier.log.transaction_index import ENTRY_SIZE, AbortedTxn, TransactionIndex
from kafkatier.protocol.errors import Errors, KafkaError
from kafkatier.server.add_partitions_to_txn_manager import AddPartitionsToTxnManager, produce_error


def marker(pid: int, epoch: int, commit: bool, coordinator_epoch: int = 0) -> bytes:
    return end_transaction_marker(pid, epoch, coordinator_epoch, commit, 1_700_000_000_000)


def test_end_transaction_marker_is_kafkas_control_batch():
    m = marker(42, 3, commit=True, coordinator_epoch=9)
    assert is_valid_batch(m)
    b = MemoryRecords(m).next_batch()
    assert b.is_control_batch and b.is_transactional and b.producer_id == 42 and b.producer_epoch == 3
    [rec] = list(b)
    assert bytes(rec.key) == struct.pack(">hh", 0, COMMIT) and bytes(rec.value) == struct.pack(">hi", 0, 9)
    assert control_record_type(marker(1, 0, commit=False)) == ABORT


def test_clients_may_not_write_control_batches(tmp_path):
    log = Log(str(tmp_path / "t-0"))
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(marker(1, 0, True), leader_epoch=0)
    assert e.value.error == Errors.INVALID_RECORD
    assert log.append_as_leader(marker(1, 0, True), leader_epoch=0, from_coordinator=True).num_batches == 1


def test_txn_index_entries_are_34_bytes_and_survive_reopen_and_truncation(tmp_path):
    path = str(tmp_path / "00000000000000000000.txnindex")
    idx = TransactionIndex(path, 0)
    assert not os.path.exists(path)                      # created on the first entry
    a, b = AbortedTxn(7, 0, 5, 6), AbortedTxn(8, 3, 10, 11)
    idx.append(a)
    idx.append(b)
    assert os.path.getsize(path) == 2 * ENTRY_SIZE == 68
    with open(path, "rb") as f:
        assert f.read(ENTRY_SIZE) == struct.pack(">hqqqq", 0, 7, 0, 5, 6)
    assert TransactionIndex(path, 0).entries == [a, b]
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(9, 1, 4, 5))               # markers come in offset order
    idx.truncate_to(10)
    assert TransactionIndex(path, 0).entries == [a]
    with open(path, "ab") as f:
        f.write(b"\x00\x01")                             # a partial entry after a crash
    assert TransactionIndex(path, 0).entries == [a]


def test_collect_returns_the_overlapping_aborted_transactions():
    idx = TransactionIndex("/nonexistent/x.txnindex", 0)
    idx.entries = [AbortedTxn(1, 0, 4, 5), AbortedTxn(2, 6, 9, 10), AbortedTxn(3, 11, 20, 30)]
    assert [t.producer_id for t in idx.collect(5, 10).aborted] == [2]
    assert [t.producer_id for t in idx.collect(0, 12).aborted] == [1, 2, 3]
    assert idx.collect(0, 5).is_complete and not idx.collect(21, 40).is_complete


def test_last_stable_offset_follows_open_and_unreplicated_transactions(tmp_path):
    log = Log(str(tmp_path / "t-0"))
    ps = ProducerStateManager()
    ps.update(log.append_as_leader(batch(), leader_epoch=0).records)                        # 0-1
    ps.update(log.append_as_leader(batch(5, 0, 0, transactional=True), leader_epoch=0).records)  # 2-3
    ps.update(log.append_as_leader(batch(6, 0, 0, transactional=True), leader_epoch=0).records)  # 4-5
    assert ps.first_unstable_offset(high_watermark=6) == 2
    done = ps.update(log.append_as_leader(marker(5, 0, False), leader_epoch=0, from_coordinator=True).records)  # 6
    assert [(t.producer_id, t.first_offset, t.last_offset, t.is_aborted) for t in done] == [(5, 2, 6, True)]
    assert ps.last_stable_offset_after(done[0]) == 4      # producer 6 still has a transaction open
    assert ps.first_unstable_offset(high_watermark=6) == 2   # the marker is not below the HW yet
    assert ps.first_unstable_offset(high_watermark=7) == 4
    ps.update(log.append_as_leader(marker(6, 0, True), leader_epoch=0, from_coordinator=True).records)   # 7
    assert ps.first_unstable_offset(high_watermark=8) is None


def test_producer_checks_epochs_and_transactional_state():
    ps = ProducerStateManager()
    ps.update(_offset(batch(5, 2, 0, transactional=True), 0))
    with pytest.raises(KafkaError) as e:
        ps.check_append(batch(5, 1, 2, transactional=True))
    assert e.value.error == Errors.INVALID_PRODUCER_EPOCH
    with pytest.raises(KafkaError) as e:
        ps.check_append(batch(5, 2, 2, transactional=False))
    assert e.value.error == Errors.INVALID_TXN_STATE
    ps.update(_offset(marker(5, 3, True, coordinator_epoch=4), 2), coordinator_epoch=4)
    with pytest.raises(KafkaError) as e:
        ps.check_marker(5, 2, 4)
    assert e.value.error == Errors.INVALID_PRODUCER_EPOCH
    with pytest.raises(KafkaError) as e:
        ps.check_marker(5, 3, 3)
    assert e.value.error == Errors.TRANSACTION_COORDINATOR_FENCED
    ps.check_marker(5, 3, 4)
    ps.check_marker(99, 0, 0)                              # a marker for an unknown producer is accepted


def _offset(records: bytes, base: int) -> bytes:
    b = bytearray(records)
    struct.pack_into(">q", b, 0, base)
    return bytes(b)


def test_aborted_transactions_are_indexed_read_and_rebuilt(tmp_path):
    log = Log(str(tmp_path / "t-0"))
    ps = ProducerStateManager()
    ps.update(log.append_as_leader(batch(5, 0, 0, transactional=True), leader_epoch=0).records)   # 0-1
    ps.update(log.append_as_leader(batch(6, 0, 0, transactional=True), leader_epoch=0).records)   # 2-3
    for t in ps.update(log.append_as_leader(marker(5, 0, False), leader_epoch=0, from_coordinator=True).records):
        log.append_aborted_txn(AbortedTxn(t.producer_id, t.first_offset, t.last_offset,
                                          ps.last_stable_offset_after(t)))
    assert log.collect_aborted_transactions(0, 5) == [AbortedTxn(5, 0, 4, 2)]
    assert log.collect_aborted_transactions(5, 6) == []
    log.roll()
    log.append_as_leader(batch(), leader_epoch=0)
    log.close()
    log2 = Log(str(tmp_path / "t-0"), had_clean_shutdown=True)
    assert log2.collect_aborted_transactions(0, 10) == [AbortedTxn(5, 0, 4, 2)]
    rebuilt = ProducerStateManager()
    rebuilt.rebuild(log2)
    assert rebuilt.first_unstable_offset(high_watermark=log2.log_end_offset) == 2    # producer 6 is still open
    p5 = rebuilt.active_producers()[5]
    assert (p5.producer_epoch, p5.coordinator_epoch, p5.current_txn_start_offset, p5.last_sequence) == (0, 0, -1, 1)
    assert rebuilt.active_producers()[6].current_txn_start_offset == 2
    log2.truncate_to(4)
    assert log2.collect_aborted_transactions(0, 10) == []
    log2.close()


def test_verification_guard_is_needed_to_open_a_transaction_and_a_marker_voids_it():
    ps = ProducerStateManager()
    txn = batch(5, 0, 0, transactional=True)
    with pytest.raises(KafkaError) as e:
        ps.check_append(txn, None, verify=True)               # never verified
    assert e.value.error == Errors.INVALID_TXN_STATE
    guard = ps.start_verification(5)
    ps.check_append(txn, guard, verify=True)
    ps.check_append(txn, None, verify=False)                  # verification off: no check
    assert ps.start_verification(5) is guard                # a concurrent produce's verification shares it
    ps.update(_offset(marker(5, 0, False), 0))                # a marker raced with the verification
    with pytest.raises(KafkaError):
        ps.check_append(txn, guard, verify=True)
    newer = ps.start_verification(5)                          # the next verification: a new guard
    assert newer is not guard
    ps.check_append(txn, newer, verify=True)
    ps.update(_offset(txn, 1))                                # once open, no verification is needed
    ps.check_append(batch(5, 0, 2, transactional=True), None, verify=True)
    assert produce_error(Errors.PRODUCER_FENCED) == Errors.INVALID_PRODUCER_EPOCH
    assert produce_error(Errors.TRANSACTION_ABORTABLE) == Errors.INVALID_TXN_STATE
    assert produce_error(Errors.CONCURRENT_TRANSACTIONS) == Errors.NOT_ENOUGH_REPLICAS
    assert produce_error(Errors.INVALID_PRODUCER_ID_MAPPING) == Errors.INVALID_PRODUCER_ID_MAPPING


class _NoMetadata:
    def topic_partitions(self, _topic):
        return []

    def alive_brokers(self):
        return []


def test_verification_answered_in_process_when_local_else_over_the_network():
    """The coordinator on this broker answers in the caller's thread (mapped as Produce answers it); an id it
    does not coordinate goes to the pool, which asks the metadata's coordinator (none here: retriable)."""
    asked, sent, got = [], [], []
    tp = ("t", 0)

    def local(tid, pid, epoch, partitions):
        asked.append(tid)
        return {p: Errors.PRODUCER_FENCED for p in partitions} if tid == "mine" else None
    m = AddPartitionsToTxnManager(_NoMetadata(), lambda *a: sent.append(a), local=local)
    try:
        m.verify("mine", 5, 0, [tp], got.append)
        assert got == [{tp: Errors.INVALID_PRODUCER_EPOCH}]          # at once, no pool, no request
        done = threading.Event()
        m.verify("theirs", 5, 0, [tp], lambda e: (got.append(e), done.set()))
        assert done.wait(10)
        assert got[-1] == {tp: Errors.NOT_ENOUGH_REPLICAS} and sent == [] and asked == ["mine", "theirs"]
    finally:
        m.shutdown()
