"""The Spark sink's producer pool: one producer per configuration per Python worker, lent to each task,
dropped after a failed task or an idle timeout (kafkatier/spark/producer_pool.py)."""
from __future__ import annotations

from kafkatier.spark.producer_pool import IDLE_TIMEOUT_S, ProducerPool


class FakeProducer:
    def __init__(self, config: dict):
        self.config = config
        self.purged = False

    def purge(self) -> None:
        self.purged = True


class FakeMessage:
    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 1


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


CONFIG = {"bootstrap.servers": "b:9092", "acks": "all", "delivery.report.only.error": True}


def test_a_healthy_task_leaves_the_producer_to_the_next_task_with_fresh_failures():
    built = []
    pool = ProducerPool(lambda c: built.append(FakeProducer(c)) or built[-1], Clock())
    producer, failures = pool.borrow(CONFIG)
    producer.config["on_delivery"]("boom", FakeMessage())
    producer.config["on_delivery"](None, FakeMessage())            # a success: not reported as a failure
    assert failures == [("boom", "t", 1)]
    pool.give_back(CONFIG, healthy=True)
    again, fresh = pool.borrow(dict(reversed(list(CONFIG.items()))))   # same settings in another order
    assert again is producer and fresh == [] and len(built) == 1
    again.config["on_delivery"]("late", FakeMessage())
    assert fresh == [("late", "t", 1)] and failures == [("boom", "t", 1)]


def test_a_failed_task_discards_the_producer_and_other_settings_get_their_own():
    built = []
    pool = ProducerPool(lambda c: built.append(FakeProducer(c)) or built[-1], Clock())
    first, _ = pool.borrow(CONFIG)
    pool.give_back(CONFIG, healthy=False)
    assert first.purged and len(pool) == 0
    second, _ = pool.borrow(CONFIG)
    other, _ = pool.borrow({**CONFIG, "linger.ms": "50"})
    assert second is not first and other is not second and len(pool) == 2


def test_an_idle_producer_is_replaced():
    clock = Clock()
    pool = ProducerPool(FakeProducer, clock)
    first, _ = pool.borrow(CONFIG)
    pool.give_back(CONFIG, healthy=True)
    clock.now += IDLE_TIMEOUT_S / 2
    assert pool.borrow(CONFIG)[0] is first
    pool.give_back(CONFIG, healthy=True)
    clock.now += IDLE_TIMEOUT_S + 1
    replaced, _ = pool.borrow(CONFIG)
    assert replaced is not first and first.purged
