"""The scenario history: Jepsen's entry shape, ordering, pairing of invocations and completions, the Jepsen
export; and the scenario package's imports pointing down only."""
from __future__ import annotations

import ast
import json
import os
import threading

from kafkatier.scenario import history
from kafkatier.scenario.history import History, pairs, read, to_jepsen
from kafkatier.scenario.sweep import parse_seeds

import pytest

SCENARIO_DIR = os.path.join(os.path.dirname(history.__file__))


def test_entries_are_written_in_order_with_increasing_indexes(tmp_path):
    h = History(str(tmp_path / "history.jsonl"))
    h.record("invoke", "producer-0", "send", [None, "producer-0:0"], topic="t")
    h.record("ok", "producer-0", "send", [None, "producer-0:0"], topic="t", partition=0, offset=0)
    h.info("nemesis", "kill", [1])
    h.flush()
    entries = read(str(tmp_path / "history.jsonl"))
    assert [e["index"] for e in entries] == [0, 1, 2]
    assert [e["type"] for e in entries] == ["invoke", "ok", "info"]
    assert entries[1]["offset"] == 0 and entries[0]["time"] <= entries[1]["time"] <= entries[2]["time"]
    inv, done = next(pairs(entries))
    assert inv["type"] == "invoke" and done["offset"] == 0


def test_concurrent_recording_loses_nothing():
    h = History(None)
    stop = threading.Event()

    def flusher():
        while not stop.is_set():
            h.flush()
    t = threading.Thread(target=flusher)
    t.start()
    threads = [threading.Thread(target=lambda n=n: [h.info(f"p{n}", "x", i) for i in range(5000)]) for n in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    stop.set()
    t.join()
    entries = h.entries()
    assert len(entries) == 20000 and [e["index"] for e in entries] == list(range(20000))


def test_disabled_history_records_nothing():
    h = History(None, enabled=False)
    h.info("nemesis", "kill", [1])
    assert h.entries() == []


def test_jepsen_export_has_send_and_poll_micro_ops(tmp_path):
    h = History(None)
    h.record("invoke", "producer-0", "send", [None, "v0"], topic="t")
    h.record("ok", "producer-0", "send", [None, "v0"], topic="t", partition=1, offset=7)
    h.record("ok", "consumer-0", "poll", {"1": [[7, "v0"]]}, topic="t")
    h.info("observer", "observe", {"kind": "brokers"})
    out = to_jepsen(h.entries())
    assert [o["f"] for o in out] == ["send", "send", "poll"]
    assert out[1]["value"] == [["send", "t/1", [7, "v0"]]]
    assert out[2]["value"] == [["poll", {"1": [[7, "v0"]]}]]
    json.dumps(out)


def test_seed_ranges():
    assert list(parse_seeds("3..5")) == [3, 4, 5] and list(parse_seeds("9")) == [9]
    for bad in ("a..b", "5..3"):
        with pytest.raises(ValueError):
            parse_seeds(bad)


def test_scenario_package_imports_point_down():
    """scenario may use cluster, zk, log (the remote tier's read side), waiting and logsetup -- never cli, and
    never broker or controller internals (server/, controller/)."""
    forbidden = ("kafkatier.cli", "kafkatier.server", "kafkatier.controller", "kafkatier.spark")
    for root, _, files in os.walk(SCENARIO_DIR):
        for f in files:
            if not f.endswith(".py"):
                continue
            tree = ast.parse(open(os.path.join(root, f)).read())
            for node in ast.walk(tree):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                for n in names:
                    assert not n.startswith(forbidden), f"{f} imports {n}"


def test_replay_check_rejudges_a_recorded_history(tmp_path):
    import subprocess
    import sys
    h = History(str(tmp_path / "history.jsonl"))
    h.info("producer-0", "start", {"idempotence": True})
    h.record("invoke", "producer-0", "send", [None, "producer-0:0"], topic="t")
    h.record("ok", "producer-0", "send", [None, "producer-0:0"], topic="t", partition=0, offset=0, acks="all")
    h.record("info", "final", "final-read", {"t/0": {"log_start": 0, "high_watermark": 1, "records": [[0, "x"]]}})
    h.flush()
    (tmp_path / "results.json").write_text(json.dumps({
        "scenario": "s", "seed": 1, "quick": True, "valid": True, "elapsed_s": 1.0, "run_dir": str(tmp_path),
        "replay": "kafkatier scenario run s.toml --seed 1", "anomalies": [], "unmet_expectations": [],
        "counts": {}, "latencies": {}}))
    repo = os.path.dirname(os.path.dirname(SCENARIO_DIR))
    p = subprocess.run([sys.executable, "-m", "kafkatier", "scenario", "replay", str(tmp_path), "--check"],
                       capture_output=True, text=True, cwd=repo)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "lost-write" in p.stdout and "inconsistent-offsets" in p.stdout
