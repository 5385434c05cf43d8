"""Faults a scenario injects into a running cluster, through public surfaces only: the ``ClusterManager`` API,
process signals and ZooKeeper.

| fault | how |
|---|---|
| kill / terminate | SIGKILL / SIGTERM to the broker process (``ClusterManager.stop_broker``) |
| start / restart | wait until a kill -9'd broker's old ephemeral registration expired, ``ClusterManager.start_broker``, then wait until the broker **serves**: its ``/brokers/ids/{id}`` znode has a czxid other than the one it had before it stopped (a fast restart can still see the dead process's ephemeral node until its session expires) |
| pause | SIGSTOP, SIGCONT after ``duration_s`` |
| expire_session | SIGSTOP for session timeout + 1.5 s, then SIGCONT: ZooKeeper expires the session, the broker re-registers with a new broker epoch (the paused controller is fenced) |
| zk_pause / zk_restart | SIGSTOP / SIGCONT, or stop and start the embedded ZooKeeper's java process on the same port and data dir |
| rolling_restart | SIGTERM + start of each broker in turn, waiting for a full ISR before the next |
| controlled-shutdown | SIGTERM (the broker sends ControlledShutdown, key 7, and the controller moves its leaders away first), wait for the process to exit, start it again after ``down_s``; the history entry names the partitions it led before and, once it exited, the ones ZooKeeper still names it leader of |
| kill_all | SIGKILL every broker, start them all after ``down_s`` |
| kill / restart / start ``rack:RACK`` | the same for every broker of the rack (``[cluster] racks``), one right after another |

Latency in the remote storage manager (``rsm.config.copy.delay.ms`` / ``rsm.config.delete.delay.ms``) and in
the control channel (``kafkatier.test.control.channel.latency.ms``) are test-only broker overrides read at
construction time; a scenario sets them in ``[cluster.overrides]``.

KIP-113: ``fail_log_dir`` fails log dir number ``dir`` of a broker the way a dead disk does
(``ClusterManager.fail_log_dir``: the data moves aside, a file takes the dir's place; the broker takes the dir
offline within a second, or exits if it was its last).  Heal stops that broker (SIGTERM), restores the dir and
starts it again, as an operator replacing the disk would.  (``move_replica`` is an admin action: see
``workloads.AdminOperations``.)

With ``[cluster] zookeeper = "ensemble"`` (a 3-server ensemble in Docker containers, ``kafkatier.testing``):
``zk_kill_leader`` (SIGKILL the ensemble's leader container; restarted after ``down_s``, or at heal),
``zk_pause_server`` (``docker pause`` the leader or a follower for ``duration_s``) and ``zk_restart_ensemble``
(every container stopped and removed, new ones started from the data after ``down_s``).  Heal unpauses and
restarts every server and waits for a quorum with one leader.

Every fault is recorded as an ``info`` entry of process ``nemesis``: ``f`` is the fault, ``value`` the broker
ids it hit.  Heal (:meth:`Faults.heal`) resumes every paused process and starts ZooKeeper and every broker
that is down.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time

from kafkatier.zk.errors import KazooException

from kafkatier.cluster.manager import ClusterManager, pid_alive
from kafkatier.logsetup import get_logger, kv
from kafkatier.scenario.history import History
from kafkatier.scenario.observer import ZooKeeperObserver
from kafkatier.waiting import WaitTimeout, wait_for
from kafkatier.zk import codecs, paths

log = get_logger("scenario.faults")

BROKER_FAULTS = ("kill", "terminate", "restart", "start", "pause", "expire_session", "controlled-shutdown")
CLUSTER_FAULTS = ("zk_pause", "zk_restart", "rolling_restart", "kill_all")
LOG_DIR_FAULTS = ("fail_log_dir",)
ENSEMBLE_FAULTS = ("zk_kill_leader", "zk_pause_server", "zk_restart_ensemble")
FAULTS = BROKER_FAULTS + CLUSTER_FAULTS + LOG_DIR_FAULTS + ENSEMBLE_FAULTS
# How long a ``txn-coordinator:ID`` target waits for ID's coordinator to exist and be alive (a condition's default).
COORDINATOR_WAIT_S = 30.0

SERVE_TIMEOUT_S = 120.0   # a restarted broker registers again: 10-17 s at load 30-50 on 2 cores; its exit is seen


class FaultError(Exception):
    """A fault that could not be applied (no candidate target, ZooKeeper external...)."""


class Faults:
    def __init__(self, manager: ClusterManager, observer: ZooKeeperObserver, history: History,
                 session_timeout_ms: int, ensemble=None):
        self.manager = manager
        self.ensemble = ensemble                   # a kafkatier.testing ZooKeeperEnsemble, or None
        self._zk_paused_servers: list = []
        self._zk_killed_servers: list = []
        self.observer = observer
        self.history = history
        self.session_timeout_s = session_timeout_ms / 1000.0
        self._paused: dict[int, str] = {}         # pid -> what ("broker-2", "zookeeper")
        self._lock = threading.Lock()
        self._timers: list[threading.Timer] = []
        self._czxid: dict[int, int | None] = {}    # registration seen when a broker was stopped
        self._failed_dirs: list[tuple[int, str]] = []   # (broker, log dir) failed by fail_log_dir

    # -- targets -----------------------------------------------------------------------------------------------
    def broker_ids(self) -> list[int]:
        return sorted(b["id"] for b in self.manager.state["brokers"])

    def _pid(self, broker_id: int) -> int | None:
        return self.manager.broker(broker_id).get("pid")

    def alive(self, broker_id: int) -> bool:
        pid = self._pid(broker_id)
        return pid_alive(pid) and pid not in self._paused

    def resolve(self, target, pick: float, exclude: tuple = ()) -> int:
        """The broker a step's target means now (see schedule.py for ``pick``), never one ``exclude`` names:
        a broker id, ``controller``, ``paused`` (a broker this run has paused) or ``leader:TOPIC/P``.  A target that
        means one broker (``controller``, ``leader:``, an id) which is excluded is a :class:`FaultError`."""
        snap = self.observer.snapshot
        excluded = self._excluded(exclude)
        live = [b for b in self.broker_ids() if self.alive(b)]
        if isinstance(target, int) or target == "controller" or target.startswith("leader:"):
            if isinstance(target, int):
                broker = target
            elif target == "controller":
                if snap.controller is None:
                    raise FaultError("no controller to target")
                broker = snap.controller
            else:
                topic, p = target[7:].rsplit("/", 1)
                broker = snap.leader(topic, int(p))
                if broker is None or not self.alive(broker):
                    raise FaultError(f"{target[7:]} has no live leader (ZooKeeper names {broker})")
            if broker in excluded:
                raise FaultError(f"target {target} is broker {broker}, which is excluded ({', '.join(exclude)})")
            return broker
        if target == "random":
            candidates = live
        elif target == "non-controller":
            candidates = [b for b in live if b != snap.controller]
        elif target.startswith("txn-coordinator:"):
            broker = self._transaction_coordinator(target[16:])
            if broker in excluded:
                raise FaultError(f"target {target} is broker {broker}, which is excluded "
                                 f"({', '.join(map(str, exclude))})")
            return broker
        elif target.startswith("follower:"):
            topic, p = target[9:].rsplit("/", 1)
            leader = snap.leader(topic, int(p))
            candidates = [b for b in snap.replicas(topic, int(p)) if b != leader and b in live]
        else:
            raise FaultError(f"unknown target {target!r}")
        candidates = sorted(b for b in candidates if b not in excluded)
        if not candidates:
            raise FaultError(f"no live broker for target {target!r}" + (
                f" outside {', '.join(map(str, exclude))}" if exclude else ""))
        return candidates[min(int(pick * len(candidates)), len(candidates) - 1)]

    def _excluded(self, exclude: tuple) -> set[int]:
        snap = self.observer.snapshot
        out: set[int] = set()
        for e in exclude:
            if isinstance(e, int):
                out.add(e)
            elif e == "controller" and snap.controller is not None:
                out.add(snap.controller)
            elif e == "paused":
                with self._lock:
                    paused = set(self._paused)
                out.update(b for b in self.broker_ids() if self._pid(b) in paused)
            elif isinstance(e, str) and e.startswith("leader:"):
                topic, p = e[7:].rsplit("/", 1)
                leader = snap.leader(topic, int(p))
                if leader is not None:
                    out.add(leader)
        return out

    def _transaction_coordinator(self, transactional_id: str) -> int:
        """The leader of the ``__transaction_state`` partition of ``transactional_id``, as ZooKeeper names it.  A
        step may come before the client has created the topic (its first FindCoordinator) or while the partition
        has no live leader: it waits up to ``COORDINATOR_WAIT_S`` for one, as a ``when`` condition would."""
        try:
            return wait_for(lambda: (self._live_transaction_coordinator(transactional_id),), COORDINATOR_WAIT_S,
                            interval=0.1, ignore=(FaultError,))[0]
        except WaitTimeout:
            return self._live_transaction_coordinator(transactional_id)   # raises the FaultError saying why

    def _live_transaction_coordinator(self, transactional_id: str) -> int:
        from kafkatier.coordinator.transaction.transaction_log import TRANSACTION_STATE_TOPIC, partition_for
        zk = self.observer.zk
        try:
            n = len(codecs.TopicAssignment.decode(zk.get(paths.topic(TRANSACTION_STATE_TOPIC))[0]).partitions)
            p = partition_for(transactional_id, n)
            leader = json.loads(zk.get(paths.partition_state(TRANSACTION_STATE_TOPIC, p))[0])["leader"]
        except (KazooException, ValueError, KeyError) as e:
            raise FaultError(f"no transaction coordinator of {transactional_id!r} yet: {e!r}") from None
        if leader < 0 or not self.alive(leader):
            raise FaultError(f"{TRANSACTION_STATE_TOPIC}/{p} has no live leader (ZooKeeper names {leader})")
        return leader

    # -- brokers ---------------------------------------------------------------------------------------------
    def _registration(self, broker_id: int) -> int | None:
        try:
            stat = self.observer.zk.exists(paths.broker(broker_id))
        except KazooException:
            return self.observer.snapshot.brokers.get(broker_id)
        return stat.czxid if stat else None

    def kill(self, broker_id: int, sig: str = "KILL") -> None:
        pid = self._pid(broker_id)
        if not pid_alive(pid):
            raise FaultError(f"broker {broker_id} is not running")
        self._czxid[broker_id] = self._registration(broker_id)
        self.history.info("nemesis", "kill" if sig == "KILL" else "terminate", [broker_id], pid=pid)
        if pid in self._paused:   # a stopped process only dies of SIGKILL; let SIGTERM run its shutdown
            os.kill(pid, signal.SIGCONT)
            self._paused.pop(pid, None)
        self.manager.stop_broker(broker_id, kill=(sig == "KILL"))

    def start(self, broker_id: int) -> None:
        if pid_alive(self._pid(broker_id)):
            raise FaultError(f"broker {broker_id} is already running")
        old = self._czxid.get(broker_id, self._registration(broker_id))
        self.wait_stale_registration_gone(broker_id, old)
        self.history.info("nemesis", "start", [broker_id])
        self.manager.start_broker(broker_id, wait=False)
        self.wait_serving(broker_id, old)
        self.history.info("nemesis", "started", [broker_id])

    def wait_stale_registration_gone(self, broker_id: int, old_czxid: int | None) -> None:
        """A broker killed with -9 leaves its ephemeral ``/brokers/ids/{id}`` until ZooKeeper expires the dead
        session; today a broker started before that refuses to start (issue 9 makes it wait itself).  Wait for
        the expiry here, bounded by twice the session timeout."""
        if old_czxid is None:
            return
        wait_for(lambda: self._registration(broker_id) != old_czxid, self.session_timeout_s * 2 + 5, interval=0.1,
                 message=f"broker {broker_id}'s old registration to expire")

    def wait_serving(self, broker_id: int, old_czxid: int | None, timeout: float = SERVE_TIMEOUT_S) -> None:
        def serving() -> bool:
            if not pid_alive(self._pid(broker_id)):
                raise FaultError(f"broker {broker_id} exited while starting:\n{self.manager.log_tail(broker_id)}")
            czxid = self._registration(broker_id)
            return czxid is not None and czxid != old_czxid
        wait_for(serving, timeout, interval=0.1, message=f"broker {broker_id} to register again")
        self.manager.wait_for_ports([broker_id], timeout)  # its previous port, or another if that was taken

    def restart(self, broker_id: int, sig: str = "KILL", down_s: float = 0.0) -> None:
        self.kill(broker_id, sig)
        if down_s:
            time.sleep(down_s)  # the fault's own duration, not synchronisation
        self.start(broker_id)

    # -- several brokers at once (a rack) -------------------------------------------------------------------------
    def kill_brokers(self, broker_ids, sig: str = "KILL") -> list[int]:
        """Stop every running broker of ``broker_ids`` (a rack's), one right after another: the rack fails as a
        whole.  The ones already down are left out; none running is a :class:`FaultError`."""
        running = [b for b in broker_ids if pid_alive(self._pid(b))]
        if not running:
            raise FaultError(f"no broker of {', '.join(map(str, broker_ids))} is running")
        for b in running:
            self.kill(b, sig)
        return running

    def start_brokers(self, broker_ids) -> None:
        """Start every stopped broker of ``broker_ids`` together, then wait until each serves."""
        down = [b for b in broker_ids if not pid_alive(self._pid(b))]
        if not down:
            raise FaultError(f"every broker of {', '.join(map(str, broker_ids))} is already running")
        old = {b: self._czxid.get(b, self._registration(b)) for b in down}
        for b in down:
            self.wait_stale_registration_gone(b, old[b])
            self.history.info("nemesis", "start", [b])
            self.manager.start_broker(b, wait=False)
        for b in down:
            self.wait_serving(b, old[b])
            self.history.info("nemesis", "started", [b])

    def restart_brokers(self, broker_ids, sig: str = "KILL", down_s: float = 0.0) -> None:
        killed = self.kill_brokers(broker_ids, sig)
        if down_s:
            time.sleep(down_s)  # the fault's own duration, not synchronisation
        self.start_brokers(killed)

    def controlled_shutdown(self, broker_id: int, topics: list[str], down_s: float = 0.0) -> None:
        """SIGTERM, wait for the exit, start again after ``down_s`` (Kafka's rolling-restart step)."""
        pid = self._pid(broker_id)
        if not pid_alive(pid) or pid in self._paused:
            raise FaultError(f"broker {broker_id} is not running")
        if self._registration(broker_id) is None:   # ControlledShutdown needs a registered broker epoch
            raise FaultError(f"broker {broker_id} is not registered (still starting)")
        self._czxid[broker_id] = self._registration(broker_id)
        led = self._led_by(broker_id, topics)
        self.history.info("nemesis", "controlled-shutdown", [broker_id], pid=pid, leading=led)
        t0 = time.monotonic()
        self.manager.stop_broker(broker_id, kill=False)
        self.history.info("nemesis", "stopped", [broker_id], shutdown_s=round(time.monotonic() - t0, 2),
                          still_leading=self._led_by(broker_id, topics))
        if down_s:
            time.sleep(down_s)  # the fault's own duration, not synchronisation
        self.start(broker_id)

    def _led_by(self, broker_id: int, topics: list[str]) -> list[str]:
        """``t/p`` of the partitions whose ZooKeeper state names ``broker_id`` leader (read now)."""
        out = []
        try:
            for t in topics:
                assignment = codecs.TopicAssignment.decode(self.observer.zk.get(paths.topic(t))[0]).partitions
                for p in sorted(assignment):
                    st = json.loads(self.observer.zk.get(paths.partition_state(t, p))[0])
                    if st["leader"] == broker_id:
                        out.append(f"{t}/{p}")
        except KazooException:
            pass   # informational only
        return out

    def pause(self, broker_id: int, duration_s: float) -> None:
        pid = self._pid(broker_id)
        if not pid_alive(pid) or pid in self._paused:
            raise FaultError(f"broker {broker_id} is not running")
        self._stop_process(pid, f"broker-{broker_id}")
        self.history.info("nemesis", "pause", [broker_id], duration_s=duration_s)
        self._later(duration_s, self._resume, pid, "resume", [broker_id])

    def expire_session(self, broker_id: int) -> None:
        pid = self._pid(broker_id)
        if not pid_alive(pid) or pid in self._paused:
            raise FaultError(f"broker {broker_id} is not running")
        old = self._registration(broker_id)
        self._stop_process(pid, f"broker-{broker_id}")
        self.history.info("nemesis", "expire_session", [broker_id])
        # Resume once ZooKeeper dropped the session (its ephemeral node is gone), bounded by 3 session timeouts.
        try:
            wait_for(lambda: self._registration(broker_id) != old, self.session_timeout_s * 3 + 5, interval=0.1,
                     message=f"broker {broker_id}'s session to expire")
        finally:
            self._resume(pid, "resume", [broker_id])

    def _stop_process(self, pid: int, what: str) -> None:
        with self._lock:
            self._paused[pid] = what
        os.kill(pid, signal.SIGSTOP)

    def _resume(self, pid: int, f: str, value) -> None:
        with self._lock:
            if self._paused.pop(pid, None) is None:
                return
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            return
        self.history.info("nemesis", f, value)

    def _later(self, delay: float, fn, *args) -> None:
        t = threading.Timer(delay, fn, args)
        t.daemon = True
        self._timers.append(t)
        t.start()

    # -- log dirs (KIP-112 / KIP-113) ---------------------------------------------------------------------------
    def log_dir(self, broker_id: int, index: int) -> str:
        dirs = self.manager.broker(broker_id)["log_dirs"]
        if not 0 <= index < len(dirs):
            raise FaultError(f"broker {broker_id} has no log dir {index} (it has {len(dirs)})")
        return dirs[index]

    def fail_log_dir(self, broker_id: int, index: int) -> None:
        from kafkatier.common.errors import UsageError
        d = self.log_dir(broker_id, index)
        try:
            self.manager.fail_log_dir(broker_id, d)
        except UsageError as e:
            raise FaultError(str(e)) from None
        self._failed_dirs.append((broker_id, d))
        self.history.info("nemesis", "fail_log_dir", [broker_id], dir=d)

    def _restore_log_dirs(self) -> None:
        failed, self._failed_dirs = self._failed_dirs, []
        for b, d in failed:
            if pid_alive(self._pid(b)):
                self.kill(b, "TERM")
            self.manager.restore_log_dir(b, d)
            self.history.info("nemesis", "restore_log_dir", [b], dir=d)

    # -- ZooKeeper -------------------------------------------------------------------------------------------
    def _zk_pid(self) -> int:
        pid = self.manager.state.get("zookeeper_pid")
        if not pid:
            raise FaultError("ZooKeeper faults need the embedded ZooKeeper (the scenario uses an external one)")
        return pid

    def zk_pause(self, duration_s: float) -> None:
        pid = self._zk_pid()
        self._stop_process(pid, "zookeeper")
        self.history.info("nemesis", "zk_pause", [], duration_s=duration_s)
        self._later(duration_s, self._resume, pid, "zk_resume", [])

    def zk_restart(self, down_s: float = 0.0) -> None:
        from kafkatier.cluster.embedded_zookeeper import stop_pid
        pid = self._zk_pid()
        self.history.info("nemesis", "zk_stop", [])
        with self._lock:
            self._paused.pop(pid, None)
        stop_pid(pid)
        self.manager.state["zookeeper_pid"] = None
        if down_s:
            time.sleep(down_s)  # the fault's own duration
        self._zk_start()

    def _zk_start(self) -> None:
        from kafkatier.cluster.embedded_zookeeper import EmbeddedZooKeeper
        port = int(self.manager.zookeeper.rsplit(":", 1)[1])
        zk = EmbeddedZooKeeper(os.path.join(self.manager.data_dir, "zookeeper"), port=port)
        self.manager.state["zookeeper_pid"] = zk.start_detached()
        self.manager.save()
        self.history.info("nemesis", "zk_start", [])

    # -- ZooKeeper ensemble (containers) --------------------------------------------------------------------------
    def _ensemble(self):
        if self.ensemble is None:
            raise FaultError('ZooKeeper ensemble faults need [cluster] zookeeper = "ensemble"')
        return self.ensemble

    def zk_kill_leader(self, down_s: float = 0.0) -> None:
        leader = self._ensemble().leader()
        self.history.info("nemesis", "zk_kill_leader", [], server=leader.server_id)
        leader.kill()
        with self._lock:
            self._zk_killed_servers.append(leader)
        if down_s:
            time.sleep(down_s)  # the fault's own duration
            self._zk_restart_killed()

    def _zk_restart_killed(self) -> None:
        with self._lock:
            killed, self._zk_killed_servers = self._zk_killed_servers, []
        for server in killed:
            server.restart(wait=True)
            self.history.info("nemesis", "zk_server_start", [], server=server.server_id)

    def zk_pause_server(self, which: str, duration_s: float) -> None:
        ensemble = self._ensemble()
        server = ensemble.leader() if which == "leader" else ensemble.followers()[0]
        server.pause()
        with self._lock:
            self._zk_paused_servers.append(server)
        self.history.info("nemesis", "zk_pause_server", [], server=server.server_id, role=which,
                          duration_s=duration_s)
        self._later(duration_s, self._zk_unpause, server)

    def _zk_unpause(self, server) -> None:
        with self._lock:
            if server not in self._zk_paused_servers:
                return
            self._zk_paused_servers.remove(server)
        server.unpause()
        self.history.info("nemesis", "zk_resume_server", [], server=server.server_id)

    def zk_restart_ensemble(self, down_s: float = 0.0) -> None:
        ensemble = self._ensemble()
        self.history.info("nemesis", "zk_stop", [], ensemble=True)
        with self._lock:
            self._zk_paused_servers, self._zk_killed_servers = [], []
        ensemble.stop()
        if down_s:
            time.sleep(down_s)  # the fault's own duration
        ensemble.start()
        self.history.info("nemesis", "zk_start", [], ensemble=True)

    def _heal_ensemble(self) -> None:
        if self.ensemble is None:
            return
        with self._lock:
            paused = list(self._zk_paused_servers)
        for server in paused:
            self._zk_unpause(server)
        self._zk_restart_killed()
        self.ensemble.wait_quorum()

    # -- cluster-wide ----------------------------------------------------------------------------------------
    def rolling_restart(self, converged, timeout: float) -> None:
        for b in self.broker_ids():
            self.restart(b, "TERM")
            wait_for(converged, timeout, interval=0.2, message=f"full ISR after restarting broker {b}")

    def kill_all(self, down_s: float) -> None:
        ids = [b for b in self.broker_ids() if pid_alive(self._pid(b))]
        for b in ids:
            self.kill(b, "KILL")
        if down_s:
            time.sleep(down_s)  # the fault's own duration
        for b in ids:
            self.wait_stale_registration_gone(b, self._czxid.get(b))
            self.manager.start_broker(b, wait=False)
            self.history.info("nemesis", "start", [b])
        for b in ids:
            self.wait_serving(b, self._czxid.get(b))

    # -- heal ------------------------------------------------------------------------------------------------
    def heal_processes_only(self) -> None:
        """SIGCONT every process this run stopped (before tearing the cluster down)."""
        for t in self._timers:
            t.cancel()
        with self._lock:
            paused, self._paused = dict(self._paused), {}
            zk_paused, self._zk_paused_servers = self._zk_paused_servers, []
        for server in zk_paused:
            try:
                server.unpause()
            except Exception:  # noqa: BLE001 - best effort before tearing down
                log.exception("could not unpause ZooKeeper server %s", server.server_id)
        for pid in paused:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def heal(self) -> None:
        """Resume every paused process, start ZooKeeper and every stopped broker."""
        for t in self._timers:
            t.cancel()
        with self._lock:
            paused = dict(self._paused)
        for pid, what in paused.items():
            self._resume(pid, "zk_resume" if what == "zookeeper" else "resume",
                         [] if what == "zookeeper" else [int(what.split("-")[1])])
        if self.manager.state.get("zookeeper_pid") is None \
                and os.path.isdir(os.path.join(self.manager.data_dir, "zookeeper")):  # embedded, stopped
            self._zk_start()
        self._heal_ensemble()
        self._restore_log_dirs()
        down = [b for b in self.broker_ids() if not pid_alive(self._pid(b))]
        if down:   # together: each one's start-up (mostly its imports) overlaps the others'
            self.start_brokers(down)
        log.info("healed %s", kv(brokers=self.broker_ids(), started=down))
