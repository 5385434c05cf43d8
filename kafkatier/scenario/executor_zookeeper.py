"""One embedded ZooKeeper per executor for a sweep's seeds, each seed in its own chroot.

Every seed of a sweep otherwise starts (and stops) its own ZooKeeper JVM: on two cores that is seconds of a run's
wall time and more than a CPU-second.  When nothing in the scenario touches the ZooKeeper server itself
(:func:`reuse_refused` says why not otherwise), the seeds of one executor share one server: seed ``S`` runs with
``--zookeeper HOST:PORT/sweep-S-<id>``, an empty chroot made for it and deleted after it, exactly as Kafka clusters
share an ensemble.  A broker's session, its ephemeral registration and its expiry stay per seed, so session faults
keep their meaning; the replay command of a seed is unchanged and runs it alone with its own ZooKeeper.

"Executor" is meant loosely: executors on one machine share the server (it is found through ``home()``, a
directory of the machine's temporary dir named after the sweep).

Lifetime: the first task of a sweep on a machine starts a *keeper* (``python -m
kafkatier.scenario.executor_zookeeper DIR IDLE_S``) under a file lock; the keeper runs the server as its child and
writes ``DIR/connect``.  Each running seed holds a lease file ``DIR/leases/<pid>-<seed>``.  The keeper stops the
server when ``DIR/stop`` appears (the driver, on the same machine, at the end of the sweep) or when no live lease
was seen for ``IDLE_S`` seconds (an executor on another machine, or a driver that died).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

from kafkatier.cluster.embedded_zookeeper import pid_alive
from kafkatier.logsetup import get_logger, kv
from kafkatier.waiting import WaitTimeout, wait_for

log = get_logger("scenario.executor_zookeeper")

IDLE_S = 120.0            # the keeper stops its ZooKeeper once no seed used it for this long
START_TIMEOUT_S = 90.0    # the JVM's start on a loaded machine
LEASE_ATTEMPTS = 3        # connecting to make a seed's chroot
KEEPER_POLL_S = 0.5

# Actions that act on the ZooKeeper server (or its ensemble) rather than on a broker's session: a run with any of
# them keeps its own ZooKeeper.
ZOOKEEPER_SERVER_ACTIONS = ("zk_pause", "zk_restart", "zk_kill_leader", "zk_pause_server", "zk_restart_ensemble")


def reuse_refused(spec) -> str | None:
    """Why the seeds of ``spec`` cannot share an executor's ZooKeeper (None: they can).  Shared only when the run
    would start the embedded ZooKeeper anyway, touches no server with a fault, and routes nothing to ZooKeeper
    through links (the link process relays its own ZooKeeper path)."""
    c = spec.cluster
    if c.zookeeper is not None:
        return f"the scenario names its ZooKeeper ({c.zookeeper})"
    if c.links or c.client_groups:
        return "the scenario routes brokers through links (their ZooKeeper paths are faulted per run)"
    actions = {a.action for a in spec.schedule} | set(spec.nemesis.menu if spec.nemesis else ())
    server_faults = sorted(a for a in actions if a.startswith("zk_") or a in ZOOKEEPER_SERVER_ACTIONS)
    if server_faults:
        return f"the scenario faults the ZooKeeper server ({', '.join(server_faults)})"
    return None


def home(sweep_id: str, base: str | None = None) -> str:
    """The executor ZooKeeper's directory of sweep ``sweep_id`` on this machine."""
    return os.path.join(base or tempfile.gettempdir(), f"kafkatier-sweep-zk-{sweep_id}")


class ExecutorZooKeeper:
    """A task's handle on its machine's shared ZooKeeper for one sweep (``lease`` one seed at a time)."""

    def __init__(self, sweep_id: str, base: str | None = None, idle_s: float = IDLE_S):
        self.dir = home(sweep_id, base)
        self.idle_s = idle_s

    @property
    def _connect_path(self) -> str:
        return os.path.join(self.dir, "connect")

    def _keeper_alive(self) -> bool:
        return _pid_alive(_read_pid(os.path.join(self.dir, "keeper.pid"))) \
            and not os.path.exists(os.path.join(self.dir, "stop"))

    def _connect(self) -> str | None:
        try:
            with open(self._connect_path) as f:
                return f.read().strip() or None
        except OSError:
            return None

    def connect_string(self) -> str:
        """The server's ``HOST:PORT``; starts the keeper if this machine has none for the sweep yet."""
        os.makedirs(os.path.join(self.dir, "leases"), exist_ok=True)
        with open(os.path.join(self.dir, "lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if not (self._keeper_alive() and self._connect()):
                    self._start_keeper()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        connect = self._connect()
        if connect is None:
            raise RuntimeError(f"the executor's ZooKeeper in {self.dir} has no connect string")
        return connect

    def _start_keeper(self) -> None:
        for stale in ("connect", "stop", "keeper.pid"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.dir, stale))
        # The Python worker's PYTHONPATH points at pyspark's zip, which has no jars/: the keeper imports the
        # installed pyspark, whose jars ZooKeeper runs from.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        with open(os.path.join(self.dir, "keeper.log"), "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "kafkatier.scenario.executor_zookeeper", self.dir,
                                     str(self.idle_s)], stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True, env=env)

        def serving() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"the executor's ZooKeeper keeper exited with status {proc.returncode} (see "
                                   f"{self.dir}/keeper.log)")
            return self._connect() is not None
        try:
            wait_for(serving, START_TIMEOUT_S, interval=0.1, message="the executor's ZooKeeper to serve")
        except WaitTimeout:
            proc.kill()
            raise

    @contextlib.contextmanager
    def lease(self, seed: int):
        """``HOST:PORT/chroot``: an empty chroot of the shared server for one seed, removed afterwards."""
        from kafkatier.zk.client import ZooKeeperUnavailableError, start_client
        from kafkatier.zk.errors import KazooException, KazooTimeoutError
        connect = self.connect_string()
        lease = os.path.join(self.dir, "leases", f"{os.getpid()}-{seed}-{uuid.uuid4().hex[:6]}")
        with open(lease, "w") as f:
            f.write(str(os.getpid()))
        chroot = f"/sweep-{seed}-{uuid.uuid4().hex[:8]}"
        try:
            # The shared server answers every seed of the machine: on a loaded one a connection can time out or
            # drop once; try again (bounded) rather than lose the seed.
            for attempt in Retrying(stop=stop_after_attempt(LEASE_ATTEMPTS), reraise=True,
                                    retry=retry_if_exception_type((ZooKeeperUnavailableError, KazooException,
                                                                     KazooTimeoutError))):
                with attempt:
                    zk = start_client(connect, timeout=10.0, connect_timeout=30.0)
                    try:
                        zk.ensure_path(chroot)
                    finally:
                        zk.stop()
                        zk.close()
            yield connect + chroot
        finally:
            try:
                zk = start_client(connect, timeout=10.0, connect_timeout=10.0)
                try:
                    zk.delete(chroot, recursive=True)
                finally:
                    zk.stop()
                    zk.close()
            except Exception as e:  # noqa: BLE001 - an old chroot only costs memory until the server stops
                log.warning("could not delete a seed's chroot %s", kv(chroot=chroot, error=repr(e)))
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lease)

    def stop(self, timeout: float = 30.0) -> None:
        """Ask the keeper to stop its server (the driver, at the end of the sweep); wait for it, bounded."""
        if not os.path.isdir(self.dir):
            return
        with open(os.path.join(self.dir, "stop"), "w"):
            pass
        try:
            wait_for(lambda: not _pid_alive(_read_pid(os.path.join(self.dir, "keeper.pid"))), timeout,
                     interval=0.1, message="the executor's ZooKeeper to stop")
        except WaitTimeout:
            log.warning("the executor's ZooKeeper keeper did not stop %s", kv(dir=self.dir))
            return
        shutil.rmtree(self.dir, ignore_errors=True)


def _read_pid(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _pid_alive(pid: int | None) -> bool:
    """A running process (a zombie -- the keeper exited, its starter has not reaped it -- is not)."""
    return pid is not None and pid_alive(pid)


def _live_leases(leases: str) -> bool:
    try:
        names = os.listdir(leases)
    except OSError:
        return False
    return any(_pid_alive(_read_pid(os.path.join(leases, n))) for n in names)


def keep(directory: str, idle_s: float) -> int:
    """The keeper: run the server until ``stop`` appears or no live lease was seen for ``idle_s``."""
    from kafkatier.cluster.embedded_zookeeper import EmbeddedZooKeeper
    with open(os.path.join(directory, "keeper.pid"), "w") as f:
        f.write(str(os.getpid()))
    zk = EmbeddedZooKeeper(data_dir=os.path.join(directory, "zookeeper"), port=0)
    zk.start(wait_timeout=START_TIMEOUT_S)
    try:
        tmp = os.path.join(directory, "connect.tmp")
        with open(tmp, "w") as f:
            f.write(zk.connect_string)
        os.replace(tmp, os.path.join(directory, "connect"))
        log.info("executor ZooKeeper serving %s", kv(connect=zk.connect_string, dir=directory))
        busy = time.monotonic()
        while not os.path.exists(os.path.join(directory, "stop")) and zk.is_running():
            if _live_leases(os.path.join(directory, "leases")):
                busy = time.monotonic()
            elif time.monotonic() - busy > idle_s:
                log.info("executor ZooKeeper idle, stopping %s", kv(idle_s=idle_s))
                break
            time.sleep(KEEPER_POLL_S)   # the keeper's own poll of its stop conditions, not synchronisation
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(directory, "connect"))
        zk.stop()
    return 0


if __name__ == "__main__":
    from kafkatier import logsetup
    logsetup.configure("INFO")
    sys.exit(keep(sys.argv[1], float(sys.argv[2])))
