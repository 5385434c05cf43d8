"""Every scenario in scenarios/ runs against a real cluster with its --quick profile and passes every checker;
the Python API is what a user's own pytest test would call."""
from __future__ import annotations

import glob
import json
import os

import pytest

from kafkatier.scenario import run_scenario

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FILES = sorted(glob.glob(os.path.join(REPO, "scenarios", "*.toml")))
SEED = 11

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


@pytest.mark.parametrize("path", FILES, ids=[os.path.basename(f)[:-5] for f in FILES])
def test_scenario_quick(path, tmp_path):
    result = run_scenario(path, seed=SEED, quick=True, runs_dir=str(tmp_path), progress=False)
    assert result.valid, json.dumps({"anomalies": result.anomalies,
                                     "unmet": result.results["unmet_expectations"]}, indent=1)[:4000]
    for name in ("history.jsonl", "results.json", "timeline.png", "index.html", "history.jepsen.json"):
        assert os.path.getsize(os.path.join(result.run_dir, name)) > 0
