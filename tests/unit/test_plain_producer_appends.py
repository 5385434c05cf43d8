"""The leader append of a plain (non-idempotent) producer's batches: once the log's producer state is built, such
batches skip the state's three passes (duplicate check, producer checks, update), since none of them finds or
records anything for a batch without a producer id.  The outcome must be the one of the full path: same offsets,
same errors for corrupt input, same producer state, and a snapshot still taken when the append rolls a segment."""
from __future__ import annotations

import struct

import pytest

from batches import producer_batch

from kafkatier.log import record_batch
from kafkatier.log.errors import KafkaError
from kafkatier.log.log import Log
from kafkatier.log.log_config import LogConfig
from kafkatier.log.producer_state import snapshot_offsets


def test_without_producer_ids_reads_every_whole_batch():
    plain, idem = producer_batch(), producer_batch(pid=7, epoch=0, seq=0)
    assert record_batch.without_producer_ids(plain)
    assert record_batch.without_producer_ids(plain + plain)
    assert record_batch.without_producer_ids(b"")
    assert record_batch.without_producer_ids(plain + plain[:20])      # a trailing partial batch is not read
    assert not record_batch.without_producer_ids(plain + idem)
    assert not record_batch.without_producer_ids(idem)
    bad_magic = bytearray(plain)
    bad_magic[record_batch.MAGIC_OFFSET] = 1
    assert not record_batch.without_producer_ids(bytes(bad_magic))
    too_small = bytearray(plain)
    struct.pack_into(">i", too_small, record_batch.LENGTH_OFFSET, 10)
    assert not record_batch.without_producer_ids(bytes(too_small))


def _built(tmp_path, name: str, config: LogConfig | None = None) -> Log:
    lg = Log(str(tmp_path / name), config or LogConfig())
    lg.append_records_as_leader(producer_batch(pid=7, epoch=0, seq=0), 0)   # the state is built from here on
    return lg


def _corruptions() -> list[bytes]:
    plain = producer_batch(n=3)
    out = []
    crc = bytearray(plain)
    crc[-1] ^= 0xFF
    out.append(bytes(crc))
    count = bytearray(plain)
    struct.pack_into(">i", count, 57, 5)
    out.append(bytes(count))
    offset = bytearray(plain)
    struct.pack_into(">q", offset, 0, 3)
    out.append(bytes(offset))
    magic = bytearray(plain)
    magic[record_batch.MAGIC_OFFSET] = 1
    out.append(bytes(magic))
    return out


@pytest.mark.parametrize("i", range(4))
def test_corrupt_plain_batches_are_refused_as_before_the_state_was_built(tmp_path, i):
    blob = _corruptions()[i]
    errors = []
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for lg in (Log(str(tmp_path / "a" / "t-0"), LogConfig()), _built(tmp_path, "b/t-0")):
        with pytest.raises(KafkaError) as e:
            lg.append_records_as_leader(blob, 0)
        errors.append((type(e.value), e.value.error, str(e.value)))
        lg.close()
    assert errors[0] == errors[1]


def test_plain_batches_after_the_state_is_built_keep_it_and_snapshot_at_roll(tmp_path):
    lg = _built(tmp_path, "t-0", LogConfig(segment_bytes=1024))
    before = lg.producer_state.active_producers()
    ends = []
    for _ in range(30):
        info = lg.append_records_as_leader(producer_batch(n=3), 0)
        assert info.last_offset - info.first_offset == 2
        ends.append(info.last_offset + 1)
    assert ends == list(range(ends[0], ends[0] + 3 * 30, 3))
    assert lg.producer_state.active_producers() == before
    assert lg.num_segments > 1
    assert snapshot_offsets(lg.dir)   # a roll still snapshots the producer state
    # a retried idempotent batch is still found after plain appends
    dup = lg.append_records_as_leader(producer_batch(pid=7, epoch=0, seq=0), 0)
    assert (dup.first_offset, dup.last_offset) == (0, 1)
    lg.close()


def _at(batch: bytes, base_offset: int) -> bytes:
    """``batch`` as a leader assigned it: its base offset set (outside the CRC)."""
    b = bytearray(batch)
    struct.pack_into(">q", b, 0, base_offset)
    return bytes(b)


def test_follower_appends_of_plain_batches_keep_the_state_and_snapshot_at_roll(tmp_path):
    # The follower's fetched batches take the same shortcut as the leader's: the outcome of the full update.
    full, short = Log(str(tmp_path / "full-0"), LogConfig(segment_bytes=1024)), \
        Log(str(tmp_path / "short-0"), LogConfig(segment_bytes=1024))
    fetched = [_at(producer_batch(pid=7, epoch=0, seq=0), 0)]
    fetched += [_at(producer_batch(n=3), 2 + 3 * i) for i in range(30)]
    fetched.append(_at(producer_batch(pid=7, epoch=0, seq=2), 92))
    for blob in fetched:
        short.append_records_as_follower(blob)
        full.append_as_follower(blob)
        full.producer_state.update(blob)   # the full path, by hand
    assert short.log_end_offset == full.log_end_offset == 94
    assert short.producer_state.active_producers() == full.producer_state.active_producers()
    assert short.num_segments > 1 and snapshot_offsets(short.dir)   # a roll still snapshots the producer state
    # a retried batch of producer 7 is found as a duplicate on this replica once it leads
    dup = short.append_records_as_leader(producer_batch(pid=7, epoch=0, seq=2), 0)
    assert (dup.first_offset, dup.last_offset) == (92, 93)
    full.close()
    short.close()
