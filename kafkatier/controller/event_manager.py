"""ControllerEventManager: one queue, one thread (``controller-event-thread``).

ZooKeeper watch callbacks, control-channel callbacks and admin calls only *enqueue* events; all controller state
is read and changed on this thread.  ``clear_and_put`` drains the queue (pre-empting what it drained) and is used
for session expiry and shutdown.

``put(event, urgent=True)`` queues an event ahead of every non-urgent one (urgent events keep their order among
themselves): a ControlledShutdown must not wait behind bulk work (ISR change notifications, responses of
thousands of partitions) while the shutting-down broker's request times out.  BrokerChange is urgent too, so the
two keep the order in which they happened.  Kafka's ZooKeeper controller has one FIFO queue; its KRaft controller
likewise lets some events jump the queue.
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Callable

import attrs

from kafkatier.logsetup import get_logger, kv

log = get_logger("controller.events")


@attrs.define
class ControllerEvent:
    """An event: ``name`` for logs and metrics, ``run`` executed on the event thread.

    ``preempt`` (optional) is called instead of ``run`` when the event is drained by ``clear_and_put``.
    ``done`` is set once the event ran or was pre-empted, so callers may wait for it.
    """

    name: str
    run: Callable[[], None]
    preempt: Callable[[], None] | None = None
    enqueued_at: float = attrs.field(factory=time.monotonic)
    done: threading.Event = attrs.field(factory=threading.Event)


_SHUTDOWN = ControllerEvent("ShutdownEventThread", lambda: None)


class ControllerEventManager:
    def __init__(self, on_controller_moved: Callable[[Exception], None] | None = None, name: str = "controller-event-thread"):
        self._urgent: collections.deque[ControllerEvent] = collections.deque()
        self._normal: collections.deque[ControllerEvent] = collections.deque()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._on_controller_moved = on_controller_moved
        self.metrics = {"events_processed": 0, "events_failed": 0, "queue_time_ms_max": 0.0}
        self._stopped = False

    def start(self) -> None:
        self._thread.start()

    def put(self, event: ControllerEvent, urgent: bool = False) -> ControllerEvent:
        with self._cond:
            if self._stopped:
                event.done.set()
                return event
            (self._urgent if urgent else self._normal).append(event)
            self._cond.notify()
        return event

    def clear_and_put(self, event: ControllerEvent) -> ControllerEvent:
        with self._cond:
            drained = list(self._urgent) + list(self._normal)
            self._urgent.clear()
            self._normal.clear()
            for e in drained:
                self._preempt(e)
            self._normal.append(event)
            self._cond.notify()
        return event

    def is_empty(self) -> bool:
        return self.queue_size() == 0

    def queue_size(self) -> int:
        return len(self._urgent) + len(self._normal)

    def shutdown(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopped = True
            self._normal.append(_SHUTDOWN)
            self._cond.notify()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @staticmethod
    def _preempt(e: ControllerEvent) -> None:
        try:
            if e.preempt is not None:
                e.preempt()
        except Exception:  # noqa: BLE001 - never let a pre-emption kill the caller
            log.exception("preempting %s failed", e.name)
        finally:
            e.done.set()

    def _take(self) -> ControllerEvent:
        with self._cond:
            while not (self._urgent or self._normal):
                self._cond.wait()
            return (self._urgent or self._normal).popleft()

    def _loop(self) -> None:
        from kafkatier.zk.fenced import ControllerMovedError

        while True:
            event = self._take()
            if event is _SHUTDOWN:
                return
            waited = (time.monotonic() - event.enqueued_at) * 1000
            self.metrics["queue_time_ms_max"] = max(self.metrics["queue_time_ms_max"], waited)
            try:
                event.run()
                self.metrics["events_processed"] += 1
            except ControllerMovedError as e:
                self.metrics["events_failed"] += 1
                log.warning("controller moved while processing %s: %s", event.name, e)
                if self._on_controller_moved:
                    try:
                        self._on_controller_moved(e)
                    except Exception:  # noqa: BLE001
                        log.exception("resignation after %s failed", event.name)
            except Exception:  # noqa: BLE001 - Kafka logs and drops the event
                self.metrics["events_failed"] += 1
                log.exception("error processing event %s (dropped) %s", event.name, kv(queue=self.queue_size()))
            finally:
                event.done.set()


class ControllerEvents:
    """What the controller's managers use of its event thread, handed to them through their constructors.

    ``put`` queues an event; ``put_active_only`` queues one that does nothing unless this broker is still the
    active controller when it runs; ``generation`` is the failover generation, bumped at every failover and
    resignation: a ZooKeeper watch or a timer registered in an older generation is stale and stops.
    """

    def __init__(self, event_manager: ControllerEventManager, is_active: Callable[[], bool]):
        self._event_manager = event_manager
        self._is_active = is_active
        self._generation = 0

    @property
    def generation(self) -> int:
        return self._generation

    def next_generation(self) -> int:
        """Called by the controller at failover and resignation only."""
        self._generation += 1
        return self._generation

    def put(self, name: str, fn: Callable[[], None], preempt: Callable[[], None] | None = None,
            urgent: bool = False) -> ControllerEvent:
        return self._event_manager.put(ControllerEvent(name, fn, preempt), urgent=urgent)

    def active_only(self, fn: Callable[[], None]) -> Callable[[], None]:
        def run():
            if self._is_active():
                fn()
        return run

    def put_active_only(self, name: str, fn: Callable[[], None]) -> ControllerEvent:
        return self.put(name, self.active_only(fn))
