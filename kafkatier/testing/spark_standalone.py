"""A Spark standalone cluster on this machine (loopback only) for tests and benchmarks: one master and N workers,
started with Spark's own launcher as an operator would (``bin/spark-class org.apache.spark.deploy.master.Master``
and ``...deploy.worker.Worker``: pip's pyspark ships ``bin/spark-class`` but not ``sbin/start-master.sh`` /
``sbin/start-worker.sh``, which a full Spark distribution adds around the same two classes).

    with StandaloneCluster(str(tmp_path), workers=2) as cluster:
        ... --master cluster.master_url ...
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

from kafkatier.waiting import wait_for

START_TIMEOUT_S = 300.0   # each of master and workers: a JVM took 87 s to start at load 40 on 2 cores
MASTER_LINE = re.compile(r"Starting Spark master at (spark://\S+)")
REGISTERED_LINE = "Successfully registered with master"


def spark_home() -> str:
    import pyspark
    return os.path.dirname(os.path.abspath(pyspark.__file__))


class StandaloneCluster:
    def __init__(self, work_dir: str, workers: int = 2, cores_per_worker: int = 1, memory: str = "1g"):
        self.work_dir = os.path.abspath(work_dir)
        self.workers = workers
        self.cores_per_worker = cores_per_worker
        self.memory = memory
        self.master_url: str | None = None
        self._procs: list[subprocess.Popen] = []

    def _env(self) -> dict[str, str]:
        return dict(os.environ, SPARK_HOME=spark_home(), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                    SPARK_NO_DAEMONIZE="1")

    def _launch(self, name: str, args: list[str]) -> str:
        log_path = os.path.join(self.work_dir, f"{name}.log")
        with open(log_path, "w") as log:
            self._procs.append(subprocess.Popen(
                [os.path.join(spark_home(), "bin", "spark-class"), *args], stdout=log, stderr=subprocess.STDOUT,
                env=self._env(), cwd=self.work_dir))
        return log_path

    @staticmethod
    def _read(path: str) -> str:
        with open(path, errors="replace") as f:
            return f.read()

    def start(self) -> StandaloneCluster:
        os.makedirs(self.work_dir, exist_ok=True)
        try:
            log = self._launch("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                          "--port", "0", "--webui-port", "0"])

            def master_url():
                m = MASTER_LINE.search(self._read(log))
                return m.group(1) if m else None
            self.master_url = wait_for(master_url, START_TIMEOUT_S, interval=0.2, message="the Spark master")
            logs = []
            for i in range(self.workers):
                work = os.path.join(self.work_dir, f"worker-{i}")
                os.makedirs(work, exist_ok=True)
                logs.append(self._launch(f"worker-{i}", [
                    "org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1", "--port", "0",
                    "--webui-port", "0", "--cores", str(self.cores_per_worker), "--memory", self.memory,
                    "--work-dir", work]))
            try:
                wait_for(lambda: self._registered(logs), START_TIMEOUT_S, interval=0.2,
                         message=f"{self.workers} Spark workers to register")
            except TimeoutError as e:
                raise TimeoutError(f"{e}; {self._tails(logs)}") from None
        except BaseException:
            self.stop()
            raise
        return self

    def _registered(self, logs: list[str]) -> bool:
        """Every worker has registered; a launcher that exited is an error at once, with its log."""
        dead = [p for p in self._procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"a Spark process exited with status {dead[0].returncode}: {self._tails(logs)}")
        return all(REGISTERED_LINE in self._read(p) for p in logs)

    def _tails(self, logs: list[str], lines: int = 8) -> str:
        """The last lines of each worker's log, for a failure message (why a worker did not register)."""
        return " | ".join(f"{os.path.basename(p)}: " + " / ".join(self._read(p).splitlines()[-lines:]) for p in logs)

    def stop(self) -> None:
        for p in reversed(self._procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self._procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        self._procs.clear()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
