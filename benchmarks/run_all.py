"""Run every benchmark in this folder, one after another, and print a summary.

Each ``benchmarks/*.py`` except this file is run as its own process with this interpreter; its output is shown
as it comes.  ``--quick`` is passed on to the benchmarks whose ``--help`` mentions it (the others run with their
defaults).  The summary lists each benchmark's status and time, and its lines starting with ``summary:`` (or,
if it prints none, its last three lines)::

    .venv/bin/python benchmarks/run_all.py [--quick] [--only NAME[,NAME...]] [--timeout 600]

Exits 1 if any benchmark failed.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SELF = os.path.basename(__file__)


def benchmarks() -> list[str]:
    return sorted(n for n in os.listdir(HERE) if n.endswith(".py") and n != SELF and not n.startswith("_"))


def supports_quick(path: str) -> bool:
    try:
        out = subprocess.run([sys.executable, path, "--help"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return False
    return out.returncode == 0 and "--quick" in out.stdout


def run_one(name: str, quick: bool, timeout: float) -> tuple[str, float, list[str]]:
    """Run one benchmark, echoing its output; returns (status, seconds, its output lines)."""
    path = os.path.join(HERE, name)
    cmd = [sys.executable, path] + (["--quick"] if quick and supports_quick(path) else [])
    print(f"=== {name}: {' '.join(os.path.basename(c) for c in cmd[1:])}", flush=True)
    lines: list[str] = []
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=os.path.dirname(HERE))
    try:
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            lines.append(line.rstrip("\n"))
            if time.monotonic() - start > timeout:
                proc.kill()
                break
        rc = proc.wait(timeout=max(1.0, timeout - (time.monotonic() - start)))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        rc = None
    elapsed = time.monotonic() - start
    if rc is None or (rc != 0 and elapsed > timeout):
        status = f"TIMEOUT after {timeout:.0f}s"
    else:
        status = "ok" if rc == 0 else f"FAILED (exit {rc})"
    return status, elapsed, lines


def summary_lines(lines: list[str]) -> list[str]:
    picked = [ln[len("summary:"):].strip() for ln in lines if ln.startswith("summary:")]
    return picked or [ln for ln in lines if ln.strip()][-3:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="pass --quick to the benchmarks that accept it")
    p.add_argument("--only", default=None, help="comma-separated benchmark names (with or without .py)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per benchmark")
    args = p.parse_args(argv)

    names = benchmarks()
    if args.only:
        wanted = {n if n.endswith(".py") else f"{n}.py" for n in args.only.split(",") if n.strip()}
        missing = wanted - set(names)
        if missing:
            p.error(f"no such benchmark(s): {', '.join(sorted(missing))}; have: {', '.join(names)}")
        names = [n for n in names if n in wanted]

    results = [(name, *run_one(name, args.quick, args.timeout)) for name in names]

    print("\n=== summary")
    for name, status, elapsed, lines in results:
        print(f"{name:24s} {status:20s} {elapsed:6.1f}s")
        for line in summary_lines(lines):
            print(f"    {line}")
    return 0 if all(status == "ok" for _, status, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
