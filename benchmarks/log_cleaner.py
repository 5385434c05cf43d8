"""Log cleaner throughput against a raw Python read-dedupe-write of the same segments, in the same run, and the
append throughput of another log while a cleaner thread runs against without.

Both are measured in ``--rounds`` rounds, each round measuring the two sides back to back (in alternating order),
and the median of the per-round ratios is reported: a change of the shared machine's load hits both sides of a
ratio alike.

1. A compacted log of ``--total-mb`` MB (``--keys`` distinct keys, ``--record-bytes`` values, ~16 KiB v2 batches,
   1 MiB segments) is written once; each round the cleaner cleans a fresh copy of it (offset map, filtered
   batches, ``.cleaned`` -> ``.swap`` -> swap, indexes) and the MB/s of dirty log processed is compared with a
   raw pass over copies of the same segment files: read each file, map key -> last offset with a minimal varint parser, rewrite each batch with
   its surviving records (new length, count, CRC) to a new file, fsync.  Goal: cleaner >= 0.6x raw.
2. Appends to another log (``Log.append_as_leader``, the broker's produce path below the network) for
   ``2 * --seconds`` s while a ``LogCleaner`` thread (default duty cycle) cleaning ``--dirty-logs`` fresh dirty
   copies of a log is switched on and off every ``--slice-ms``: the append rate with the cleaner working against
   the rate with it stopped.  Goal: >= 0.8x.

    .venv/bin/python benchmarks/log_cleaner.py [--total-mb 32] [--keys 2000] [--record-bytes 200] [--seconds 5]
                                               [--rounds 7] [--dirty-logs 8] [--quick]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from crc32c import crc32c  # noqa: E402
from kafka.record.memory_records import MemoryRecordsBuilder  # noqa: E402

from kafkatier.log.cleaner import Cleaner  # noqa: E402
from kafkatier.log.cleaner_throttle import Throttler  # noqa: E402
from kafkatier.log.log import Log  # noqa: E402
from kafkatier.log.log_cleaner import CleanerConfig, CleanerThread, LogCleaner  # noqa: E402
from kafkatier.log.log_cleaner_manager import cleanable_range  # noqa: E402

CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(1 << 20), "min.cleanable.dirty.ratio": "0.01"}


def build_log(path: str, total_mb: int, keys: int, record_bytes: int) -> Log:
    lg = Log(path, dict(CONFIG), had_clean_shutdown=True)
    value = os.urandom(record_bytes)
    n = 0
    while lg.size < total_mb << 20:
        b = MemoryRecordsBuilder(2, 0, 16384)
        while b.append(int(time.time() * 1000), b"key-%d" % (n % keys), value) is not None:
            n += 1
        b.close()
        lg.append_as_leader(bytes(b.buffer()), 0)
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    return lg


def _varint(buf, p):
    v = shift = 0
    while True:
        b = buf[p]
        p += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return (v >> 1) ^ -(v & 1), p
        shift += 7


def _records(buf, p, end):
    while p < end:
        length, q = _varint(buf, p)
        stop = q + length
        q += 1
        _, q = _varint(buf, q)
        delta, q = _varint(buf, q)
        klen, q = _varint(buf, q)
        yield p, stop, delta, bytes(buf[q:q + klen])
        p = stop


def raw_clean(files: list[str], out_dir: str) -> None:
    """The baseline: read, dedupe by key, rewrite surviving records, fsync."""
    datas = []
    last: dict[bytes, int] = {}
    for f in files:
        with open(f, "rb") as fh:
            data = fh.read()
        datas.append(data)
        p = 0
        while p + 61 <= len(data):
            base, length = struct.unpack_from(">qi", data, p)
            for _, _, delta, key in _records(data, p + 61, p + 12 + length):
                last[key] = base + delta
            p += 12 + length
    for f, data in zip(files, datas):
        out = bytearray()
        p = 0
        while p + 61 <= len(data):
            base, length = struct.unpack_from(">qi", data, p)
            kept = [data[a:b] for a, b, delta, key in _records(data, p + 61, p + 12 + length)
                    if last[key] == base + delta]
            if kept:
                recs = b"".join(kept)
                hdr = bytearray(data[p:p + 61])
                struct.pack_into(">i", hdr, 8, 49 + len(recs))
                struct.pack_into(">i", hdr, 57, len(kept))
                body = bytes(hdr[21:]) + recs
                struct.pack_into(">I", hdr, 17, crc32c(body))
                out += hdr[:21] + body
            p += 12 + length
        with open(os.path.join(out_dir, os.path.basename(f) + ".raw"), "wb") as fh:
            fh.write(out)
            fh.flush()
            os.fsync(fh.fileno())


def open_copy(template: str, path: str) -> Log:
    """A fresh dirty copy of the template log (copied outside every timed section)."""
    shutil.copytree(template, path)
    lg = Log(path, dict(CONFIG), had_clean_shutdown=True)
    lg.update_high_watermark(lg.log_end_offset)
    return lg


def clean_pair(template: str, tmp: str, r: int) -> tuple[float, float]:
    """One round: the cleaner and the raw baseline on copies of the same segments, back to back (the order
    alternates with ``r``, so a change of the machine's load hits both sides alike).  MB/s of each."""
    lg = open_copy(template, os.path.join(tmp, f"r{r}-0"))
    segs = lg.cleanable_segments()
    size = sum(s.size for s in segs)
    raw_dir = os.path.join(tmp, f"raw{r}")
    os.makedirs(raw_dir)
    copies = []
    for f in (s.log_path for s in segs):
        dst = os.path.join(raw_dir, os.path.basename(f))
        shutil.copyfile(f, dst)
        copies.append(dst)

    def raw() -> float:
        t0 = time.perf_counter()
        raw_clean(copies, raw_dir)
        return time.perf_counter() - t0

    def cleaner() -> float:
        todo = cleanable_range(lg, None, int(time.time() * 1000))
        t0 = time.perf_counter()
        Cleaner(0, CleanerConfig().map_slots_per_thread, Throttler(float("inf")),
                clock=lambda: int(time.time() * 1000)).clean(todo)
        return time.perf_counter() - t0
    if r % 2:
        raw_s, clean_s = raw(), cleaner()
    else:
        clean_s, raw_s = cleaner(), raw()
    lg.close()
    mb = size / (1 << 20)
    return mb / clean_s, mb / raw_s


class Gate:
    """Wraps a cleaner thread's duty cycle: while closed the thread waits at its next batch (holding nothing), so
    the benchmark can switch the cleaner off and on every few hundred milliseconds."""

    def __init__(self, duty):
        self.duty = duty
        self.open = threading.Event()
        self.open.set()

    def begin(self) -> None:
        self.duty.begin()

    def tick(self) -> None:
        if not self.open.is_set():
            self.open.wait()
            self.duty.begin()   # held here: not work
        self.duty.tick()


def append_pair(template: str, tmp: str, r: int, args) -> tuple[float, float, int, float]:
    """One round: appends to another log for ``2 * --seconds``, switching a ``LogCleaner`` thread (cleaning fresh
    dirty copies of the template log) on and off every ``--slice-ms``: the rate with the cleaner working and the
    rate with it stopped are measured interleaved, so the machine's load hits both alike.  MB/s of each (alone,
    with the cleaner), the number of logs cleaned meanwhile and the seconds the cleaner worked."""
    value = os.urandom(1024)
    dirty_dir = os.path.join(tmp, f"cl{r}")
    os.makedirs(dirty_dir)
    logs = [open_copy(template, os.path.join(dirty_dir, f"c{i}-0")) for i in range(args.dirty_logs)]
    path = os.path.join(tmp, f"append{r}-0")
    lg = Log(path, {"segment.bytes": str(64 << 20)}, had_clean_shutdown=True)
    b = MemoryRecordsBuilder(2, 0, 16384)
    while b.append(0, None, value) is not None:
        pass
    b.close()
    batch = bytes(b.buffer())
    cleaner = LogCleaner(CleanerConfig(backoff_ms=50), [dirty_dir], lambda: list(logs),
                         clock=lambda: int(time.time() * 1000))
    thread = CleanerThread(cleaner, 0)
    gate = Gate(thread.cleaner.duty)
    thread.cleaner.duty = gate
    cleaner.threads = [thread]
    thread.start()
    done = [0, 0]            # bytes appended with the cleaner off, on
    spent = [0.0, 0.0]
    slice_s = args.slice_ms / 1000.0
    try:
        t0 = time.perf_counter()
        while True:
            phase_start = time.perf_counter()
            if phase_start - t0 >= 2 * args.seconds:
                break
            on = int((phase_start - t0) / slice_s) % 2 == (r % 2)
            if on:
                gate.open.set()
            else:
                gate.open.clear()
            end = t0 + (int((phase_start - t0) / slice_s) + 1) * slice_s
            n = 0
            now = phase_start
            while now < end:
                lg.append_as_leader(batch, 0)
                n += len(batch)
                now = time.perf_counter()
            done[on] += n
            spent[on] += now - phase_start
    finally:
        gate.open.set()
        cleaner.shutdown()
        lg.close()
        for x in logs:
            x.close()
        shutil.rmtree(dirty_dir, ignore_errors=True)
        shutil.rmtree(path, ignore_errors=True)
    duty = gate.duty
    worked_s = duty.slept_s * duty.fraction / (1 - duty.fraction) if duty.fraction < 1 else float("nan")
    return done[0] / spent[0] / (1 << 20), done[1] / spent[1] / (1 << 20), thread.logs_cleaned, worked_s


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-mb", type=int, default=32)
    p.add_argument("--keys", type=int, default=2000)
    p.add_argument("--record-bytes", type=int, default=200)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--dirty-logs", type=int, default=8)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--slice-ms", type=float, default=250.0, help="appends: switch the cleaner on/off this often")
    p.add_argument("--quick", action="store_true", help="8 MB, 3 rounds, 2 s of appends")
    args = p.parse_args(argv)
    if args.quick:
        args.total_mb, args.rounds, args.seconds, args.dirty_logs = 8, 3, 2.0, 4
    tmp = tempfile.mkdtemp(prefix="kafkatier-bench-cleaner-")
    try:
        template = os.path.join(tmp, "template-0")
        build_log(template, args.total_mb, args.keys, args.record_bytes).close()
        small = os.path.join(tmp, "small-0")
        build_log(small, max(4, args.total_mb // 4), args.keys, args.record_bytes).close()
        clean_rates, append_rates = [], []
        for r in range(args.rounds):   # interleaved: each round measures both sides back to back
            c, w = clean_pair(template, tmp, r)
            clean_rates.append((c, w, c / w))
            a, b, n, worked = append_pair(small, tmp, r, args)
            append_rates.append((a, b, b / a, n))
            print(f"round {r + 1}: cleaner {c:.1f} MB/s, raw {w:.1f} MB/s ({c / w:.2f}x); appends alone "
                  f"{a:.1f} MB/s, while cleaning {b:.1f} MB/s ({b / a:.2f}x; the cleaner worked {worked:.2f} s of "
                  f"{args.seconds:g} s on, {n} logs cleaned)", flush=True)
        med = statistics.median
        ratio_c, ratio_a = med(x[2] for x in clean_rates), med(x[2] for x in append_rates)
        print(f"cleaning {args.total_mb} MB ({args.keys} keys, {args.record_bytes} B values), median of "
              f"{args.rounds} rounds: cleaner {med(x[0] for x in clean_rates):.1f} MB/s, raw read-dedupe-write "
              f"{med(x[1] for x in clean_rates):.1f} MB/s, ratio {ratio_c:.2f}x (goal >= 0.6x)")
        print(f"appends to another log, median of {args.rounds} rounds: {med(x[0] for x in append_rates):.1f} MB/s "
              f"alone, {med(x[1] for x in append_rates):.1f} MB/s while the cleaner runs, ratio {ratio_a:.2f}x "
              f"(goal >= 0.8x)")
        print(f"summary: cleaner/raw {ratio_c:.2f}x, appends with/without cleaner {ratio_a:.2f}x; "
              f"load {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
