"""ScenarioRunner: one run of a scenario with one seed, from an empty cluster to a report.

Phases:
1. **Plan**: derive the schedule from the seed and print the seed and every step first.
2. **Set-up**: ``ClusterManager.up`` in ``<run_dir>/cluster`` (embedded ZooKeeper unless the scenario names
   one), create the topics and wait until every partition has a leader and a full ISR; start the ZooKeeper
   observer and the workloads.
3. **Workload phase** (``duration_s``): ``at`` steps run at their times, ``when`` steps as soon as the observer
   sees their condition (or are not reached after ``timeout_s``); each step runs in its own thread so a slow
   restart never delays the next fault.  A progress bar shows time and acknowledged sends.  A step the file
   names that still waits at the end keeps the phase going, bounded by its own timeout; what became of every
   step (done, skipped, not reached, unfinished) is the :class:`StepLedger`'s, and a named step that did not
   happen is an unmet expectation.
4. **Heal**: stop the producers (outstanding sends get ``heal_timeout`` to complete), resume paused processes,
   start ZooKeeper and every broker that is down, remove the replication throttles the run set, then wait --
   bounded by ``[heal] timeout_s`` -- until every broker is registered, a controller is elected, every partition
   has a leader and its full ISR, no reassignment is running, no topic is DISABLING and no remote data of a
   delete-disabled topic is left.  A heal that does not converge is itself an anomaly.
5. **Final reads**: every partition from its log start offset to its high watermark, the ``tieredstorage``
   znodes and topic configs, the remote tier (files and segment metadata).  They go into the history as
   ``final`` entries, so ``replay --check`` can re-judge a run from ``history.jsonl`` alone.
6. **Check and report**: every checker, the scenario's ``[expect]`` section, ``results.json``, the Jepsen
   export, ``timeline.png``, ``index.html`` and a one-screen summary.  Exit status 0 valid, 1 anomalies.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import sys
import threading
import time
from typing import Callable

import attrs

from kafkatier.cluster.manager import ClusterManager
from kafkatier.logsetup import get_logger, kv
from kafkatier.scenario import report
from kafkatier.scenario.admin_faults import AdminFaults
from kafkatier.scenario.network_faults import LINK_ACTIONS, NetworkFaults
from kafkatier.scenario.checkers import Anomaly, check_all, final, observations, split
from kafkatier.scenario.copy_progress import COPY_ACTIONS, CopyProgress
from kafkatier.scenario.faults import SERVE_TIMEOUT_S, FaultError, Faults
from kafkatier.scenario.history import HISTORY_FILE, INFO, History, read, write_jepsen
from kafkatier.scenario.observer import ZooKeeperObserver
from kafkatier.scenario.request_faults import RequestFaults
from kafkatier.scenario.schedule import Schedule, Step, derive
from kafkatier.scenario.spec import ScenarioSpec, in_library, load, resolve
from kafkatier.scenario.step_ledger import StepLedger, StepNotReached
from kafkatier.waiting import WaitTimeout, wait_for
from kafkatier.zk import paths
from kafkatier.zk.client import start_client

log = get_logger("scenario")

SETUP_TIMEOUT_S = 120.0   # brokers ready, topics online: 26-30 s at load 50 on 2 cores; a crash is seen at once
REPORTS = ("all", "failing")     # which runs draw timeline.png and index.html
FLUSH_TIMEOUT_S = 15.0
# How long past duration_s the workload phase may go on for a named step still waiting (each step is bounded by
# its own timeout first: a condition's timeout_s, a client phase's 30 s).
MAX_EXTENSION_S = 300.0


class ScenarioUnavailableError(RuntimeError):
    """The scenario cannot run on this machine (its ZooKeeper ensemble needs Docker); the CLI exits 2."""


def start_ensemble(base_dir: str):
    """A 3-server ZooKeeper ensemble in containers (``kafkatier.testing``) for ``zookeeper = "ensemble"``."""
    from kafkatier.testing import docker_engine
    from kafkatier.testing.zookeeper_container import ZooKeeperEnsemble
    from kafkatier.testing.zookeeper_image import ensure_image
    try:
        client = docker_engine.docker_client()
    except docker_engine.DockerUnavailableError as e:
        raise ScenarioUnavailableError(f'[cluster] zookeeper = "ensemble" needs Docker: {e}') from None
    try:
        docker_engine.remove_orphans(client)
    finally:
        client.close()
    tag = ensure_image(progress=lambda line: None).tag
    return ZooKeeperEnsemble(tag, base_dir, size=3).start()


@attrs.frozen
class RunResult:
    valid: bool
    exit_code: int
    run_dir: str
    results: dict

    @property
    def anomalies(self) -> list[dict]:
        return self.results["anomalies"]


def step_deadline(step: Step, t0: float) -> float:
    """When (``time.monotonic()``) a step stops waiting at the latest: its time, or its condition's ``timeout_s``
    and its delay after the workload started at ``t0``."""
    if step.at is not None:
        return t0 + step.at
    return t0 + step.action.when.timeout_s + (step.action.delay_s or 0.0)


def replay_command(spec: ScenarioSpec, seed: int, quick: bool) -> str:
    """The command that runs this seed again from any directory: a library scenario by its name (the same on
    every machine with kafkatier installed), another file by its absolute path."""
    path = spec.name if spec.path is None or in_library(spec.path) else os.path.abspath(spec.path)
    return f"kafkatier scenario run {path} --seed {seed}" + (" --quick" if quick else "")


def run_scenario(scenario: str | ScenarioSpec, seed: int | None = None, quick: bool = False,
                 runs_dir: str = "runs", progress: bool | None = None, out: Callable[[str], None] = print,
                 record: bool = True, reports: str = "all") -> RunResult:
    """Run one scenario (a file path or a loaded spec) with one seed; see the module docstring.  ``reports``:
    ``all``, or ``failing`` to draw ``timeline.png`` and ``index.html`` only for a run that is not valid (a
    sweep keeps no valid run's directory)."""
    spec = load(resolve(scenario)) if isinstance(scenario, str) else scenario
    if seed is None:
        seed = random.SystemRandom().randrange(1, 10**6)
    return ScenarioRunner(spec, seed, quick, runs_dir, progress, out, record, reports).run()


class ScenarioRunner:
    def __init__(self, spec: ScenarioSpec, seed: int, quick: bool, runs_dir: str, progress: bool | None,
                 out: Callable[[str], None], record: bool = True, reports: str = "all"):
        if reports not in REPORTS:
            raise ValueError(f"reports: expected one of {', '.join(REPORTS)}, got {reports!r}")
        self.reports = reports
        self.base_spec = spec
        self.spec = spec.profile(quick)
        self.seed = seed
        self.quick = quick
        self.out = out
        self.progress = progress
        self.schedule: Schedule = derive(self.spec, seed)
        self.run_dir = os.path.abspath(os.path.join(runs_dir, f"{spec.name}-{seed}"))
        self.history: History | None = None
        self.record = record
        self.unmet: list[str] = []
        self.extra_anomalies: list[Anomaly] = []
        self._cancel = threading.Event()
        self._step_threads: list[threading.Thread] = []
        self.network: NetworkFaults | None = None   # with [cluster] links = true
        self.ledger: StepLedger | None = None        # what became of each step (step_ledger.py)
        self.workload_started = 0.0                  # time.monotonic() when the workload phase began

    # -- the run ---------------------------------------------------------------------------------------------
    def run(self) -> RunResult:
        spec = self.spec
        self.out(f"scenario {spec.name}{' (quick)' if self.quick else ''}: seed {self.seed}")
        self.out(self.schedule.describe())
        if os.path.exists(self.run_dir):
            shutil.rmtree(self.run_dir)
        os.makedirs(self.run_dir)
        if spec.path:
            shutil.copyfile(spec.path, os.path.join(self.run_dir, "scenario.toml"))
        self.history = History(os.path.join(self.run_dir, HISTORY_FILE), enabled=self.record)
        self.ledger = StepLedger(self.schedule.steps, self.history)
        started = time.monotonic()
        manager = ClusterManager(os.path.join(self.run_dir, "cluster"))
        c = spec.cluster
        ensemble = None
        zookeeper = c.zookeeper
        if zookeeper == "ensemble":
            ensemble = start_ensemble(os.path.join(self.run_dir, "zookeeper-ensemble"))
            zookeeper = ensemble.connect_string
        self.history.info("nemesis", "cluster_up", {"brokers": c.brokers, "zookeeper": zookeeper,
                                                    "accept_unclean_loss": spec.expect.accept_unclean_loss})
        try:
            manager.up(brokers=c.brokers, log_dirs_per_broker=c.log_dirs_per_broker, zookeeper=zookeeper,
                       session_timeout_ms=c.session_timeout_ms, overrides=c.broker_overrides(),
                       timeout=SETUP_TIMEOUT_S, links=c.links, client_groups=c.client_groups,
                       racks=c.racks or None)
        except BaseException:
            try:
                if manager.state:
                    manager.down()
            finally:
                if ensemble is not None:
                    ensemble.stop()
            raise
        observer = faults = progress = None
        try:
            self._create_topics(manager)
            observer = ZooKeeperObserver(manager.zookeeper, [t.name for t in spec.topics], self.history)
            observer.start()
            progress = self._copy_progress(manager, observer)
            faults = Faults(manager, observer, self.history, c.session_timeout_ms, ensemble)
            if c.links or c.client_groups:
                self.network = NetworkFaults(manager.links, self.history, faults.resolve, self._partition_of)
            self._workload_phase(manager, observer, faults)
            self._heal(manager, observer, faults)
            self._final_reads(manager, observer)
        finally:
            if faults is not None:
                self._cancel.set()
                try:
                    faults.heal_processes_only()
                except Exception:  # noqa: BLE001 - best effort before tearing down
                    log.exception("could not resume paused processes")
            try:
                if progress is not None:
                    progress.stop()
                if observer is not None:
                    observer.stop()
                self.history.flush()
            finally:
                try:
                    for job in getattr(self, "ctp_jobs", ()):
                        job.close()      # idempotent: never leave a job's processes behind
                finally:
                    try:
                        manager.down()   # whatever failed above, never leave broker or ZooKeeper processes behind
                    finally:
                        if ensemble is not None:
                            ensemble.stop()
        return self._report(time.monotonic() - started)

    def _copy_progress(self, manager: ClusterManager, observer: ZooKeeperObserver) -> CopyProgress | None:
        """KIP-113 moves' and reassignments' progress for the timeline, in a run that has any."""
        if not {s.action.action for s in self.schedule.steps} & set(COPY_ACTIONS):
            return None
        progress = CopyProgress(lambda: {b["id"]: list(b["log_dirs"]) for b in manager.state["brokers"]},
                                lambda: dict(observer.snapshot.partitions), [t.name for t in self.spec.topics],
                                self.history)
        progress.start()
        return progress

    def _create_topics(self, manager: ClusterManager) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": manager.bootstrap_servers})
        futures = admin.create_topics([NewTopic(t.name, t.partitions, t.replication_factor, config=t.configs)
                                       for t in self.spec.topics], request_timeout=30)
        for name, f in futures.items():
            try:
                f.result(timeout=30)
            except KafkaException as e:
                # The cluster is new and this is its only creator: the topic exists because a request that the
                # client sent again (a lost answer) created it.  Seen once in a 100-seed sweep under load.
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
                log.warning("topic already created by an earlier attempt of the same request %s", kv(topic=name))
        zk = start_client(manager.zookeeper, timeout=10.0, connect_timeout=30.0)
        try:
            def online() -> bool:
                for t in self.spec.topics:
                    for p in range(t.partitions):
                        st = json.loads(zk.get(paths.partition_state(t.name, p))[0])
                        if st["leader"] < 0 or len(st["isr"]) != t.replication_factor:
                            return False
                return True
            wait_for(online, SETUP_TIMEOUT_S, interval=0.1, ignore=(Exception,), message="topics online")
            if self.spec.cluster.racks:   # the assignment rack-aware placement chose, for [expect] and the report
                self.history.info("observer", "assignment", {
                    "racks": {str(b): r for b, r in self.spec.cluster.racks.items()},
                    "topics": {t.name: {str(p): json.loads(zk.get(paths.topic(t.name))[0])["partitions"][str(p)]
                                        for p in range(t.partitions)} for t in self.spec.topics}})
        finally:
            zk.stop()
            zk.close()

    # -- workload phase ------------------------------------------------------------------------------------------
    def _workload_phase(self, manager: ClusterManager, observer: ZooKeeperObserver, faults: Faults) -> None:
        from kafkatier.scenario.ctp_workload import CtpJob
        from kafkatier.scenario.txn_workload import TxnProducerWorkload
        from kafkatier.scenario.workloads import (AdminOperations, ConsumerWorkload, OffsetsSampler,
                                                  ProducerWorkload, SparkProducerWorkload)
        spec, h = self.spec, self.history
        bootstrap = manager.bootstrap_servers
        self.producers, self.readers, self.spark_jobs = [], [], []
        self.ctp_jobs = []   # consume-transform-produce jobs: through heal, drained before the final reads
        counter = {"n": 0}

        def on_ack() -> None:
            counter["n"] += 1
            observer.snapshot.acked = counter["n"]

        def on_written(rows: int) -> None:   # a Spark job's committed rows count as acknowledged progress
            observer.snapshot.acked = max(observer.snapshot.acked, counter["n"] + rows)
        for i, w in enumerate(spec.workloads):
            # A workload of a client group bootstraps from the group's links (its own listener on every broker).
            bootstrap = manager.client_bootstrap(w.client_group) if w.client_group else manager.bootstrap_servers
            if w.type == "ctp":   # one job of `count` instances (ctp_workload.py)
                h.info(f"ctp-{i}", "start", attrs.asdict(w))
                self.ctp_jobs.append(CtpJob(f"ctp-{i}", w, bootstrap, spec.topic(w.topic).partitions, h))
                continue
            for k in range(w.count):
                name = f"{w.type}-{i}-{k}" if w.count > 1 else f"{w.type}-{i}"
                h.info(name, "start", attrs.asdict(w))
                if w.type == "producer":
                    self.producers.append(ProducerWorkload(name, w, bootstrap, h, on_ack=on_ack))
                elif w.type == "txn_producer":
                    self.producers.append(TxnProducerWorkload(name, w, bootstrap, spec.topic(w.topic).partitions, h,
                                                              self.seed, on_ack=on_ack))
                elif w.type == "spark_producer":
                    self.spark_jobs.append(SparkProducerWorkload(name, w, bootstrap, h, on_progress=on_written))
                elif w.type == "consumer":
                    self.readers.append(ConsumerWorkload(name, w, bootstrap, spec.topic(w.topic).partitions, h))
                else:
                    self.readers.append(OffsetsSampler(name, w, bootstrap, spec.topic(w.topic).partitions, h))
        bootstrap = manager.bootstrap_servers
        self.admin = AdminOperations(bootstrap, h)
        self.admin_faults = AdminFaults(bootstrap, observer, faults, h, spec.topics)
        self.request_faults = RequestFaults(manager, h)
        for wl in self.producers + self.readers + self.spark_jobs + self.ctp_jobs:
            wl.start()
        t0 = self.workload_started = time.monotonic()
        for step in self.schedule.steps:
            self.ledger.waiting(step, step_deadline(step, t0))
            th = threading.Thread(target=self.run_step, args=(step, t0, observer, faults),
                                  name=f"scenario-step-{step.number}", daemon=True)
            self._step_threads.append(th)
            th.start()
        self._progress(t0, spec.duration_s, counter)
        # A step the file names that still waits (for its condition, delay or client phase) keeps the workload
        # going, bounded by its own deadline: it should happen under the load it was written for.
        waited_for = self.ledger.wait_for_named(cap=t0 + spec.duration_s + MAX_EXTENSION_S)
        if waited_for:
            ended = round(time.monotonic() - t0, 2)
            h.info("scenario", "workload-extended", {"steps": waited_for, "planned_s": spec.duration_s,
                                                     "ended_s": ended})
            log.info("the workload phase went on for named steps %s", kv(steps=waited_for, ended_s=ended))
        for p in self.producers:
            p.stop()
        for p in self.producers:
            p.join(timeout=10)
        for p in self.producers:
            left = p.finish(FLUSH_TIMEOUT_S)
            h.info(p.process, "stop", {"sent": p.sent, "acked": p.acked, "failed": p.failed, "unknown": p.unknown,
                                       "unfinished": left})
        for job in self.spark_jobs:   # a Spark job runs to its end (bounded), faults still going on meanwhile
            h.info(job.process, "stop", {"unfinished": job.finish(SparkProducerWorkload.JOB_TIMEOUT_S)})
        h.flush()

    def _progress(self, t0: float, duration: float, counter: dict) -> None:
        from tqdm import tqdm
        disable = (not sys.stderr.isatty()) if self.progress is None else not self.progress
        with tqdm(total=round(duration), unit="s", desc=self.spec.name, disable=disable, leave=False) as bar:
            while True:
                elapsed = time.monotonic() - t0
                bar.n = min(round(elapsed), round(duration))
                bar.set_postfix(acked=counter["n"], refresh=True)
                if elapsed >= duration:
                    return
                time.sleep(min(0.5, duration - elapsed))  # the workload phase's own clock, not synchronisation

    def run_step(self, step: Step, t0: float, observer: ZooKeeperObserver, faults: Faults) -> None:
        """Wait for the step's time (or condition and delay), apply it, and tell the ledger what became of it."""
        a = step.action
        if step.at is not None:
            if self._cancel.wait(max(0.0, t0 + step.at - time.monotonic())):
                self.ledger.not_reached(step, f"heal began before its time ({step.at:g}s)")
                return
        else:
            if not observer.wait_until(lambda s: _holds(a.when, s), a.when.timeout_s, self._cancel):
                self.ledger.not_reached(step, "heal began before its condition held" if self._cancel.is_set()
                                        else f"condition not met within {a.when.timeout_s:g}s")
                return
            if a.delay_s and self._cancel.wait(a.delay_s):
                self.ledger.not_reached(step, f"heal began during its {a.delay_s:g}s delay")
                return
        self.ledger.started(step, time.monotonic() - t0)
        try:
            self._apply(step, observer, faults)
            self.ledger.done(step)
        except StepNotReached as e:
            log.info("step not reached %s", kv(step=step.number, reason=str(e)))
            self.ledger.not_reached(step, str(e))
        except Exception as e:  # noqa: BLE001 - recorded; the run goes on to heal and check
            if not isinstance(e, (FaultError, WaitTimeout)):
                log.exception("step %s failed", step.number)
            reason = (str(e) if isinstance(e, (FaultError, WaitTimeout)) else repr(e))[:300]
            log.info("step skipped %s", kv(step=step.number, reason=reason.splitlines()[0]))
            self.ledger.skipped(step, reason)

    def _partition_of(self, pick: float) -> tuple[str, int]:
        """A partition of the scenario's topics that ``pick`` chooses."""
        tps = [(t.name, p) for t in self.spec.topics for p in range(t.partitions)]
        return tps[min(int(pick * len(tps)), len(tps) - 1)]

    def _apply(self, step: Step, observer: ZooKeeperObserver, faults: Faults) -> None:
        ACTIONS[step.action.action](self, step, observer, faults)

    def target(self, step: Step, faults: Faults) -> int:
        """The broker the step's ``target`` means now, never one its ``not`` excludes."""
        return faults.resolve(step.action.target, step.pick, exclude=step.action.exclude)

    def rack(self, step: Step) -> tuple[int, ...] | None:
        """The brokers of the step's ``rack:RACK`` target, or None for a target naming one broker."""
        t = step.action.target
        return self.spec.cluster.rack_brokers(t[5:]) if isinstance(t, str) and t.startswith("rack:") else None

    def expect_outcome(self, step: Step, err: str | None) -> None:
        """The step's ``expect`` on an admin operation's outcome: an error name (``NONE``: success) or ``any``.
        Without one, an admin operation's error is recorded in the history and the run goes on."""
        want = step.action.expect_error
        if want is not None and want != "any" and (err or "NONE") != want:
            self.unmet.append(f"step #{step.number} ({step.origin}) {step.action.action}: expected {want}, got "
                              f"{err or 'NONE'}")

    def require_outcome(self, step: Step, err: str | None, what: str) -> None:
        """An admin operation the step needs to have happened: an error nobody expected skips the step."""
        self.expect_outcome(step, err)
        if err is not None and step.action.expect_error is None:
            raise FaultError(f"{what}: {err}")

    # -- heal ------------------------------------------------------------------------------------------------
    def converged(self, observer: ZooKeeperObserver, faults: Faults) -> str | None:
        """None when the cluster is healthy, else what is still missing."""
        snap = observer.snapshot
        missing = [b for b in faults.broker_ids() if b not in snap.brokers]
        if missing:
            return f"brokers {missing} not registered"
        if snap.controller is None:
            return "no controller"
        for t in self.spec.topics:
            for p in range(t.partitions):
                st = snap.partitions.get((t.name, p))
                if st is None or st["leader"] < 0 or sorted(st["isr"]) != sorted(st["replicas"]):
                    return f"{t.name}/{p} not fully replicated ({st and {'leader': st['leader'], 'isr': st['isr']}})"
            tiered = snap.tiered.get(t.name)
            if tiered and tiered["state"] == "DISABLING":
                return f"{t.name} still DISABLING"
        return None

    def _heal(self, manager: ClusterManager, observer: ZooKeeperObserver, faults: Faults) -> None:
        h = self.history
        self._cancel.set()
        for th in self._step_threads:
            th.join(timeout=SERVE_TIMEOUT_S + 30)   # a step restarting a broker waits up to that for it
        self.ledger.close("heal began")   # the verdict on every step is fixed here
        h.info("nemesis", "heal", None)
        t0 = time.monotonic()
        if self.network is not None:
            self.network.heal()   # first: brokers reach ZooKeeper and each other again
        faults.heal()
        self.admin_faults.heal()
        self.request_faults.heal()
        for job in self.ctp_jobs:
            job.heal()   # instances a kill_client left down start again
        why: list[str | None] = [None]

        def healthy() -> bool:
            why[0] = (self.converged(observer, faults) or self._remote_pending(manager, observer)
                      or self._moves_pending(manager) or self.admin_faults.pending())
            return why[0] is None
        try:
            wait_for(healthy, self.spec.heal_timeout_s, interval=0.2, message="the cluster to converge")
            h.record(INFO, "final", "heal", {"converged": True, "waited_s": round(time.monotonic() - t0, 2)})
        except WaitTimeout:
            h.record(INFO, "final", "heal", {"converged": False, "reason": why[0]})
            self.extra_anomalies.append(Anomaly("heal", "not-converged", f"the cluster did not converge within "
                                                f"{self.spec.heal_timeout_s:g}s after heal: {why[0]}"))
        for job in self.ctp_jobs:   # every input record processed (bounded), then the instances stopped
            job.drain(self.spec.heal_timeout_s)
            job.close()
        # Readers keep going through heal so checkers see reads across the restarts; stop them now.
        for r in self.readers:
            r.stop()
        for r in self.readers:
            r.join(timeout=10)
            close_bounded(r, self.history)
        self.admin.close()
        self.admin_faults.close()
        self.request_faults.close()

    def _remote_pending(self, manager: ClusterManager, observer: ZooKeeperObserver) -> str | None:
        for t in self.spec.topics:
            config = observer.snapshot.configs.get(t.name, {})
            if t.name in observer.snapshot.tiered and config.get("remote.storage.enable", "false") != "true":
                for p, remote in self._remote(manager, observer, t.name, t.partitions).items():
                    if remote["files"]:
                        return f"{p}: {len(remote['files'])} remote files still to delete"
        return None

    def _compare_replicas(self) -> bool:
        """Whether the final read compares every replica's batches (``final-log-dirs``, checker ``log_dirs``):
        with several log dirs per broker (KIP-113 moves), or when the run reassigns partitions (a new replica
        must hold what the others hold; the replica sets are the final ones, read from ZooKeeper after heal)."""
        return self.spec.cluster.log_dirs_per_broker > 1 or any(
            s.action.action == "reassign" for s in self.schedule.steps)

    def _moves_pending(self, manager: ClusterManager) -> str | None:
        """KIP-113: a ``.move`` still copying, or a moved-away ``.delete`` waiting for ``file.delete.delay.ms``
        (also a replica a reassignment removed)."""
        if not self._compare_replicas():
            return None
        for d in _log_dirs(manager):
            for name, parsed in d["entries"]:
                if parsed.kind != "current":
                    return f"{name} still in {d['dir']}"
        return None

    @staticmethod
    def _remote(manager: ClusterManager, observer: ZooKeeperObserver, topic: str, partitions: int) -> dict:
        from kafkatier.log.remote.remote_log_metadata_manager import ZkRemoteLogMetadataManager
        from kafkatier.log.remote.remote_log_segment_metadata import TopicIdPartition
        from kafkatier.log.remote.remote_storage_manager import LocalTieredStorage
        from kafkatier.zk import codecs
        zk = observer.zk
        topic_id = codecs.TopicAssignment.decode(zk.get(paths.topic(topic))[0]).topic_id
        storage = LocalTieredStorage(manager.state["remote_storage_dir"], broker_id=-1)
        out = {}
        for p in range(partitions):
            tip = TopicIdPartition(topic_id, topic, p)
            stems = storage.segment_stems(tip)
            segs = []
            for m in ZkRemoteLogMetadataManager(zk).list_remote_log_segments(tip):
                segs.append({"start": m.start_offset, "end": m.end_offset, "state": m.state.name,
                             "tiered_epoch": m.tiered_epoch,
                             "has_files": any(s.startswith(f"{m.start_offset:020d}-") for s in stems)})
            out[f"{topic}/{p}"] = {"files": stems, "segments": segs}
        return out

    # -- final reads -------------------------------------------------------------------------------------------
    def _final_reads(self, manager: ClusterManager, observer: ZooKeeperObserver) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition
        h = self.history
        consumer = Consumer({"bootstrap.servers": manager.bootstrap_servers, "group.id": "scenario-final",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "logger": __import__("logging").getLogger("scenario.librdkafka")})
        reads: dict[str, dict] = {}
        acked: dict[tuple[str, int], int] = {}  # the highest acknowledged offset per partition
        for e in h.entries():
            if e.get("type") == "ok" and e.get("f") == "send" and isinstance(e.get("offset"), int):
                key = (e.get("topic"), e.get("partition"))
                acked[key] = max(acked.get(key, -1), e["offset"])
        try:
            for t in self.spec.topics:
                for p in range(t.partitions):
                    # A leader elected just before the end may not have advanced its high watermark yet (its
                    # followers have not fetched again): wait, bounded, until it covers every acknowledged offset;
                    # a watermark that never gets there is judged as loss.
                    def watermarks():
                        lo, hi = consumer.get_watermark_offsets(TopicPartition(t.name, p), timeout=10, cached=False)
                        return (lo, hi) if hi > acked.get((t.name, p), -1) else None
                    try:
                        lo, hi = wait_for(watermarks, 15, interval=0.2, ignore=(KafkaException,),
                                          message=f"high watermark of {t.name}/{p} to cover the acknowledged sends")
                    except WaitTimeout:
                        lo, hi = consumer.get_watermark_offsets(TopicPartition(t.name, p), timeout=10, cached=False)
                    reads[f"{t.name}/{p}"] = {"log_start": lo, "high_watermark": hi, "records": [],
                                              "_next": lo}
                    if hi > lo:
                        consumer.assign([TopicPartition(t.name, p, lo)])
                        part = reads[f"{t.name}/{p}"]

                        def done() -> bool:
                            for m in consumer.consume(num_messages=1000, timeout=0.5):
                                if m.error():
                                    continue
                                part["records"].append([m.offset(), m.value().decode()])
                                part["_next"] = m.offset() + 1
                            # read_committed skips control batches and aborted records: the position passes them
                            pos = consumer.position([TopicPartition(t.name, p)])[0].offset
                            part["_next"] = max(part["_next"], pos)
                            return part["_next"] >= hi
                        try:
                            wait_for(done, 60, interval=0, message=f"final read of {t.name}/{p}")
                        except WaitTimeout:
                            pass   # judged from the history: kafka_clients' unreadable-after-heal
        finally:
            consumer.close()
        for part in reads.values():
            part["read_to"] = part.pop("_next", part["log_start"])
        h.record(INFO, "final", "final-read", reads)
        observer.poll_once()
        if self._compare_replicas():
            h.record(INFO, "final", "final-log-dirs", self._final_log_dirs(manager, observer, reads))
        tiered = {}
        remote: dict[str, dict] = {}
        for t in self.spec.topics:
            st = observer.snapshot.tiered.get(t.name)
            if st is not None:
                tiered[t.name] = {"state": st["state"], "epoch": st["epoch"],
                                  "config": observer.snapshot.configs.get(t.name, {})}
                remote.update(self._remote(manager, observer, t.name, t.partitions))
        h.record(INFO, "final", "final-tiered", tiered)
        h.record(INFO, "final", "final-remote", remote)
        h.flush()

    def _final_log_dirs(self, manager: ClusterManager, observer: ZooKeeperObserver, reads: dict) -> dict:
        """Per broker and log dir the partition directories there, with a current one's batches below the
        high watermark as ``[base offset, last offset, crc]`` (for the log_dirs checker)."""
        from kafkatier.log.record_batch import iter_batches
        replicas = {f"{t.name}/{p}": observer.snapshot.replicas(t.name, p)
                    for t in self.spec.topics for p in range(t.partitions)}
        dirs = []
        for d in _log_dirs(manager):
            parts = {}
            for name, parsed in d["entries"]:
                tp = f"{parsed.topic}/{parsed.partition}"
                if tp not in replicas:
                    continue
                batches = []
                if parsed.kind == "current":
                    hw = reads.get(tp, {}).get("high_watermark", 0)
                    path = os.path.join(d["dir"], name)
                    for seg in sorted(f for f in os.listdir(path) if f.endswith(".log")):
                        with open(os.path.join(path, seg), "rb") as f:
                            buf = f.read()
                        batches += [[b.base_offset, b.last_offset, b.crc] for _, b in iter_batches(buf)
                                    if b.last_offset < hw]
                parts[name] = {"tp": tp, "kind": parsed.kind, "batches": batches}
            dirs.append({"broker": d["broker"], "dir": d["dir"], "partitions": parts})
        return {"replicas": replicas, "dirs": dirs}

    # -- report ------------------------------------------------------------------------------------------------
    def _expectations(self, entries: list[dict]) -> list[str]:
        if not self.record:
            return []
        ex = self.spec.expect
        unmet = self.ledger.unmet() + self.unmet
        sends = [e for e in entries if e["f"] == "send" and e["type"] in ("fail", "info")] + [
            e for e in entries if e["f"] == "stop" and e["value"].get("unfinished")]
        if ex.failed_sends == "some" and not sends:
            unmet.append("expected some sends to fail, none did")
        if ex.failed_sends == "none" and sends:
            unmet.append(f"expected no failed sends, {len(sends)} failed or are unknown")
        for job in (e for e in entries if e["f"] == "spark-produce" and e["type"] != "invoke"):
            if job["type"] != "ok":
                unmet.append(f"expected the Spark job of {job['process']} to succeed: {job.get('error', job['type'])}")
        seen = {e["value"]["state"] for e in observations(entries, "tiered")}
        for s in ex.tiered_states_seen:
            if s not in seen:
                unmet.append(f"expected to see tiered state {s}, saw {sorted(seen)}")
        tenures = {e["value"]["czxid"] for e in observations(entries, "controller") if e["value"]["broker"] is not None}
        if len(tenures) - 1 < ex.controller_changes_at_least:
            unmet.append(f"expected at least {ex.controller_changes_at_least} controller changes, saw "
                         f"{len(tenures) - 1}")
        if ex.replicas_across_racks:
            unmet.extend(_replicas_not_across_racks(entries))
        if ex.consumers_read_while_down:
            unmet.extend(_consumers_not_reading_while_down(entries))
        return unmet

    def _report(self, elapsed: float) -> RunResult:
        entries = read(self.history.path)
        anomalies = (check_all(entries) if self.record else []) + self.extra_anomalies
        res = report.results(spec=self.spec, seed=self.seed, quick=self.quick, schedule=self.schedule,
                             entries=entries, anomalies=anomalies, unmet=self._expectations(entries),
                             replay=replay_command(self.base_spec, self.seed, self.quick), elapsed_s=elapsed,
                             run_dir=self.run_dir, steps=self.ledger.shown())
        report.write_json(os.path.join(self.run_dir, "results.json"), res)
        write_jepsen(entries, os.path.join(self.run_dir, "history.jepsen.json"))
        if self.reports == "all" or not res["valid"]:
            try:
                report.timeline(entries, [b + 1 for b in range(self.spec.cluster.brokers)],
                                os.path.join(self.run_dir, "timeline.png"), f"{self.spec.name} seed {self.seed}")
            except Exception:  # noqa: BLE001 - a picture must not hide the verdict
                log.exception("timeline failed")
            report.write_html(os.path.join(self.run_dir, "index.html"), res)
        self.out(report.summary(res))
        return RunResult(valid=res["valid"], exit_code=res["exit_code"], run_dir=self.run_dir, results=res)


# ------------------------------------------------------------------------------------------------ actions
# One handler per ``[[schedule]]`` action: ``handler(runner, step, observer, faults)``.  The schema's action enum
# (scenario.schema.json, with a description of each) and this table hold the same names (a unit test checks), so
# a new action is one ``@action`` function here, one enum entry there.
Handler = Callable[[ScenarioRunner, Step, ZooKeeperObserver, Faults], None]
ACTIONS: dict[str, Handler] = {}


def action(*names: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for n in names:
            if n in ACTIONS:
                raise ValueError(f"action {n!r} registered twice")
            ACTIONS[n] = fn
        return fn
    return register


@action(*LINK_ACTIONS)
def _link(r: ScenarioRunner, step: Step, observer: ZooKeeperObserver, faults: Faults) -> None:
    a = step.action
    r.network.apply(a.action, a.link, a.target, a.topic, a.partition, step.pick, step.duration_s)


@action("kill")
def _kill(r, step, observer, faults) -> None:
    rack = r.rack(step)
    if rack:
        faults.kill_brokers(rack, step.action.signal)
    else:
        faults.kill(r.target(step, faults), step.action.signal)


@action("terminate")
def _terminate(r, step, observer, faults) -> None:
    rack = r.rack(step)
    if rack:
        faults.kill_brokers(rack, "TERM")
    else:
        faults.kill(r.target(step, faults), "TERM")


@action("restart")
def _restart(r, step, observer, faults) -> None:
    rack = r.rack(step)
    if rack:
        faults.restart_brokers(rack, step.action.signal, step.down_s)
    else:
        faults.restart(r.target(step, faults), step.action.signal, step.down_s)


@action("start")
def _start(r, step, observer, faults) -> None:
    rack = r.rack(step)
    if rack:
        faults.start_brokers(rack)
    else:
        faults.start(r.target(step, faults))


@action("pause")
def _pause(r, step, observer, faults) -> None:
    faults.pause(r.target(step, faults), step.duration_s or 1.0)


@action("expire_session")
def _expire_session(r, step, observer, faults) -> None:
    faults.expire_session(r.target(step, faults))


@action("zk_pause")
def _zk_pause(r, step, observer, faults) -> None:
    faults.zk_pause(step.duration_s or 1.0)


@action("zk_restart")
def _zk_restart(r, step, observer, faults) -> None:
    faults.zk_restart(step.down_s)


@action("kill_all")
def _kill_all(r, step, observer, faults) -> None:
    faults.kill_all(step.down_s)


@action("rolling_restart")
def _rolling_restart(r, step, observer, faults) -> None:
    faults.rolling_restart(lambda: r.converged(observer, faults) is None, r.spec.heal_timeout_s)


@action("zk_kill_leader")
def _zk_kill_leader(r, step, observer, faults) -> None:
    faults.zk_kill_leader(step.down_s)


@action("zk_pause_server")
def _zk_pause_server(r, step, observer, faults) -> None:
    faults.zk_pause_server(step.action.server, step.duration_s or 1.0)


@action("zk_restart_ensemble")
def _zk_restart_ensemble(r, step, observer, faults) -> None:
    faults.zk_restart_ensemble(step.down_s)


@action("fail_log_dir")
def _fail_log_dir(r, step, observer, faults) -> None:
    faults.fail_log_dir(r.target(step, faults), step.action.dir)


@action("move_replica")
def _move_replica(r, step, observer, faults) -> None:
    a = step.action
    b = r.target(step, faults)
    dirs = faults.manager.broker(b)["log_dirs"]
    index = a.dir
    if index is None:   # the dir after the one holding the replica now
        here = [i for i, d in enumerate(dirs) if os.path.isdir(os.path.join(d, f"{a.topic}-{a.partition}"))]
        if not here:
            raise FaultError(f"broker {b} has no current directory of {a.topic}-{a.partition}")
        index = (here[0] + 1) % len(dirs)
    r.require_outcome(step, r.admin.move_replica(a.topic, a.partition, b, faults.log_dir(b, index)),
               "AlterReplicaLogDirs answered")


@action("alter_config")
def _alter_config(r, step, observer, faults) -> None:
    a = step.action
    r.expect_outcome(step, r.admin.alter_config(a.topic, a.set, a.delete))


@action("delete_records")
def _delete_records(r, step, observer, faults) -> None:
    a = step.action
    r.expect_outcome(step, r.admin.delete_records(a.topic, a.partition, a.offset, a.timeout_ms))


@action("controlled-shutdown")
def _controlled_shutdown(r, step, observer, faults) -> None:
    faults.controlled_shutdown(r.target(step, faults), [t.name for t in r.spec.topics], step.down_s)


@action("reassign")
def _reassign(r, step, observer, faults) -> None:
    a = step.action
    r.require_outcome(step, r.admin_faults.reassign(a.topic, a.partition, a.replicas, a.via, step.pick),
               "the reassignment was not started")


@action("cancel-reassignment")
def _cancel_reassignment(r, step, observer, faults) -> None:
    r.expect_outcome(step, r.admin_faults.cancel(step.action.topic, step.action.partition))


@action("preferred-election", "unclean-election")
def _elect(r, step, observer, faults) -> None:
    a = step.action
    r.expect_outcome(step, r.admin_faults.elect(a.action.split("-")[0], a.topic, a.partition))


@action("inject_errors", "clock_skew")
def _request_fault(r, step, observer, faults) -> None:
    r.request_faults.apply(step.action, r.target(step, faults), step.duration_s)


@action("throttle")
def _throttle(r, step, observer, faults) -> None:
    a = step.action
    brokers = [r.target(step, faults)] if a.target is not None else r.admin_faults.live_brokers()
    if a.clear:
        r.admin_faults.clear_throttles(None if a.target is None else brokers, None if a.topic is None else [a.topic])
    else:
        r.admin_faults.throttle(a.rate, brokers, a.topic, step.duration_s)


@action("kill_client", "restart_client")
def _kill_client(r, step, observer, faults) -> None:
    from kafkatier.scenario.ctp_workload import PHASE_TIMEOUT_S, PhaseNotReached
    a = step.action
    job = next(j for j in r.ctp_jobs if j.owns(a.client))
    instance = job.instance(a.client, step.pick)
    r.ledger.waiting(step, time.monotonic() + PHASE_TIMEOUT_S)   # its client's phase, as a condition is waited for
    try:
        hit = instance.kill(a.signal, step.down_s if a.action == "restart_client" else None, a.phase,
                            timeout_s=PHASE_TIMEOUT_S, cancel=r._cancel)
    except PhaseNotReached as e:
        raise StepNotReached(str(e)) from None
    except ProcessLookupError as e:
        raise FaultError(str(e)) from None
    r.ledger.started(step, time.monotonic() - r.workload_started)
    r.history.info("nemesis", a.action, dict(hit, client=instance.process, down_s=step.down_s))


def _log_dirs(manager: ClusterManager) -> list[dict]:
    """Every broker's log dirs with the partition directories in them: ``[(name, PartitionDirName)]``."""
    from kafkatier.log.dir_names import MalformedDirNameError, parse_partition_dir
    out = []
    for b in manager.state["brokers"]:
        for d in b["log_dirs"]:
            entries = []
            if os.path.isdir(d):
                for name in sorted(os.listdir(d)):
                    if not os.path.isdir(os.path.join(d, name)):
                        continue
                    try:
                        entries.append((name, parse_partition_dir(os.path.join(d, name))))
                    except MalformedDirNameError:
                        continue
            out.append({"broker": b["id"], "dir": d, "entries": entries})
    return out


def _replicas_not_across_racks(entries: list[dict]) -> list[str]:
    """``[expect] replicas_across_racks``: each partition's replicas, as created, in min(RF, racks) racks."""
    created = [e["value"] for e in entries if e["process"] == "observer" and e["f"] == "assignment"]
    if not created:
        return ["expected the topics' rack-aware assignment in the history, found none"]
    racks = created[0]["racks"]
    out = []
    for topic, parts in sorted(created[0]["topics"].items()):
        for p, replicas in sorted(parts.items(), key=lambda kv: int(kv[0])):
            used = {racks[str(b)] for b in replicas}
            want = min(len(replicas), len(set(racks.values())))
            if len(used) < want:
                out.append(f"expected {topic}/{p}'s replicas {replicas} in {want} racks, they are in "
                           f"{len(used)} ({', '.join(sorted(used))})")
    return out


def _consumers_not_reading_while_down(entries: list[dict]) -> list[str]:
    """``[expect] consumers_read_while_down``: every consumer polled records between the schedule's first kill and
    the next start of a broker (it fell back from the replica it read to a live one)."""
    kills = [e["time"] for e in entries if e["process"] == "nemesis" and e["f"] in ("kill", "terminate")]
    if not kills:
        return ["expected a kill of brokers, there was none"]
    down_from = min(kills)
    starts = [e["time"] for e in entries if e["process"] == "nemesis" and e["f"] == "start" and e["time"] > down_from]
    down_to = min(starts) if starts else float("inf")
    consumers = sorted({e["process"] for e in entries if e["process"].startswith("consumer") and e["f"] == "start"})
    out = []
    for c in consumers:
        if not any(e["process"] == c and e["f"] == "poll" and e["type"] == "ok" and down_from <= e["time"] <= down_to
                   for e in entries):
            out.append(f"expected {c} to poll records while the killed brokers were down "
                       f"({down_from / 1e9:.1f}s-{down_to / 1e9:.1f}s), it polled none")
    return out


def _holds(c, snap) -> bool:
    if c.tiered_state is not None:
        st = snap.tiered.get(c.topic)
        if st is None or st["state"] != c.tiered_state:
            return False
    if c.tiered_epoch_at_least is not None:
        st = snap.tiered.get(c.topic)
        if st is None or st["epoch"] < c.tiered_epoch_at_least:
            return False
    if c.controller_epoch_at_least is not None and snap.controller_epoch < c.controller_epoch_at_least:
        return False
    if c.acked_at_least is not None and snap.acked < c.acked_at_least:
        return False
    if c.leader is not None or c.isr is not None:
        st = snap.partitions.get((c.topic, c.partition))
        if st is None:
            return False
        # No leader (-1) also when the state znode still names a broker that is no longer registered: a controller
        # that failed over while the leader was down keeps it there, as Kafka's does, until an election succeeds.
        leader = st["leader"] if st["leader"] in snap.brokers else -1
        if c.leader is not None and leader != c.leader:
            return False
        if c.isr is not None and tuple(sorted(st["isr"])) != c.isr:
            return False
    return True


CLOSE_TIMEOUT_S = 30.0


def close_bounded(workload, history: History, timeout: float = CLOSE_TIMEOUT_S) -> bool:
    """``workload.close()``, waited for at most ``timeout`` s.  librdkafka's consumer close waits for its group
    handler to terminate and was seen to wait for good after heal (a sweep seed under load: the run then never
    ended); the run goes on, its history says which client did not close (False) and when it last got records
    (``last_progress_s``: a client already stuck before its close polled nothing for a while)."""
    closer = threading.Thread(target=workload.close, name=f"close-{workload.process}", daemon=True)
    closer.start()
    closer.join(timeout)
    if closer.is_alive():
        log.warning("a client did not close %s", kv(client=workload.process, timeout_s=timeout))
        last = workload.last_progress_ns
        history.info(workload.process, "close", {"closed": False, "waited_s": timeout,
                                                 "last_progress_s": None if last is None else round(last / 1e9, 3),
                                                 "closing_at_s": round(history.seconds(), 3)})
        return False
    return True


def recheck(run_dir: str, out: Callable[[str], None] = print) -> RunResult:
    """Re-run the checkers over a finished run's ``history.jsonl`` (``scenario replay --check``)."""
    from collections import Counter
    with open(os.path.join(run_dir, "results.json")) as f:
        old = json.load(f)
    entries = read(os.path.join(run_dir, HISTORY_FILE))
    anomalies, accepted = split(check_all(entries))
    heal = final(entries, "heal")
    if heal and not heal.get("converged", True):
        anomalies.append(Anomaly("heal", "not-converged", f"did not converge: {heal.get('reason')}"))
    res = dict(old, anomalies=[a.to_json() for a in anomalies], accepted=[a.to_json() for a in accepted],
               warnings=report.warnings(entries),
               counts=report.counts(entries),
               faults=dict(sorted(Counter(e["f"] for e in entries if e["process"] == "nemesis").items())))
    res["valid"] = not anomalies and not old.get("unmet_expectations")
    res["exit_code"] = 0 if res["valid"] else 1
    out(report.summary(res))
    return RunResult(valid=res["valid"], exit_code=res["exit_code"], run_dir=run_dir, results=res)
