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
from kafkatier.log.errors import InvalidRecordError

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
