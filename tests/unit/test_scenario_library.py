"""The scenario library ships inside the package: one copy (``scenarios/`` in a checkout is a link to it), found
by name from any directory, and replay commands that run from anywhere."""
from __future__ import annotations

import configparser
import os
import subprocess
import sys

from kafkatier.scenario.runner import replay_command
from kafkatier.scenario.spec import LIBRARY_DIR, from_dict, library, load, resolve

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_one_source_of_truth_scenarios_is_a_link_to_the_package_library():
    link = os.path.join(REPO, "scenarios")
    assert os.path.islink(link), "scenarios/ must be a link to kafkatier/scenario/library, not a second copy"
    assert os.path.realpath(link) == os.path.realpath(LIBRARY_DIR)
    assert len(library()) >= 12


def test_the_library_is_package_data():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(REPO, "setup.cfg"))
    data = cfg["options.package_data"]["kafkatier.scenario"]
    assert "library/*.toml" in [p.strip() for p in data.split(",")]


def test_a_name_resolves_to_the_library_and_a_path_to_itself(tmp_path):
    assert resolve("nemesis-broker-faults") == os.path.join(LIBRARY_DIR, "nemesis-broker-faults.toml")
    assert resolve("nemesis-broker-faults.toml") == os.path.join(LIBRARY_DIR, "nemesis-broker-faults.toml")
    own = tmp_path / "mine.toml"
    own.write_text('name = "mine"\n[cluster]\nbrokers = 1\n[[topics]]\nname = "t"\n')
    assert resolve(str(own)) == str(own)


def test_replay_commands_run_from_anywhere(tmp_path):
    spec = load(resolve("nemesis-broker-faults"))
    assert replay_command(spec, 7, True) == "kafkatier scenario run nemesis-broker-faults --seed 7 --quick"
    own = from_dict({"name": "mine", "cluster": {"brokers": 1}, "topics": [{"name": "t"}]},
                    path=os.path.relpath(str(tmp_path / "mine.toml")))
    assert replay_command(own, 3, False) == f"kafkatier scenario run {tmp_path / 'mine.toml'} --seed 3"


def test_list_and_an_unknown_name_from_another_directory(tmp_path):
    p = subprocess.run([sys.executable, "-m", "kafkatier", "scenario", "list"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "nemesis-broker-faults" in p.stdout
    p = subprocess.run([sys.executable, "-m", "kafkatier", "scenario", "run", "no-such-scenario"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "kafkatier scenario list" in p.stderr
