"""The console script builds the parser of the named command alone when that command's module has its name: a
broker process (``kafkatier broker start``) does not import every tool, the scenario engine and Spark."""
from __future__ import annotations

import subprocess
import sys

from kafkatier.cli.main import build_parser


def commands(parser) -> set[str]:
    return set(parser._subparsers._group_actions[0].choices)  # noqa: SLF001 - argparse keeps no public accessor


def test_named_command_alone():
    assert commands(build_parser(["broker", "start", "--id", "1"])) == {"broker"}
    assert commands(build_parser(["--log-level", "DEBUG", "broker", "start"])) == {"broker"}
    assert commands(build_parser(["consumer-groups", "--list"])) == {"consumer-groups"}


def test_every_command_otherwise():
    full = commands(build_parser())
    assert {"broker", "cluster", "scenario", "producer-perf-test"} <= full
    assert commands(build_parser(["producer-perf-test"])) == full   # its module is named otherwise
    assert commands(build_parser(["--help"])) == full
    assert commands(build_parser(["no-such-command"])) == full


def test_broker_start_imports_no_tool():
    code = ("import sys; from kafkatier.cli.main import build_parser; "
            "build_parser(['broker', 'start', '--help']); "
            "print(sorted(m for m in sys.modules if m.startswith(('kafkatier.scenario', 'kafkatier.spark', "
            "'kafkatier.cli.cluster'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
