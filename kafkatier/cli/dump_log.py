"""``kafkatier dump-log``: kafka-dump-log, reading a broker's files directly (no broker needed).

``--files`` takes segments (``.log``), offset indexes (``.index``), time indexes (``.timeindex``),
transaction indexes (``.txnindex``) and producer state snapshots (``.snapshot``); the lines are Kafka 3.9's
``DumpLogSegments`` ones::

    Dumping /d/t-0/00000000000000000000.log
    Log starting offset: 0
    baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 \
partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 \
CreateTime: 1700000000000 size: 80 magic: 2 compresscodec: none crc: 1234 isvalid: true
    | offset: 0 CreateTime: 1700000000000 keySize: 1 valueSize: 1 sequence: -1 headerKeys: [] key: k payload: v

Records are listed with ``--deep-iteration`` or ``--print-data-log`` (as in Kafka, printing data implies deep
iteration), those of compressed batches (gzip, snappy, lz4, zstd) decompressed as the broker does
(``log/log_validator.py``); a batch that does not decompress is followed by one ``Found invalid record`` line
and the dump of that file stops.

Remote segments -- the tiered storage copies (``<startOffset>-<segmentId>.log`` / ``.index`` / ``.timeindex`` /
``.txnindex`` under ``kafka-tiered-storage/<topic>-<partition>-<topicId>/``) -- are dumped like local ones, their
base offset read from the name's 20 digits (Kafka's tool parses the whole stem and refuses such names).

A file that is none of these, or that cannot be read, is reported on one line and the command exits 2.
"""
from __future__ import annotations

import os
import re
import struct
from typing import Iterator

from kafkatier.cli.main import UsageError
from kafkatier.common.byte_utils import read_varint
from kafkatier.log.errors import CorruptRecordError
from kafkatier.log.log_validator import decompress
from kafkatier.log.producer_state import CorruptSnapshotError, decode_snapshot
from kafkatier.log.remote.remote_storage_manager import FILE_STEM_RE
from kafkatier.protocol.errors import KafkaError
from kafkatier.log.record_batch import (
    CONTROL_FLAG_MASK,
    HEADER_SIZE,
    BatchHeader,
    compute_crc,
    iter_batches,
)

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
DELETE_HORIZON_FLAG_MASK = 0x40
SUFFIXES = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
INT_MAX = 2 ** 31 - 1
_INDEX_ENTRY = struct.Struct(">ii")
_TIME_INDEX_ENTRY = struct.Struct(">qi")
_TXN_INDEX_ENTRY = struct.Struct(">hqqqi")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "dump-log", help="print the batches and records of log segments and indexes (kafka-dump-log)",
        description="Print a broker's segment files (.log), offset and time indexes, transaction indexes and "
                    "producer state snapshots in kafka-dump-log's format, reading the files directly.")
    p.add_argument("--files", required=True, metavar="FILE[,FILE...]", help="comma-separated data and index files")
    p.add_argument("--print-data-log", action="store_true", help="print the records' keys and values")
    p.add_argument("--deep-iteration", action="store_true", help="list the records of each batch")
    p.add_argument("--max-bytes", type=int, default=2 ** 31 - 1, help="read at most this many bytes of a segment")
    p.set_defaults(func=run)


def run(args) -> int:
    files = [f.strip() for f in args.files.split(",") if f.strip()]
    if not files:
        raise UsageError("--files needs at least one file")
    for path in files:
        if not path.endswith(SUFFIXES):
            raise UsageError(f"{path} is not a log segment, offset index, time index, transaction index or producer "
                             f"snapshot file (expected a name ending in {', '.join(SUFFIXES)})")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise UsageError(f"cannot read {path}: {e.strerror}") from None
        check_file(path, data)
        for line in dump_file(path, data, print_data=args.print_data_log,
                              deep=args.deep_iteration or args.print_data_log, max_bytes=args.max_bytes):
            print(line)
    return 0


ENTRY_SIZES = {".index": _INDEX_ENTRY.size, ".timeindex": _TIME_INDEX_ENTRY.size, ".txnindex": _TXN_INDEX_ENTRY.size}


def check_file(path: str, data: bytes) -> None:
    """Refuse, before printing anything, a file whose content is not of its kind: a segment whose first batch is
    not a valid v2 batch, an index whose size is not a whole number of entries."""
    base_offset_of(path)
    suffix = "." + path.rsplit(".", 1)[-1]
    if suffix in ENTRY_SIZES:
        if len(data) % ENTRY_SIZES[suffix]:
            raise UsageError(f"{path} is not a {suffix} file: its size {len(data)} is not a multiple of "
                             f"{ENTRY_SIZES[suffix]} bytes")
        return
    if suffix == ".snapshot":
        try:
            decode_snapshot(data)
        except CorruptSnapshotError as e:
            raise UsageError(f"{path} is not a producer state snapshot: {e}") from None
        return
    if not data:
        return
    try:
        first = next(iter_batches(data), None)
    except CorruptRecordError as e:
        raise UsageError(f"{path} is not a log segment: {e}") from None
    if first is None or compute_crc(data, 0, first[1].size_in_bytes) != first[1].crc:
        raise UsageError(f"{path} is not a log segment: no valid record batch at position 0")


_LOCAL_STEM = re.compile(r"\d+")


def base_offset_of(path: str) -> int:
    """The base offset a segment or index file's name carries: ``<offset>.log`` (local) or
    ``<offset, 20 digits>-<segmentId>.log`` (a remote segment of the tiered storage)."""
    stem = os.path.basename(path).split(".")[0]
    if _LOCAL_STEM.fullmatch(stem):
        return int(stem)
    remote = FILE_STEM_RE.fullmatch(stem)
    if remote:
        return int(remote.group(1))
    raise UsageError(f"{path}: the file name is not a base offset (20 digits, e.g. 00000000000000000000.log, or "
                     f"a remote segment's 00000000000000000000-<segmentId>.log)")


def dump_file(path: str, data: bytes, *, print_data: bool = False, deep: bool = False,
              max_bytes: int = 2 ** 31 - 1) -> Iterator[str]:
    base = base_offset_of(path)
    yield f"Dumping {path}"
    if path.endswith(".log"):
        yield f"Log starting offset: {base}"
        yield from dump_segment(path, data[:max_bytes], print_data=print_data, deep=deep)
    elif path.endswith(".index"):
        if not data:
            yield f"{path} is empty."
        for pos in range(0, len(data), _INDEX_ENTRY.size):
            rel, position = _INDEX_ENTRY.unpack_from(data, pos)
            if rel == 0 and pos > 0:
                break  # the preallocated, unused tail of an active index (Kafka stops there too)
            yield f"offset: {base + rel} position: {position}"
    elif path.endswith(".timeindex"):
        for pos in range(0, len(data), _TIME_INDEX_ENTRY.size):
            ts, rel = _TIME_INDEX_ENTRY.unpack_from(data, pos)
            if rel == 0 and pos > 0:
                break
            yield f"timestamp: {ts} offset: {base + rel}"
    elif path.endswith(".snapshot"):
        yield from dump_producer_snapshot(data)
    else:
        for pos in range(0, len(data) - len(data) % _TXN_INDEX_ENTRY.size, _TXN_INDEX_ENTRY.size):
            _version, pid, first, last, lso = _TXN_INDEX_ENTRY.unpack_from(data, pos)
            yield f"version: 0 producerId: {pid} firstOffset: {first} lastOffset: {last} lastStableOffset: {lso}"


def dump_producer_snapshot(data: bytes) -> Iterator[str]:
    """One line per producer of a ``.snapshot`` file, as Kafka's tool prints the entries it reads back: the
    transaction's first offset as Java's ``OptionalLong``, the last batch's first sequence derived from its last
    sequence and offset delta (wrapping past ``Integer.MAX_VALUE`` as Kafka's ``decrementSequence``)."""
    for e in decode_snapshot(data):
        txn = (f"OptionalLong[{e.current_txn_first_offset}]" if e.current_txn_first_offset >= 0
               else "OptionalLong.empty")
        line = (f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} coordinatorEpoch: "
                f"{e.coordinator_epoch} currentTxnFirstOffset: {txn} lastTimestamp: {e.timestamp} ")
        if e.last_offset >= 0:
            first = (e.last_sequence - e.offset_delta if e.last_sequence >= e.offset_delta
                     else INT_MAX - (e.offset_delta - e.last_sequence) + 1)
            line += (f"firstSequence: {first} lastSequence: {e.last_sequence} lastOffset: {e.last_offset} "
                     f"offsetDelta: {e.offset_delta} timestamp: {e.timestamp}")
        yield line


def _delete_horizon(h: BatchHeader) -> str:
    return f"OptionalLong[{h.base_timestamp}]" if h.attributes & DELETE_HORIZON_FLAG_MASK else "OptionalLong.empty"


def dump_segment(path: str, data: bytes, *, print_data: bool, deep: bool) -> Iterator[str]:
    end = 0
    try:
        for pos, h in iter_batches(data):
            end = pos + h.size_in_bytes
            count = h.records_count
            last_seq = -1 if h.base_sequence < 0 else (h.base_sequence + h.last_offset_delta) % 2 ** 31
            valid = compute_crc(data, pos, h.size_in_bytes) == h.crc
            yield (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {count} "
                   f"baseSequence: {h.base_sequence} lastSequence: {last_seq} producerId: {h.producer_id} "
                   f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
                   f"isTransactional: {str(h.is_transactional).lower()} "
                   f"isControl: {str(h.is_control_batch).lower()} deleteHorizonMs: {_delete_horizon(h)} "
                   f"position: {pos} {h.timestamp_type}: {h.max_timestamp} size: {h.size_in_bytes} "
                   f"magic: {h.magic} compresscodec: {CODECS.get(h.compression_type, h.compression_type)} "
                   f"crc: {h.crc} isvalid: {str(valid).lower()}")
            if deep:
                body = data[pos + HEADER_SIZE:end]
                if h.compression_type != 0:
                    try:
                        body = decompress(h.compression_type, body, 0, len(body), os.path.basename(path))
                    except KafkaError as e:
                        yield f"Found invalid record at position {pos}: {e.message or e}"
                        return
                yield from _record_lines(body, h, print_data)
    except CorruptRecordError as e:
        yield f"Found invalid record at position {end}: {e}"
        return
    if end < len(data):
        yield f"Found {len(data) - end} invalid bytes at the end of {os.path.basename(path)}"


def _bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_varint(buf, pos)
    if n < 0:
        return None, pos
    return buf[pos:pos + n], pos + n


def _text(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def _record_lines(body: bytes, h: BatchHeader, print_data: bool) -> Iterator[str]:
    """The records of a batch, from its (decompressed) records section."""
    pos = 0
    for _ in range(h.records_count):
        _length, pos = read_varint(body, pos)
        pos += 1  # attributes
        ts_delta, pos = read_varint(body, pos)
        off_delta, pos = read_varint(body, pos)
        key, pos = _bytes(body, pos)
        value, pos = _bytes(body, pos)
        nheaders, pos = read_varint(body, pos)
        keys = []
        for _h in range(nheaders):
            hk, pos = _bytes(body, pos)
            _hv, pos = _bytes(body, pos)
            keys.append("" if hk is None else _text(hk))
        seq = -1 if h.base_sequence < 0 else (h.base_sequence + off_delta) % 2 ** 31
        line = (f"| offset: {h.base_offset + off_delta} {h.timestamp_type}: {h.base_timestamp + ts_delta} "
                f"keySize: {-1 if key is None else len(key)} valueSize: {-1 if value is None else len(value)} "
                f"sequence: {seq} headerKeys: [{','.join(keys)}]")
        if h.attributes & CONTROL_FLAG_MASK:
            line += _control_text(key, value)
        elif print_data:  # as Kafka: a null key or value is left out, not printed as null
            line += (f" key: {_text(key)}" if key is not None else "") + \
                (f" payload: {_text(value)}" if value is not None else "")
        yield line


def _control_text(key: bytes | None, value: bytes | None) -> str:
    """`` endTxnMarker: COMMIT coordinatorEpoch: N`` for a transaction marker (key: version, type; value:
    version, coordinator epoch), `` controlType: NAME(id)`` otherwise."""
    if key is None or len(key) < 4:
        return " controlType: UNKNOWN(-1)"
    ctype = struct.unpack_from(">h", key, 2)[0]
    if ctype in (0, 1) and value is not None and len(value) >= 6:
        epoch = struct.unpack_from(">i", value, 2)[0]
        return f" endTxnMarker: {'COMMIT' if ctype == 1 else 'ABORT'} coordinatorEpoch: {epoch}"
    return f" controlType: UNKNOWN({ctype})"
