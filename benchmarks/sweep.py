"""Scenario sweeps on Spark: seeds/hour with 1, 2 and 4 local workers (``local[N]``: N seeds at once), the same
seeds for every row, measured back to back in one run so load affects every row.

The first row is the baseline, a sweep as it ran before reuse: every seed starts its own ZooKeeper and draws its
timeline and HTML page.  The other rows reuse what is safe to share (one ZooKeeper per executor, a chroot per
seed; pictures only for failing seeds).  Speed-ups are against the baseline; ``same outcomes`` says whether every
seed ended as in the baseline (valid / anomalies / error)::

    .venv/bin/python benchmarks/sweep.py [--quick] [--scenario NAME] [--seeds N] [--workers 1,2,4]

Prints one row per setting (wall time with Spark's start-up, the seeds' job time, seeds/hour of the job, speed-up,
the 100-seed wall time it implies -- Spark's start-up once plus 100 seeds at the job's rate --, mean seed
duration) and ``summary:`` lines with the load average.  ``--quick``: the tiny one-broker scenario of the tests,
2 seeds, 1 and 2 workers.  ``--no-baseline`` skips the first row.
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
    ap.add_argument("--seeds", type=int, default=8, help="seeds per row (default 8)")
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--baseline-workers", type=int, default=1)
    ap.add_argument("--no-baseline", action="store_true")
    args = ap.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    with tempfile.TemporaryDirectory(prefix="kafkatier-bench-sweep-") as tmp:
        if args.quick:
            path = os.path.join(tmp, "tiny.toml")
            with open(path, "w") as f:
                f.write(TINY)
            spec, seeds, workers = load(path), range(1, 3), [1, 2]
        else:
            spec = load(resolve(args.scenario))
            seeds = range(args.first_seed, args.first_seed + args.seeds)
        settings = ([] if args.no_baseline else [(args.baseline_workers, False)]) + [(n, True) for n in workers]
        print(f"sweep of {spec.name} --quick, seeds {seeds.start}..{seeds.stop - 1}; load {os.getloadavg()}; "
              f"{os.cpu_count()} cores")
        print(f"{'workers':>7} {'reuse':>5} {'wall s':>7} {'job s':>6} {'seeds/h':>8} {'speed-up':>8} "
              f"{'100 seeds':>10} {'seed s':>7} {'load':>5}  outcomes")
        base = None
        base_outcomes = None
        for i, (n, reuse) in enumerate(settings):
            t0 = time.monotonic()
            with redirect_stdout(io.StringIO()):
                res = spark_sweep(spec, seeds, f"local[{n}]", True, os.path.join(tmp, f"out-{i}"), reuse=reuse,
                                  reports="failing" if reuse else "all")
            wall = time.monotonic() - t0          # including Spark's start-up, as a user sees it
            job = res.elapsed_s                   # the seeds' job: Spark's start-up (paid once) excluded
            rate = 3600 * len(seeds) / job
            hundred = (wall - job) + 100 * job / len(seeds)
            base = base or rate
            outcomes: dict[str, int] = {}
            for r in res.rows:
                outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
            per_seed = {r["seed"]: r["outcome"] for r in res.rows}
            base_outcomes = base_outcomes or per_seed
            same = "" if per_seed is base_outcomes else (
                "; same outcomes" if per_seed == base_outcomes else
                f"; DIFFERENT outcomes: {sorted(s for s in per_seed if per_seed[s] != base_outcomes.get(s))}")
            mean = sum(r["duration_s"] for r in res.rows) / len(res.rows)
            load_avg = os.getloadavg()[0]
            print(f"{n:>7} {'yes' if reuse else 'no':>5} {wall:>7.0f} {job:>6.0f} {rate:>8.0f} {rate / base:>8.2f} "
                  f"{hundred / 60:>8.1f} m {mean:>7.1f} {load_avg:>5.1f}  {outcomes}{same}", flush=True)
            print(f"summary: {n} workers{'' if reuse else ' (baseline: no reuse)'}: {rate:.0f} seeds/hour "
                  f"({rate / base:.2f}x of the baseline), 100 seeds in {hundred / 60:.1f} min (Spark's start-up "
                  f"{wall - job:.0f}s once), mean seed {mean:.1f}s, load {load_avg:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
