"""Message format v0/v1 (magic 0/1) ↔ v2 record batches, as Kafka's broker converts them.

Kafka 3.x keeps its logs in format v2 (``log.message.format.version`` ≥ 3.0 is the only choice), yet still serves
Produce v0–v2 and Fetch v0–v3, whose clients speak message sets of magic 0 (Kafka 0.8–0.9) or magic 1 (0.10).

* **Up-conversion on produce** (Kafka's ``LogValidator.convertAndAssignOffsetsNonCompressed`` /
  ``validateMessagesAndAssignOffsetsCompressed``): every message's CRC is checked (``CORRUPT_MESSAGE``), compressed
  wrappers are opened, and the messages become one v2 batch with the wrapper's codec; magic 0 messages carry no
  timestamp (``NO_TIMESTAMP``, -1), magic 1 messages keep theirs.  Offsets are assigned by the log's append.
* **Down-conversion on fetch** (Kafka's ``RecordsUtil.downConvert`` for fetchers below Fetch v4): v2 batches are
  rewritten as magic 0 (Fetch v0–v1) or magic 1 (Fetch v2–v3) messages with their offsets kept; control batches are
  dropped and headers (which old formats cannot carry) are lost.  kafkatier writes the converted messages
  uncompressed (Kafka re-compresses with the batch's codec); old clients read both.

The message-set codecs are kafka-python's (``kafka.record``).
"""
from __future__ import annotations

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kafkatier.protocol.errors import Errors, KafkaError

MAGIC_OFFSET = 16  # offset(8) + size(4) + crc(4): the magic byte of a legacy message and of a v2 batch alike
NO_TIMESTAMP = -1
_BIG = 1 << 31


class CorruptMessageError(KafkaError):
    def __init__(self, message: str):
        super().__init__(message, Errors.CORRUPT_MESSAGE)


def magic_of(records) -> int:
    """The magic byte of the first entry of ``records`` (-1 when too short to tell)."""
    buf = memoryview(records).cast("B") if not isinstance(records, (bytes, bytearray)) else records
    return buf[MAGIC_OFFSET] if len(buf) > MAGIC_OFFSET else -1


def fetch_magic(fetch_version: int) -> int:
    """The newest message format a fetcher of ``fetch_version`` reads: magic 0 below v2, 1 below v4, else 2."""
    return 0 if fetch_version <= 1 else 1 if fetch_version <= 3 else 2


def up_convert(records) -> bytes:
    """A produce request's magic 0/1 message set as one v2 batch (offsets from 0; the log assigns the real ones).

    Raises :class:`CorruptMessageError` on a bad CRC, a truncated message, an empty set or a magic ≥ 2 entry."""
    data = bytes(records)
    mr = MemoryRecords(data)
    builder = None
    delta = 0
    while True:
        batch = mr.next_batch()
        if batch is None:
            break
        if not isinstance(batch, LegacyRecordBatch):
            raise CorruptMessageError("Produce requests before v3 may only carry message format v0/v1")
        if not batch.validate_crc():
            raise CorruptMessageError("Message is corrupt (stored crc does not match computed crc)")
        for record in batch:
            if builder is None:
                builder = DefaultRecordBatchBuilder(
                    magic=2, compression_type=batch.compression_type, is_transactional=False, producer_id=-1,
                    producer_epoch=-1, base_sequence=-1, batch_size=_BIG)
            ts = record.timestamp if batch.magic >= 1 and record.timestamp is not None else NO_TIMESTAMP
            builder.append(delta, timestamp=ts, key=record.key, value=record.value, headers=[])
            delta += 1
    if builder is None:
        raise CorruptMessageError("Produce request carries no complete message")
    return bytes(builder.build())


def down_convert(records, magic: int, first_offset: int = 0) -> bytes:
    """Fetched v2 batches (``records``: bytes-like, possibly ending in a partial batch) as a message set of
    ``magic`` (0 or 1), offsets kept, control batches and records before ``first_offset`` (the fetch offset,
    inside the first batch) dropped, as Kafka's ``RecordsUtil.downConvert``."""
    if records is None:
        return records
    data = bytes(records)
    if not data:
        return data
    mr = MemoryRecords(data)
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=_BIG)
    while True:
        batch = mr.next_batch()
        if batch is None:
            break
        if getattr(batch, "is_control_batch", False):
            continue
        for record in batch:
            if record.offset < first_offset:
                continue
            ts = record.timestamp if magic >= 1 and record.timestamp is not None and record.timestamp >= 0 \
                else (NO_TIMESTAMP if magic >= 1 else None)
            builder.append(record.offset, timestamp=ts, key=record.key, value=record.value)
    return bytes(builder.build())


__all__ = ["CorruptMessageError", "down_convert", "fetch_magic", "magic_of", "up_convert"]
