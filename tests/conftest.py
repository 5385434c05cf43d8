"""Shared pytest fixtures.

Sections: the ``kafkatier`` command line; ZooKeeper and clusters (from the plugin).  Add new fixtures under a
section header of their own.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from kip950_support import TIERED

REPO_ROOT = Path(__file__).resolve().parents[1]

pytest_plugins = ["kafkatier.testing.plugin"]

# The Spark CLI's class archive is recorded per checkout (its key includes the jars' paths): a fresh clone's first
# `kafkatier spark produce` would start a JVM that writes ~160 MB for a minute or two after the test returned.
# The archive's own logic is unit-tested; the suite's Spark commands start the JVM without it.
os.environ.setdefault("KAFKATIER_SPARK_CLASS_ARCHIVE", "0")


# ---------------------------------------------------------------------------------------------------------------
# The ``kafkatier`` command line


@attrs.frozen
class KafkatierCli:
    """How to run the ``kafkatier`` console script of this checkout in a subprocess."""

    argv: tuple[str, ...]
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 60.0, env: dict[str, str] | None = None,
            **kwargs) -> subprocess.CompletedProcess:
        """Run ``kafkatier ARGS...`` to completion, capturing text output."""
        return subprocess.run([*self.argv, *args], env={**self.env, **(env or {})}, capture_output=True,
                              text=True, timeout=timeout, **kwargs)

    def popen(self, *args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
        return subprocess.Popen([*self.argv, *args], env={**self.env, **(env or {})}, **kwargs)


@pytest.fixture(scope="session")
def kafkatier_cli() -> KafkatierCli:
    script = Path(sys.executable).with_name("kafkatier")
    argv = (str(script),) if script.exists() else (sys.executable, "-m", "kafkatier")
    # Import this checkout whatever state the venv's editable install is in.
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return KafkatierCli(argv=argv, env=env)


# ---------------------------------------------------------------------------------------------------------------
# ZooKeeper and clusters: fixtures ``zookeeper``, ``zk_root``, ``zk``, ``cluster``, ``cluster_factory``,
# ``module_cluster_factory``, ``zookeeper_ensemble``, ``zookeeper_under_test``, ``kafkatier_cluster`` and
# ``expire_session`` come from kafkatier's pytest plugin (kafkatier/testing/plugin.py), the one users get.  It is
# registered by the ``pytest11`` entry point; naming it here as well keeps a venv installed before the entry point
# existed working (pytest loads a plugin once under that name).


@pytest.fixture(scope="module")
def tiered_cluster(module_cluster_factory):
    """Three brokers with one log dir each and tiered storage on (``kip950_support.TIERED``: 500 ms remote log
    manager and retention tasks), one per test module."""
    return module_cluster_factory(brokers=3, log_dirs=1, overrides=TIERED)


# ---------------------------------------------------------------------------------------------------------------
# Spark: one local session for the whole test session (start-up costs seconds), ``kafkatier`` data source
# registered.  ``local[2,3]``: two cores, a failed task is tried up to 3 times (the exactly-once tests retry one).


@pytest.fixture(scope="session")
def spark():
    from kafkatier.spark.jobs import spark_session
    session = spark_session("local[2,3]", app_name="kafkatier-tests",
                            conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()
