"""What became of each step of a run: a scheduled fault that never happened is never a silent valid run.  The
ledger's statuses and unmet lines, the runner's accounting of a step cut short by heal (the consume-transform-
produce scenario's ``restart_client phase=committing``), the workload phase going on for a named step still
waiting, and what the verdict, its exit code and the summary say."""
from __future__ import annotations

import re
import threading
import time

import pytest

from kafkatier.scenario import report
from kafkatier.scenario.ctp_workload import CtpInstance, CtpJob, PhaseNotReached
from kafkatier.scenario.history import History
from kafkatier.scenario.runner import ScenarioRunner, step_deadline
from kafkatier.scenario.schedule import derive
from kafkatier.scenario.spec import ScenarioSpecError, WorkloadSpec, from_dict, load, resolve
from kafkatier.scenario.step_ledger import (DONE, NOT_REACHED, RUNNING, SKIPPED, UNFINISHED, WAITING,
                                            StepLedger)
from kafkatier.waiting import wait_for

DOC = {"name": "s", "duration_s": 10, "cluster": {"brokers": 3}, "topics": [{"name": "t"}],
       "schedule": [{"at": 1, "action": "kill", "target": 1},
                    {"at": 2, "action": "kill", "target": 2},
                    {"when": {"topic": "t", "partition": 0, "leader": -1, "timeout_s": 5}, "action": "start",
                     "target": 1}],
       "nemesis": {"menu": ["kill"], "start_s": 3, "stop_s": 6, "interval_s": 4}}


def _ledger():
    """The steps as (schedule[0] #2 at 1 s, schedule[1] #3 at 2 s, schedule[2] #1 when..., the nemesis' #4)."""
    schedule = derive(from_dict(DOC), 1)
    h = History(None)
    steps = sorted(schedule.steps, key=lambda s: (s.origin == "nemesis", s.origin))
    assert [s.number for s in steps] == [2, 3, 1, 4]
    return steps, StepLedger(schedule.steps, h), h


def test_each_step_ends_in_one_status_and_a_named_step_that_did_not_happen_is_unmet():
    (s1, s2, s3, nemesis), ledger, h = _ledger()
    assert nemesis.origin == "nemesis"
    ledger.started(s1, 1.01)
    ledger.done(s1)
    ledger.started(s2, 2.0)
    ledger.skipped(s2, "broker 2 is paused\nmore")
    ledger.not_reached(s3, "condition not met within 5s")
    ledger.not_reached(nemesis, "heal began before its time (3s)")
    ledger.done(s3)                          # a second report changes nothing
    shown = ledger.shown()
    assert shown[2] == {"happened_at": 1.01, "status": DONE}
    assert shown[3] == {"happened_at": 2.0, "status": "skipped: broker 2 is paused"}
    assert shown[1] == {"status": "not reached: condition not met within 5s"}
    assert shown[4] == {"status": "not reached: heal began before its time (3s)"}
    # The nemesis step is a random draw: visible in its status and the history, never an unmet expectation.
    assert ledger.unmet() == ["step #1 (schedule[2]) start was not reached: condition not met within 5s",
                              "step #3 (schedule[1]) kill did not happen: broker 2 is paused"]
    skipped = [e["value"] for e in h.entries() if e["f"] == "skipped"]
    assert [(v["step"], v["status"]) for v in skipped] == [(3, SKIPPED), (1, NOT_REACHED), (4, NOT_REACHED)]


def test_heal_fixes_the_verdict_a_waiting_step_is_not_reached_a_running_one_unfinished():
    (s1, s2, s3, nemesis), ledger, _ = _ledger()
    ledger.started(s1, 1.0)
    ledger.done(s1)
    ledger.started(s2, 2.0)                  # still restarting a broker when heal began
    ledger.close("heal began")
    ledger.done(s2)                          # its thread ends later: the verdict stays the one at heal
    ledger.not_reached(s3, "late")
    assert [ledger.status(s) for s in (s1, s2, s3, nemesis)] == [DONE, UNFINISHED, NOT_REACHED, NOT_REACHED]
    assert ledger.shown()[3]["status"] == "unfinished: still being applied when heal began"
    assert ledger.shown()[1]["status"] == "not reached: heal began first"
    assert ledger.unmet() == ["step #1 (schedule[2]) start was not reached: heal began first",
                              "step #3 (schedule[1]) kill did not finish: still being applied when heal began"]


def test_the_workload_goes_on_while_a_named_step_waits_bounded_by_its_deadline_and_the_cap():
    (s1, s2, s3, nemesis), ledger, _ = _ledger()
    for s in (s1, s2):
        ledger.done(s)
    now = time.monotonic()
    ledger.waiting(nemesis, now + 1000)      # a nemesis step is never waited for
    assert ledger.wait_for_named(cap=now + 1000) == [1]   # s3 waits with no deadline of its own: not waited for
    ledger.waiting(s3, now + 1000)
    assert ledger.wait_for_named(cap=now) == [1]          # the cap has passed: the run goes on to heal
    ledger.waiting(s3, now - 1)
    assert ledger.wait_for_named(cap=now + 1000) == [1]   # its own deadline has passed
    ledger.waiting(s3, now + 1000)
    waiter = threading.Thread(target=ledger.wait_for_named, kwargs={"cap": now + 1000})
    waiter.start()
    ledger.started(s3, 4.0)
    ledger.done(s3)
    waiter.join(60)
    assert not waiter.is_alive() and ledger.status(s3) == DONE   # it returned once the step happened
    assert ledger.wait_for_named(cap=now + 1000) == []


def test_a_step_waits_until_its_time_or_its_condition_and_delay():
    (s1, _, s3, _), _, _ = _ledger()
    assert step_deadline(s1, 100.0) == 101.0 and step_deadline(s3, 100.0) == 105.0


def test_a_step_after_the_end_of_the_run_is_refused_when_the_file_loads():
    doc = dict(DOC, schedule=[{"at": [8, 12], "action": "kill", "target": 1}])
    with pytest.raises(ScenarioSpecError, match=r"schedule\[0\]\.at: 12 is after the run's duration_s 10"):
        from_dict(doc)


# -- the runner's accounting, on the consume-transform-produce scenario -----------------------------------------
class _Observer:
    """No condition ever holds (the steps here wait for time or a client phase only)."""

    def wait_until(self, predicate, timeout, cancelled=None):
        return False


@pytest.fixture
def ctp_runner(tmp_path):
    spec = load(resolve("txn-consume-transform-produce"))
    runner = ScenarioRunner(spec, 3, True, str(tmp_path), False, lambda line: None)
    runner.history = History(None)
    runner.ledger = StepLedger(runner.schedule.steps, runner.history)
    # The job's instances exist but never run: no instance ever reaches a phase.
    runner.ctp_jobs = [CtpJob("ctp-1", next(w for w in spec.workloads if w.type == "ctp"), "127.0.0.1:1", 3,
                              runner.history)]
    yield runner
    runner.ctp_jobs[0].close()


def test_a_client_step_cut_short_by_heal_is_not_reached_and_the_run_is_invalid(ctp_runner, tmp_path):
    r = ctp_runner
    step = next(s for s in r.schedule.steps if s.action.phase == "committing")
    assert step.origin.startswith("schedule")
    t0 = r.workload_started = time.monotonic() - step.at   # its time has come
    th = threading.Thread(target=r.run_step, args=(step, t0, _Observer(), None))
    th.start()
    wait_for(lambda: step.number in r.ledger.shown(), 30, message="the step to wait for its client's phase")
    assert r.ledger.status(step) == WAITING       # waiting for ctp-1-K to be committing, as a condition is
    r._cancel.set()                                # heal begins (what ScenarioRunner._heal does first)
    th.join(30)
    r.ledger.close("heal began")
    shown = r.ledger.shown()[step.number]
    assert "happened_at" not in shown
    assert re.fullmatch(r"not reached: heal began before ctp-1-[01] was committing \(waited \d+\.\ds\)",
                        shown["status"]), shown
    [line] = [u for u in r.ledger.unmet() if f"#{step.number} " in u]
    assert line.startswith(f"step #{step.number} ({step.origin}) restart_client was not reached: heal began")
    # The other steps never came either (their time had not come when heal began): all visible, all unmet.
    assert {st.split(":")[0] for st in (v["status"] for v in r.ledger.shown().values())} == {NOT_REACHED}
    res = report.results(spec=r.spec, seed=r.seed, quick=True, schedule=r.schedule, entries=r.history.entries(),
                         anomalies=[], unmet=r.ledger.unmet(), replay="kafkatier scenario run x --seed 3",
                         elapsed_s=1.0, run_dir=str(tmp_path), steps=r.ledger.shown())
    assert not res["valid"] and res["exit_code"] == 1
    text = report.summary(res)
    assert "INVALID" in text and f"UNMET   step #{step.number} (" in text
    assert re.search(r"steps: 4 not reached \(#1, #2, #3, #4\)", text), text


def test_a_client_step_whose_phase_never_comes_is_not_reached_within_its_timeout():
    inst = CtpInstance("ctp-0", "g", WorkloadSpec(type="ctp", topic="in", output_topic="out"), "127.0.0.1:1",
                       History(None))
    with pytest.raises(PhaseNotReached, match=r"ctp-0 was not committing within 0s"):
        inst.kill(phase="committing", timeout_s=0)
    inst.stopping.set()
    with pytest.raises(PhaseNotReached, match=r"ctp-0 stopped before it was committing"):
        inst.kill(phase="committing", timeout_s=30)


def test_a_done_run_counts_its_steps_in_the_summary(tmp_path):
    spec = from_dict(DOC)
    schedule = derive(spec, 1)
    ledger = StepLedger(schedule.steps, History(None))
    for s in schedule.steps:
        if s.origin == "nemesis":
            continue
        ledger.started(s, 1.0)
        ledger.done(s)
    ledger.close("heal began")
    res = report.results(spec=spec, seed=1, quick=False, schedule=schedule, entries=[], anomalies=[],
                         unmet=ledger.unmet(), replay="r", elapsed_s=1.0, run_dir=str(tmp_path),
                         steps=ledger.shown())
    assert res["valid"] and res["exit_code"] == 0       # only the nemesis step was not reached
    assert "steps: 3 done, 1 not reached (#4)" in report.summary(res)
    assert RUNNING not in {v["status"] for v in ledger.shown().values()}

