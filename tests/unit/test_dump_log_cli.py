"""kafkatier dump-log: Kafka 3.9's DumpLogSegments lines for segments and indexes, bad input in one line."""
from __future__ import annotations

import re
import struct

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from kafkatier.cli.main import main

BATCH_LINE = re.compile(
    r"^baseOffset: \d+ lastOffset: \d+ count: \d+ baseSequence: -?\d+ lastSequence: -?\d+ producerId: -?\d+ "
    r"producerEpoch: -?\d+ partitionLeaderEpoch: -?\d+ isTransactional: (true|false) isControl: (true|false) "
    r"deleteHorizonMs: OptionalLong.empty position: \d+ CreateTime: \d+ size: \d+ magic: 2 compresscodec: none "
    r"crc: \d+ isvalid: true$")
RECORD_LINE = re.compile(
    r"^\| offset: \d+ CreateTime: \d+ keySize: -?\d+ valueSize: -?\d+ sequence: -?\d+ headerKeys: \[[^\]]*\]"
    r"( key: .* payload: .*)?$")


def _segment(tmp_path):
    out = b""
    for base in (0, 2):
        b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                      producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
        b.append(0, 1700000000000, b"k", b"v%d" % base, [("h", b"x")])
        b.append(1, 1700000000001, None, b"w", [])
        raw = bytearray(b.build())
        struct.pack_into(">q", raw, 0, base)
        out += bytes(raw)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(out)
    return path


def test_segment_batches_and_records(tmp_path, capsys):
    path = _segment(tmp_path)
    assert main(["dump-log", "--files", str(path), "--print-data-log"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Dumping {path}"
    assert lines[1] == "Log starting offset: 0"
    assert BATCH_LINE.match(lines[2]), lines[2]
    assert lines[2].startswith("baseOffset: 0 lastOffset: 1 count: 2 ")
    assert RECORD_LINE.match(lines[3]) and lines[3].endswith("headerKeys: [h] key: k payload: v0"), lines[3]
    assert lines[4].endswith("keySize: -1 valueSize: 1 sequence: -1 headerKeys: [] payload: w")
    assert "position: 0 " in lines[2] and BATCH_LINE.match(lines[5]) and lines[5].startswith("baseOffset: 2 ")
    assert len(lines) == 8


def test_batches_only_without_deep_iteration(tmp_path, capsys):
    path = _segment(tmp_path)
    assert main(["dump-log", "--files", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and all(BATCH_LINE.match(x) for x in lines[2:])


def test_indexes(tmp_path, capsys):
    idx = tmp_path / "00000000000000000100.index"
    idx.write_bytes(struct.pack(">ii", 0, 0) + struct.pack(">ii", 5, 4096) + b"\0" * 16)
    tidx = tmp_path / "00000000000000000100.timeindex"
    tidx.write_bytes(struct.pack(">qi", 1700000000000, 5) + b"\0" * 12)
    assert main(["dump-log", "--files", f"{idx},{tidx}"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"Dumping {idx}", "offset: 100 position: 0", "offset: 105 position: 4096",
        f"Dumping {tidx}", "timestamp: 1700000000000 offset: 105"]


def test_non_segment_file_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    assert main(["dump-log", "--files", str(bad)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert main(["dump-log", "--files", str(tmp_path / "00000000000000000000.log")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_garbage_named_like_a_segment_one_line_exit_2(tmp_path, capsys):
    for name, content in (("00000000000000000000.log", b"hello, this is not a record batch at all" * 3),
                          ("00000000000000000000.index", b"\0" * 7)):
        f = tmp_path / name
        f.write_bytes(content)
        assert main(["dump-log", "--files", str(f)]) == 2
        out = capsys.readouterr()
        assert out.out == "" and len(out.err.strip().splitlines()) == 1 and "Traceback" not in out.err


def test_transaction_marker_and_empty_index(tmp_path, capsys):
    from kafkatier.log.record_batch import end_transaction_marker
    seg = tmp_path / "00000000000000000007.log"
    raw = bytearray(end_transaction_marker(42, 3, 5, True, 1700000000000))
    struct.pack_into(">q", raw, 0, 7)
    seg.write_bytes(bytes(raw))
    empty = tmp_path / "00000000000000000007.index"
    empty.write_bytes(b"")
    assert main(["dump-log", "--files", f"{seg},{empty}", "--deep-iteration"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith("baseOffset: 7 lastOffset: 7 count: 1 baseSequence: -1 lastSequence: -1 "
                               "producerId: 42 producerEpoch: 3 ")
    assert "isTransactional: true isControl: true" in lines[2]
    assert lines[3].startswith("| offset: 7 CreateTime: ") and \
        lines[3].endswith("endTxnMarker: COMMIT coordinatorEpoch: 5")
    assert lines[4:] == [f"Dumping {empty}", f"{empty} is empty."]


def _compressed_batch(codec: int, base: int = 0) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(3):
        b.append(i, 1700000000000 + i, b"key%d" % i, b"value-%d" % i * 20, [])
    raw = bytearray(b.build())
    struct.pack_into(">q", raw, 0, base)
    return bytes(raw)


@pytest.mark.parametrize("codec, name", [(1, "gzip"), (2, "snappy"), (3, "lz4"), (4, "zstd")])
def test_compressed_batches_are_listed_record_by_record(tmp_path, capsys, codec, name):
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(_compressed_batch(codec))
    assert main(["dump-log", "--files", str(path), "--print-data-log"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f" compresscodec: {name} " in lines[2] and "count: 3 " in lines[2] and lines[2].endswith("isvalid: true")
    assert [ln.split(" CreateTime")[0] for ln in lines[3:]] == ["| offset: 0", "| offset: 1", "| offset: 2"]
    assert lines[5].endswith("keySize: 4 valueSize: 140 sequence: -1 headerKeys: [] key: key2 payload: "
                             + "value-2" * 20)
    assert main(["dump-log", "--files", str(path)]) == 0   # batches only
    assert len(capsys.readouterr().out.splitlines()) == 3


def test_a_batch_that_does_not_decompress_ends_the_dump_in_one_line(tmp_path, capsys):
    bad = bytearray(_compressed_batch(4, base=3))
    bad[-8:] = b"\xff" * 8   # the zstd frame's tail
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(_compressed_batch(4) + bytes(bad))
    assert main(["dump-log", "--files", str(path), "--deep-iteration"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "isvalid: false" in lines[6] and lines[7].startswith("Found invalid record at position ")
    assert len(lines) == 8


def test_remote_segments_are_dumped_with_the_offset_of_their_name(tmp_path, capsys):
    remote = tmp_path / "kafka-tiered-storage" / "t-0-AAAAAAAAAAAAAAAAAAAAAA"
    remote.mkdir(parents=True)
    segment = remote / "00000000000000000005-bbbbbbbbbbbbbbbbbbbbbb.log"
    segment.write_bytes(_compressed_batch(3, base=5))
    index = remote / "00000000000000000005-bbbbbbbbbbbbbbbbbbbbbb.index"
    index.write_bytes(struct.pack(">ii", 0, 0))
    assert main(["dump-log", "--files", f"{segment},{index}", "--print-data-log"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [f"Dumping {segment}", "Log starting offset: 5"]
    assert lines[2].startswith("baseOffset: 5 lastOffset: 7 count: 3 ") and " compresscodec: lz4 " in lines[2]
    assert lines[3].startswith("| offset: 5 ") and lines[-2:] == [f"Dumping {index}", "offset: 5 position: 0"]


def test_a_name_that_is_neither_local_nor_remote_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "00000000000000000005-short.log"
    path.write_bytes(_compressed_batch(0))
    assert main(["dump-log", "--files", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "remote segment" in err[0]


def test_producer_snapshot_lines_as_kafkas_tool(tmp_path, capsys):
    """``.snapshot`` files: Kafka's dumpProducerIdSnapshot line per producer (an open transaction's first offset as
    ``OptionalLong[N]``, the last batch's first sequence derived from its last sequence and offset delta)."""
    from kafkatier.log.producer_state import SnapshotEntry, encode_snapshot
    snap = tmp_path / "00000000000000000042.snapshot"
    snap.write_bytes(encode_snapshot([
        SnapshotEntry(producer_id=7, producer_epoch=1, last_sequence=9, last_offset=41, offset_delta=4,
                      timestamp=1700000000000, coordinator_epoch=-1, current_txn_first_offset=-1),
        SnapshotEntry(producer_id=8, producer_epoch=0, last_sequence=1, last_offset=30, offset_delta=3,
                      timestamp=1700000000005, coordinator_epoch=2, current_txn_first_offset=28)]))
    assert main(["dump-log", "--files", str(snap)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"Dumping {snap}",
        "producerId: 7 producerEpoch: 1 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty "
        "lastTimestamp: 1700000000000 firstSequence: 5 lastSequence: 9 lastOffset: 41 offsetDelta: 4 "
        "timestamp: 1700000000000",
        "producerId: 8 producerEpoch: 0 coordinatorEpoch: 2 currentTxnFirstOffset: OptionalLong[28] "
        "lastTimestamp: 1700000000005 firstSequence: 2147483646 lastSequence: 1 lastOffset: 30 offsetDelta: 3 "
        "timestamp: 1700000000005"]
    bad = tmp_path / "00000000000000000043.snapshot"
    bad.write_bytes(snap.read_bytes()[:-3])
    assert main(["dump-log", "--files", str(bad)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not a producer state snapshot" in err


def test_a_brokers_own_snapshot_is_dumped(tmp_path, capsys):
    """A snapshot the log wrote at a roll reads back: the producer's last batch as the log holds it."""
    from kafkatier.log.log import Log
    from kafkatier.log.producer_state import snapshot_offsets, snapshot_path
    log = Log(str(tmp_path / "t-0"))
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=5,
                                  producer_epoch=0, base_sequence=0, batch_size=1 << 20)
    for i in range(3):
        b.append(i, 1700000000000 + i, None, b"v", [])
    log.append_records_as_leader(bytes(b.build()), leader_epoch=0)
    log.snapshot_producer_state()
    [offset] = snapshot_offsets(str(tmp_path / "t-0"))
    path = snapshot_path(str(tmp_path / "t-0"), offset)
    assert main(["dump-log", "--files", path]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("producerId: 5 producerEpoch: 0 coordinatorEpoch: -1 "
                             "currentTxnFirstOffset: OptionalLong.empty ")
    assert "firstSequence: 0 lastSequence: 2 lastOffset: 2 offsetDelta: 2" in out[1]
    log.close()
