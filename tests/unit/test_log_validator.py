"""Produce validation (log/log_validator.py): every kind of bad batch is refused with Kafka's error and nothing
reaches the log; valid batches (plain and gzip) pass unchanged."""
from __future__ import annotations

import struct
import time

import pytest
from crc32c import crc32c
from kafka.record.memory_records import MemoryRecordsBuilder

from kafkatier.log import record_batch as rb
from kafkatier.log.log import Log
from kafkatier.log.log_config import LogConfig
from kafkatier.log.log_validator import (RecordValidationError, validate_produce_records, validate_records)
from kafkatier.protocol.errors import Errors, KafkaError

NOW = 1_700_000_000_000


def batch(n: int = 3, *, ts: int = NOW, compression: int = 0, key: bool = True) -> bytes:
    b = MemoryRecordsBuilder(2, compression, 1 << 22)
    for i in range(n):
        b.append(ts + i, (b"k%d" % i) if key else None, b"v" * 20, headers=[("h", b"x")])
    b.close()
    return bytes(b.buffer())


def reseal(blob: bytes | bytearray, *, codec: int | None = None, count: int | None = None) -> bytes:
    """Edit a batch header field and recompute the CRC, as an attacker with a working client would."""
    buf = bytearray(blob)
    if codec is not None:
        attrs_ = struct.unpack_from(">h", buf, rb.ATTRIBUTES_OFFSET)[0]
        struct.pack_into(">h", buf, rb.ATTRIBUTES_OFFSET, (attrs_ & ~7) | codec)
    if count is not None:
        struct.pack_into(">i", buf, 57, count)
        struct.pack_into(">i", buf, rb.LAST_OFFSET_DELTA_OFFSET, count - 1)
    struct.pack_into(">I", buf, rb.CRC_OFFSET, crc32c(bytes(buf[rb.ATTRIBUTES_OFFSET:])))
    return bytes(buf)


def with_records(blob: bytes, records: bytes) -> bytes:
    """The batch header of ``blob`` around other record bytes, length and CRC fixed."""
    buf = bytearray(blob[:rb.HEADER_SIZE] + records)
    struct.pack_into(">i", buf, rb.LENGTH_OFFSET, len(buf) - rb.LOG_OVERHEAD)
    return reseal(buf)


def make_log(tmp_path, **props) -> Log:
    cfg = LogConfig.from_props({k: str(v) for k, v in props.items()})
    return Log(str(tmp_path / "t-0"), cfg, clock=lambda: NOW)


def refused(lg: Log, blob: bytes) -> KafkaError:
    with pytest.raises(KafkaError) as e:
        lg.append_as_leader(blob, 0, now_ms=NOW)
    assert lg.log_end_offset == 0, "nothing may be appended"
    return e.value


def test_valid_plain_and_gzip_batches_are_appended(tmp_path):
    lg = make_log(tmp_path)
    lg.append_as_leader(batch(5), 0, now_ms=NOW)
    lg.append_as_leader(batch(4, compression=1), 0, now_ms=NOW)
    assert lg.log_end_offset == 9


def test_unknown_codec_with_valid_crc_is_invalid_record(tmp_path):
    e = refused(make_log(tmp_path), reseal(batch(), codec=7))
    assert e.error == Errors.INVALID_RECORD and "compression type" in e.message


def test_random_record_bytes_with_valid_crc_are_invalid_record(tmp_path):
    import random
    rnd = random.Random(7)
    lg = make_log(tmp_path)
    for _ in range(200):
        junk = bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(1, 200)))
        e = refused(lg, with_records(batch(), junk))
        assert e.error == Errors.INVALID_RECORD


def test_record_count_larger_or_smaller_than_records(tmp_path):
    lg = make_log(tmp_path)
    assert refused(lg, reseal(batch(3), count=4)).error == Errors.INVALID_RECORD
    e = refused(lg, reseal(batch(3), count=2))
    assert e.error == Errors.INVALID_RECORD and "records still remaining" in e.message


def test_inner_offset_deltas_must_count_from_zero(tmp_path):
    blob = bytearray(batch(2))
    # first record: length varint, attributes, timestamp delta varint (0), offset delta varint (0) -> make it 1
    pos = rb.HEADER_SIZE + 1 + 1 + 1
    assert blob[pos] == 0
    blob[pos] = 2  # zigzag(1)
    e = refused(make_log(tmp_path), reseal(blob))
    assert e.error == Errors.INVALID_RECORD and "offset delta" in e.message


def test_corrupt_gzip_payload_is_invalid_record(tmp_path):
    blob = bytearray(batch(5, compression=1))
    blob[rb.HEADER_SIZE + 12] ^= 0xFF
    assert refused(make_log(tmp_path), reseal(blob)).error == Errors.INVALID_RECORD


def test_record_timestamp_out_of_range_gives_record_errors(tmp_path):
    lg = make_log(tmp_path, **{"message.timestamp.difference.max.ms": 60_000})
    assert refused(lg, batch(3, ts=NOW - 3_600_000)).error == Errors.INVALID_TIMESTAMP  # the batch header
    b = MemoryRecordsBuilder(2, 0, 1 << 22)  # only a middle record is late: found by the record walk
    for i, ts in enumerate((NOW, NOW - 3_600_000, NOW + 1)):
        b.append(ts, b"k", b"v")
    b.close()
    e = refused(lg, bytes(b.buffer()))
    assert e.error == Errors.INVALID_TIMESTAMP
    assert isinstance(e, RecordValidationError) and e.record_errors[0].batch_index == 1
    assert "out of range" in e.record_errors[0].message
    lg.append_as_leader(batch(3, ts=NOW - 1000), 0, now_ms=NOW)  # inside the window
    assert lg.log_end_offset == 3


def test_log_append_time_topic_ignores_record_timestamps(tmp_path):
    lg = make_log(tmp_path, **{"message.timestamp.type": "LogAppendTime",
                               "message.timestamp.difference.max.ms": 1000})
    lg.append_as_leader(batch(3, ts=1), 0, now_ms=NOW)
    assert lg.log_end_offset == 3


def test_compacted_topic_needs_keys(tmp_path):
    e = refused(make_log(tmp_path, **{"cleanup.policy": "compact"}), batch(2, key=False))
    assert e.error == Errors.INVALID_RECORD and len(e.record_errors) == 2


@pytest.mark.parametrize("blob,needle", [
    (b"", "at least one record batch"),
    (batch()[:-5], "at least one record batch"),          # length runs past the buffer
    (batch() + batch(), "exactly one record batch"),
    (bytes(16) + b"\x01" + bytes(60), "magic version 2"),
])
def test_produce_v3_needs_exactly_one_v2_batch(blob, needle):
    with pytest.raises(KafkaError) as e:
        validate_produce_records(blob, 9)
    assert e.value.error == Errors.INVALID_RECORD and needle in e.value.message


def test_zstd_needs_produce_v7():
    with pytest.raises(KafkaError) as e:
        validate_produce_records(reseal(batch(), codec=4), 6)
    assert e.value.error == Errors.UNSUPPORTED_COMPRESSION_TYPE
    validate_produce_records(batch(), 3)


def test_validation_is_cheap_for_plain_batches():
    """The common path: one walk per record; well under the cost of the append itself."""
    blob = batch(1000)
    cfg = LogConfig.from_props({})
    start = time.perf_counter()
    for _ in range(20):
        validate_records(blob, cfg, NOW)
    per_record_us = (time.perf_counter() - start) / 20_000 * 1e6
    assert per_record_us < 20, per_record_us
