"""Index files created lazily (Kafka's LazyIndex, issue 15): a new log or a rolled-to segment has no index file
until it indexes something; a segment that stops being active gets both; a log whose index files are missing
rebuilds them at load, after a clean shutdown or a crash."""
from __future__ import annotations

import logging
import os

from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from kafkatier.log.log import Log
from kafkatier.log.log_config import LogConfig


def make_log(tmp_path, **props) -> Log:
    cfg = LogConfig.from_props({k.replace("_", "."): str(v) for k, v in props.items()})
    return Log(str(tmp_path / "orders-0"), cfg, clock=lambda: 1_000_000)


def produce_blob(n: int, value_size: int = 100) -> bytes:
    b = MemoryRecordsBuilder(2, 0, 1 << 22)
    for i in range(n):
        b.append(1_000 + i, f"k{i}".encode(), f"v{i}".encode().ljust(value_size, b"."))
    b.close()
    return bytes(b.buffer())


def read_all(lg: Log, start: int) -> list[int]:
    """Offsets a consumer sees fetching from ``start`` to the end."""
    seen: list[int] = []
    while True:
        recs = MemoryRecords(lg.read(start, 1 << 20).records)
        got = []
        while recs.has_next():
            got += [r.offset for r in recs.next_batch() if r.offset >= start]
        if not got:
            return seen
        seen += got
        start = got[-1] + 1


def _files(lg: Log, suffix: str) -> list[str]:
    return sorted(n for n in os.listdir(lg.dir) if n.endswith(suffix))


def test_new_logs_and_rolled_to_segments_create_no_index_files(tmp_path):
    lg = make_log(tmp_path, segment_bytes=2 * len(produce_blob(5)))
    assert _files(lg, ".index") == [] and _files(lg, ".timeindex") == []
    for _ in range(5):
        lg.append_as_leader(produce_blob(5), 1)
    bases = sorted(s.base_offset for s in lg.log_segments())
    assert len(bases) >= 3
    inactive = [f"{b:020d}" for b in bases[:-1]]
    # Every inactive segment has both files (tiered storage copies them); the active one has none yet.
    assert _files(lg, ".index") == [b + ".index" for b in inactive]
    assert _files(lg, ".timeindex") == [b + ".timeindex" for b in inactive]
    lg.close()


def test_missing_index_files_are_rebuilt_at_load(tmp_path, caplog):
    one = len(produce_blob(50, value_size=200))
    lg = make_log(tmp_path, segment_bytes=3 * one, index_interval_bytes=512)
    for _ in range(7):
        lg.append_as_leader(produce_blob(50, value_size=200), 1)
    lg.close()
    removed = [n for n in os.listdir(lg.dir) if n.endswith((".index", ".timeindex"))]
    assert removed
    for n in removed:
        os.unlink(os.path.join(lg.dir, n))
    for clean in (True, False):
        caplog.clear()
        with caplog.at_level(logging.INFO):
            again = Log(str(tmp_path / "orders-0"), lg.config, had_clean_shutdown=clean, recovery_point=0)
        assert again.log_end_offset == 350
        assert read_all(again, start=123) == list(range(123, 350))
        assert "missing_index_rebuilt" in caplog.text
        # The rebuilt index answers lookups inside a segment (not just from its start), and every inactive
        # segment has its files again.
        seg = again.log_segments()[0]
        assert seg.offset_index.entries > 0
        assert all(s.offset_index.file_exists and s.time_index.file_exists for s in again.log_segments()[:-1])
        again.close()
