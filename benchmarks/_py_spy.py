"""py-spy recordings of broker processes for the benchmarks that take ``--py-spy DIR`` (a helper module: the
leading underscore keeps ``run_all.py`` from running it)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time


class PySpy:
    """py-spy recordings (collapsed stacks) of some broker processes, started and stopped by the benchmark."""

    def __init__(self, out_dir: str | None, gil: bool = False, rate: int = 50):
        self.out_dir = out_dir
        self.gil = gil  # only samples of the thread holding the GIL (py-spy --gil): where the CPU goes
        self.rate = rate
        self.procs: list[subprocess.Popen] = []

    def start(self, pids: dict[int, int], label: str) -> None:
        if not self.out_dir:
            return
        exe = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
        if not os.path.exists(exe):
            print("--py-spy: py-spy is not installed (pip install py-spy); not recording", flush=True)
            self.out_dir = None
            return
        os.makedirs(self.out_dir, exist_ok=True)
        for b, pid in pids.items():
            out = os.path.join(self.out_dir, f"{label}-broker-{b}.txt")
            self.procs.append(subprocess.Popen([exe, "record", "--pid", str(pid), "--format", "raw",
                                                "--rate", str(self.rate), "--threads", "--nonblocking",
                                                *(["--gil"] if self.gil else []), "--output", out],
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1.0)  # py-spy attaches before the measured part starts (not a synchronisation of the cluster)

    def stop(self) -> None:
        for p in self.procs:
            p.send_signal(signal.SIGINT)
        for p in self.procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs = []
