"""Scenario sweeps on Spark: seeds/hour with 1, 2 and 4 local workers (``local[N]``: N seeds at once, each with its
own embedded ZooKeeper and brokers), the same seeds for every N, measured back to back in one run so load
affects every row; speed-up is against the 1-worker row of the same run::

    .venv/bin/python benchmarks/sweep.py [--quick] [--scenario NAME] [--seeds N] [--workers 1,2,4]

Prints one row per worker count (wall time, seeds/hour, speed-up, the 100-seed wall time it implies) and
``summary:`` lines with the load average.  ``--quick``: the tiny one-broker scenario of the tests, 2 seeds,
1 and 2 workers.
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from contextlib import redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kafkatier.scenario.spark_sweep import spark_sweep  # noqa: E402
from kafkatier.scenario.spec import load, resolve  # noqa: E402
from kafkatier.testing.tiny_scenario import tiny_scenario  # noqa: E402

TINY = tiny_scenario("tiny")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the tiny scenario, 2 seeds, 1 and 2 workers")
    ap.add_argument("--scenario", default="nemesis-broker-faults")
    ap.add_argument("--seeds", type=int, default=8, help="seeds per worker count (default 8)")
    ap.add_argument("--workers", default="1,2,4")
    args = ap.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    with tempfile.TemporaryDirectory(prefix="kafkatier-bench-sweep-") as tmp:
        if args.quick:
            path = os.path.join(tmp, "tiny.toml")
            with open(path, "w") as f:
                f.write(TINY)
            spec, seeds, workers = load(path), range(1, 3), [1, 2]
        else:
            spec, seeds = load(resolve(args.scenario)), range(1, args.seeds + 1)
        print(f"sweep of {spec.name} --quick, seeds {seeds.start}..{seeds.stop - 1}; load {os.getloadavg()}")
        print(f"{'workers':>7} {'wall s':>8} {'seeds/h':>8} {'speed-up':>8} {'100 seeds':>10}  outcomes")
        base = None
        for n in workers:
            t0 = time.monotonic()
            with redirect_stdout(io.StringIO()):
                res = spark_sweep(spec, seeds, f"local[{n}]", True, os.path.join(tmp, f"out-{n}"))
            wall = time.monotonic() - t0          # including Spark's start-up, as a user sees it
            rate = 3600 * len(seeds) / wall
            base = base or rate
            outcomes = {}
            for r in res.rows:
                outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
            print(f"{n:>7} {wall:>8.0f} {rate:>8.0f} {rate / base:>8.2f} {100 * 3600 / rate / 60:>8.0f} m  "
                  f"{outcomes}", flush=True)
            print(f"summary: {n} workers: {rate:.0f} seeds/hour ({rate / base:.2f}x of 1 worker), load "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
