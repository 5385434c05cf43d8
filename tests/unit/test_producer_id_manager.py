"""ProducerIdManager (one class, a fake ZooKeeper client): blocks claimed from ``/latest_producer_id_block``;
ZooKeeper unreachable for a while is waited out, for longer it becomes ProducerIdsUnavailableError (InitProducerId
answers COORDINATOR_LOAD_IN_PROGRESS, which clients retry) instead of a server error."""
from __future__ import annotations

import json

import pytest

from kafkatier.server import producer_id_manager
from kafkatier.server.producer_id_manager import ProducerIdManager, ProducerIdsUnavailableError
from kafkatier.zk.errors import SessionExpiredError
from fakes import FakeZk

BLOCK = "/latest_producer_id_block"


class ExpiringZk(FakeZk):
    """The shared fake whose first ``failures`` retried calls raise a session expiry."""

    def __init__(self, failures: int = 0):
        super().__init__()
        self.failures = failures

    def retry(self, fn, *args, **kw):
        if self.failures:
            self.failures -= 1
            raise SessionExpiredError()
        return fn(*args, **kw)

    @property
    def data(self) -> bytes:
        return self.nodes[BLOCK]


def test_blocks_follow_each_other():
    zk = ExpiringZk()
    first = ProducerIdManager(zk, 1)
    assert [first.generate_producer_id() for _ in range(3)] == [0, 1, 2]
    assert ProducerIdManager(zk, 2).generate_producer_id() == 1000
    assert json.loads(zk.data) == {"version": 1, "broker": 2, "block_start": "1000", "block_end": "1999"}


def test_a_session_expiry_during_the_claim_is_waited_out():
    zk = ExpiringZk(failures=3)
    assert ProducerIdManager(zk, 1).generate_producer_id() == 0


def test_zookeeper_unreachable_for_long_is_a_retriable_unavailability(monkeypatch):
    monkeypatch.setattr(producer_id_manager, "ZK_UNAVAILABLE_RETRY_S", 0.2)
    zk = ExpiringZk(failures=10**6)
    m = ProducerIdManager(zk, 1)
    with pytest.raises(ProducerIdsUnavailableError):
        m.generate_producer_id()
    zk.failures = 0              # ZooKeeper back: the next InitProducerId gets an id
    assert m.generate_producer_id() == 0
