"""Record batch v2 (magic 2) headers: parse, validate and assign offsets without touching the records.

Layout of the 61-byte header (big-endian)::

    0  baseOffset int64        8  batchLength int32      12 partitionLeaderEpoch int32
    16 magic int8              17 crc uint32             21 attributes int16
    23 lastOffsetDelta int32   27 baseTimestamp int64    35 maxTimestamp int64
    43 producerId int64        51 producerEpoch int16    53 baseSequence int32
    57 recordsCount int32      61 records...

``batchLength`` counts the bytes after itself, so a batch occupies ``batchLength + 12`` bytes. The CRC-32C
covers attributes to the end of the batch, so rewriting baseOffset and partitionLeaderEpoch keeps it valid.

Only v2 batches are accepted: kafka-python, confluent-kafka (librdkafka) and kcat all produce v2 against a
broker that advertises Produce v3+, and a v0/v1 message set is rejected with CORRUPT_MESSAGE.
Compressed batches are stored as received; nothing here decompresses.
"""
from __future__ import annotations

import struct
from typing import Iterator

import attrs
from crc32c import crc32c

from kafkatier.log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetsOutOfOrderError,
    RecordTooLargeError,
)

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61 == Kafka's RECORD_BATCH_OVERHEAD
RECORD_BATCH_OVERHEAD = HEADER_SIZE
LOG_OVERHEAD = 12  # baseOffset + batchLength
MAGIC_V2 = 2

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20

NO_TIMESTAMP = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_PRODUCER_ID = -1
CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
INT32_MAX = 2**31 - 1

_OFFSET_LEN_EPOCH = struct.Struct(">qii")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_LEN_AT = struct.Struct(">qi")


@attrs.frozen(slots=True)
class BatchHeader:
    """The fixed header of one v2 record batch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @classmethod
    def parse(cls, buf, position: int = 0) -> BatchHeader:
        """Parse the header at ``position``; the buffer must hold at least 61 bytes from there."""
        if len(buf) - position < HEADER_SIZE:
            raise CorruptRecordError(
                f"Record batch header at position {position} is truncated: {len(buf) - position} bytes "
                f"available, {HEADER_SIZE} needed")
        return cls(*HEADER.unpack_from(buf, position))

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression_type(self) -> int:
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self) -> str:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control_batch(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID


@attrs.frozen
class AppendInfo:
    """What an append validated and (for leaders) assigned.

    ``records`` are the bytes to write: whole batches only (a trailing partial batch is dropped, as Kafka
    does), with offsets and leader epochs rewritten on the leader path. Empty input yields ``num_batches=0``
    and ``first_offset = last_offset = -1``.
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    num_batches: int
    num_records: int
    valid_bytes: int
    records: bytes
    log_append_time: int = NO_TIMESTAMP
    log_start_offset: int = -1
    # (epoch, base offset) where the partition leader epoch changes between batches (follower appends).
    epoch_starts: tuple[tuple[int, int], ...] = ()


def compute_crc(buf, position: int, size: int) -> int:
    """CRC-32C of a batch at ``position`` of ``size`` bytes (attributes to end)."""
    return crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET: position + size])


def is_valid_batch(buf, position: int = 0) -> bool:
    """True when the batch at ``position`` is complete, v2, and its CRC matches."""
    if len(buf) - position < HEADER_SIZE:
        return False
    size = _INT32.unpack_from(buf, position + LENGTH_OFFSET)[0] + LOG_OVERHEAD
    if size < HEADER_SIZE or position + size > len(buf) or buf[position + MAGIC_OFFSET] != MAGIC_V2:
        return False
    return compute_crc(buf, position, size) == _UINT32.unpack_from(buf, position + CRC_OFFSET)[0]


def rewrite_base_offset(buf: bytearray, position: int, base_offset: int) -> None:
    """Set baseOffset of the batch at ``position`` in place (the CRC does not cover it)."""
    _INT64.pack_into(buf, position + BASE_OFFSET_OFFSET, base_offset)


def rewrite_partition_leader_epoch(buf: bytearray, position: int, epoch: int) -> None:
    """Set partitionLeaderEpoch of the batch at ``position`` in place (the CRC does not cover it)."""
    _INT32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf: bytearray, position: int, size: int, now_ms: int) -> None:
    """Mark the batch LogAppendTime with maxTimestamp = now and recompute its CRC (Kafka's setMaxTimestamp)."""
    attributes = _INT16.unpack_from(buf, position + ATTRIBUTES_OFFSET)[0]
    _INT16.pack_into(buf, position + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, now_ms)
    _UINT32.pack_into(buf, position + CRC_OFFSET, compute_crc(buf, position, size))


def iter_batches(buf, start: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each complete batch; stop at a trailing partial batch.

    Raises CorruptRecordError for a batch smaller than the v2 overhead or with a magic other than 2
    (the rest of the buffer cannot be interpreted then). CRCs are not checked here.
    """
    total = len(buf)
    pos = start
    while total - pos >= LOG_OVERHEAD:
        size = _INT32.unpack_from(buf, pos + LENGTH_OFFSET)[0] + LOG_OVERHEAD
        if size < HEADER_SIZE:
            raise CorruptRecordError(f"Record batch at position {pos} has size {size}, which is less than "
                                     f"the minimum record batch overhead ({HEADER_SIZE})")
        if pos + size > total:
            return
        header = BatchHeader(*HEADER.unpack_from(buf, pos))
        if header.magic != MAGIC_V2:
            raise CorruptRecordError(_magic_message(header.magic, pos))
        yield pos, header
        pos += size


PRODUCER_ID_OFFSET = 43
_INT64 = struct.Struct(">q")


def without_producer_ids(buf) -> bool:
    """True when every whole batch of ``buf`` is a v2 batch without a producer id (a plain, non-idempotent
    producer's): a producer state has nothing to check or record for them.  False for anything else, including
    what :func:`iter_batches` refuses (then the callers that iterate raise its error)."""
    total = len(buf)
    pos = 0
    while total - pos >= LOG_OVERHEAD:
        size = _INT32.unpack_from(buf, pos + LENGTH_OFFSET)[0] + LOG_OVERHEAD
        if size < HEADER_SIZE:
            return False
        if pos + size > total:
            break
        if buf[pos + MAGIC_OFFSET] != MAGIC_V2 or _INT64.unpack_from(buf, pos + PRODUCER_ID_OFFSET)[0] != NO_PRODUCER_ID:
            return False
        pos += size
    return True


def whole_batches_size(buf, start: int = 0) -> int:
    """Number of bytes from ``start`` that hold whole batches (reads batchLength fields only)."""
    total = len(buf)
    pos = start
    while total - pos >= LOG_OVERHEAD:
        size = _INT32.unpack_from(buf, pos + LENGTH_OFFSET)[0] + LOG_OVERHEAD
        if size < HEADER_SIZE or pos + size > total:
            break
        pos += size
    return pos - start


def _magic_message(magic: int, pos: int) -> str:
    return (f"Record batch at position {pos} has magic {magic}; only record batch format v2 (magic 2) is "
            f"accepted")


def _tp(topic_partition: str) -> str:
    return topic_partition or "<unknown>"


def _check_size_and_magic(buf, pos: int, size: int, total: int, max_message_bytes: int | None,
                          topic_partition: str) -> None:
    # Magic first: a v0/v1 message can be smaller than a v2 header.
    if size > MAGIC_OFFSET and total - pos > MAGIC_OFFSET and buf[pos + MAGIC_OFFSET] != MAGIC_V2:
        raise CorruptRecordError(_magic_message(buf[pos + MAGIC_OFFSET], pos))
    if size < HEADER_SIZE:
        raise CorruptRecordError(
            f"Record batch at position {pos} in the append to {_tp(topic_partition)} has size {size}, "
            f"which is less than the minimum record batch overhead ({HEADER_SIZE})")
    if max_message_bytes is not None and size > max_message_bytes:
        raise RecordTooLargeError(
            f"The record batch size in the append to {_tp(topic_partition)} is {size} bytes which exceeds "
            f"the maximum configured value of {max_message_bytes}.")


def validate_and_assign_offsets(records, next_offset: int, leader_epoch: int, now_ms: int, *,
                                max_message_bytes: int | None = None,
                                timestamp_type: str = CREATE_TIME,
                                timestamp_before_max_ms: int | None = None,
                                timestamp_after_max_ms: int | None = None,
                                log_start_offset: int = -1,
                                topic_partition: str = "", from_coordinator: bool = False) -> AppendInfo:
    """Validate a produced ``records`` blob batch by batch (headers and CRC) and assign offsets.

    ``from_coordinator``: an append of a coordinator (Kafka's ``AppendOrigin.COORDINATOR``): control batches
    (transaction markers) and producer batches without a sequence (transactional offset commits) are allowed.

    Each batch gets ``baseOffset = next offset`` and ``partitionLeaderEpoch = leader_epoch``; with
    ``timestamp_type=LogAppendTime`` its maxTimestamp becomes ``now_ms`` (and the CRC is recomputed).
    Raises CorruptRecordError (size, magic, CRC), RecordTooLargeError, InvalidRecordError (Kafka's client
    append rules) or InvalidTimestampError.
    """
    src = memoryview(records).cast("B") if not isinstance(records, (bytes, bytearray)) else records
    total = len(src)
    # The output is built once with b"".join: per batch a rewritten 16-byte prefix (offset, length, leader
    # epoch: not covered by the CRC) and a view of the rest.  Copying the whole blob to a bytearray and then
    # to bytes cost ~1 ms per MiB (fresh large buffers page-fault), 25 times the CRC check.
    view = memoryview(src)
    parts: list = []
    pos = 0
    first_offset = next_offset
    max_ts = NO_TIMESTAMP
    offset_of_max_ts = -1
    num_batches = 0
    num_records = 0
    log_append = timestamp_type == LOG_APPEND_TIME
    unpack = HEADER.unpack_from
    while total - pos >= LOG_OVERHEAD:
        size = _INT32.unpack_from(src, pos + LENGTH_OFFSET)[0] + LOG_OVERHEAD
        _check_size_and_magic(src, pos, size, total, max_message_bytes, topic_partition)
        if pos + size > total:
            break  # trailing partial batch: dropped, as Kafka trims invalid bytes
        (base, _len, _epoch, _magic, crc, attributes, last_delta, base_ts, batch_max_ts, producer_id,
         _producer_epoch, base_sequence, count) = unpack(src, pos)
        computed = crc32c(view[pos + ATTRIBUTES_OFFSET: pos + size])
        if computed != crc:
            raise CorruptRecordError(f"Record is corrupt (stored crc = {crc}, computed crc = {computed}) in "
                                     f"topic partition {_tp(topic_partition)}.")
        if base != 0:
            raise InvalidRecordError(f"The baseOffset of the record batch in the append to "
                                     f"{_tp(topic_partition)} should be 0, but it is {base}")
        if last_delta < 0:
            raise InvalidRecordError(f"Batch has an invalid offset range: [{base}, {base + last_delta}] in "
                                     f"topic partition {_tp(topic_partition)}.")
        if count <= 0:
            raise InvalidRecordError(f"Invalid reported count for record batch: {count} in topic partition "
                                     f"{_tp(topic_partition)}.")
        if last_delta + 1 != count:
            raise InvalidRecordError(f"Inconsistent batch offset range [{base}, {base + last_delta}] and "
                                     f"count of records {count} in topic partition {_tp(topic_partition)}.")
        if attributes & CONTROL_FLAG_MASK and not from_coordinator:
            raise InvalidRecordError(f"Clients are not allowed to write control records in topic partition "
                                     f"{_tp(topic_partition)}.")
        if producer_id > NO_PRODUCER_ID and base_sequence < 0 and not from_coordinator:
            raise InvalidRecordError(f"Invalid sequence number {base_sequence} in record batch with "
                                     f"producerId {producer_id} in topic partition {_tp(topic_partition)}.")
        if not log_append:
            _check_timestamps(base_ts, batch_max_ts, next_offset, now_ms, timestamp_before_max_ms,
                              timestamp_after_max_ms)
        last_offset = next_offset + last_delta
        if log_append:
            batch = bytearray(view[pos:pos + size])
            _OFFSET_LEN_EPOCH.pack_into(batch, 0, next_offset, _len, leader_epoch)
            set_log_append_time(batch, 0, size, now_ms)
            parts.append(batch)
            batch_max_ts = now_ms
        else:
            parts.append(_OFFSET_LEN_EPOCH.pack(next_offset, _len, leader_epoch))
            parts.append(view[pos + _OFFSET_LEN_EPOCH.size:pos + size])
        if batch_max_ts > max_ts:
            max_ts = batch_max_ts
            offset_of_max_ts = last_offset
        num_batches += 1
        num_records += count
        next_offset = last_offset + 1
        pos += size
    if num_batches == 0:
        return AppendInfo(-1, -1, NO_TIMESTAMP, -1, 0, 0, 0, b"", log_start_offset=log_start_offset)
    return AppendInfo(first_offset, next_offset - 1, max_ts, offset_of_max_ts, num_batches, num_records, pos,
                      b"".join(parts), now_ms if log_append else NO_TIMESTAMP, log_start_offset)


def _check_timestamps(base_ts: int, max_ts: int, offset: int, now_ms: int, before_max_ms: int | None,
                      after_max_ms: int | None) -> None:
    # Kafka checks every record; the header bounds the latest (maxTimestamp) and, through the first
    # record's timestamp (baseTimestamp), the usual earliest one.
    if before_max_ms is not None and base_ts != NO_TIMESTAMP and now_ms - base_ts > before_max_ms:
        raise InvalidTimestampError(
            f"Timestamp {base_ts} of message with offset {offset} is out of range. The timestamp should be "
            f"within [{now_ms - before_max_ms}, {now_ms + (after_max_ms or 0)}]")
    if after_max_ms is not None and max_ts - now_ms > after_max_ms:
        raise InvalidTimestampError(
            f"Timestamp {max_ts} of message with offset {offset} is out of range. The timestamp should be "
            f"within [{now_ms - (before_max_ms or 0)}, {now_ms + after_max_ms}]")


def validate_follower_records(records, *, topic_partition: str = "") -> AppendInfo:
    """Validate batches fetched from the leader; their offsets and epochs are kept as they are.

    Checks sizes, magic, CRC and that offsets increase from batch to batch (gaps are allowed: the
    leader's log may be compacted). Raises CorruptRecordError or OffsetsOutOfOrderError.
    """
    src = memoryview(records).cast("B") if not isinstance(records, (bytes, bytearray)) else records
    total = len(src)
    pos = 0
    first_offset = -1
    last_offset = -1
    max_ts = NO_TIMESTAMP
    offset_of_max_ts = -1
    num_batches = 0
    num_records = 0
    epoch_starts: list[tuple[int, int]] = []
    prev_epoch = None
    view = memoryview(src)
    while total - pos >= LOG_OVERHEAD:
        size = _INT32.unpack_from(src, pos + LENGTH_OFFSET)[0] + LOG_OVERHEAD
        _check_size_and_magic(src, pos, size, total, None, topic_partition)
        if pos + size > total:
            break
        (base, _len, epoch, _magic, crc, _attributes, last_delta, _base_ts, batch_max_ts, _pid, _pe, _seq,
         count) = HEADER.unpack_from(src, pos)
        computed = crc32c(view[pos + ATTRIBUTES_OFFSET: pos + size])
        if computed != crc:
            raise CorruptRecordError(f"Record is corrupt (stored crc = {crc}, computed crc = {computed}) in "
                                     f"topic partition {_tp(topic_partition)}.")
        batch_last = base + last_delta
        if last_delta < 0 or (num_batches and base <= last_offset):
            raise OffsetsOutOfOrderError(
                f"Out of order offsets found in append to {_tp(topic_partition)}: batch [{base}, {batch_last}] "
                f"follows last offset {last_offset}")
        if num_batches == 0:
            first_offset = base
        if epoch >= 0 and epoch != prev_epoch:
            epoch_starts.append((epoch, base))
            prev_epoch = epoch
        if batch_max_ts > max_ts:
            max_ts = batch_max_ts
            offset_of_max_ts = batch_last
        last_offset = batch_last
        num_batches += 1
        num_records += count
        pos += size
    if num_batches == 0:
        return AppendInfo(-1, -1, NO_TIMESTAMP, -1, 0, 0, 0, b"")
    data = bytes(view[:pos]) if not isinstance(src, bytes) or pos < total else src
    return AppendInfo(first_offset, last_offset, max_ts, offset_of_max_ts, num_batches, num_records, pos,
                      data, epoch_starts=tuple(epoch_starts))


def _zigzag_varint(value: int) -> bytes:
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while v & ~0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


_CONTROL_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")


def end_transaction_marker(producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                           timestamp_ms: int) -> bytes:
    """One control batch holding a COMMIT (type 1) or ABORT (type 0) marker, Kafka's
    ``MemoryRecords.withEndTransactionMarker``: transactional + control attributes, base sequence -1, one record
    with key (version 0, type) and value (version 0, coordinator epoch); offsets are assigned on append."""
    key = _CONTROL_KEY.pack(0, 1 if commit else 0)
    value = _MARKER_VALUE.pack(0, coordinator_epoch)
    body = (b"\x00" + _zigzag_varint(0) + _zigzag_varint(0) + _zigzag_varint(len(key)) + key
            + _zigzag_varint(len(value)) + value + _zigzag_varint(0))
    record = _zigzag_varint(len(body)) + body
    attributes = TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK
    batch = bytearray(HEADER.pack(0, HEADER_SIZE - LOG_OVERHEAD + len(record), NO_PARTITION_LEADER_EPOCH,
                                  MAGIC_V2, 0, attributes, 0, timestamp_ms, timestamp_ms, producer_id,
                                  producer_epoch, -1, 1)) + record
    _UINT32.pack_into(batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
    return bytes(batch)
