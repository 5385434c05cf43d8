"""Failover scenarios: seeded fault schedules against a real cluster, recorded histories, Jepsen-style
checkers, timelines.  The library is ``library/`` (``scenarios/`` in a checkout links to it) and docs/scenarios.md.

Python API (a pytest test runs a scenario in a few lines)::

    from kafkatier.scenario import run_scenario
    result = run_scenario("controller-kill-during-disabling", seed=7, quick=True,   # a library name or a path
                          runs_dir=str(tmp_path))
    assert result.valid, result.anomalies

Modules: ``spec`` (file format and loader), ``schedule`` (seeded PRNG), ``faults``, ``workloads``,
``observer`` (ZooKeeper), ``history``, ``checkers/``, ``report``, ``runner``, ``sweep``, ``spark_sweep``.
Imports point down: scenario -> cluster -> server/log/zk (never into server internals).
"""
from __future__ import annotations

from kafkatier.scenario.spec import ScenarioSpec, ScenarioSpecError, load

__all__ = ["RunResult", "ScenarioSpec", "ScenarioSpecError", "load", "recheck", "run_scenario"]


def __getattr__(name: str):
    # The runner pulls in clients and matplotlib; load it only when used.
    if name in ("run_scenario", "recheck", "RunResult"):
        from kafkatier.scenario import runner
        return getattr(runner, name)
    raise AttributeError(name)
