"""ControllerChannelManager: controller -> broker control requests carried by ZooKeeper.

Layout (per broker, created by the broker at start-up and by the controller if missing)::

    /kafkatier/control/<brokerId>/requests/request_NNNNNNNNNN    PERSISTENT_SEQUENTIAL, written by the controller
    /kafkatier/control/<brokerId>/responses/request_NNNNNNNNNN   PERSISTENT, written by the broker (same name)

Every request znode is written with a transaction fenced by ``/controller_epoch`` and carries the controller
epoch and the target's broker epoch (``zk_schemas/control_request.json``).  The broker watches its ``requests``
children, applies them in sequence order and writes the answer under ``responses`` with the same name.  The
controller's per-broker send thread then reads the answer, deletes both znodes (fenced) and runs the callback.

Kafka's channel properties are kept: per-broker FIFO, one request in flight per broker, retried until answered
or the broker is removed, the queue dropped on broker removal or resignation, callbacks only enqueue events.
A new controller deletes whatever it finds in the queues before it sends anything.

Requests and responses of any size: a body that does not fit one znode (``limits.MAX_ZNODE_BYTES``) is
compressed and split into ``/kafkatier/control/<brokerId>/parts/<token>-NNNNN`` znodes written before the
request znode that refers to them (:mod:`kafkatier.zk.control_parts`); the broker answers the same way.

Unlike Kafka's RequestSendThread, which drops nothing either but only sees network errors, every error while
sending (a ZooKeeper error, a malformed answer, a bug in a payload) is logged and the request resent with
bounded exponential backoff; only the broker leaving, a resignation or shutdown end the attempts.  A request
not answered within ``request_timeout_s`` is not resent while the broker that received it is still registered
(same broker epoch) and its request znode is still there: the broker is working on it (Kafka's socket stays
open for as long too; only a disconnect makes it resend).
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Callable

import attrs
import tenacity

from kafkatier.logsetup import get_logger, kv
from kafkatier.zk import codecs, control_parts, paths
from kafkatier.zk.client import ensure_persistent_paths, get_children_many
from kafkatier.zk.errors import NoNodeError
from kafkatier.zk.fenced import RETRYABLE as ZK_RETRYABLE
from kafkatier.zk.fenced import ControllerMovedError
from kafkatier.zk.limits import ZNodeTooLargeError

log = get_logger("controller.channel")

ResponseCallback = Callable[[codecs.ControlResponse], None]


@attrs.define
class QueuedRequest:
    api_key: int
    api_name: str
    api_version: int
    body: dict
    callback: ResponseCallback | None
    enqueued_at: float = attrs.field(factory=time.monotonic)


BARRIER = -1  # not a request: its callback runs once everything queued before it was answered


class _Stopped(Exception):
    pass


class RequestSendThread(threading.Thread):
    def __init__(self, manager: "ControllerChannelManager", broker_id: int, broker_epoch: int):
        super().__init__(name=f"Controller-{manager.controller_id}-to-broker-{broker_id}-send-thread", daemon=True)
        self.manager = manager
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.queue: "queue.Queue[QueuedRequest]" = queue.Queue()
        self.stopped = threading.Event()
        self.in_flight: str | None = None

    def shutdown(self) -> None:
        self.stopped.set()
        self.queue.put(None)  # type: ignore[arg-type]

    def run(self) -> None:
        while not self.stopped.is_set():
            item = self.queue.get()
            if item is None or self.stopped.is_set():
                return
            if item.api_key == BARRIER:
                item.callback(None)
                continue
            try:
                response = self._send_until_answered(item)
            except _Stopped:
                return
            except ControllerMovedError as e:
                log.warning("fenced while sending to broker %s: %s", self.broker_id, e)
                self.manager.on_controller_moved(e)
                return
            self.manager.metrics_record(self.broker_id, item, response)
            if item.callback is not None:
                try:
                    item.callback(response)
                except Exception:  # noqa: BLE001
                    log.exception("response callback failed %s", kv(broker=self.broker_id, api=item.api_name))

    def _send_until_answered(self, item: QueuedRequest) -> codecs.ControlResponse:
        def before_sleep(rs: tenacity.RetryCallState) -> None:
            e = rs.outcome.exception()
            if isinstance(e, (TimeoutError, *ZK_RETRYABLE)):
                log.info("no answer; resending %s", kv(broker=self.broker_id, api=item.api_name,
                                                        attempt=rs.attempt_number, reason=type(e).__name__))
            else:
                log.warning("sending failed; resending %s", kv(broker=self.broker_id, api=item.api_name,
                                                                attempt=rs.attempt_number, error=repr(e)))

        retrying = tenacity.Retrying(
            # No error drops a request: a ZooKeeper connection loss, a malformed or refused answer, anything
            # else is resent after a bounded backoff until the broker answers or leaves the channel.
            retry=tenacity.retry_if_exception(lambda e: not isinstance(e, (_Stopped, ControllerMovedError))),
            stop=lambda rs: self.stopped.is_set(),
            wait=tenacity.wait_exponential(multiplier=0.1, max=2.0),
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    return self._send_once(item)
        except (_Stopped, ControllerMovedError):
            raise
        except Exception:  # noqa: BLE001 - stopped while the last attempt was failing
            raise _Stopped() from None
        raise _Stopped()

    def _write_request(self, request: codecs.ControlRequest) -> tuple[str, codecs.BodyParts | None]:
        """Create the request znode (after its parts, for a body too large for one znode); its name and parts."""
        w = self.manager.writer()
        prefix = paths.control_requests(self.broker_id) + "/" + paths.REQUEST_PREFIX
        text = codecs.dump_body(request.body)  # once, whether the body goes in the envelope or in parts
        try:
            data = request.encode(body_text=text)
        except ZNodeTooLargeError:
            ref, parts = control_parts.split_body(request.body, text=text)
            log.info("control request split %s", kv(broker=self.broker_id, api=request.api_name,
                                                    parts=ref.count, compressed_bytes=ref.size))
            request = attrs.evolve(request, body={}, body_parts=ref)
            try:
                control_parts.write_parts(w.create, self.broker_id, parts)
                return w.create(prefix, request.encode(), sequence=True).rsplit("/", 1)[1], ref
            except Exception:
                # Parts nobody refers to; if this fails too, the next controller clears them with the queues.
                try:
                    self._delete_quietly(control_parts.part_paths(self.broker_id, ref))
                except Exception:  # noqa: BLE001
                    pass
                raise
        return w.create(prefix, data, sequence=True).rsplit("/", 1)[1], None

    def _send_once(self, item: QueuedRequest) -> codecs.ControlResponse:
        mgr = self.manager
        if self.stopped.is_set() or (mgr.send_latency_s and self.stopped.wait(mgr.send_latency_s)):
            raise _Stopped()
        request = codecs.ControlRequest(
            api_key=item.api_key, api_version=item.api_version, api_name=item.api_name,
            controller_id=mgr.controller_id, controller_epoch=mgr.controller_epoch(),
            broker_epoch=self.broker_epoch, body=item.body)
        name, request_parts = self._write_request(request)
        self.in_flight = name
        response_path = paths.control_responses(self.broker_id) + "/" + name
        arrived = threading.Event()
        deadline = time.monotonic() + mgr.request_timeout_s
        data = None
        while not self.stopped.is_set():
            arrived.clear()
            try:
                stat = mgr.zk.exists(response_path, watch=lambda ev: arrived.set())
                if stat is not None:
                    data, _ = mgr.zk.get(response_path)
                    break
            except NoNodeError:
                pass
            except ZK_RETRYABLE:
                pass  # the watch went with the connection: the bounded wait below polls again
            remaining = deadline - time.monotonic()
            if remaining <= 0 and self._still_working_on(name):
                waited = time.monotonic() - (deadline - mgr.request_timeout_s)
                log.info("no answer yet; broker alive and request pending, waiting %s",
                         kv(broker=self.broker_id, api=item.api_name, node=name, waited_s=round(waited, 1)))
                deadline = time.monotonic() + mgr.request_timeout_s
                continue
            if remaining <= 0:
                self._cleanup(name, request_parts)
                self.in_flight = None
                raise TimeoutError(f"no response from broker {self.broker_id} to {name}")
            # The watch wakes us up; the bounded wait only covers a watch lost with the connection.
            arrived.wait(min(remaining, 1.0))
        if self.stopped.is_set():
            raise _Stopped()
        response_parts = None
        try:
            response = codecs.ControlResponse.decode(data, path=response_path)
            response_parts = response.body_parts
            if response_parts is not None:
                body = control_parts.join_body(
                    response_parts, control_parts.read_parts(mgr.zk.get, self.broker_id, response_parts),
                    what=response_path)
                response = attrs.evolve(response, body=body, body_parts=None)
        except codecs.MalformedZNodeError as e:
            log.warning("malformed response skipped %s", kv(broker=self.broker_id, node=name, reason=e))
            raise TimeoutError(str(e)) from e
        finally:
            self._cleanup(name, request_parts, response_parts)
            self.in_flight = None
        return response

    def _still_working_on(self, name: str) -> bool:
        """True while the broker (this incarnation: its registration's czxid is our broker epoch) is registered
        and the request znode is still there: the broker applies requests in order and answers each one, so a
        slow answer (a LeaderAndIsr creating thousands of logs) is waited for, not resent.  Resending would
        make the broker apply it twice and, past ``request_timeout_s``, never catch up."""
        try:
            registration = self.manager.zk.exists(paths.broker(self.broker_id))
            pending = self.manager.zk.exists(paths.control_requests(self.broker_id) + "/" + name)
        except ZK_RETRYABLE:
            return False
        return (registration is not None and registration.czxid == self.broker_epoch and pending is not None
                and not self.stopped.is_set())

    def _cleanup(self, name: str, *parts: codecs.BodyParts | None) -> None:
        self._delete_quietly([paths.control_responses(self.broker_id) + "/" + name,
                              paths.control_requests(self.broker_id) + "/" + name,
                              *(p for ref in parts for p in control_parts.part_paths(self.broker_id, ref))])

    def _delete_quietly(self, znodes: list[str]) -> None:
        w = self.manager.writer()
        for p in znodes:
            try:
                w.delete(p)
            except NoNodeError:
                pass


class ControllerChannelManager:
    def __init__(self, zk, controller_id: int, writer: Callable[[], object], controller_epoch: Callable[[], int],
                 on_controller_moved: Callable[[Exception], None], request_timeout_s: float = 30.0,
                 send_latency_s: float = 0.0):
        self.zk = zk
        self.controller_id = controller_id
        self.writer = writer
        self.controller_epoch = controller_epoch
        self.on_controller_moved = on_controller_moved
        self.request_timeout_s = request_timeout_s
        self.send_latency_s = send_latency_s  # test only: see ControllerConfig.control_request_latency_s
        self._threads: dict[int, RequestSendThread] = {}
        self._lock = threading.Lock()
        self.metrics: dict[str, dict] = {}

    def startup(self, brokers: dict[int, int]) -> None:
        """``brokers``: id -> broker epoch.  Clears every stale queue first, and creates the live brokers' missing
        queue paths: every queue read in one pipelined round (a failover waits for this)."""
        self.clear_stale_queues(ensure=set(brokers))
        for b, epoch in brokers.items():
            self.add_broker(b, epoch, queues_ready=True)

    def clear_stale_queues(self, ensure: set[int] = frozenset()) -> None:
        """Delete every request, response and part left in any broker's queue; ``ensure``: brokers whose queue
        paths are created when missing."""
        ids = get_children_many(self.zk, [paths.CONTROL_ROOT])[0] or []
        brokers = sorted(set(ids) | {str(b) for b in ensure})
        parents = [f"{paths.CONTROL_ROOT}/{b}/{sub}" for b in brokers for sub in ("responses", "requests", "parts")]
        w = None
        ensured = {str(b) for b in ensure}
        for parent, children in zip(parents, get_children_many(self.zk, parents)):
            if children is None:
                if parent.split("/")[-2] in ensured:
                    ensure_persistent_paths(self.zk, [parent])
                continue
            w = w or self.writer()
            for c in children:
                try:
                    w.delete(f"{parent}/{c}")
                except NoNodeError:
                    pass
            if children:
                log.info("cleared stale control queue %s", kv(path=parent, nodes=len(children)))

    def add_broker(self, broker_id: int, broker_epoch: int, queues_ready: bool = False) -> None:
        """``queues_ready``: the broker's queue paths are known to exist (:meth:`startup` made sure)."""
        with self._lock:
            if broker_id in self._threads:
                return
            if not queues_ready:
                ensure_persistent_paths(self.zk, (paths.control_requests(broker_id),
                                                  paths.control_responses(broker_id), paths.control_parts(broker_id)))
            t = RequestSendThread(self, broker_id, broker_epoch)
            self._threads[broker_id] = t
            t.start()

    def remove_broker(self, broker_id: int) -> None:
        with self._lock:
            t = self._threads.pop(broker_id, None)
        if t:
            t.shutdown()

    def send(self, broker_id: int, api_key: int, api_name: str, api_version: int, body: dict,
             callback: ResponseCallback | None = None) -> bool:
        with self._lock:
            t = self._threads.get(broker_id)
        if t is None:
            log.warning("not sending %s to broker %s: not registered in the channel manager", api_name, broker_id)
            return False
        t.queue.put(QueuedRequest(api_key, api_name, api_version, body, callback))
        return True

    def barrier(self, broker_id: int, callback: Callable[[], None]) -> bool:
        """Run ``callback()`` (on the send thread) once every request queued to ``broker_id`` before this call
        has been answered.  False when the broker is not registered; a callback behind a dropped queue never
        runs."""
        with self._lock:
            t = self._threads.get(broker_id)
        if t is None:
            return False
        t.queue.put(QueuedRequest(BARRIER, "Barrier", 0, {}, lambda _response: callback()))
        return True

    def shutdown(self) -> None:
        with self._lock:
            threads = list(self._threads.values())
            self._threads.clear()
        for t in threads:
            t.shutdown()

    def queue_sizes(self) -> dict[int, int]:
        with self._lock:
            return {b: t.queue.qsize() + (1 if t.in_flight else 0) for b, t in self._threads.items()}

    def metrics_record(self, broker_id: int, item: QueuedRequest, response: codecs.ControlResponse) -> None:
        m = self.metrics.setdefault(item.api_name, {"sent": 0, "errors": 0, "latency_ms_max": 0.0})
        m["sent"] += 1
        if response.error_code:
            m["errors"] += 1
        m["latency_ms_max"] = max(m["latency_ms_max"], (time.monotonic() - item.enqueued_at) * 1000)
