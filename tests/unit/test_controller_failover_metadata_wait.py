"""A failover waits (bounded) for the brokers to apply its elections' UpdateMetadata before the rest of its
work (kafka_controller.KafkaController._await_applied)."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from kafkatier.controller.kafka_controller import KafkaController


class _Channel:
    """Barriers answered at once, later from another thread, or never; unknown brokers refused."""

    def __init__(self, answer: dict[int, float | None]):
        self.answer = answer

    def barrier(self, broker, callback) -> bool:
        if broker not in self.answer:
            return False
        delay = self.answer[broker]
        if delay is not None:
            threading.Timer(delay, callback).start()
        return True


def _wait(answer, brokers, timeout_s):
    t0 = time.monotonic()
    KafkaController._await_applied(SimpleNamespace(channel=_Channel(answer)), brokers, timeout_s)
    return time.monotonic() - t0


def test_the_wait_ends_when_every_broker_answered():
    assert _wait({1: 0.0, 2: 0.05}, {1, 2}, 30.0) < 10.0


def test_a_broker_not_in_the_channel_is_not_waited_for():
    assert _wait({1: 0.0}, {1, 7}, 30.0) < 10.0


def test_a_broker_that_does_not_answer_is_waited_for_at_most_the_bound():
    assert 0.2 <= _wait({1: 0.0, 2: None}, {1, 2}, 0.2) < 10.0


def test_nothing_to_wait_for_without_brokers_or_channel():
    KafkaController._await_applied(SimpleNamespace(channel=None), {1}, 30.0)
    assert _wait({}, set(), 30.0) < 1.0
