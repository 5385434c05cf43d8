"""Scenario files: every file in scenarios/ loads; bad files are one line naming the field (exit 2); a seed
derives one schedule."""
from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from kafkatier.scenario import schedule
from kafkatier.scenario.spec import ScenarioSpecError, from_dict, load

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FILES = sorted(glob.glob(os.path.join(REPO, "scenarios", "*.toml")))

MINIMAL = {"name": "m", "cluster": {"brokers": 3}, "topics": [{"name": "t"}]}


def test_the_library_has_at_least_a_dozen_files_each_opening_with_a_comment():
    assert len(FILES) >= 12
    for f in FILES:
        with open(f) as fh:
            assert fh.readline().startswith("# "), f"{f} must start with a comment on what it shows"
        spec = load(f)
        assert spec.name == os.path.basename(f)[:-5], f"{f}: name must match the file name"


@pytest.mark.parametrize("doc, field", [
    ({**MINIMAL, "cluster": {"brokers": "3"}}, "cluster.brokers"),
    ({**MINIMAL, "topics": [{"name": "t", "partitions": 0}]}, "topics[0].partitions"),
    ({**MINIMAL, "schedule": [{"action": "explode", "at": 1}]}, "schedule[0].action"),
    ({**MINIMAL, "schedule": [{"action": "kill", "at": 1, "target": "leader"}]}, "schedule[0].target"),
    ({**MINIMAL, "schedule": [{"action": "kill", "at": 1}]}, "schedule[0].target"),
    ({**MINIMAL, "schedule": [{"action": "kill", "target": 1}]}, "schedule[0]"),
    ({**MINIMAL, "schedule": [{"action": "kill", "at": 1, "target": 7}]}, "schedule[0].target"),
    ({**MINIMAL, "workloads": [{"type": "producer", "topic": "nope"}]}, "workloads[0].topic"),
    ({**MINIMAL, "topics": [{"name": "t", "replication_factor": 4}]}, "topics[0].replication_factor"),
    ({**MINIMAL, "colour": "red"}, "(top level)"),
    ({**MINIMAL, "schedule": [{"action": "alter_config", "at": [5, 1], "topic": "t"}]}, "time range"),
    ({**MINIMAL, "schedule": [{"action": "fail_log_dir", "at": 1, "target": 1, "dir": 0}]}, "schedule[0].action"),
    ({**MINIMAL, "cluster": {"brokers": 3, "log_dirs_per_broker": 2},
      "schedule": [{"action": "fail_log_dir", "at": 1, "target": 1}]}, "schedule[0].dir"),
    ({**MINIMAL, "cluster": {"brokers": 3, "log_dirs_per_broker": 2},
      "schedule": [{"action": "move_replica", "at": 1, "target": 1, "topic": "t", "dir": 2}]}, "schedule[0].dir"),
    ({**MINIMAL, "cluster": {"brokers": 3, "log_dirs_per_broker": 2},
      "schedule": [{"action": "move_replica", "at": 1, "target": 1}]}, "schedule[0].topic"),
])
def test_a_bad_file_names_the_field(doc, field):
    with pytest.raises(ScenarioSpecError) as e:
        from_dict(doc)
    assert field in str(e.value) and "\n" not in str(e.value)


def test_cli_bad_file_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\n[cluster]\nbrokers = 2\n[[topics]]\nname = "t"\n[[schedule]]\nat = 1\n'
                   'action = "kill"\ntarget = "leader:x/0"\n')
    p = subprocess.run([sys.executable, "-m", "kafkatier", "scenario", "run", str(bad)], capture_output=True,
                       text=True, cwd=REPO)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "schedule[0].target" in p.stderr, p.stderr
    p = subprocess.run([sys.executable, "-m", "kafkatier", "scenario", "run", str(tmp_path / "missing.toml")],
                       capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 2 and "no such scenario file" in p.stderr


def test_cli_list_shows_every_scenario():
    p = subprocess.run([sys.executable, "-m", "kafkatier", "scenario", "list"], capture_output=True, text=True,
                       cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.splitlines()) == len(FILES)


def test_one_seed_one_schedule_and_swarm_picks_weights():
    spec = from_dict({**MINIMAL, "duration_s": 30,
                      "schedule": [{"action": "kill", "at": [1, 9], "target": "random"}],
                      "nemesis": {"menu": ["kill", "pause", "zk_pause", "restart"], "swarm": True}})
    a, b, c = schedule.derive(spec, 5), schedule.derive(spec, 5), schedule.derive(spec, 6)
    assert a.describe() == b.describe() and a.describe() != c.describe()
    assert a.swarm_weights and set(a.swarm_weights) <= {"kill", "pause", "zk_pause", "restart"}
    assert all(1 <= s.at <= 30 for s in a.steps)


def test_quick_profile_scales_times_and_rates():
    spec = from_dict({**MINIMAL, "duration_s": 20, "quick": {"duration_s": 10, "rate_scale": 0.5},
                      "workloads": [{"type": "producer", "topic": "t", "rate": 100}],
                      "schedule": [{"action": "kill", "at": 8, "target": 1}]})
    q = spec.profile(quick=True)
    assert q.duration_s == 10 and q.schedule[0].at == 4 and q.workloads[0].rate == 50


def test_cli_sweep_and_replay_bad_input_exit_2(tmp_path):
    f = FILES[0]
    p = subprocess.run([sys.executable, "-m", "kafkatier", "scenario", "sweep", f, "--seeds", "9..2"],
                       capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 2 and "--seeds" in p.stderr and p.stderr.count("\n") == 1
    p = subprocess.run([sys.executable, "-m", "kafkatier", "scenario", "replay", str(tmp_path)],
                       capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 2 and "not a scenario run directory" in p.stderr and p.stderr.count("\n") == 1


def test_ensemble_scenario_without_docker_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    from kafkatier.cli.main import main
    from kafkatier.testing import docker_engine

    def no_docker(timeout: float = 30.0):
        raise docker_engine.DockerUnavailableError("no Docker daemon at unix:///var/run/docker.sock")
    monkeypatch.setattr(docker_engine, "docker_client", no_docker)
    code = main(["scenario", "run", os.path.join(REPO, "scenarios", "zk-ensemble-leader-loss.toml"), "--quick",
                 "--runs-dir", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "needs Docker" in err, err


def test_ensemble_faults_need_an_ensemble():
    with pytest.raises(ScenarioSpecError, match=r"schedule\[0\].action: 'zk_kill_leader' needs"):
        from_dict({**MINIMAL, "schedule": [{"action": "zk_kill_leader", "at": 1}]})


# -- Kafka's admin faults: controlled-shutdown, reassign, cancel-reassignment, elections, throttle -----------------

@pytest.mark.parametrize("doc, field", [
    ({**MINIMAL, "schedule": [{"action": "reassign", "at": 1}]}, "schedule[0].topic"),
    ({**MINIMAL, "schedule": [{"action": "reassign", "at": 1, "topic": "t", "via": "rest"}]}, "schedule[0].via"),
    ({**MINIMAL, "schedule": [{"action": "reassign", "at": 1, "topic": "t", "replicas": [1, 1]}]},
     "schedule[0].replicas"),
    ({**MINIMAL, "schedule": [{"action": "reassign", "at": 1, "topic": "t", "replicas": [1, 4]}]},
     "schedule[0].replicas"),
    ({**MINIMAL, "schedule": [{"action": "kill", "at": 1, "target": 1, "replicas": [1]}]}, "schedule[0].replicas"),
    ({**MINIMAL, "schedule": [{"action": "throttle", "at": 1}]}, "schedule[0].rate"),
    ({**MINIMAL, "schedule": [{"action": "throttle", "at": 1, "rate": 0}]}, "schedule[0].rate"),
    ({**MINIMAL, "schedule": [{"action": "throttle", "at": 1, "rate": 5, "clear": True}]}, "schedule[0].rate"),
    ({**MINIMAL, "schedule": [{"action": "controlled-shutdown", "at": 1}]}, "schedule[0].target"),
    ({**MINIMAL, "schedule": [{"action": "preferred-election", "at": 1, "partition": 2}]}, "schedule[0].topic"),
    ({**MINIMAL, "schedule": [{"action": "preferred-election", "at": 1, "topic": "t", "partition": 1}]},
     "schedule[0].partition"),
    ({**MINIMAL, "schedule": [{"action": "unclean-election", "at": 1, "topic": "t"}]}, "schedule[0].action"),
    ({**MINIMAL, "nemesis": {"menu": ["reassign", "unclean-election"]}}, "nemesis.menu"),
    ({**MINIMAL, "nemesis": {"menu": ["reassign"], "via": "both"}}, "nemesis.via"),
    ({**MINIMAL, "nemesis": {"menu": ["reassign_partitions"]}}, "nemesis.menu[0]"),
    ({**MINIMAL, "topics": [{"name": "t", "configs": {"unclean.leader.election.enable": True}}]},
     "topics[0].configs.unclean.leader.election.enable"),
    ({**MINIMAL, "cluster": {"overrides": {"unclean.leader.election.enable": "true"}}},
     "cluster.overrides.unclean.leader.election.enable"),
    ({**MINIMAL, "schedule": [{"action": "alter_config", "at": 1, "topic": "t",
                               "set": {"unclean.leader.election.enable": "true"}}]},
     "schedule[0].set.unclean.leader.election.enable"),
])
def test_a_bad_admin_fault_names_the_field(doc, field):
    with pytest.raises(ScenarioSpecError) as e:
        from_dict(doc)
    assert field in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_unclean_elections_need_the_scenario_to_accept_their_loss():
    with pytest.raises(ScenarioSpecError, match="accept_unclean_loss"):
        from_dict({**MINIMAL, "schedule": [{"action": "unclean-election", "at": 1, "topic": "t"}]})
    spec = from_dict({**MINIMAL, "expect": {"accept_unclean_loss": True},
                      "schedule": [{"action": "unclean-election", "at": 1, "topic": "t", "partition": 0}]})
    assert spec.expect.accept_unclean_loss and spec.schedule[0].action == "unclean-election"


def test_admin_fault_steps_load_with_their_parameters():
    spec = from_dict({**MINIMAL, "schedule": [
        {"action": "reassign", "at": 1, "topic": "t", "partition": 0, "replicas": [3, 2, 1], "via": "znode"},
        {"action": "throttle", "at": 2, "rate": 100000, "duration_s": 3},
        {"action": "throttle", "at": 6, "clear": True, "target": 2},
        {"action": "controlled-shutdown", "at": 3, "target": "controller", "down_s": [0.5, 1]},
        {"action": "cancel-reassignment", "at": 4},
        {"action": "preferred-election", "at": 5, "topic": "t"}]})
    r, th, clear, cs, _, _ = spec.schedule
    assert (r.replicas, r.via, th.rate, th.duration_s, clear.clear, cs.down_s) == (
        (3, 2, 1), "znode", 100000, 3.0, True, (0.5, 1.0))
    text = schedule.derive(spec, 1).describe()
    assert "reassign target" not in text and "via=znode replicas=3,2,1" in text and "rate=100000B/s" in text


def test_nemesis_admin_faults_draw_their_parameters_from_the_seed():
    spec = from_dict({**MINIMAL, "duration_s": 60, "expect": {"accept_unclean_loss": True},
                      "nemesis": {"menu": ["controlled-shutdown", "reassign", "cancel-reassignment",
                                           "preferred-election", "unclean-election", "throttle"],
                                  "interval_s": [0.5, 1.0], "via": "mixed", "throttle_rate": [1000, 2000]}})
    a, b = schedule.derive(spec, 3), schedule.derive(spec, 3)
    assert a == b
    kinds = {s.action.action for s in a.steps}
    assert kinds == set(spec.nemesis.menu)
    assert {s.action.via for s in a.steps if s.action.action == "reassign"} == {"api", "znode"}
    for s in a.steps:
        if s.action.action == "throttle":
            assert 1000 <= s.action.rate <= 2000 and 1.0 <= s.duration_s <= 4.0
        if s.action.action == "controlled-shutdown":
            assert s.action.target == "random" and s.down_s > 0
    # Menus without the new faults draw exactly what they drew before (seeds of existing scenarios replay).
    old = from_dict({**MINIMAL, "duration_s": 30, "nemesis": {"menu": ["kill", "pause"]}})
    assert [(s.at, s.action.action, s.pick, s.duration_s) for s in schedule.derive(old, 4).steps][:3] == [
        (2.354, "kill", 0.396058, 0.0), (4.819, "kill", 0.401591, 0.0), (9.573, "pause", 0.221928, 1.648)]


def test_a_reassign_step_draws_its_partition_and_live_replicas_from_its_pick():
    from kafkatier.scenario.admin_faults import draw_reassignment
    from kafkatier.scenario.faults import FaultError
    parts = [("t", 0), ("t", 1), ("u", 0)]
    rf = {"t": 3, "u": 2}
    a = draw_reassignment(0.25, parts, rf, [1, 2, 3, 4], None, 0, None)
    assert a == draw_reassignment(0.25, parts, rf, [4, 3, 2, 1], None, 0, None)      # one pick, one choice
    topic, p, replicas = a
    assert (topic, p) in parts and len(replicas) == rf[topic] and set(replicas) <= {1, 2, 3, 4}
    assert len(replicas) == len(set(replicas))
    assert draw_reassignment(0.9, parts, rf, [2, 3], "u", 0, None)[2] in ([2, 3], [3, 2])
    assert draw_reassignment(0.9, parts, rf, [2], "t", 1, (3, 1, 2)) == ("t", 1, [3, 1, 2])   # given: as given
    orders = {tuple(draw_reassignment(k / 50, parts, rf, [1, 2, 3], "t", 0, None)[2]) for k in range(50)}
    assert len(orders) > 1 and all(set(o) == {1, 2, 3} for o in orders)              # the preferred leader moves
    moves = {frozenset(draw_reassignment(k / 50, parts, rf, [1, 2, 3, 4], "t", 0, None, lambda t, p: [1, 2, 3])[2])
             for k in range(50)}
    assert frozenset({1, 2, 3}) not in moves                                          # with a spare broker, data moves
    with pytest.raises(FaultError, match="only 2 live brokers"):
        draw_reassignment(0.5, parts, rf, [1, 2], "t", 0, None)


# -- conditions on a partition's state: `when = { topic, partition, isr / leader }` ---------------------------------

@pytest.mark.parametrize("when, field", [
    ({"isr": [1]}, "schedule[0].when.topic"),
    ({"leader": -1}, "schedule[0].when.topic"),
    ({"topic": "t", "partition": 1, "isr": [1]}, "schedule[0].when.partition"),
    ({"topic": "t", "leader": -2}, "schedule[0].when.leader"),
    ({"topic": "t", "isr": []}, "schedule[0].when.isr"),
    ({"topic": "t", "isr": [1, 1]}, "schedule[0].when.isr"),
])
def test_a_bad_partition_condition_names_the_field(when, field):
    with pytest.raises(ScenarioSpecError) as e:
        from_dict({**MINIMAL, "schedule": [{"action": "kill", "target": 1, "when": when}]})
    assert field in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_partition_conditions_hold_on_what_zookeeper_shows():
    from kafkatier.scenario.observer import Snapshot
    from kafkatier.scenario.runner import _holds
    spec = from_dict({**MINIMAL, "schedule": [
        {"action": "kill", "target": 1, "when": {"topic": "t", "isr": [2, 1]}},
        {"action": "start", "target": 3, "when": {"topic": "t", "leader": -1}}]})
    isr, offline = (s.when for s in spec.schedule)
    snap = Snapshot(brokers={1: 10, 2: 11})
    assert not _holds(isr, snap) and not _holds(offline, snap)          # no state znode yet
    snap.partitions[("t", 0)] = {"leader": 1, "isr": [1, 2]}
    assert _holds(isr, snap) and not _holds(offline, snap)
    snap.partitions[("t", 0)] = {"leader": 1, "isr": [1]}
    snap.brokers = {2: 11}                                           # the leader's registration is gone
    assert not _holds(isr, snap) and _holds(offline, snap)
    snap.partitions[("t", 0)] = {"leader": -1, "isr": [1]}
    assert _holds(offline, snap)


def test_a_run_that_could_not_complete_exits_3_with_one_line(capsys):
    """Issue 25: 0 valid, 1 anomalies, 2 bad input, 3 the run could not complete (no verdict either way)."""
    from kafkatier.cli.scenario import _guarded
    from kafkatier.waiting import WaitTimeout

    def cluster_did_not_start():
        raise WaitTimeout("timed out after 90.0s waiting for brokers [1, 2, 3] to register\nmore detail")
    assert _guarded(cluster_did_not_start) == 3
    err = capsys.readouterr().err
    assert err == ("kafkatier scenario: the run could not complete: timed out after 90.0s waiting for brokers "
                   "[1, 2, 3] to register\n")


def test_any_error_of_a_run_without_a_verdict_exits_3_never_1(capsys):
    """A client library's exception while the cluster is set up (a create-topics answer lost under load...) is no
    anomaly: exit 3 with one line naming it; bad input found while starting stays exit 2 (raised to the CLI)."""
    import pytest

    from kafkatier.cli.scenario import _guarded
    from kafkatier.common.errors import UsageError

    class KafkaException(Exception):
        pass

    def create_topics_failed():
        raise KafkaException("KafkaError{code=_TIMED_OUT,val=-185,str=\"Failed while waiting for controller\"}")
    assert _guarded(create_topics_failed) == 3
    assert capsys.readouterr().err == ('kafkatier scenario: the run could not complete: KafkaException: '
                                       'KafkaError{code=_TIMED_OUT,val=-185,str="Failed while waiting for '
                                       'controller"}\n')

    def bad_rack():
        raise UsageError("--rack names broker 9")
    with pytest.raises(UsageError):
        _guarded(bad_rack)


def test_a_client_that_never_closes_does_not_hold_the_run(tmp_path):
    """librdkafka's consumer close was seen to wait for good after heal (seed 154 of a 200-seed sweep under load):
    the close is bounded and the history says which client did not close; the checkers read that entry."""
    import threading

    from kafkatier.scenario.checkers import check_all
    from kafkatier.scenario.history import History, read
    from kafkatier.scenario.runner import close_bounded

    class _Stuck:
        process = "consumer-1"
        last_progress_ns = 1_500_000_000   # its last records, 1.5 s into the run
        released = threading.Event()

        def close(self):
            self.released.wait(60)
    history = History(str(tmp_path / "history.jsonl"))
    stuck = _Stuck()
    try:
        assert close_bounded(stuck, history, timeout=0.2) is False
    finally:
        stuck.released.set()
    history.flush()
    entries = read(history.path)
    [(process, f, value)] = [(e["process"], e["f"], e["value"]) for e in entries]
    assert (process, f) == ("consumer-1", "close") and value["closed"] is False and value["waited_s"] == 0.2
    assert value["last_progress_s"] == 1.5 and value["closing_at_s"] >= 0
    assert check_all(entries) == []
    assert close_bounded(type("_Fine", (), {"process": "consumer-2", "last_progress_ns": None,
                                            "close": lambda self: None})(), history)
