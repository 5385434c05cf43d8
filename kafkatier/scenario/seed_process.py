"""One seed of a sweep as a child process (``kafkatier scenario run ...``), bounded in time: a run that hangs is
stopped, and so is the cluster it leaves behind (its brokers and ZooKeeper run in sessions of their own and would
otherwise load the machine for the rest of the sweep)."""
from __future__ import annotations

import os
import subprocess

from kafkatier.logsetup import get_logger, kv

log = get_logger("scenario.seed_process")

SEED_TIMEOUT_S = 1800.0   # a run has bounded phases; this only catches a child that hangs
STOP_S = 60.0             # a timed-out run's SIGTERM tears its cluster down; then SIGKILL
HUNG = 3                  # the exit status of a run stopped for hanging (it could not complete)


def run_seed_process(cmd: list[str], log_path: str, cluster_dir: str, timeout: float = SEED_TIMEOUT_S,
                     env: dict[str, str] | None = None, stop_s: float = STOP_S) -> int:
    """Run ``cmd`` with its output in ``log_path``; its exit status.  After ``timeout`` s: SIGTERM (the run
    unwinds like Ctrl-C and stops its cluster), SIGKILL after ``stop_s``, then whatever ``cluster_dir``'s
    ``cluster.json`` still lists is stopped; :data:`HUNG`."""
    with open(log_path, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        out.write(f"\nkafkatier scenario sweep: the run did not finish within {timeout:g}s\n")
        out.flush()
        proc.terminate()
        try:
            proc.wait(stop_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    stop_left_cluster(cluster_dir)
    return HUNG


def stop_left_cluster(cluster_dir: str) -> None:
    """Stop the brokers and ZooKeeper a run's ``cluster.json`` still lists (best effort)."""
    from kafkatier.cluster.manager import ClusterManager
    if not os.path.exists(os.path.join(cluster_dir, "cluster.json")):
        return
    try:
        manager = ClusterManager(cluster_dir)
        manager.load()
        manager.down()
    except Exception as e:  # noqa: BLE001 - best effort after a hung run
        log.warning("could not stop a hung run's cluster %s", kv(dir=cluster_dir, error=repr(e)))
