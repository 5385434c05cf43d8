"""The scenario format: every action and ``when`` key documented from the schema and dispatched from one table,
target exclusion (``not``), ``expect`` on an admin action's outcome, client settings that cannot work together
refused before anything starts, ``scenario run --dry-run``."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import attrs
import pytest

from kafkatier.scenario.faults import FaultError, Faults
from kafkatier.scenario.runner import ACTIONS
from kafkatier.scenario.spec import SCHEMA_FILE, ConditionSpec, ScenarioSpecError, from_dict

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import mkdocs_hooks  # noqa: E402

MINIMAL = {"name": "m", "cluster": {"brokers": 3}, "topics": [{"name": "t"}]}

with open(SCHEMA_FILE) as f:
    SCHEMA = json.load(f)
ACTION = SCHEMA["$defs"]["action"]["properties"]["action"]
CONDITION = SCHEMA["$defs"]["condition"]["properties"]


def test_the_dispatch_table_and_the_schema_name_the_same_actions_each_described():
    assert set(ACTIONS) == set(ACTION["enum"])
    assert len(ACTION["enumDescriptions"]) == len(ACTION["enum"])
    assert all(d.strip() for d in ACTION["enumDescriptions"])


def test_every_when_key_is_in_the_schema_with_a_meaning():
    assert set(CONDITION) == {f.name for f in attrs.fields(ConditionSpec)}
    assert all(p.get("description") for p in CONDITION.values())


def test_the_generated_reference_lists_every_action_and_when_key():
    text = mkdocs_hooks.render_scenario_schema(SCHEMA)
    when = text[text.index("### [schedule.when]"):]
    for key in CONDITION:
        assert f"| `{key}` |" in when, key
    for name in ACTION["enum"]:
        assert f'| `"{name}"` |' in text, name
    with open(os.path.join(REPO, "docs", "scenario-reference.md")) as f:
        assert "<!-- scenario-schema -->" in f.read()


def _step(**kw):
    return {**MINIMAL, "schedule": [{"at": 1, **kw}]}


@pytest.mark.parametrize("doc, message", [
    (_step(action="kill", target="random", **{"not": ["nobody"]}), "schedule[0].not"),
    (_step(action="kill", target="random", **{"not": [9]}), "no broker 9"),
    (_step(action="kill", target="controller", **{"not": ["controller"]}), "excludes the target"),
    (_step(action="zk_pause", **{"not": ["paused"]}), "only with a `target`"),
    (_step(action="kill", target=1, expect="NONE"), "only for the admin actions"),
    (_step(action="alter_config", topic="t", set={"retention.ms": 1}, expect="NOT_AN_ERROR"),
     "not a Kafka error name"),
    (_step(action="alter_config", topic="t", expect="any", expect_error="NONE"), "not both"),
    ({**MINIMAL, "workloads": [{"type": "producer", "topic": "t", "acks": "1"}]}, "workloads[0].acks"),
    ({**MINIMAL, "workloads": [{"type": "producer", "topic": "t", "acks": 0, "idempotence": True}]},
     "idempotence = true"),
])
def test_bad_format_is_one_line_naming_the_field(doc, message):
    with pytest.raises(ScenarioSpecError) as e:
        from_dict(doc)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_good_format_loads():
    spec = from_dict({**MINIMAL, "workloads": [{"type": "producer", "topic": "t", "acks": "1",
                                                "idempotence": False}],
                      "schedule": [{"at": 1, "action": "kill", "target": "controller", "not": ["paused", 2]},
                                   {"at": 2, "action": "alter_config", "topic": "t", "expect": "any",
                                    "set": {"retention.ms": 1000}},
                                   {"at": 3, "action": "preferred-election", "topic": "t",
                                    "expect_error": "NONE"}]})
    assert spec.schedule[0].exclude == ("paused", 2)
    assert [a.expect_error for a in spec.schedule] == [None, "any", "NONE"]


class _Snapshot:
    controller = 1

    def leader(self, topic, p):
        return 2

    def replicas(self, topic, p):
        return [1, 2, 3]


class _Observer:
    snapshot = _Snapshot()


class _Manager:
    state = {"brokers": [{"id": b, "pid": os.getpid()} for b in (1, 2, 3)]}

    def broker(self, b):
        return self.state["brokers"][b - 1]


def test_a_target_never_resolves_to_an_excluded_broker():
    faults = Faults(_Manager(), _Observer(), history=None, session_timeout_ms=1000)
    for pick in (0.0, 0.5, 0.99):
        assert faults.resolve("random", pick, exclude=("controller", "leader:t/0")) == 3
        assert faults.resolve("follower:t/0", pick, exclude=(3,)) == 1
    assert faults.resolve("controller", 0.0, exclude=(2,)) == 1
    with pytest.raises(FaultError, match="excluded"):
        faults.resolve("controller", 0.0, exclude=("controller",))
    with pytest.raises(FaultError, match="outside"):
        faults.resolve("non-controller", 0.0, exclude=(2, 3))


def test_cli_incompatible_client_settings_exit_2_before_anything_starts(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\n[cluster]\nbrokers = 1\n[[topics]]\nname = "t"\nreplication_factor = 1\n'
                   '[[workloads]]\ntype = "producer"\ntopic = "t"\nacks = "1"\n')
    p = subprocess.run([sys.executable, "-m", "kafkatier", "scenario", "run", str(bad), "--runs-dir",
                        str(tmp_path / "runs")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "idempotence" in p.stderr and not (tmp_path / "runs").exists()


def test_dry_run_prints_the_schedule_in_time_order_and_starts_nothing(tmp_path):
    p = subprocess.run([sys.executable, "-m", "kafkatier", "scenario", "run", "nemesis-broker-faults", "--seed", "5",
                        "--dry-run", "--runs-dir", str(tmp_path / "runs")], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    times = [float(t) for t in re.findall(r"#\d+\s+at\s+([0-9.]+)s", p.stdout)]
    assert times and times == sorted(times)
    assert "kafkatier scenario run nemesis-broker-faults --seed 5" in p.stdout
    assert not (tmp_path / "runs").exists()


# -- racks: [cluster] racks, a rack:RACK target, consumers' client_rack, the rack expectations -----------------
RACKS = {**MINIMAL, "cluster": {"brokers": 4, "racks": {"1": "a", "2": "a", "3": "b", "4": "c"}}}


def test_a_rack_target_names_every_broker_of_the_rack():
    spec = from_dict({**RACKS, "workloads": [{"type": "consumer", "topic": "t", "client_rack": "a"}],
                      "schedule": [{"at": 1, "action": "restart", "target": "rack:a", "down_s": 2}],
                      "expect": {"replicas_across_racks": True, "consumers_read_while_down": True}})
    assert spec.cluster.racks == {1: "a", 2: "a", 3: "b", 4: "c"}
    assert spec.cluster.rack_brokers("a") == (1, 2) and spec.cluster.rack_brokers("c") == (4,)
    assert spec.workloads[0].client_rack == "a" and spec.expect.replicas_across_racks


@pytest.mark.parametrize("doc, message", [
    ({**RACKS, "cluster": {"brokers": 4, "racks": {"1": "a", "2": "b"}}}, "broker 3 has no rack"),
    ({**RACKS, "cluster": {"brokers": 2, "racks": {"1": "a", "2": "b", "5": "c"}}}, "no broker 5"),
    ({**RACKS, "cluster": {"brokers": 1, "racks": {"1": "a b"}}}, "cluster.racks.1"),
    ({**RACKS, "schedule": [{"at": 1, "action": "kill", "target": "rack:z"}]}, "no broker in rack 'z'"),
    ({**RACKS, "schedule": [{"at": 1, "action": "pause", "target": "rack:a"}]}, "not 'pause'"),
    ({**RACKS, "schedule": [{"at": 1, "action": "kill", "target": "rack:a", "not": [1]}]}, "not with a rack"),
    ({**RACKS, "schedule": [{"at": 1, "action": "kill", "target": "rack:"}]}, "schedule[0].target"),
    ({**RACKS, "workloads": [{"type": "producer", "topic": "t", "client_rack": "a"}]}, "only for a consumer"),
    ({**MINIMAL, "expect": {"replicas_across_racks": True}}, "needs cluster.racks"),
])
def test_bad_rack_settings_are_one_line_naming_the_field(doc, message):
    with pytest.raises(ScenarioSpecError) as e:
        from_dict(doc)
    assert message in str(e.value) and "\n" not in str(e.value)


class _RackManager:
    def __init__(self):
        self.state = {"brokers": [{"id": b, "pid": None} for b in (1, 2, 3)]}
        self.started: list[int] = []

    def broker(self, b):
        return self.state["brokers"][b - 1]


def test_a_rack_with_no_running_broker_cannot_be_killed_and_none_stopped_cannot_be_started():
    faults = Faults(_RackManager(), _Observer(), history=None, session_timeout_ms=1000)
    with pytest.raises(FaultError, match="no broker of 1, 2 is running"):
        faults.kill_brokers((1, 2))
    faults = Faults(_Manager(), _Observer(), history=None, session_timeout_ms=1000)
    with pytest.raises(FaultError, match="already running"):
        faults.start_brokers((1, 2))


def _entry(process, f, t, value=None, type_="info"):
    return {"process": process, "f": f, "time": t * 10**9, "type": type_, "value": value}


def test_the_rack_expectations_judge_the_history():
    from kafkatier.scenario.runner import _consumers_not_reading_while_down, _replicas_not_across_racks
    racks = {"1": "a", "2": "a", "3": "b", "4": "c"}
    good = [_entry("observer", "assignment", 0, {"racks": racks, "topics": {"t": {"0": [1, 3, 4], "1": [3, 4, 2]}}})]
    assert _replicas_not_across_racks(good) == []
    bad = [_entry("observer", "assignment", 0, {"racks": racks, "topics": {"t": {"0": [1, 2, 3]}}})]
    assert _replicas_not_across_racks(bad) == ["expected t/0's replicas [1, 2, 3] in 3 racks, they are in 2 (a, b)"]
    assert "found none" in _replicas_not_across_racks([])[0]
    run = [_entry("consumer-1", "start", 0), _entry("consumer-2", "start", 0), _entry("nemesis", "kill", 5, [1]),
           _entry("consumer-1", "poll", 6, {"0": [[1, "x"]]}, "ok"), _entry("nemesis", "start", 9, [1]),
           _entry("consumer-2", "poll", 10, {"0": [[2, "y"]]}, "ok")]
    assert _consumers_not_reading_while_down(run) == [
        "expected consumer-2 to poll records while the killed brokers were down (5.0s-9.0s), it polled none"]
    assert _consumers_not_reading_while_down(run[:2]) == ["expected a kill of brokers, there was none"]


class _HealHistory:
    def __init__(self, events):
        self.events = events

    def info(self, process, f, value=None, **extra):
        self.events.append((f, tuple(value or ())))


class _HealManager:
    def __init__(self, tmp_path, events):
        self.data_dir = str(tmp_path)
        self.state = {"brokers": [{"id": 1, "pid": None}, {"id": 2, "pid": os.getpid()}, {"id": 3, "pid": None}]}
        self.events = events

    def broker(self, b):
        return self.state["brokers"][b - 1]

    def start_broker(self, b, wait=True):
        assert not wait
        self.events.append(("process", (b,)))


class _HealFaults(Faults):
    def _registration(self, broker_id):
        return None

    def wait_stale_registration_gone(self, broker_id, old_czxid):
        self.history.events.append(("stale-gone", (broker_id,)))

    def wait_serving(self, broker_id, old_czxid, timeout=0):
        self.history.events.append(("serving", (broker_id,)))


def test_heal_starts_every_stopped_broker_before_waiting_for_any():
    import tempfile
    events = []
    with tempfile.TemporaryDirectory() as d:
        faults = _HealFaults(_HealManager(d, events), _Observer(), _HealHistory(events), session_timeout_ms=1000)
        faults._czxid.update({1: 11, 3: 33})
        faults.heal()
    assert events == [("stale-gone", (1,)), ("start", (1,)), ("process", (1,)),
                      ("stale-gone", (3,)), ("start", (3,)), ("process", (3,)),
                      ("serving", (1,)), ("started", (1,)), ("serving", (3,)), ("started", (3,))]
