"""The scenario's own librdkafka clients: their settings, and how a run gets their debug log."""
from __future__ import annotations


def test_the_run_clients_log_librdkafka_debug_contexts_only_when_asked(monkeypatch):
    from kafkatier.scenario.workloads import DEBUG_ENV, QUIET_LOGGER, client_config
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    quiet = client_config("127.0.0.1:1", "consumer-1")
    assert quiet["logger"] is QUIET_LOGGER and "debug" not in quiet and quiet["client.id"] == "consumer-1"
    monkeypatch.setenv(DEBUG_ENV, "cgrp,fetch")
    loud = client_config("127.0.0.1:1", "consumer-1")
    # librdkafka's own threads print to stderr: a client blocked in close() still logs.
    assert loud["debug"] == "cgrp,fetch" and "logger" not in loud and loud["client.id"] == "consumer-1"
