"""LocalTieredStorage: Kafka's layout, all-or-nothing copies, range reads and deletes."""
from __future__ import annotations

import os
import threading

import pytest

from kafkatier.log.remote.remote_log_segment_metadata import (RemoteLogSegmentId, TopicIdPartition,
                                                              new_segment_metadata)
from kafkatier.log.remote.remote_storage_manager import (PARTITION_DIR_RE, IndexType, LocalTieredStorage,
                                                         LogSegmentData, RemoteResourceNotFoundError,
                                                         RemoteStorageError)

TIP = TopicIdPartition("LWgrMmVrT0a__7a4SasuPA", "topicA", 0)


@pytest.fixture
def local_files(tmp_path):
    d = tmp_path / "local"
    d.mkdir()
    (d / "log").write_bytes(bytes(range(200)))
    (d / "index").write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x64")
    (d / "timeindex").write_bytes(b"\x00" * 12)
    return d


def segment(start=11, size=200, sid="bCqX9U--S-6U8XUM9II25Q"):
    return new_segment_metadata(RemoteLogSegmentId(TIP, sid), start, start + 9, 0, 1, size, {0: start}, 0)


def data(d, txn=None) -> LogSegmentData:
    return LogSegmentData(str(d / "log"), str(d / "index"), str(d / "timeindex"), txn, None, b"0\n1\n0 11\n")


def test_layout_is_kafkas_local_tiered_storage(tmp_path, local_files):
    rsm = LocalTieredStorage(str(tmp_path / "remote"), broker_id=1)
    md = segment()
    rsm.copy_log_segment_data(md, data(local_files))
    pdir = tmp_path / "remote" / "kafka-tiered-storage" / "topicA-0-LWgrMmVrT0a__7a4SasuPA"
    assert PARTITION_DIR_RE.fullmatch(pdir.name)
    assert sorted(os.listdir(pdir)) == sorted(f"00000000000000000011-bCqX9U--S-6U8XUM9II25Q{s}" for s in (
        ".log", ".index", ".timeindex", ".snapshot", ".leader_epoch_checkpoint"))  # no .txnindex: optional
    assert rsm.fetch_index(md, IndexType.LEADER_EPOCH) == b"0\n1\n0 11\n"
    assert rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT) == b""
    assert rsm.segment_stems(TIP) == ["00000000000000000011-bCqX9U--S-6U8XUM9II25Q"]


def test_failed_copy_leaves_nothing_behind(tmp_path, local_files):
    rsm = LocalTieredStorage(str(tmp_path / "remote"), broker_id=1)
    broken = LogSegmentData(str(local_files / "log"), str(local_files / "missing-index"),
                            str(local_files / "timeindex"), None, None, b"")
    with pytest.raises(RemoteStorageError):
        rsm.copy_log_segment_data(segment(), broken)
    assert rsm.segment_stems(TIP) == []
    pdir = rsm.partition_dir(TIP)
    assert [n for n in os.listdir(pdir)] == []


def test_range_reads_and_kafkas_errors(tmp_path, local_files):
    rsm = LocalTieredStorage(str(tmp_path / "remote"), broker_id=1)
    md = segment()
    rsm.copy_log_segment_data(md, data(local_files))
    assert rsm.fetch_log_segment(md, 10, 12) == bytes([10, 11, 12])
    assert rsm.fetch_log_segment(md, 190) == bytes(range(190, 200))
    for args, msg in (((-1,), "Start position must be positive"),
                      ((5, 4), "End position cannot be less than startPosition"),
                      ((5, 200), "End position cannot be greater than segment size")):
        with pytest.raises(RemoteStorageError, match=msg):
            rsm.fetch_log_segment(md, *args)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_log_segment(segment(start=99, sid="AAAAAAAAAAAAAAAAAAAAAA"), 0)


def test_delete_removes_the_set_and_tolerates_missing_files(tmp_path, local_files):
    rsm = LocalTieredStorage(str(tmp_path / "remote"), broker_id=1)
    md = segment()
    rsm.copy_log_segment_data(md, data(local_files))
    os.unlink(rsm.path_of(md, ".index"))
    rsm.delete_log_segment_data(md)
    rsm.delete_log_segment_data(md)  # again: nothing left is not an error
    assert rsm.segment_stems(TIP) == []
    rsm.delete_partition(TIP)
    assert not os.path.exists(rsm.partition_dir(TIP))


def test_delete_enable_false_keeps_data(tmp_path, local_files):
    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(tmp_path / "remote"), "broker.id": 1, "delete.enable": "false"})
    md = segment()
    rsm.copy_log_segment_data(md, data(local_files))
    rsm.delete_log_segment_data(md)
    assert rsm.segment_stems(TIP) != []


def test_broker_id_is_required(tmp_path):
    with pytest.raises(RemoteStorageError, match="Broker ID is required to configure the LocalTieredStorage "
                                                 "manager."):
        LocalTieredStorage().configure({"dir": str(tmp_path)})


def test_close_interrupts_a_slowed_copy_and_cleans_up(tmp_path, local_files):
    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(tmp_path / "remote"), "broker.id": 1, "copy.delay.ms": "60000"})
    errors = []

    def copy():
        try:
            rsm.copy_log_segment_data(segment(), data(local_files))
        except RemoteStorageError as e:
            errors.append(e)
    t = threading.Thread(target=copy)
    t.start()
    from kafkatier.waiting import wait_for
    wait_for(lambda: rsm.segment_stems(TIP), 10, message="the .log file to be written")
    rsm.close()
    t.join(10)
    assert errors and rsm.segment_stems(TIP) == []
