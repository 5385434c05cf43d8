"""A sweep: one scenario over a range of seeds, ``parallel`` runs at a time, each in its own process (so a run's
clients, threads and signals never touch another's).  Prints a table of seed x outcome and keeps only the run
directories of failing seeds.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import attrs

from kafkatier.scenario.executor_zookeeper import ExecutorZooKeeper
from kafkatier.scenario.seed_process import run_seed_process


@attrs.frozen
class SeedOutcome:
    seed: int
    exit_code: int
    elapsed_s: float
    anomalies: tuple[str, ...]
    run_dir: str


def parse_seeds(text: str) -> range:
    """``A..B`` (inclusive) or a single seed."""
    lo, sep, hi = text.partition("..")
    try:
        a, b = int(lo), int(hi) if sep else int(lo)
    except ValueError:
        raise ValueError(f"--seeds: expected A..B, got {text!r}") from None
    if b < a:
        raise ValueError(f"--seeds: {b} is below {a}")
    return range(a, b + 1)


def _run_one(path: str, seed: int, quick: bool, runs_dir: str, name: str,
             zookeeper: ExecutorZooKeeper | None) -> SeedOutcome:
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "kafkatier", "--log-level", "WARNING", "scenario", "run", path, "--seed",
           str(seed), "--runs-dir", runs_dir, "--no-progress", "--reports", "failing"] + (["--quick"] if quick else [])
    run_dir = os.path.join(runs_dir, f"{name}-{seed}")
    log_path = os.path.join(runs_dir, f".{name}-{seed}.out")
    with contextlib.ExitStack() as stack:
        if zookeeper is not None:
            try:
                cmd += ["--zookeeper", stack.enter_context(zookeeper.lease(seed))]
            except Exception as e:  # noqa: BLE001 - this seed could not run; the sweep goes on
                return SeedOutcome(seed, 3, time.monotonic() - t0,
                                   (f"the shared ZooKeeper did not start: {str(e).splitlines()[0][:200]}",), run_dir)
        rc = run_seed_process(cmd, log_path, os.path.join(run_dir, "cluster"))
    anomalies: tuple[str, ...] = ()
    try:
        with open(os.path.join(run_dir, "results.json")) as f:
            res = json.load(f)
        anomalies = tuple(f"{a['checker']}/{a['type']}" for a in res["anomalies"]) + tuple(
            f"unmet: {u}" for u in res["unmet_expectations"])
    except (OSError, json.JSONDecodeError):
        # No verdict: the run did not complete (the cluster did not start...); never counted as valid.
        rc = rc if rc not in (0, 1) else 3
        anomalies = (f"run did not complete; see {runs_dir}/.{name}-{seed}.out",)
    return SeedOutcome(seed, rc, time.monotonic() - t0, anomalies, run_dir)


def sweep(path: str, name: str, seeds: range, parallel: int = 1, quick: bool = False, runs_dir: str = "runs",
          out=print, share_zookeeper: bool = False) -> list[SeedOutcome]:
    """``share_zookeeper``: the seeds share one ZooKeeper, a chroot each (only for a scenario that
    :func:`executor_zookeeper.reuse_refused` allows)."""
    os.makedirs(runs_dir, exist_ok=True)
    results: list[SeedOutcome] = []
    t0 = time.monotonic()
    out(f"sweep {name}: seeds {seeds.start}..{seeds.stop - 1}, {parallel} at a time"
        + (", one ZooKeeper (a chroot per seed)" if share_zookeeper else ""))
    out(f"{'seed':>8}  {'outcome':<9} {'time':>7}  anomalies")
    zookeeper = ExecutorZooKeeper(uuid.uuid4().hex[:12]) if share_zookeeper else None
    with ThreadPoolExecutor(max_workers=parallel) as pool, contextlib.ExitStack() as stack:
        if zookeeper is not None:
            stack.callback(zookeeper.stop)
        for r in pool.map(lambda s: _run_one(path, s, quick, runs_dir, name, zookeeper), seeds):
            outcome = {0: "valid", 1: "ANOMALY"}.get(r.exit_code, "error")
            out(f"{r.seed:>8}  {outcome:<9} {r.elapsed_s:>6.1f}s  {', '.join(r.anomalies)}")
            if r.exit_code == 0:
                shutil.rmtree(r.run_dir, ignore_errors=True)
                try:
                    os.remove(os.path.join(runs_dir, f".{name}-{r.seed}.out"))
                except OSError:
                    pass
            results.append(r)
    bad = [r for r in results if r.exit_code != 0]
    out(f"{len(results)} seeds in {time.monotonic() - t0:.0f}s: {len(results) - len(bad)} valid, {len(bad)} failing"
        + (f" ({', '.join(str(r.seed) for r in bad)}; kept in {runs_dir})" if bad else ""))
    return results
