"""The consume-transform-produce job of the scenario engine: its transform, the ``ctp`` checker (each anomaly fed
in a crafted history is reported; the clean history passes every checker) and the scenario format of the ``ctp``
workload and the ``kill_client`` / ``restart_client`` actions."""
from __future__ import annotations

import pytest

from kafkatier.scenario.checkers import check_all, ctp
from kafkatier.scenario.ctp_worker import source_of, transform
from kafkatier.scenario.spec import ScenarioSpecError, from_dict

S = 1_000_000_000
SPEC = {"type": "ctp", "topic": "in", "output_topic": "out", "count": 2}


class H:
    def __init__(self):
        self.entries: list[dict] = []
        self.add(0, "info", "ctp-0", "start", SPEC)
        self.add(0, "info", "consumer-1", "start", {"type": "consumer", "topic": "out",
                                                    "isolation_level": "read_committed"})
        self.add(0, "info", "consumer-1", "seek", "beginning", topic="out")

    def add(self, t: float, type_: str, process: str, f: str, value=None, **extra) -> dict:
        e = {"index": len(self.entries), "time": int(t * S), "type": type_, "process": process, "f": f,
             "value": value, **extra}
        self.entries.append(e)
        return e

    def txn(self, t: float, inputs: list[tuple[int, int, str]], out_offsets: list[int], outcome: str = "ok",
            process: str = "ctp-0-0", commit_asked: bool = True) -> None:
        """A transaction of the job: the transforms of ``inputs`` ``(partition, offset, value)`` written to the
        same output partition at ``out_offsets``, the input offsets committed with it."""
        value = {"txn": f"{process}#1:{t}", "inputs": {}}
        self.add(t, "invoke", process, "ctp-txn", value, topic="out", input_topic="in")
        writes = [[p, oo, transform(v, p, o)] for (p, o, v), oo in zip(inputs, out_offsets)]
        offsets = {str(p): max(o for q, o, _ in inputs if q == p) + 1 for p, _, _ in inputs}
        self.add(t + 0.1, outcome, process, "ctp-txn", value, topic="out", input_topic="in", writes=writes,
                 offsets=offsets if commit_asked else None, end_invoked=int((t + 0.05) * S) if commit_asked else None)

    def offsets(self, t: float, committed: dict[int, int]) -> None:
        self.add(t, "ok", "ctp-0", "ctp-offsets", {str(p): o for p, o in committed.items()}, topic="in")

    def poll(self, t: float, records: dict[int, list[tuple[int, str]]]) -> None:
        self.add(t, "ok", "consumer-1", "poll", {str(p): [list(r) for r in rs] for p, rs in records.items()},
                 topic="out", invoked=int(t * S))

    def final(self, inputs: dict[int, list[tuple[int, str]]], outputs: dict[int, list[tuple[int, str]]],
              drained: bool = True, committed: dict[int, int] | None = None) -> None:
        parts = {}
        for topic, data in (("in", inputs), ("out", outputs)):
            for p, recs in data.items():
                end = recs[-1][0] + 1 if recs else 0
                parts[f"{topic}/{p}"] = {"log_start": 0, "high_watermark": end + 1, "read_to": end + 1,
                                         "records": [list(r) for r in recs]}
        ends = {str(p): (recs[-1][0] + 1 if recs else 0) for p, recs in inputs.items()}
        self.add(98, "info", "final", "ctp-drain", {"process": "ctp-0", "drained": drained, "ends": ends,
                                                     "committed": {str(p): o for p, o in (committed or {}).items()}
                                                     if committed is not None else ends})
        self.add(99, "info", "final", "final-read", parts)

    def types(self) -> set[str]:
        return {a.type for a in ctp.check(self.entries)}


INPUT = [(0, 0, "producer-0:0"), (0, 1, "producer-0:1"), (0, 2, "producer-0:2")]


def clean() -> H:
    """Input 0..2 of in/0 transformed by two transactions into out/0 at 0 and 2 (1 and 3: their markers)."""
    h = H()
    h.txn(1.0, INPUT[:1], [0])
    h.offsets(1.5, {0: 1})
    h.txn(2.0, INPUT[1:], [2, 3])
    h.poll(2.5, {0: [(0, transform("producer-0:0", 0, 0))]})
    h.offsets(3.0, {0: 3})
    return h


def _final_ok(h: H, outputs=None) -> None:
    h.final({0: [(o, v) for _, o, v in INPUT]}, outputs if outputs is not None else
            {0: [(0, transform(INPUT[0][2], 0, 0)), (2, transform(INPUT[1][2], 0, 1)),
                 (3, transform(INPUT[2][2], 0, 2))]})


def test_the_transform_names_its_input_record():
    v = transform("producer-0:17@x", 2, 40)
    assert v == "PRODUCER-0:17@X@2/40" and source_of(v) == (2, 40)
    assert source_of("no tag") is None and source_of("A@1/") is None and source_of("A@x/1") is None


def test_a_clean_history_passes_every_checker():
    h = clean()
    _final_ok(h)
    assert [a for a in check_all(h.entries) if not a.accepted] == []


def test_an_input_transformed_twice_is_a_duplicate():
    h = clean()
    h.txn(4.0, INPUT[1:2], [5], process="ctp-0-1")     # a second instance processed input 0/1 again
    _final_ok(h, {0: [(0, transform(INPUT[0][2], 0, 0)), (2, transform(INPUT[1][2], 0, 1)),
                      (3, transform(INPUT[2][2], 0, 2)), (5, transform(INPUT[1][2], 0, 1))]})
    assert h.types() == {"duplicate-output"}


def test_offsets_ahead_of_the_committed_output_lose_input():
    h = clean()
    h.offsets(3.5, {0: 3})
    _final_ok(h, {0: [(0, transform(INPUT[0][2], 0, 0))]})     # 0/1 and 0/2 committed as consumed, no output
    [a] = [a for a in ctp.check(h.entries)]
    assert a.type == "lost-input" and "2 input records" in a.message


def test_output_of_no_input_is_a_phantom_and_aborted_output_read_is_reported():
    h = clean()
    h.txn(4.0, [(0, 2, "producer-0:2")], [7], outcome="fail")   # aborted: its record must stay invisible
    h.poll(4.5, {0: [(7, transform("producer-0:2", 0, 2))]})
    _final_ok(h, {0: [(0, transform(INPUT[0][2], 0, 0)), (2, transform(INPUT[1][2], 0, 1)),
                      (3, transform(INPUT[2][2], 0, 2)), (9, "GARBAGE")]})
    assert h.types() == {"phantom-output", "aborted-output-read", "duplicate-output"}


def test_a_read_before_commit_was_asked_offsets_going_back_and_no_drain():
    h = clean()
    h.txn(5.0, [(0, 3, "producer-0:3")], [5], process="ctp-0-1")
    h.poll(5.01, {0: [(5, transform("producer-0:3", 0, 3))]})      # before its end_invoked (5.05)
    h.offsets(6.0, {0: 1})                                          # the group's offset went back
    h.final({0: [(o, v) for _, o, v in INPUT] + [(3, "producer-0:3")]},
            {0: [(0, transform(INPUT[0][2], 0, 0)), (2, transform(INPUT[1][2], 0, 1)),
                 (3, transform(INPUT[2][2], 0, 2)), (5, transform("producer-0:3", 0, 3))]}, drained=False,
            committed={0: 1})
    assert h.types() == {"precommitted-output-read", "offset-regressed", "not-drained"}


def test_a_transaction_the_instance_died_in_before_commit_is_aborted():
    h = clean()
    h.txn(4.0, [(0, 2, "producer-0:2")], [6], outcome="fail", commit_asked=False)
    h.poll(4.5, {0: [(6, transform("producer-0:2", 0, 2))]})
    _final_ok(h)
    assert h.types() == {"aborted-output-read", "duplicate-output"}


# -- the scenario format -------------------------------------------------------------------------------------
DOC = {"name": "c", "cluster": {"brokers": 3}, "topics": [{"name": "in"}, {"name": "out"}],
       "workloads": [{"type": "producer", "topic": "in"}, dict(SPEC)]}


def _with(workload=None, step=None) -> dict:
    doc = {**DOC, "workloads": [DOC["workloads"][0], {**SPEC, **(workload or {})}]}
    if step is not None:
        doc["schedule"] = [{"at": 1, **step}]
    return doc


def test_a_ctp_workload_and_its_client_steps_load():
    spec = from_dict(_with(step={"action": "restart_client", "client": "ctp-1", "phase": "committing",
                                 "down_s": [0.5, 1]}))
    assert spec.workloads[1].output_topic == "out" and spec.schedule[0].client == "ctp-1"
    assert spec.schedule[0].phase == "committing"
    assert from_dict(_with(step={"action": "kill_client", "client": "ctp-1-1"})).schedule[0].client == "ctp-1-1"


@pytest.mark.parametrize("doc, message", [
    (_with({"output_topic": "nope"}), "workloads[1].output_topic: unknown topic"),
    (_with({"output_topic": "in"}), "cannot write the topic it reads"),
    ({**DOC, "workloads": [{"type": "ctp", "topic": "in"}]}, "output_topic: required"),
    ({**DOC, "workloads": [{"type": "producer", "topic": "in", "output_topic": "out"}]}, "only for type 'ctp'"),
    (_with(step={"action": "kill_client"}), "schedule[0].client: required"),
    (_with(step={"action": "kill_client", "client": "ctp-0"}), "names no ctp workload"),
    (_with(step={"action": "kill_client", "client": "ctp-1-2"}), "instances 0..1"),
    (_with(step={"action": "kill_client", "client": "producer-0"}), "schedule[0].client"),
    (_with(step={"action": "kill", "target": 1, "client": "ctp-1"}), "only for actions kill_client"),
    (_with(step={"action": "kill", "target": 1, "phase": "produced"}), "schedule[0].phase"),
    (_with(step={"action": "kill_client", "client": "ctp-1", "phase": "later"}), "schedule[0].phase"),
])
def test_bad_ctp_format_is_one_line_naming_the_field(doc, message):
    with pytest.raises(ScenarioSpecError) as e:
        from_dict(doc)
    assert message in str(e.value) and "\n" not in str(e.value)


# -- the supervisor of one instance, around a stand-in for the job's process ------------------------------------
FAKE_JOB = """
import json, sys, time
def emit(ev, **f):
    print(json.dumps({"t": time.monotonic_ns(), "ev": ev, **f}), flush=True)
emit("ready")
seq = 0
while True:
    emit("begin", txn=seq, inputs={"0": [seq, seq]})
    time.sleep(0.02)
    emit("produced", txn=seq, writes=[[0, seq, "X@0/%d" % seq]])
    time.sleep(0.02)
    emit("end", txn=seq, offsets={"0": seq + 1})
    time.sleep(0.02)
    emit("committed", txn=seq, records=seq + 1)
    seq += 1
"""


def test_the_supervisor_kills_at_a_phase_restarts_and_records_what_the_dead_instance_left_open():
    import sys

    from kafkatier.scenario.ctp_workload import CtpInstance
    from kafkatier.scenario.history import History
    from kafkatier.scenario.spec import WorkloadSpec
    from kafkatier.waiting import wait_for

    h = History(None)
    inst = CtpInstance("ctp-0", "g", WorkloadSpec(type="ctp", topic="in", output_topic="out"), "127.0.0.1:1", h)
    inst.argv = [sys.executable, "-c", FAKE_JOB]
    inst.start()
    try:
        hit = inst.kill("KILL", down_s=0.1, phase="committing", timeout_s=30)
        assert hit["phase"] == "committing" and hit["incarnation"] == 1
        wait_for(lambda: inst.incarnation == 2 and inst.alive(), 30, message="restarted after down_s")
        assert inst.kill("KILL", down_s=None, phase="produced", timeout_s=30)["phase"] == "produced"
        wait_for(lambda: not inst.alive(), 30, message="killed")
        with pytest.raises(TimeoutError):           # down until heal: nothing to kill; a healing run stops waiting
            inst.kill(timeout_s=30, cancel=_set_event())
        assert inst.incarnation == 2
        inst.heal()
        wait_for(lambda: inst.incarnation == 3 and inst.alive(), 30, message="started at heal")
    finally:
        inst.stop()
        inst.join(10)
    entries = h.entries()
    txns = [e for e in entries if e["f"] == "ctp-txn" and e["type"] != "invoke"]
    # Each kill leaves one transaction open (the process may have got a step further than the supervisor saw when
    # it signalled; the history records where it really was): asked to commit -> unknown, else aborted.
    open_at_death = [e for e in txns if e["type"] != "ok"]
    assert len(open_at_death) >= 2
    assert all((e["type"] == "info") == (e["end_invoked"] is not None) for e in open_at_death)
    assert all(e["error"].startswith("exited") for e in open_at_death)
    assert all(e["writes"] and e["offsets"] and e["end_invoked"] for e in txns if e["type"] == "ok")
    exits = [e["value"]["returncode"] for e in entries if e["f"] == "ctp-exit"]
    assert exits[:2] == [-9, -9] and len(exits) == 3


def _set_event():
    import threading
    e = threading.Event()
    e.set()
    return e


def test_a_job_closed_before_it_started_leaves_nothing_behind():
    """The runner closes every job in its ``finally``, also when the run failed before the workload phase."""
    from kafkatier.scenario.ctp_workload import CtpJob
    from kafkatier.scenario.history import History
    from kafkatier.scenario.spec import WorkloadSpec
    h = History(None)
    job = CtpJob("ctp-1", WorkloadSpec(type="ctp", topic="in", output_topic="out", count=2), "127.0.0.1:1", 3, h)
    assert [i.process for i in job.instances] == ["ctp-1-0", "ctp-1-1"] and job.group == "scenario-ctp-1"
    assert job.instance("ctp-1-1", 0.0).process == "ctp-1-1" and job.owns("ctp-1") and not job.owns("ctp-2")
    job.close()
    job.close()     # a second close does nothing
    assert [e["value"]["incarnations"] for e in h.entries() if e["f"] == "ctp-stop"] == [0, 0]


def test_the_watchdog_reports_a_call_blocked_past_its_deadline_and_grace():
    """librdkafka's send_offsets_to_transaction can block past its timeout forever (see ctp_worker's docstring)."""
    from kafkatier.scenario.ctp_worker import Watchdog
    now = [100.0]
    stalls: list[str] = []
    wd = Watchdog(20.0, stalls.append, clock=lambda: now[0])
    assert not wd.check()                               # nothing guarded
    with wd.guard("send_offsets_to_transaction", 30.0):
        now[0] = 150.0
        assert not wd.check()                           # at its deadline + grace: still allowed
        now[0] = 150.5
        assert wd.check()
    assert stalls == ["STALLED: send_offsets_to_transaction blocked in librdkafka for 50.5s (20.5s past its timeout)"]
    now[0] = 1000.0
    assert not wd.check()                               # the call returned
    wd.stop()                                           # never started: nothing to join


def test_a_worker_blocked_past_its_deadline_reports_the_stall_and_exits():
    """The worker's watchdog ends the process (the supervisor starts a new incarnation) with a ``fatal`` event."""
    import json
    import subprocess
    import sys
    code = (
        "import time\n"
        "from kafkatier.scenario.ctp_worker import Watchdog, _exit_stalled\n"
        "wd = Watchdog(0.0, _exit_stalled, interval_s=0.01).start()\n"
        "with wd.guard('commit_transaction', 0.0):\n"
        "    time.sleep(60)   # the blocked librdkafka call\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3
    ev = json.loads(proc.stdout.splitlines()[-1])
    assert ev["ev"] == "fatal" and ev["error"].startswith("STALLED: commit_transaction blocked in librdkafka")


# A job whose phases come in one burst (the pipe delivers several lines at once under load): ``produced`` lasts
# no time at all as the supervisor reads it.
BURST_JOB = """
import json, sys, time
def line(ev, **f):
    return json.dumps({"t": time.monotonic_ns(), "ev": ev, **f}) + "\\n"
sys.stdout.write(line("ready")); sys.stdout.flush()
seq = 0
while True:
    sys.stdout.write(line("begin", txn=seq, inputs={"0": [seq, seq]}) + line("produced", txn=seq, writes=[[0, seq, "X"]])
                     + line("end", txn=seq, offsets={"0": seq + 1}) + line("committed", txn=seq, records=seq + 1))
    sys.stdout.flush()
    seq += 1
    time.sleep(0.3)
"""


def test_a_phase_that_lasts_no_time_is_still_hit():
    """The kill is fired by the phase change itself: a waiter woken after the fact missed ``produced`` when the
    lines of a whole transaction arrived together (a consume-transform-produce run under load: 30 s, never hit)."""
    import sys
    import threading

    from kafkatier.scenario.ctp_workload import CtpInstance
    from kafkatier.scenario.history import History
    from kafkatier.scenario.spec import WorkloadSpec

    inst = CtpInstance("ctp-0", "g", WorkloadSpec(type="ctp", topic="in", output_topic="out"), "127.0.0.1:1",
                       History(None))
    inst.argv = [sys.executable, "-c", BURST_JOB]
    inst.start()
    try:
        # Two steps wait on the same instance at once: each gets its own kill (the second, the next incarnation).
        hits: dict = {}
        later = threading.Thread(target=lambda: hits.update(produced=inst.kill(
            "KILL", down_s=0.1, phase="produced", timeout_s=30)))
        later.start()
        hits["committing"] = inst.kill("KILL", down_s=0.1, phase="committing", timeout_s=30)
        later.join(60)
        assert hits["committing"]["phase"] == "committing" and hits["produced"]["phase"] == "produced"
        assert {hits["committing"]["incarnation"], hits["produced"]["incarnation"]} <= {1, 2}
        assert hits["committing"]["pid"] != hits["produced"]["pid"]
    finally:
        inst.stop()
        inst.join(10)
