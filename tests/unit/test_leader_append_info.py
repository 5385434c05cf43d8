"""The compiled leader append that builds its ``AppendInfo`` itself (``_record_walk.leader_append_info``, the
path ``LeaderAppendValidator`` takes): the same object the Python steps build, still a frozen attrs value, and
the same refusals (None, so the Python steps raise their error)."""
from __future__ import annotations

import attrs
import pytest
from kafka.record.memory_records import MemoryRecordsBuilder

from kafkatier.log import log_validator as lv
from kafkatier.log import record_batch as rb
from kafkatier.log.errors import KafkaError
from kafkatier.log.log_config import LogConfig

compiled = pytest.importorskip("kafkatier.log._record_walk", reason="built without a C compiler")

NOW = 1_700_000_000_000


def batch(n: int, value: int = 30, key: bool = True) -> bytes:
    b = MemoryRecordsBuilder(2, 0, 1 << 20)
    for i in range(n):
        b.append(NOW + i, b"k%d" % i if key else None, b"v" * value)
    b.close()
    return bytes(b.buffer())


def python_steps(blob: bytes, cfg: LogConfig):
    saved = lv._compiled_leader_append
    lv._compiled_leader_append = None
    try:
        return lv.LeaderAppendValidator(cfg).validate(blob, 40, 6, NOW, log_start_offset=3, topic_partition="t-0")
    except KafkaError as e:
        return type(e).__name__, str(e)
    finally:
        lv._compiled_leader_append = saved


def test_the_compiled_path_is_the_one_taken():
    assert lv._compiled_leader_append_info is not None


@pytest.mark.parametrize("blob", [batch(1), batch(16), batch(3) + batch(200, value=5), batch(2, value=2000)])
def test_the_built_info_equals_the_python_one(blob):
    cfg = LogConfig()
    info = lv.LeaderAppendValidator(cfg).validate(blob, 40, 6, NOW, log_start_offset=3, topic_partition="t-0")
    expected = python_steps(blob, cfg)
    assert type(info) is rb.AppendInfo
    assert info == expected
    assert hash(info) == hash(expected)
    assert info.log_append_time == rb.NO_TIMESTAMP and info.epoch_starts == () and info.log_start_offset == 3
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        info.first_offset = 0
    assert attrs.evolve(info, log_start_offset=9).log_start_offset == 9


@pytest.mark.parametrize("cfg,blob", [
    (LogConfig(max_message_bytes=100), batch(5)),                       # too large: RecordTooLarge
    (LogConfig(cleanup_policy=["compact"]), batch(3, key=False)),       # keyless on a compacted topic
    (LogConfig(), batch(3)[:-1]),                                       # a trailing partial batch only
    (LogConfig(message_timestamp_before_max_ms=5), batch(2)),           # timestamps out of range
])
def test_refusals_are_the_python_path_errors(cfg, blob):
    validator = lv.LeaderAppendValidator(cfg)
    assert compiled.leader_append_info(blob, 40, 6, NOW + 10**6, cfg.max_message_bytes, validator._before,
                                       validator._after, cfg.compact, rb.crc32c, rb.AppendInfo, lv._INFO_FIELDS,
                                       3) is None
    try:
        got = validator.validate(blob, 40, 6, NOW + 10**6, log_start_offset=3, topic_partition="t-0")
    except KafkaError as e:
        got = type(e).__name__, str(e)
    saved = lv._compiled_leader_append
    lv._compiled_leader_append = None
    try:
        expected = validator.validate(blob, 40, 6, NOW + 10**6, log_start_offset=3, topic_partition="t-0")
    except KafkaError as e:
        expected = type(e).__name__, str(e)
    finally:
        lv._compiled_leader_append = saved
    assert got == expected


def test_wrong_field_names_are_refused():
    with pytest.raises(ValueError):
        compiled.leader_append_info(batch(1), 0, 0, NOW, None, None, None, False, rb.crc32c, rb.AppendInfo,
                                    ("first_offset",), 0)


# --- a Produce request's records: a writable view of the request frame (protocol/produce_codec.py) ---------------

@pytest.mark.parametrize("blob", [batch(1), batch(3) + batch(200, value=5)])
def test_a_writable_view_gets_its_offsets_in_place(blob):
    cfg = LogConfig()
    frame = bytearray(b"head" + blob + b"tail")
    view = memoryview(frame)[4:4 + len(blob)]
    info = lv.LeaderAppendValidator(cfg).validate(view, 40, 6, NOW, log_start_offset=3, topic_partition="t-0")
    expected = python_steps(blob, cfg)
    assert info.records is view and bytes(view) == expected.records   # no copy: the frame holds the batch
    assert info == expected and frame[:4] == b"head" and frame[-4:] == b"tail"


def test_a_read_only_view_is_copied_and_left_as_it_was():
    blob = batch(3)
    view = memoryview(blob)
    info = lv.LeaderAppendValidator(LogConfig()).validate(view, 40, 6, NOW, log_start_offset=3, topic_partition="t-0")
    assert type(info.records) is bytes and info == python_steps(blob, LogConfig()) and bytes(view) == blob


@pytest.mark.parametrize("cfg,blob", [
    (LogConfig(max_message_bytes=100), batch(5)),
    (LogConfig(cleanup_policy=["compact"]), batch(3, key=False)),
    (LogConfig(message_timestamp_before_max_ms=5), batch(2)),
])
def test_a_refused_writable_view_is_left_as_it_was(cfg, blob):
    frame = bytearray(blob)
    validator = lv.LeaderAppendValidator(cfg)
    assert compiled.leader_append_info(memoryview(frame), 40, 6, NOW + 10**6, cfg.max_message_bytes,
                                       validator._before, validator._after, cfg.compact, rb.crc32c, rb.AppendInfo,
                                       lv._INFO_FIELDS, 3) is None
    assert bytes(frame) == blob
