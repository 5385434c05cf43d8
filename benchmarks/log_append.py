"""Throughput of ``Log.append_as_leader`` against raw ``file.write`` of the same bytes, in the same run.

1 KiB records in ~16 KiB v2 batches (built once with kafka-python's builder), appended until ``--total-mb``
has been written. Neither side fsyncs. Raw and log runs alternate for ``--rounds`` rounds and the best round of
each counts (page-cache writeback makes single runs noisy). Prints both rates and their ratio, and the ratio of
the CPU time the appending thread used (``time.thread_time``: steadier than wall time on a busy machine, where
the wall-time ratio mostly measures the scheduler)::

    .venv/bin/python benchmarks/log_append.py [--total-mb 128] [--rounds 3] [--batch-kb 16] [--record-bytes 1024]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kafka.record.memory_records import MemoryRecordsBuilder  # noqa: E402

from kafkatier.log import log_validator  # noqa: E402
from kafkatier.log.log import Log  # noqa: E402
from kafkatier.log.log_config import LogConfig  # noqa: E402


def build_batch(batch_bytes: int, record_bytes: int) -> bytes:
    builder = MemoryRecordsBuilder(2, 0, batch_bytes)
    value = os.urandom(record_bytes)
    ts = int(time.time() * 1000)
    i = 0
    while builder.append(ts, f"key-{i}".encode(), value) is not None:
        i += 1
    builder.close()
    return bytes(builder.buffer())


def bench_raw(path: str, batch: bytes, count: int) -> tuple[float, float]:
    """(wall seconds, thread CPU seconds)."""
    with open(path, "wb", buffering=0) as f:
        start, cpu = time.perf_counter(), time.thread_time()
        for _ in range(count):
            f.write(batch)
        return time.perf_counter() - start, time.thread_time() - cpu


def bench_log(dir_path: str, batch: bytes, count: int) -> tuple[float, float]:
    """(wall seconds, thread CPU seconds)."""
    lg = Log(os.path.join(dir_path, "bench-0"), LogConfig())
    try:
        start, cpu = time.perf_counter(), time.thread_time()
        for _ in range(count):
            lg.append_as_leader(batch, 0)
        elapsed, used = time.perf_counter() - start, time.thread_time() - cpu
        assert lg.log_end_offset > 0
        return elapsed, used
    finally:
        lg.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-mb", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch-kb", type=int, default=16)
    p.add_argument("--record-bytes", type=int, default=1024)
    p.add_argument("--dir", default=None, help="where to write (default: a temp dir, removed afterwards)")
    args = p.parse_args(argv)

    batch = build_batch(args.batch_kb * 1024, args.record_bytes)
    count = max(1, args.total_mb * 1024 * 1024 // len(batch))
    total = count * len(batch)
    raw_s = log_s = py_s = raw_cpu = log_cpu = float("inf")
    compiled = log_validator._compiled_walk
    for _ in range(max(1, args.rounds)):
        work = tempfile.mkdtemp(prefix="kafkatier-bench-", dir=args.dir)
        try:
            wall, cpu = bench_raw(os.path.join(work, "raw.bin"), batch, count)
            raw_s, raw_cpu = min(raw_s, wall), min(raw_cpu, cpu)
            os.unlink(os.path.join(work, "raw.bin"))
            wall, cpu = bench_log(work, batch, count)
            log_s, log_cpu = min(log_s, wall), min(log_cpu, cpu)
            if compiled is not None:  # the same appends validated in pure Python (no C compiler)
                shutil.rmtree(os.path.join(work, "bench-0"), ignore_errors=True)
                fast = log_validator._compiled_leader_append
                log_validator._compiled_walk = log_validator._compiled_leader_append = None
                try:
                    py_s = min(py_s, bench_log(work, batch, count)[0])
                finally:
                    log_validator._compiled_walk, log_validator._compiled_leader_append = compiled, fast
        finally:
            shutil.rmtree(work, ignore_errors=True)
    mb = total / (1024 * 1024)
    raw_rate, log_rate = mb / raw_s, mb / log_s
    print(f"batch: {len(batch)} bytes ({args.record_bytes}-byte records), batches: {count}, "
          f"total: {mb:.0f} MiB per run, best of {max(1, args.rounds)} rounds")
    print(f"raw file.write:          {raw_rate:9.1f} MB/s")
    print(f"Log.append_as_leader:    {log_rate:9.1f} MB/s  ({count / log_s:,.0f} batches/s)"
          f"{'' if compiled else '  (pure-Python validation: the compiled one is not built)'}")
    if compiled is not None:
        print(f"  validated in Python:    {mb / py_s:9.1f} MB/s  (ratio {mb / py_s / raw_rate:.2f})")
    print(f"ratio (log / raw):       {log_rate / raw_rate:9.2f}")
    print(f"CPU-time ratio:          {raw_cpu / log_cpu:9.2f}  (raw {raw_cpu / count * 1e6:.1f} us, log "
          f"{log_cpu / count * 1e6:.1f} us per batch)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
