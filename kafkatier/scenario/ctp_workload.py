"""CtpJob (processes ``ctp-N``, ``ctp-N-K``): a consume-transform-produce job with exactly-once semantics
(KIP-98, KIP-447) for the scenario engine.

Each instance is a real process (``python -m kafkatier.scenario.ctp_worker``, see that module) in consumer group
``scenario-ctp-N`` with transactional id = its process name, so a schedule's ``kill_client`` / ``restart_client``
kill it with a signal (SIGKILL by default) the way a crashed or killed application dies; its supervisor
(:class:`CtpInstance`) starts it again after the step's ``down_s`` (``kill_client``: at heal), and the new
incarnation fences the old one.  A step may wait until the instance is at a given point of a transaction
(``phase``): ``produced`` (its records delivered, EndTxn not asked) or ``committing`` (EndTxn(commit) asked,
not answered).

History, per instance: ``ctp-start`` / ``ctp-exit`` (info) and one ``ctp-txn`` operation per transaction:
``invoke`` with the input ranges, then ``ok`` (committed), ``fail`` (aborted: an abortable error, or the process
died before it asked to commit) or ``info`` (died after it asked to commit: either outcome), with ``writes``
``[[partition, offset, value], ...]`` of the output, ``offsets`` (the input offsets committed with it) and
``end_invoked``.  Process ``ctp-N`` itself samples the group's committed offsets with OffsetFetch
``require_stable`` (KIP-447; librdkafka asks it for read_committed consumers) as ``ctp-offsets`` entries, and
after heal waits until they reach the input's end (``ctp-drain``, a ``final`` entry).  The checker is
``checkers/ctp.py``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kafkatier.logsetup import get_logger, kv
from kafkatier.scenario.history import FAIL, INFO, INVOKE, OK, History
from kafkatier.scenario.spec import WorkloadSpec
from kafkatier.scenario.workloads import Workload, client_config, error_name
from kafkatier.waiting import WaitTimeout, wait_for

log = get_logger("scenario.ctp")

RESTART_BACKOFF_S = 0.5     # a supervisor's pause before it starts a job that exited on its own
STOP_TIMEOUT_S = 10.0
PHASES = ("any", "produced", "committing")
# How long a kill waits for its phase: a job stalls while a coordinator or leader it needs is down (seen 15 s on a
# loaded 2-core machine, its first transaction blocked by a killed coordinator).
PHASE_TIMEOUT_S = 30.0


class PhaseNotReached(TimeoutError):
    """A kill that waited for its instance's phase in vain: the phase did not come in time, the supervisor
    stopped, or the run began to heal."""


class CtpInstance(Workload):
    """One instance of the job and its supervisor (see the module docstring)."""

    def __init__(self, name: str, group: str, spec: WorkloadSpec, bootstrap: str, history: History):
        super().__init__(name, history)
        self.spec = spec
        self.argv = [sys.executable, "-m", "kafkatier.scenario.ctp_worker", "--bootstrap-server", bootstrap,
                     "--group", group, "--input", spec.topic, "--output", spec.output_topic,
                     "--transactional-id", name, "--per-txn", str(spec.txn_records),
                     "--transaction-timeout-ms", str(spec.transaction_timeout_ms)]
        self._t0 = history.clock() - history.now()
        self._cond = threading.Condition()
        self._proc: subprocess.Popen | None = None
        self._down_until: float | None = 0.0     # None: down until heal
        self._phase = "stopped"                   # stopped | idle | produced | committing
        self._armed: list[dict] = []              # kills waiting for their phase: fired by the phase change itself
        self._signalled = 0                       # the incarnation a kill was sent to (it may not have exited yet)
        self.incarnation = 0
        self.committed_txns = self.aborted_txns = 0

    # -- faults --------------------------------------------------------------------------------------------
    def alive(self) -> bool:
        with self._cond:
            return self._proc is not None and self._proc.poll() is None

    def kill(self, sig: str = "KILL", down_s: float | None = 0.0, phase: str = "any",
             timeout_s: float = PHASE_TIMEOUT_S, cancel: threading.Event | None = None) -> dict:
        """Signal the running process (once it is at ``phase``), keep it down ``down_s`` (None: until heal).
        Returns what was hit; raises :class:`PhaseNotReached` if the instance did not reach ``phase`` in time, or
        ``cancel`` was set (the run is healing) or the instance stopped first.

        The kill is armed and fired by the phase change itself (:meth:`_set_phase`), under the same lock: a phase
        that lasts a few milliseconds (``produced``: only send_offsets_to_transaction until ``end``), or several
        phases read from the pipe at once, is never missed the way a waiter woken after the fact would miss it."""
        started = time.monotonic()
        deadline = started + timeout_s
        what = "running" if phase == "any" else phase
        with self._cond:
            armed = {"phase": phase, "sig": sig, "down_s": down_s, "hit": None}
            self._armed.append(armed)
            try:
                self._fire_if_armed()
                while armed["hit"] is None:
                    left = deadline - time.monotonic()
                    waited = f"waited {time.monotonic() - started:.1f}s"
                    if cancel is not None and cancel.is_set():
                        raise PhaseNotReached(f"heal began before {self.process} was {what} ({waited})")
                    if self.stopping.is_set():
                        raise PhaseNotReached(f"{self.process} stopped before it was {what} ({waited})")
                    if left <= 0:
                        raise PhaseNotReached(f"{self.process} was not {what} within {timeout_s:g}s")
                    self._cond.wait(min(left, 0.05))
            finally:
                if armed in self._armed:
                    self._armed.remove(armed)
        return armed["hit"]

    def _fire_if_armed(self) -> None:
        """Under the lock: the first armed kill whose phase the running process is at now (one kill: the others
        wait for the next incarnation)."""
        if self._proc is None or self._proc.poll() is not None or self._signalled == self.incarnation:
            return
        armed = next((a for a in self._armed if a["phase"] in ("any", self._phase)), None)
        if armed is None:
            return
        self._down_until = None if armed["down_s"] is None else time.monotonic() + armed["down_s"]
        armed["hit"] = {"pid": self._proc.pid, "incarnation": self.incarnation, "phase": self._phase,
                        "signal": armed["sig"]}
        os.kill(self._proc.pid, getattr(signal, f"SIG{armed['sig']}"))
        self._signalled = self.incarnation
        self._armed.remove(armed)
        self._cond.notify_all()

    def heal(self) -> None:
        with self._cond:
            self._down_until = 0.0
            self._cond.notify_all()

    # -- the supervisor --------------------------------------------------------------------------------------
    def work(self) -> None:
        while not self.stopping.is_set():
            with self._cond:
                while not self.stopping.is_set() and (self._down_until is None or
                                                      time.monotonic() < self._down_until):
                    self._cond.wait(0.05 if self._down_until is None else
                                    max(0.0, min(0.05, self._down_until - time.monotonic())))
                if self.stopping.is_set():
                    return
                self.incarnation += 1
                self._proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                              text=True, start_new_session=True)
                self._phase = "idle"
                self._down_until = time.monotonic() + RESTART_BACKOFF_S   # unless a kill says otherwise
                self._fire_if_armed()                                      # a kill of any phase
            self.history.info(self.process, "ctp-start", {"pid": self._proc.pid, "incarnation": self.incarnation})
            self._follow(self._proc)

    def _follow(self, proc: subprocess.Popen) -> None:
        """Record the process's events until it exits."""
        open_txn: dict | None = None
        for line in proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            t, kind = ev["t"], ev["ev"]
            if kind == "begin":
                value = {"txn": f"{self.process}#{self.incarnation}:{ev['txn']}", "inputs": ev["inputs"]}
                open_txn = {"value": value, "writes": [], "offsets": None, "end_invoked": None}
                self.history.record_at(t, INVOKE, self.process, "ctp-txn", value, **self._topics())
                self._set_phase("idle")
            elif kind == "produced" and open_txn is not None:
                open_txn["writes"] = ev["writes"]
                self._set_phase("produced")
            elif kind == "end" and open_txn is not None:
                open_txn["offsets"] = ev["offsets"]
                open_txn["end_invoked"] = t - self._t0
                self._set_phase("committing")
            elif kind in ("committed", "aborted") and open_txn is not None:
                if kind == "aborted":
                    open_txn["writes"] = ev.get("writes", open_txn["writes"])
                self._complete(t, OK if kind == "committed" else FAIL, open_txn, ev.get("error"))
                open_txn = None
                self._set_phase("idle")
            elif kind == "ready":
                self.history.record_at(t, INFO, self.process, "ctp-ready", None)
            elif kind == "fatal":
                self.history.record_at(t, INFO, self.process, "ctp-fatal", ev.get("error"))
        code = proc.wait()
        if open_txn is not None:
            # Died in a transaction: never asked to commit, only an abort can end it; asked, either outcome.
            self._complete(self.history.clock(), FAIL if open_txn["end_invoked"] is None else INFO, open_txn,
                           f"exited {code}")
        self._set_phase("stopped")
        self.history.info(self.process, "ctp-exit", {"returncode": code, "incarnation": self.incarnation})

    def _topics(self) -> dict:
        return {"topic": self.spec.output_topic, "input_topic": self.spec.topic}

    def _complete(self, t: int, type_: str, txn: dict, error: str | None) -> None:
        extra = {"writes": txn["writes"], "offsets": txn["offsets"], "end_invoked": txn["end_invoked"],
                 **self._topics()}
        if error is not None:
            extra["error"] = error
        if type_ == OK:
            self.committed_txns += 1
        elif type_ == FAIL:
            self.aborted_txns += 1
        self.history.record_at(t, type_, self.process, "ctp-txn", txn["value"], **extra)

    def _set_phase(self, phase: str) -> None:
        with self._cond:
            self._phase = phase
            self._fire_if_armed()
            self._cond.notify_all()

    def stop(self) -> None:
        """Stop the supervisor and the process (SIGTERM, then SIGKILL): an open transaction is aborted."""
        with self._cond:
            self.stopping.set()
            proc = self._proc
            self._cond.notify_all()
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT_S)


class CtpJob(Workload):
    """The instances of one ``ctp`` workload, and the sampler of their group's committed offsets."""

    def __init__(self, name: str, spec: WorkloadSpec, bootstrap: str, input_partitions: int, history: History):
        super().__init__(name, history)
        self.spec = spec
        self.group = f"scenario-{name}"
        self.partitions = input_partitions
        names = [f"{name}-{k}" for k in range(spec.count)] if spec.count > 1 else [name]
        self.instances = [CtpInstance(n, self.group, spec, bootstrap, history) for n in names]
        self.consumer = Consumer(client_config(bootstrap) | {
            "group.id": self.group, "enable.auto.commit": False, "isolation.level": "read_committed"})
        self._last: dict[str, int] = {}
        self._closed = False

    def instance(self, client: str, pick: float) -> CtpInstance:
        """The instance a step's ``client`` names: one process name, or the workload's name (the step's pick
        chooses among its instances, live ones first)."""
        for i in self.instances:
            if i.process == client:
                return i
        live = [i for i in self.instances if i.alive()] or self.instances
        return live[min(int(pick * len(live)), len(live) - 1)]

    def owns(self, client: str) -> bool:
        return client == self.process or any(i.process == client for i in self.instances)

    def start(self) -> None:
        for i in self.instances:
            i.start()
        super().start()

    def committed(self, timeout_s: float = 5.0) -> dict[str, int]:
        """The group's committed offsets of the input (OffsetFetch, require_stable): ``{"<partition>": offset}``
        (-1: none yet)."""
        tps = self.consumer.committed([TopicPartition(self.spec.topic, p) for p in range(self.partitions)],
                                      timeout=timeout_s)
        return {str(tp.partition): tp.offset if tp.offset >= 0 else -1 for tp in tps}

    def _sample(self) -> dict[str, int] | None:
        t_invoke = self.history.now()
        try:
            offsets = self.committed()
        except KafkaException as e:
            self.history.record(INFO, self.process, "ctp-offsets-error", error_name(e.args[0]) if e.args else repr(e))
            return None
        if offsets != self._last:
            self.history.record(OK, self.process, "ctp-offsets", offsets, topic=self.spec.topic, group=self.group,
                                invoked=t_invoke)
            self._last = offsets
        return offsets

    def work(self) -> None:
        while not self.stopping.wait(self.spec.interval_s):
            self._sample()

    def heal(self) -> None:
        for i in self.instances:
            i.heal()

    def drain(self, timeout_s: float) -> bool:
        """After heal: wait until the group's committed offsets reach the end of the input (its producers have
        stopped); recorded as the ``final`` entry ``ctp-drain``."""
        self.stop()
        if self.is_alive():
            self.join(timeout=STOP_TIMEOUT_S)
        ends: dict[str, int] = {}
        try:
            for p in range(self.partitions):
                ends[str(p)] = self.consumer.get_watermark_offsets(TopicPartition(self.spec.topic, p), timeout=10,
                                                                   cached=False)[1]
        except KafkaException as e:
            self.history.record(INFO, "final", "ctp-drain", {"process": self.process, "drained": False,
                                                              "reason": f"end offsets: {e!r}"})
            return False
        t0 = time.monotonic()
        seen: list[dict[str, int]] = []

        def drained() -> bool:
            offsets = self._sample()
            if offsets is not None:
                seen.append(offsets)
            return offsets is not None and all(offsets.get(p, -1) >= end for p, end in ends.items())
        try:
            wait_for(drained, timeout_s, interval=0.2, message=f"{self.process} to commit its whole input")
            self.history.record(INFO, "final", "ctp-drain", {
                "process": self.process, "drained": True, "ends": ends, "committed": seen[-1],
                "waited_s": round(time.monotonic() - t0, 2)})
            return True
        except WaitTimeout:
            pass
        offsets = seen[-1] if seen else None
        self.history.record(INFO, "final", "ctp-drain", {"process": self.process, "drained": False, "ends": ends,
                                                          "committed": offsets, "waited_s": timeout_s})
        log.warning("consume-transform-produce job did not drain %s", kv(job=self.process, ends=ends,
                                                                        committed=offsets))
        return False

    def close(self) -> None:
        """Stop every instance (and the sampler); a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        self.stop()
        if self.is_alive():
            self.join(timeout=STOP_TIMEOUT_S)    # the sampler, before its consumer closes
        for i in self.instances:
            i.stop()
        for i in self.instances:
            if i.is_alive():                    # never started when the run failed before its workload phase
                i.join(timeout=STOP_TIMEOUT_S)
            self.history.info(i.process, "ctp-stop", {"incarnations": i.incarnation, "committed": i.committed_txns,
                                                  "aborted": i.aborted_txns})
        self.consumer.close()
