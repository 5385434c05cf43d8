"""Loading logs after a kill -9 without work per log that can wait (issue 27: 20,000 replicas restarted): the
leader epoch checkpoint truncated at load is written later (Kafka's ``truncateFromEndAsyncFlush``) and still
right after any further kill; an empty segment is recovered without opening its file."""
from __future__ import annotations

import os

from kafka.record.memory_records import MemoryRecordsBuilder

from kafkatier.log.checkpoints import LEADER_EPOCH_CHECKPOINT
from kafkatier.log.log import Log
from kafkatier.log.log_config import LogConfig
from kafkatier.log.log_manager import LogManager


def blob(n: int) -> bytes:
    b = MemoryRecordsBuilder(2, 0, 1 << 20)
    for i in range(n):
        b.append(1_000 + i, None, f"v{i}".encode())
    b.close()
    return bytes(b.buffer())


def killed(lg: Log) -> None:
    """A kill -9: the files stay as they are on disk (page cache included); nothing is closed or flushed."""
    lg.release_files()


def reload(path: str) -> Log:
    return Log(path, LogConfig(), recovery_point=0)


def epochs(lg: Log) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in lg.leader_epoch_cache.epoch_entries()]


def checkpoint(path: str) -> bytes:
    with open(os.path.join(path, LEADER_EPOCH_CHECKPOINT), "rb") as f:
        return f.read()


def led_epoch_2_without_writing(tmp_path) -> str:
    """A log with 5 records of epoch 1 whose replica then led epoch 2 (written) and was killed."""
    path = str(tmp_path / "orders-0")
    lg = Log(path, LogConfig())
    lg.append_as_leader(blob(5), 1)
    lg.assign_epoch_start_offset(2, 5)
    assert epochs(lg) == [(1, 0), (2, 5)]
    killed(lg)
    return path


def test_load_truncates_the_epoch_in_memory_without_rewriting_the_file(tmp_path):
    path = led_epoch_2_without_writing(tmp_path)
    before = checkpoint(path)
    lg = reload(path)
    assert lg.log_end_offset == 5 and epochs(lg) == [(1, 0)]
    assert checkpoint(path) == before  # rewritten later, not by the load
    killed(lg)
    assert epochs(reload(path)) == [(1, 0)]  # a kill in between: the next load truncates it again


def test_follower_append_in_the_same_epoch_writes_the_truncation_first(tmp_path):
    """The stale entry (2, 5) must not survive once epoch-1 batches sit at offset 5: a kill after the append
    would otherwise load them as epoch 2's."""
    path = led_epoch_2_without_writing(tmp_path)
    source = Log(str(tmp_path / "leader" / "orders-0"), LogConfig())
    source.append_as_leader(blob(5), 1)
    source.append_as_leader(blob(5), 1)
    lg = reload(path)
    lg.append_as_follower(source.read(5, 1 << 20).records)
    assert lg.log_end_offset == 10 and epochs(lg) == [(1, 0)]
    assert b"2 5" not in checkpoint(path)
    killed(lg)
    again = reload(path)
    assert again.log_end_offset == 10 and epochs(again) == [(1, 0)]


def test_new_leader_epoch_after_the_load_survives_a_kill(tmp_path):
    path = led_epoch_2_without_writing(tmp_path)
    lg = reload(path)
    lg.assign_epoch_start_offset(3, 5, write=False)  # a LeaderAndIsr: written by the broker's background task
    lg.append_as_leader(blob(3), 3)
    killed(lg)  # before that task: recovery assigns epoch 3 from the batches, over the stale entry
    again = reload(path)
    assert again.log_end_offset == 8 and epochs(again) == [(1, 0), (3, 5)]


def test_flush_and_close_write_the_truncation(tmp_path):
    path = led_epoch_2_without_writing(tmp_path)
    lg = reload(path)
    lg.flush()
    assert b"2 5" not in checkpoint(path)
    path2 = led_epoch_2_without_writing(tmp_path / "b")
    lg2 = reload(path2)
    lg2.close()
    assert b"2 5" not in checkpoint(path2)


def test_log_manager_writes_pending_truncations_in_the_background(tmp_path):
    data = tmp_path / "data"
    path = led_epoch_2_without_writing(data)
    lm = LogManager([str(data)], initial_task_delay_ms=0)
    try:
        lg = lm.get_log("orders", 0)
        assert epochs(lg) == [(1, 0)] and b"2 5" in checkpoint(path)
        lm.write_leader_epoch_checkpoints()  # the "leader-epoch-cache-flush" task started by startup()
        assert b"2 5" not in checkpoint(path)
    finally:
        lm.shutdown()


def test_empty_segment_recovered_without_opening_its_file(tmp_path):
    path = str(tmp_path / "orders-0")
    killed(Log(path, LogConfig()))
    lg = reload(path)
    assert lg.log_end_offset == 0 and not lg.active_segment.has_open_file
    assert lg.append_as_leader(blob(2), 1).first_offset == 0
    killed(lg)
    assert reload(path).log_end_offset == 2
