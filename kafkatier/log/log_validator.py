"""Produce validation: Kafka's ``LogValidator`` (storage/.../log/LogValidator.java) and the record checks of
``ProduceRequest.validateRecords``, for record batch format v2.

Two entry points, both called before anything is appended:

- :func:`validate_produce_records` (request level, from ``KafkaApis.handle_produce``): Produce v3+ must carry
  exactly one v2 batch per partition (INVALID_RECORD, Kafka's messages), ZStandard needs Produce v7+
  (UNSUPPORTED_COMPRESSION_TYPE).
- :func:`validate_records` (log level, from ``Log.append_as_leader`` once ``record_batch`` has checked the batch
  headers, CRCs and offset ranges): the compression codec, then the records inside every batch: their framing
  (each record's varint length matches its fields; header counts and sizes are sane; the batch holds exactly
  ``recordsCount`` records and nothing after them), the inner offsets (record ``i`` has offset delta ``i``), keys on
  compacted topics, and every record's timestamp against ``message.timestamp.*`` for CreateTime topics.
  Compressed batches are decompressed (bounded) and their inner records checked the same way.

Errors are Kafka's: a broken batch or record structure is INVALID_RECORD (87), a bad timestamp INVALID_TIMESTAMP
(32), and per-record failures carry Kafka's ``record_errors`` (``batch_index`` = the record's index in its batch)
through :class:`RecordValidationError`; header and CRC problems stay CORRUPT_MESSAGE (2) in ``record_batch``.

Deliberate differences from Kafka:

- Kafka re-assigns inner offsets of a compressed batch whose offsets are not 0..n-1 (it recompresses); we never
  rewrite records, so such a batch (compressed or not) is refused with INVALID_RECORD.
- A codec whose library is missing (kafka-python's optional snappy / lz4 / zstd; ``setup.cfg`` installs them)
  cannot be checked, so its batches are refused with UNSUPPORTED_COMPRESSION_TYPE rather than stored unread.
- Record attributes other than 0 are refused (unused in format v2; Kafka ignores them, but kafka-python reads
  them as a varint and then misreads the record).
- A record header key that is not UTF-8 is refused (Kafka decodes it with replacement characters; clients such
  as kafka-python then cannot read the record, and nothing after it).
- Decompressed data is capped at :data:`MAX_DECOMPRESSED_BYTES` per batch (a batch that inflates beyond it is
  refused with INVALID_RECORD); Kafka streams instead.

Speed: the record walk is compiled (``kafkatier/log/_record_walk.c``, built by ``setup.py`` when a C compiler is
there, optional): it accepts exactly the batches the pure-Python walk accepts and returns the same result; for
anything else it returns None and the Python walk runs to raise Kafka's error, so messages never depend on which
walk ran. Without the extension the Python walk does all of it (inlined varint reads, nothing allocated per
record). Timestamps are checked once per batch from the minimum and maximum seen. aiokafka's compiled
``DefaultRecordBatch`` reader was measured first (5x the Python walk, the compiled walk ~100x) and cannot do the
checks: it reads attributes as a varint and ignores them, takes any negative key or value size as null, and
allocates every key and value.
"""
from __future__ import annotations

import struct
import zlib
from typing import Sequence

import attrs

from kafkatier.log import record_batch as rb
from kafkatier.log.errors import Errors, InvalidRecordError, KafkaError
from kafkatier.log.log_config import LONG_MAX
from kafkatier.logsetup import get_logger, kv

try:
    from kafkatier.log._record_walk import leader_append as _compiled_leader_append
    from kafkatier.log._record_walk import leader_append_info as _compiled_leader_append_info
    from kafkatier.log._record_walk import walk as _compiled_walk
except ImportError:  # built without a C compiler: the pure-Python walk below does everything
    _compiled_walk = _compiled_leader_append = _compiled_leader_append_info = None

#: AppendInfo's fields in order, for the compiled append that builds it (it sets them as ``object.__setattr__``
#: does, without the frozen class's ``__init__``: ~1 us of a ~7 us append).  Only for the slotted attrs class
#: with the fields it knows; otherwise the tuple is turned into an AppendInfo here.
_INFO_FIELDS = tuple(a.name for a in attrs.fields(rb.AppendInfo))
if _INFO_FIELDS != ("first_offset", "last_offset", "max_timestamp", "offset_of_max_timestamp", "num_batches",
                    "num_records", "valid_bytes", "records", "log_append_time", "log_start_offset",
                    "epoch_starts") or "__slots__" not in rb.AppendInfo.__dict__:
    _compiled_leader_append_info = None

log = get_logger("log.validator")

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
#: Kafka shows at most this many record errors in the top-level message.
_SHOWN_ERRORS = 3
_INT32 = struct.Struct(">i")
_warned_codecs: set[int] = set()


@attrs.frozen
class RecordError:
    """One rejected record: its index in its batch and why (Kafka's ``ProduceResponse.RecordError``)."""
    batch_index: int
    message: str | None


class RecordValidationError(KafkaError):
    """Records rejected one by one (Kafka's ``RecordValidationException``); ``error`` is INVALID_RECORD or
    INVALID_TIMESTAMP and ``record_errors`` go into the Produce response."""

    def __init__(self, message: str, error: Errors, record_errors: Sequence[RecordError]):
        super().__init__(message, error)
        self.record_errors = tuple(record_errors)


class UnsupportedCompressionTypeError(KafkaError):
    error = Errors.UNSUPPORTED_COMPRESSION_TYPE


# --- request level ------------------------------------------------------------------------------------------

def validate_produce_records(records, version: int) -> None:
    """Kafka's ``ProduceRequest.validateRecords``: for Produce v3+ exactly one v2 batch per partition."""
    if version < 3:
        return
    buf = records if isinstance(records, (bytes, bytearray)) else memoryview(records).cast("B")
    total = len(buf)
    if total < rb.LOG_OVERHEAD:
        raise InvalidRecordError(f"Produce requests with version {version} must have at least one record batch "
                                 f"per partition")
    size = _INT32.unpack_from(buf, rb.LENGTH_OFFSET)[0] + rb.LOG_OVERHEAD
    if total > rb.MAGIC_OFFSET and buf[rb.MAGIC_OFFSET] != rb.MAGIC_V2:
        raise InvalidRecordError(f"Produce requests with version {version} are only allowed to contain record "
                                 f"batches with magic version 2")
    if size < rb.HEADER_SIZE or size > total:
        raise InvalidRecordError(f"Produce requests with version {version} must have at least one record batch "
                                 f"per partition")
    if version < 7 and buf[rb.ATTRIBUTES_OFFSET + 1] & rb.COMPRESSION_CODEC_MASK == ZSTD:
        raise UnsupportedCompressionTypeError(f"Produce requests with version {version} are not allowed to use "
                                              f"ZStandard compression")
    if total - size >= rb.LOG_OVERHEAD:
        raise InvalidRecordError(f"Produce requests with version {version} are only allowed to contain exactly "
                                 f"one record batch per partition")


# --- log level ----------------------------------------------------------------------------------------------

def validate_leader_append(records, next_offset: int, leader_epoch: int, now_ms: int, config, *,
                           log_start_offset: int = -1, topic_partition: str = "",
                           from_coordinator: bool = False) -> rb.AppendInfo:
    """A leader append's validation, whole: :func:`record_batch.validate_and_assign_offsets` (sizes, magic, CRC,
    the client append rules, offsets assigned) then :func:`validate_records` (the records inside), as Kafka's
    ``LogValidator`` does both.  :class:`LeaderAppendValidator` for one config (a log keeps one)."""
    return LeaderAppendValidator(config).validate(records, next_offset, leader_epoch, now_ms,
                                                  log_start_offset=log_start_offset, topic_partition=topic_partition,
                                                  from_coordinator=from_coordinator)


class LeaderAppendValidator:
    """:func:`validate_leader_append` for one topic config, its settings read once (``Log`` keeps one per config:
    every append reading the timestamp, size and cleanup settings again was a tenth of a 16 KiB append).

    The compiled fast path (``_record_walk.leader_append``) does both steps in one pass for what it accepts:
    uncompressed CreateTime batches from a client, every check passed.  For anything else it returns None and
    the two Python steps run, raising the error, so the errors are always the Python path's."""

    __slots__ = ("config", "_before", "_after", "_create_time", "_max_message_bytes", "_compact")

    def __init__(self, config) -> None:
        self.config = config
        before = config.effective_timestamp_before_max_ms
        after = config.effective_timestamp_after_max_ms
        self._before = None if before == LONG_MAX else before
        self._after = None if after == LONG_MAX else after
        self._create_time = config.message_timestamp_type != rb.LOG_APPEND_TIME
        self._max_message_bytes = config.max_message_bytes
        self._compact = config.compact

    def validate(self, records, next_offset: int, leader_epoch: int, now_ms: int, log_start_offset: int = -1,
                 topic_partition: str = "", from_coordinator: bool = False) -> rb.AppendInfo:
        compiled = _compiled_leader_append   # None: the Python steps below (tests and benchmarks set it so)
        if compiled is not None and self._create_time and not from_coordinator:
            try:
                build = _compiled_leader_append_info
                if build is not None:
                    info = build(records, next_offset, leader_epoch, now_ms, self._max_message_bytes, self._before,
                                 self._after, self._compact, rb.crc32c, rb.AppendInfo, _INFO_FIELDS,
                                 log_start_offset)
                    if info is not None:
                        return info
                else:
                    fast = compiled(records, next_offset, leader_epoch, now_ms, self._max_message_bytes,
                                    self._before, self._after, self._compact, rb.crc32c)
                    if fast is not None:  # (first, last, max_ts, offset of max_ts, batches, count, bytes, records)
                        return rb.AppendInfo(*fast, log_start_offset=log_start_offset)
            except (TypeError, BufferError, OverflowError, ValueError):  # a buffer it cannot read: Python can
                pass
        cfg = self.config
        info = rb.validate_and_assign_offsets(
            records, next_offset, leader_epoch, now_ms, max_message_bytes=self._max_message_bytes,
            timestamp_type=cfg.message_timestamp_type, timestamp_before_max_ms=self._before,
            timestamp_after_max_ms=self._after, log_start_offset=log_start_offset, topic_partition=topic_partition,
            from_coordinator=from_coordinator)
        if not from_coordinator:
            validate_records(info.records, cfg, now_ms, topic_partition=topic_partition)
        return info


def validate_records(records, config, now_ms: int, *, topic_partition: str = "") -> None:
    """Check the records inside every batch of a leader append (headers already checked by ``record_batch``).

    ``config`` is the partition's ``LogConfig`` (``message.timestamp.*``, ``cleanup.policy``)."""
    create_time = config.message_timestamp_type != rb.LOG_APPEND_TIME
    before = config.effective_timestamp_before_max_ms if create_time else LONG_MAX
    after = config.effective_timestamp_after_max_ms if create_time else LONG_MAX
    lo = now_ms - before if before < LONG_MAX else None
    hi = now_ms + after if after < LONG_MAX else None
    compacted = config.compact
    tp = topic_partition or "<unknown>"
    # rb.iter_batches inlined (no header object per batch): whole batches only; what it refuses, it raises
    total = len(records)
    pos = 0
    unpack = rb.HEADER.unpack_from
    while total - pos >= rb.LOG_OVERHEAD:
        size = _INT32.unpack_from(records, pos + rb.LENGTH_OFFSET)[0] + rb.LOG_OVERHEAD
        if size < rb.HEADER_SIZE:
            next(rb.iter_batches(records, pos))  # raises iter_batches' CorruptRecordError
        if pos + size > total:
            break
        (base_offset, _len, _epoch, magic, _crc, attributes, _last_delta, base_ts, _max_ts, _pid, _pe, _seq,
         count) = unpack(records, pos)
        if magic != rb.MAGIC_V2:
            next(rb.iter_batches(records, pos))  # raises iter_batches' CorruptRecordError
        codec = attributes & rb.COMPRESSION_CODEC_MASK
        body_start, body_end = pos + rb.HEADER_SIZE, pos + size
        if codec == NONE:
            data, start, end = records, body_start, body_end
        else:
            inflated = decompress(codec, records, body_start, body_end, tp)
            data, start, end = inflated, 0, len(inflated)
        min_ts, min_i, max_ts, max_i, keyless = walk_records(data, start, end, count, base_ts, tp, codec != NONE)
        pos += size
        if compacted and keyless:
            raise RecordValidationError(
                _summary(len(keyless), "One or more records have been rejected"), Errors.INVALID_RECORD,
                [RecordError(i, f"Compacted topic cannot accept message without key in topic partition {tp}.")
                 for i in keyless])
        if base_ts == rb.NO_TIMESTAMP or (lo is None and hi is None):
            continue  # Kafka checks only records that carry a timestamp
        errors = []
        if lo is not None and min_ts < lo:
            errors.append(RecordError(min_i, _ts_message(min_ts, base_offset + min_i, lo, hi, now_ms)))
        if hi is not None and max_ts > hi:
            errors.append(RecordError(max_i, _ts_message(max_ts, base_offset + max_i, lo, hi, now_ms)))
        if errors:
            raise RecordValidationError(_summary(len(errors), "One or more records have been rejected due to invalid "
                                                              "timestamp"), Errors.INVALID_TIMESTAMP, errors)


def _summary(count: int, prefix: str) -> str:
    return f"{prefix}: {count} record error(s) in total, showing at most the first {_SHOWN_ERRORS}"


def _ts_message(ts: int, offset: int, lo: int | None, hi: int | None, now_ms: int) -> str:
    return (f"Timestamp {ts} of message with offset {offset} is out of range. The timestamp should be within "
            f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else '+inf'}]")


def decompress(codec: int, buf, start: int, end: int, tp: str) -> bytes:
    """The inflated records of a compressed batch (also read by the log cleaner)."""
    if codec == GZIP:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out = d.decompress(bytes(memoryview(buf)[start:end]), MAX_DECOMPRESSED_BYTES)
        except zlib.error as e:
            raise InvalidRecordError(f"Failed to decompress gzip record batch in topic partition {tp}: {e}") from None
        if d.unconsumed_tail:
            raise InvalidRecordError(f"Record batch in topic partition {tp} decompresses to more than "
                                     f"{MAX_DECOMPRESSED_BYTES} bytes")
        if not d.eof:
            raise InvalidRecordError(f"Failed to decompress gzip record batch in topic partition {tp}: "
                                     f"truncated stream")
        return out
    if codec in (SNAPPY, LZ4, ZSTD):
        from kafka import codec as kc
        available = {SNAPPY: kc.has_snappy, LZ4: kc.has_lz4, ZSTD: kc.has_zstd}[codec]()
        if not available:  # never append what cannot be checked (setup.cfg installs every codec's library)
            if codec not in _warned_codecs:
                _warned_codecs.add(codec)
                log.error("cannot decompress to validate: codec library not installed; such batches are refused "
                          "%s", kv(codec=CODEC_NAMES[codec]))
            raise UnsupportedCompressionTypeError(f"Compression codec {CODEC_NAMES[codec]} is not available on "
                                                  f"this broker")
        decode = {SNAPPY: kc.snappy_decode, LZ4: kc.lz4_decode, ZSTD: kc.zstd_decode}[codec]
        try:
            out = decode(bytes(memoryview(buf)[start:end]))
        except Exception as e:  # noqa: BLE001 - each library raises its own error type
            raise InvalidRecordError(f"Failed to decompress {CODEC_NAMES[codec]} record batch in topic partition "
                                     f"{tp}: {type(e).__name__}") from None
        if len(out) > MAX_DECOMPRESSED_BYTES:
            raise InvalidRecordError(f"Record batch in topic partition {tp} decompresses to more than "
                                     f"{MAX_DECOMPRESSED_BYTES} bytes")
        return out
    raise InvalidRecordError(f"Unknown compression type id: {codec} in topic partition {tp}")


def walk_records(buf, pos: int, end: int, count: int, base_ts: int, tp: str, compressed: bool):
    """:func:`_walk`, by the compiled walk when it is built (it accepts exactly what ``_walk`` accepts, with the
    same result) and by ``_walk`` for every batch it does not accept (which raises Kafka's error)."""
    if _compiled_walk is not None:
        try:
            result = _compiled_walk(buf, pos, end, count, base_ts)
        except (TypeError, BufferError, OverflowError):  # a buffer it cannot read: the Python walk can
            result = None
        if result is not None:
            return result
    return _walk(buf, pos, end, count, base_ts, tp, compressed)


def _walk(buf, pos: int, end: int, count: int, base_ts: int, tp: str, compressed: bool):
    """Walk ``count`` v2 records in ``buf[pos:end]``; returns (min timestamp, its index, max timestamp, its index,
    indexes of records without a key).  Raises InvalidRecordError on any framing or inner offset problem."""
    min_ts = max_ts = None
    min_i = max_i = 0
    keyless: list[int] = []
    i = 0
    try:
        while i < count:
            if pos >= end:
                raise InvalidRecordError(f"Record batch in topic partition {tp} declares {count} records but holds "
                                         f"only {i}")
            # record length (zigzag varint); the common case is one byte
            b = buf[pos]
            pos += 1
            if b < 0x80:
                v = b
            else:
                v, shift = b & 0x7F, 7
                while True:
                    b = buf[pos]
                    pos += 1
                    v |= (b & 0x7F) << shift
                    if b < 0x80:
                        break
                    shift += 7
                    if shift > 28:
                        raise InvalidRecordError("Invalid varint record length")
            length = (v >> 1) ^ -(v & 1)
            rec_end = pos + length
            if length < 1 or rec_end > end:
                raise InvalidRecordError(f"Invalid record size: expected to read {length} bytes in record payload, "
                                         f"but instead the buffer has only {end - pos} remaining bytes.")
            if buf[pos]:
                raise InvalidRecordError(f"Record {i} in topic partition {tp} has attributes {buf[pos]}; record "
                                         f"attributes are unused in record format v2 and must be 0")
            p = pos + 1
            # Each field is a zigzag varint, nearly always one byte: inline that case, call for the rest.
            b = buf[p]
            if b < 0x80:
                ts_delta, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                p, ts_delta = _varint(buf, p, 63)
            b = buf[p]
            if b < 0x80:
                off_delta, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                p, off_delta = _varint(buf, p, 28)
            if off_delta != i:
                raise InvalidRecordError(f"Inner record {i} of a record batch in topic partition {tp} has offset "
                                         f"delta {off_delta}, expected {i}")
            b = buf[p]
            if b < 0x80:
                klen, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                p, klen = _varint(buf, p, 28)
            if klen >= 0:
                p += klen
            elif klen == -1:
                keyless.append(i)
            else:
                raise InvalidRecordError(f"Invalid negative key size {klen}")
            b = buf[p]
            if b < 0x80:
                vlen, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                p, vlen = _varint(buf, p, 28)
            if vlen >= 0:
                p += vlen
            elif vlen < -1:
                raise InvalidRecordError(f"Invalid negative value size {vlen}")
            b = buf[p]
            if b == 0:
                p += 1
            else:
                p = _headers(buf, p, rec_end)
            if p != rec_end:
                raise InvalidRecordError(f"Invalid record size: expected to read {length} bytes in record payload, "
                                         f"but instead read {p - pos}")
            ts = base_ts + ts_delta
            if min_ts is None:
                min_ts = max_ts = ts
            elif ts < min_ts:
                min_ts, min_i = ts, i
            elif ts > max_ts:
                max_ts, max_i = ts, i
            pos = rec_end
            i += 1
    except IndexError:
        raise InvalidRecordError(f"Found invalid record structure in topic partition {tp}") from None
    if pos != end:
        raise InvalidRecordError(f"Incorrect declared batch size, records still remaining in file (topic partition "
                                 f"{tp}{', compressed batch' if compressed else ''})")
    if min_ts is None:
        min_ts = max_ts = base_ts
    return min_ts, min_i, max_ts, max_i, keyless


def _headers(buf, p: int, rec_end: int) -> int:
    """Skip a record's headers (count varint at ``p``); the position after them."""
    p, nheaders = _varint(buf, p, 28)
    if nheaders < 0:
        raise InvalidRecordError(f"Found invalid number of record headers {nheaders}")
    for _ in range(nheaders):
        if p >= rec_end:
            raise InvalidRecordError(f"Found invalid number of record headers {nheaders}")
        p, hk = _varint(buf, p, 28)
        if hk < 0:
            raise InvalidRecordError(f"Invalid negative header key size {hk}")
        try:  # a String in Kafka's format; clients (kafka-python) cannot read a record whose key is not UTF-8
            bytes(buf[p:p + hk]).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRecordError("Invalid record header key: not UTF-8") from None
        p += hk
        p, hv = _varint(buf, p, 28)
        if hv < -1:
            raise InvalidRecordError(f"Invalid negative header value size {hv}")
        if hv > 0:
            p += hv
    return p


def _varint(buf, p: int, max_shift: int) -> tuple[int, int]:
    """A zigzag varint at ``p``: (next position, value); IndexError past the end of ``buf``."""
    b = buf[p]
    if b < 0x80:
        return p + 1, (b >> 1) ^ -(b & 1)
    v, shift = b & 0x7F, 7
    p += 1
    while True:
        b = buf[p]
        p += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return p, (v >> 1) ^ -(v & 1)
        shift += 7
        if shift > max_shift:
            raise InvalidRecordError("Invalid varint in record")
