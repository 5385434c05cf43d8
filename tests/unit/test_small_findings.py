"""Issue #26's smaller findings: a bad ``tiered_epoch`` logged once per change (no traceback every 30 s), an
unknown ``sasl.mechanism`` a usage error, ``--record-size`` beyond ``max.request.size`` a usage error."""
from __future__ import annotations

import argparse
import logging

import pytest

from kafkatier.admin.bootstrap import BootstrapConfigError, client_kwargs_from_properties
from kafkatier.log.remote.remote_log_manager import _Task
from kafkatier.zk.codecs import MalformedZNodeError


class _Log:
    closed = False


class _Partition:
    leader_epoch = 3
    log = _Log()


class BadEpochTask(_Task):
    def __init__(self):
        super().__init__(None, _Partition(), "t-0")
        self.reason = "not a number"
        self.runs = 0

    def execute(self):
        self.runs += 1
        raise MalformedZNodeError("/brokers/topics/t/tieredstorage/tiered_epoch", self.reason)


def test_bad_tiered_epoch_logged_once_per_change(caplog):
    task = BadEpochTask()
    with caplog.at_level(logging.INFO):
        for _ in range(5):
            task.run()
        task.reason = "negative"
        task.run()
        task.run()
    lines = [r for r in caplog.records if "task_skipped_malformed_znode" in r.getMessage()]
    assert task.runs == 7 and len(lines) == 2 and not any(r.exc_info for r in lines)


def test_unknown_sasl_mechanism_is_a_config_error():
    assert client_kwargs_from_properties({"sasl.mechanism": "scram-sha-512"}).kwargs["sasl_mechanism"] == \
        "SCRAM-SHA-512"
    with pytest.raises(BootstrapConfigError, match="unsupported SASL mechanism 'NOPE'"):
        client_kwargs_from_properties({"sasl.mechanism": "NOPE"})


def test_record_size_beyond_max_request_size():
    from kafkatier.cli.common import Connection
    from kafkatier.cli.main import UsageError
    from kafkatier.cli.produce import producer_kwargs
    args = argparse.Namespace(acks="all", idempotence=False, compression_type="none", delivery_timeout_ms=120000,
                              max_block_ms=60000, batch_size=None, linger_ms=None, request_timeout_ms=None,
                              record_size=1_000_000_000_000)
    with pytest.raises(UsageError, match="max.request.size"):
        producer_kwargs(args, Connection(bootstrap_servers=("127.0.0.1:9092",)))
    args.record_size = 1000
    assert producer_kwargs(args, Connection(bootstrap_servers=("127.0.0.1:9092",)))["acks"] == "all"
