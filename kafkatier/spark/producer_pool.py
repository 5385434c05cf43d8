"""One librdkafka producer per configuration in each Python worker, lent to the tasks the worker runs (Spark's
``InternalKafkaProducerPool`` / ``CachedKafkaProducer``: its Kafka sink keeps one producer per set of
parameters in each executor and closes it after ``spark.kafka.producer.cache.timeout``, 10 minutes, unused).

PySpark reuses a Python worker for the next task (``spark.python.worker.reuse``, on by default), so the tasks
of a job after the first, and of the next jobs, find the producer connected, the metadata known and the
producer id granted: a task no longer pays a client's start (bootstrap connection, Metadata, InitProducerId,
a connection to each leader), which on a busy machine is a good part of a small job.

A task borrows the producer with nothing queued (the task before it flushed) and a fresh list of delivery
failures; a task that fails discards it (it may hold records the task gave up on, or be in a fatal state), and
the next task builds a new one.  Transactional producers are never pooled: each task attempt has its own
transactional id.  A worker runs one task at a time, so nothing here is shared between threads.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

# Spark's spark.kafka.producer.cache.timeout.  Nothing runs in an idle worker, so the age is checked when the
# next task asks; Spark stops a Python worker idle for a minute anyway.
IDLE_TIMEOUT_S = 600.0


class DeliveryFailures:
    """The ``on_delivery`` callback of a pooled producer: collects the current task's failed deliveries
    (``delivery.report.only.error`` reports nothing else)."""

    def __init__(self) -> None:
        self.items: list[tuple[Any, str, int]] = []

    def __call__(self, err, msg) -> None:
        if err is not None:
            self.items.append((err, msg.topic(), msg.partition()))


@attrs.define
class _Entry:
    producer: Any
    failures: DeliveryFailures
    last_used: float


class ProducerPool:
    def __init__(self, factory: Callable[[dict], Any] | None = None, clock: Callable[[], float] = time.monotonic):
        self._factory = factory
        self._clock = clock
        self._entries: dict[tuple, _Entry] = {}

    @staticmethod
    def _key(config: Mapping[str, Any]) -> tuple:
        return tuple(sorted((k, str(v)) for k, v in config.items()))

    def borrow(self, config: Mapping[str, Any]) -> tuple[Any, list]:
        """``(producer, failures)``: the pooled producer for ``config`` (built on first use, or again after
        :data:`IDLE_TIMEOUT_S` unused) and the list its failed deliveries go to until the next borrow."""
        key = self._key(config)
        entry = self._entries.get(key)
        now = self._clock()
        if entry is not None and now - entry.last_used > IDLE_TIMEOUT_S:
            self._close(self._entries.pop(key))
            entry = None
        if entry is None:
            failures = DeliveryFailures()
            entry = _Entry(self._build({**config, "on_delivery": failures}), failures, now)
            self._entries[key] = entry
        entry.failures.items = []
        entry.last_used = now
        return entry.producer, entry.failures.items

    def give_back(self, config: Mapping[str, Any], healthy: bool) -> None:
        """The task is done with the producer: keep it for the next task when ``healthy`` (everything it sent
        acknowledged), close it otherwise."""
        key = self._key(config)
        entry = self._entries.get(key)
        if entry is None:
            return
        if healthy:
            entry.last_used = self._clock()
        else:
            self._close(self._entries.pop(key))

    def __len__(self) -> int:
        return len(self._entries)

    def _build(self, config: dict):
        if self._factory is not None:
            return self._factory(config)
        from confluent_kafka import Producer

        return Producer(config)

    @staticmethod
    def _close(entry: _Entry) -> None:
        """Drop what the failed task left queued (it gave those records up) so the producer's destruction
        does not wait for them."""
        try:
            entry.producer.purge()
        except Exception:  # noqa: BLE001 - a producer in a fatal state may refuse; it is dropped either way
            pass


# The worker's pool (one per Python worker process).
POOL = ProducerPool()
