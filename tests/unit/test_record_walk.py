"""The compiled record walk (kafkatier/log/_record_walk.c) against the pure-Python walk it replaces: on valid
batches and on thousands of mutated ones, the compiled walk accepts exactly what the Python walk accepts, with
the same result, and hands everything else to the Python walk (which raises Kafka's error). Also: validation with
the compiled walk missing (a machine without a C compiler) refuses and accepts the same batches."""
from __future__ import annotations

import random

import pytest
from kafka.record.memory_records import MemoryRecordsBuilder

from kafkatier.log import log_validator as lv
from kafkatier.log import record_batch as rb
from kafkatier.log.errors import InvalidRecordError, KafkaError

compiled = pytest.importorskip("kafkatier.log._record_walk", reason="built without a C compiler")

NOW = 1_700_000_000_000


def records_of(n: int, *, keyless_every: int = 0, headers: bool = True, value: int = 20) -> bytes:
    b = MemoryRecordsBuilder(2, 0, 1 << 22)
    for i in range(n):
        key = None if keyless_every and i % keyless_every == 0 else b"k%d" % i
        b.append(NOW + (i * 7919) % 23 - 11, key, b"v" * value,
                 headers=[("h\u00e9", b"x"), ("n", None)] if headers else [])
    b.close()
    return bytes(b.buffer())


def python_walk(buf, count, base_ts):
    try:
        return lv._walk(buf, rb.HEADER_SIZE, len(buf), count, base_ts, "t-0", False)
    except InvalidRecordError:
        return "refused"


def compiled_walk(buf, count, base_ts):
    r = compiled.walk(buf, rb.HEADER_SIZE, len(buf), count, base_ts)
    return "refused" if r is None else r


@pytest.mark.parametrize("n,keyless_every,headers", [(0, 0, False), (1, 0, False), (5, 2, True), (300, 3, True),
                                                     (1000, 0, False)])
def test_valid_batches_give_the_same_result(n, keyless_every, headers):
    blob = records_of(n, keyless_every=keyless_every, headers=headers)
    _, h = next(rb.iter_batches(blob))
    expected = python_walk(blob, h.records_count, h.base_timestamp)
    assert expected != "refused"
    assert compiled_walk(blob, h.records_count, h.base_timestamp) == expected
    assert lv.walk_records(blob, rb.HEADER_SIZE, len(blob), h.records_count, h.base_timestamp, "t-0", False) \
        == expected


def test_mutated_batches_are_accepted_exactly_when_the_python_walk_accepts():
    rnd = random.Random(29)
    seeds = [records_of(4, keyless_every=2), records_of(3, headers=False), records_of(2, value=200)]
    accepted = 0
    for trial in range(6000):
        buf = bytearray(rnd.choice(seeds))
        _, h = next(rb.iter_batches(bytes(buf)))
        count = h.records_count
        for _ in range(rnd.randint(1, 3)):
            kind = rnd.random()
            pos = rnd.randrange(rb.HEADER_SIZE, len(buf))
            if kind < 0.5:
                buf[pos] = rnd.randrange(256)
            elif kind < 0.65:
                buf[pos] ^= 1 << rnd.randrange(8)
            elif kind < 0.8:
                del buf[pos:pos + rnd.randint(1, 4)]
            elif kind < 0.9:
                buf[pos:pos] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 4)))
            else:
                count += rnd.choice((-1, 1))
        blob = bytes(buf)
        expected = python_walk(blob, count, h.base_timestamp)
        got = compiled_walk(blob, count, h.base_timestamp)
        assert got == expected, (trial, blob.hex())
        accepted += expected != "refused"
    assert accepted > 100  # the mutations keep some batches valid (e.g. a changed value byte)


def test_long_varlong_timestamp_delta_is_left_to_the_python_walk():
    # a 10-byte timestamp delta wider than 64 bits: the compiled walk hands it over, the Python walk decides
    rec = bytes([0]) + bytes([0xFF] * 9 + [0x7F]) + bytes([0, 2]) + b"k" + bytes([2]) + b"v" + bytes([0])
    body = bytes([len(rec) * 2]) + rec
    blob = bytes(rb.HEADER_SIZE) + body
    assert compiled.walk(blob, rb.HEADER_SIZE, len(blob), 1, NOW) is None
    assert lv.walk_records(blob, rb.HEADER_SIZE, len(blob), 1, NOW, "t-0", False) \
        == lv._walk(blob, rb.HEADER_SIZE, len(blob), 1, NOW, "t-0", False)


def test_validation_without_the_compiled_walk(monkeypatch):
    """A machine without a compiler: the same batches are accepted and refused with the same errors."""
    blob = records_of(5, keyless_every=2)
    bad = bytearray(blob)
    bad[rb.HEADER_SIZE + 1] = 4  # the first record's attributes
    from kafkatier.log.log_config import LogConfig
    cfg = LogConfig()
    results = []
    for walk in (compiled.walk, None):
        monkeypatch.setattr(lv, "_compiled_walk", walk)
        lv.validate_records(blob, cfg, NOW)
        with pytest.raises(InvalidRecordError) as e:
            lv.validate_records(bytes(bad), cfg, NOW)
        results.append(str(e.value))
    assert results[0] == results[1]


# --- the compiled leader append (headers, CRC, offsets and the record walk in one pass) ----------------------

def _configs():
    from kafkatier.log.log_config import LogConfig
    return [LogConfig(), LogConfig(cleanup_policy=["compact"]), LogConfig(max_message_bytes=300),
            LogConfig(message_timestamp_before_max_ms=5, message_timestamp_after_max_ms=5)]


def python_leader_append(blob, cfg, next_offset=7, epoch=3):
    """The two Python steps the fast path replaces: the AppendInfo, or the error's class and message."""
    monkey = lv._compiled_leader_append
    lv._compiled_leader_append = None
    try:
        return lv.validate_leader_append(blob, next_offset, epoch, NOW, cfg, log_start_offset=0,
                                         topic_partition="t-0")
    except KafkaError as e:
        return type(e).__name__, str(e)
    finally:
        lv._compiled_leader_append = monkey


def fast_leader_append(blob, cfg, next_offset=7, epoch=3):
    from kafkatier.log.log_config import LONG_MAX
    before, after = cfg.effective_timestamp_before_max_ms, cfg.effective_timestamp_after_max_ms
    return compiled.leader_append(blob, next_offset, epoch, NOW, cfg.max_message_bytes,
                                  None if before == LONG_MAX else before, None if after == LONG_MAX else after,
                                  cfg.compact, rb.crc32c)


def _with_crc(buf: bytearray, pos: int = 0) -> bytearray:
    size = int.from_bytes(buf[pos + rb.LENGTH_OFFSET:pos + rb.LENGTH_OFFSET + 4], "big", signed=True) + 12
    if 0 < size and pos + size <= len(buf) and size >= rb.HEADER_SIZE:
        crc = rb.crc32c(bytes(buf[pos + rb.ATTRIBUTES_OFFSET:pos + size]))
        buf[pos + rb.CRC_OFFSET:pos + rb.CRC_OFFSET + 4] = crc.to_bytes(4, "big")
    return buf


def test_leader_append_fast_path_takes_valid_batches_with_the_same_result():
    from kafkatier.log.log_config import LogConfig
    cfg = LogConfig()
    blob = records_of(5, headers=True) + records_of(300, headers=False) + records_of(1, value=500)
    fast = fast_leader_append(blob, cfg)
    assert fast is not None
    info = python_leader_append(blob, cfg)
    assert fast == (info.first_offset, info.last_offset, info.max_timestamp, info.offset_of_max_timestamp,
                    info.num_batches, info.num_records, info.valid_bytes, info.records)
    assert lv.validate_leader_append(blob, 7, 3, NOW, cfg, log_start_offset=0) == info


def test_leader_append_fast_path_accepts_only_what_the_python_path_accepts():
    """Mutated headers (CRC mostly recomputed, so the checks after it are reached) and records, one to three
    batches, four configs: whatever the fast path accepts, the Python path accepts with the same AppendInfo;
    everything else goes to the Python path, whose errors are the only ones raised."""
    rnd = random.Random(2929)
    seeds = [records_of(4, keyless_every=2), records_of(3, headers=False), records_of(2, value=200)]
    header_fields = [(rb.BASE_OFFSET_OFFSET, 8), (rb.LENGTH_OFFSET, 4), (rb.MAGIC_OFFSET, 1),
                     (rb.ATTRIBUTES_OFFSET, 2), (rb.LAST_OFFSET_DELTA_OFFSET, 4), (rb.BASE_TIMESTAMP_OFFSET, 8),
                     (rb.MAX_TIMESTAMP_OFFSET, 8), (43, 8), (53, 4), (57, 4)]
    configs = _configs()
    accepted = refused_by_python = 0
    for trial in range(4000):
        parts = [bytearray(rnd.choice(seeds)) for _ in range(rnd.randint(1, 3))]
        victim = rnd.randrange(len(parts))
        buf = parts[victim]
        for _ in range(rnd.randint(0, 2)):
            kind = rnd.random()
            if kind < 0.5:
                off, width = rnd.choice(header_fields)
                value = rnd.choice((0, 1, -1, 2, 5, -2, 2**31 - 1, NOW, NOW + 10**6, NOW - 10**6, 0x20, 0x10, 0x01))
                buf[off:off + width] = value.to_bytes(width, "big", signed=True) if -(1 << (8 * width - 1)) <= \
                    value < (1 << (8 * width - 1)) else bytes(width)
            elif kind < 0.8:
                pos = rnd.randrange(rb.HEADER_SIZE, len(buf))
                buf[pos] = rnd.randrange(256)
            else:
                pos = rnd.randrange(rb.HEADER_SIZE, len(buf))
                del buf[pos:pos + rnd.randint(1, 3)]
                buf[rb.LENGTH_OFFSET:rb.LENGTH_OFFSET + 4] = (len(buf) - 12).to_bytes(4, "big", signed=True)
        if rnd.random() < 0.8:
            _with_crc(buf)
        blob = b"".join(bytes(p) for p in parts)
        if rnd.random() < 0.05:
            blob = blob[:rnd.randrange(len(blob))]   # a trailing partial batch
        cfg = rnd.choice(configs)
        expected = python_leader_append(blob, cfg)
        fast = fast_leader_append(blob, cfg)
        if fast is None:
            refused_by_python += isinstance(expected, tuple)
            continue
        assert not isinstance(expected, tuple), (trial, expected, blob.hex())
        assert fast == (expected.first_offset, expected.last_offset, expected.max_timestamp,
                        expected.offset_of_max_timestamp, expected.num_batches, expected.num_records,
                        expected.valid_bytes, expected.records), (trial, blob.hex())
        accepted += 1
    assert accepted > 300 and refused_by_python > 300


@pytest.mark.parametrize("kind", ["crc", "base_offset", "count", "control", "sequence", "record_attributes",
                                  "keyless_compacted", "too_large", "timestamp"])
def test_corrupt_batches_are_refused_with_the_python_error(kind):
    """Each refused kind: validate_leader_append raises the same error with the fast path as without it."""
    from kafkatier.log.log_config import LogConfig
    cfg = LogConfig()
    buf = bytearray(records_of(4, keyless_every=2 if kind == "keyless_compacted" else 0))
    if kind == "crc":
        buf[-1] ^= 1
    elif kind == "base_offset":
        buf[0:8] = (3).to_bytes(8, "big")
    elif kind == "count":
        buf[57:61] = (5).to_bytes(4, "big")
    elif kind == "control":
        buf[rb.ATTRIBUTES_OFFSET + 1] |= 0x20
    elif kind == "sequence":
        buf[43:51] = (9).to_bytes(8, "big")
        buf[53:57] = (-1).to_bytes(4, "big", signed=True)
    elif kind == "record_attributes":
        buf[rb.HEADER_SIZE + 1] = 4
    elif kind == "keyless_compacted":
        cfg = LogConfig(cleanup_policy=["compact"])
    elif kind == "too_large":
        cfg = LogConfig(max_message_bytes=100)
    elif kind == "timestamp":
        cfg = LogConfig(message_timestamp_after_max_ms=0)
        buf[rb.MAX_TIMESTAMP_OFFSET:rb.MAX_TIMESTAMP_OFFSET + 8] = (NOW + 10**6).to_bytes(8, "big")
    if kind != "crc":
        _with_crc(buf)
    blob = bytes(buf)
    assert fast_leader_append(blob, cfg) is None
    with pytest.raises(KafkaError) as with_fast:
        lv.validate_leader_append(blob, 7, 3, NOW, cfg, log_start_offset=0, topic_partition="t-0")
    assert (type(with_fast.value).__name__, str(with_fast.value)) == python_leader_append(blob, cfg)
