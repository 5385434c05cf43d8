"""The broker end of the control channel: watches ``/kafkatier/control/<id>/requests``, applies requests in
sequence order, and writes each answer to ``/kafkatier/control/<id>/responses/<same name>``.

Epoch checks follow Kafka (docs/controller.md#broker-side-checks): a request whose broker epoch is not -1 and below
this broker's czxid gets STALE_BROKER_EPOCH; one whose controller epoch is below the highest seen gets
STALE_CONTROLLER_EPOCH.  A controller epoch above the highest seen
is believed only if ``/controller_epoch`` (read after a sync) has reached it: an absurd jump -- a forged or
corrupted request -- would otherwise make every real controller look stale to this broker; it is logged and refused
with STALE_CONTROLLER_EPOCH (INVALID_REQUEST, so the controller resends, if ZooKeeper cannot be read).

Every request is checked before anything is applied: a znode that is not a control request (bad JSON, wrong
envelope types, missing fields) is answered INVALID_REQUEST when its envelope names an API and version, else deleted;
a body is read into its typed message (:func:`decode_request_body`, :mod:`kafkatier.protocol.control_messages`)
and one that does not match its API's message spec is answered INVALID_REQUEST before the epoch checks; either
is logged once and the queue goes on.

A request whose body is in part znodes (``body_parts``, :mod:`kafkatier.zk.control_parts`) is joined before it
is applied; missing or corrupted parts are logged and answered with INVALID_REQUEST, so the controller resends.
An answer too large for one znode is split the same way.

Request faults (``server/fault_injection.py``) act after the epoch and body checks: an injected error answers
the request, or some of its partitions, without applying them; a dropped answer applies the request and deletes
its request znode instead of answering, so the controller, past ``request.timeout.ms``, sees a lost answer and
resends (a request znode left in place would make it wait for ever: the broker looks busy with it).
"""
from __future__ import annotations

import json
import threading
from typing import Callable, Protocol

import attrs
from kafkatier.zk.errors import KazooException, NoNodeError, NodeExistsError
from kafkatier.zk.watchers import ChildrenWatch

from kafkatier.common.wake_loop import run_on_wake_ups
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.control_messages import (CONTROL_DATA, ControlMessage, ControlMessageError,
                                                 LeaderAndIsrRequestData, LeaderAndIsrResponseData,
                                                 StopReplicaRequestData, StopReplicaResponseData,
                                                 UpdateMetadataRequestData, UpdateMetadataResponseData)
from kafkatier.protocol.errors import Errors
from kafkatier.server.control_request_faults import apply_control_faults
from kafkatier.server.fault_injection import FaultRegistry
from kafkatier.zk import codecs, control_parts, paths
from kafkatier.zk.limits import ZNodeTooLargeError

log = get_logger("server.control")


class ControlRequestApis(Protocol):
    """What applies a checked control request (:class:`~kafkatier.server.control_apis.ControlApis`): each takes
    the typed request and returns the typed response without the top-level epoch checks."""

    def handle_leader_and_isr(self, request: LeaderAndIsrRequestData) -> LeaderAndIsrResponseData: ...

    def handle_stop_replica(self, request: StopReplicaRequestData) -> StopReplicaResponseData: ...

    def handle_update_metadata(self, request: UpdateMetadataRequestData) -> UpdateMetadataResponseData: ...


#: The control requests a broker applies (ControlledShutdown goes the other way, to the controller).
APPLIED = frozenset({ApiKeys.LEADER_AND_ISR, ApiKeys.STOP_REPLICA, ApiKeys.UPDATE_METADATA})


def decode_request_body(api_key: int, api_version: int, body) -> ControlMessage:
    """The typed request a control request's body stands for; :class:`ControlMessageError` naming the path
    when the body does not match its API's message spec at ``api_version`` (or the API is not one a broker
    applies)."""
    if api_key not in APPLIED:
        raise ControlMessageError(f"unknown control api key {api_key}")
    return CONTROL_DATA[ApiKeys(api_key)][0].from_json(api_version, body)


class ControlRequestHandler:
    def __init__(self, zk, broker_id: int, broker_epoch: Callable[[], int], apis: ControlRequestApis,
                 faults: FaultRegistry | None = None):
        """``broker_epoch``: this broker's current epoch (its registration's czxid); ``apis`` applies the checked
        requests; ``faults``: injected control-request faults, if any."""
        self.zk = zk
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.apis = apis
        self.faults = faults
        self.controller_epoch = 0  # highest controller epoch seen
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._done: set[str] = set()
        self._thread = threading.Thread(target=self._run, name=f"control-request-handler-{broker_id}", daemon=True)
        self.metrics = {"requests": 0, "stale_controller_epoch": 0, "stale_broker_epoch": 0, "malformed": 0,
                        "unproven_controller_epoch": 0, "answers_dropped": 0}

    def start(self) -> None:
        for p in (paths.control_requests(self.broker_id), paths.control_responses(self.broker_id),
                  paths.control_parts(self.broker_id)):
            try:
                self.zk.ensure_path(p)
            except NodeExistsError:
                pass
        self._thread.start()
        ChildrenWatch(self.zk, paths.control_requests(self.broker_id), self._on_children)

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()

    def _on_children(self, children):
        if self._stopped.is_set():
            return False
        self._wake.set()
        return True

    def _run(self) -> None:
        run_on_wake_ups(self._wake, self._stopped, self._drain_or_retry)

    def _drain_or_retry(self) -> None:
        try:
            self._drain()
        except Exception:  # noqa: BLE001 - a transient ZooKeeper error: try again on the next wake-up
            log.exception("error draining the control queue")
            self._stopped.wait(0.2)
            self._wake.set()

    def _drain(self) -> None:
        parent = paths.control_requests(self.broker_id)
        try:
            children = self.zk.get_children(parent)
        except NoNodeError:
            return
        names = paths.sorted_sequential(children, paths.REQUEST_PREFIX)
        self._done &= set(names)
        for name in names:
            if self._stopped.is_set():
                return
            if name in self._done:
                continue
            resp_path = paths.control_responses(self.broker_id) + "/" + name
            if self.zk.exists(resp_path):
                self._done.add(name)
                continue
            try:
                data, _ = self.zk.get(parent + "/" + name)
            except NoNodeError:
                continue
            try:
                req = codecs.ControlRequest.decode(data)
            except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
                self._refuse_unreadable(parent + "/" + name, resp_path, data, e)
                self._done.add(name)
                continue
            try:
                response = self._handle_complete(req, parent + "/" + name)
            except KazooException:
                raise  # ZooKeeper trouble: the drain loop tries again
            except Exception as e:  # noqa: BLE001 - a request this code cannot handle must not stop the queue
                self.metrics["malformed"] += 1
                log.exception("control request could not be handled; answered INVALID_REQUEST %s",
                              kv(node=name, api=req.api_name, error=type(e).__name__))
                response = self._invalid_response(req)
            if response is None:  # an injected lost answer: applied, not answered
                self.metrics["answers_dropped"] += 1
                log.info("dropping the answer to a control request (injected fault) %s", kv(node=name))
                try:
                    self.zk.delete(parent + "/" + name)
                except NoNodeError:
                    pass
                self._done.add(name)
                continue
            data = self._encode_response(response)
            try:
                self.zk.create(resp_path, data)
            except NodeExistsError:
                pass
            except NoNodeError:
                self.zk.ensure_path(paths.control_responses(self.broker_id))
                self.zk.create(resp_path, data)
            self._done.add(name)

    def _refuse_unreadable(self, path: str, resp_path: str, data: bytes | None, reason: Exception) -> None:
        """A request znode that is not a control request (bad JSON, wrong envelope types, missing fields): logged
        once and answered INVALID_REQUEST when its envelope names an API and version, else deleted."""
        self.metrics["malformed"] += 1
        text = str(reason)
        log.warning("refusing malformed control request %s", kv(node=path, reason=text[:300]))
        envelope = _envelope(data)
        if envelope is not None:
            api_key, api_version = envelope
            response = codecs.ControlResponse(api_key=api_key, api_version=api_version,
                                              error_code=int(Errors.INVALID_REQUEST),
                                              body={"error_code": int(Errors.INVALID_REQUEST)},
                                              broker_id=self.broker_id, broker_epoch=self.broker_epoch())
            try:
                self.zk.create(resp_path, response.encode())
                return
            except NodeExistsError:
                return
            except (KazooException, ValueError) as e:
                log.warning("cannot answer a malformed control request; deleting it %s",
                            kv(node=path, error=type(e).__name__))
        try:
            self.zk.delete(path)
        except NoNodeError:
            pass

    def _invalid_response(self, req) -> codecs.ControlResponse:
        return codecs.ControlResponse(api_key=req.api_key, api_version=req.api_version,
                                      error_code=int(Errors.INVALID_REQUEST),
                                      body={"error_code": int(Errors.INVALID_REQUEST)},
                                      broker_id=self.broker_id, broker_epoch=self.broker_epoch())

    def _handle_complete(self, req: codecs.ControlRequest, path: str) -> codecs.ControlResponse | None:
        """``handle`` the request once its body is joined from its parts; a body that cannot be joined is
        answered with INVALID_REQUEST (logged), never applied in part."""
        if req.body_parts is None:
            return self.handle(req)
        try:
            parts = control_parts.read_parts(self.zk.get, self.broker_id, req.body_parts)
            body = control_parts.join_body(req.body_parts, parts, what=path)
        except codecs.MalformedZNodeError as e:
            self.metrics["malformed"] += 1
            log.warning("refusing control request with bad parts %s", kv(node=path, api=req.api_name, reason=e))
            return codecs.ControlResponse(api_key=req.api_key, api_version=req.api_version,
                                          error_code=int(Errors.INVALID_REQUEST),
                                          body=self._error_body(req, Errors.INVALID_REQUEST),
                                          broker_id=self.broker_id, broker_epoch=self.broker_epoch())
        return self.handle(attrs.evolve(req, body=body, body_parts=None))

    def _encode_response(self, response: codecs.ControlResponse) -> bytes:
        """The response znode's data; a body too large for one znode is written to parts first."""
        text = codecs.dump_body(response.body)  # once, whether the body goes in the envelope or in parts
        try:
            return response.encode(body_text=text)
        except ZNodeTooLargeError:
            ref, parts = control_parts.split_body(response.body, text=text)
            control_parts.write_parts(self.zk.create, self.broker_id, parts)
            log.info("control response split %s", kv(api=response.api_key, parts=ref.count,
                                                     compressed_bytes=ref.size))
            return attrs.evolve(response, body={}, body_parts=ref).encode()

    def handle(self, req) -> "codecs.ControlResponse | None":
        """The answer to ``req``; None when an injected fault drops it (the request was applied)."""
        self.metrics["requests"] += 1
        my_epoch = self.broker_epoch()
        try:  # read before anything else: the error bodies below walk the request's partitions
            request = decode_request_body(req.api_key, req.api_version, req.body)
        except ControlMessageError as e:
            self.metrics["malformed"] += 1
            log.warning("invalid control request body %s", kv(api=req.api_name, version=req.api_version,
                                                              reason=str(e)[:300]))
            return self._invalid_response(req)
        error = Errors.NONE
        body: dict
        if req.broker_epoch != -1 and req.broker_epoch < my_epoch:
            error = Errors.STALE_BROKER_EPOCH
            self.metrics["stale_broker_epoch"] += 1
        elif req.controller_epoch < self.controller_epoch:
            error = Errors.STALE_CONTROLLER_EPOCH
            self.metrics["stale_controller_epoch"] += 1
        elif req.controller_epoch > self.controller_epoch:
            error = self._check_epoch_jump(req.controller_epoch)
        if error != Errors.NONE:
            log.info("rejecting control request %s", kv(api=req.api_name, error=error.name,
                                                         controller_epoch=req.controller_epoch,
                                                         broker_epoch=req.broker_epoch, mine=my_epoch))
            body = self._error_body(req, error)
            return codecs.ControlResponse(api_key=req.api_key, api_version=req.api_version, error_code=int(error),
                                          body=body, broker_id=self.broker_id, broker_epoch=my_epoch)
        self.controller_epoch = max(self.controller_epoch, req.controller_epoch)
        dropped = False
        try:
            body, dropped = apply_control_faults(
                self.faults, req.api_key, req.body,
                # the faults hand back the body, or a copy without some partitions: read that one again
                lambda b: self._apply(request if b is req.body else decode_request_body(req.api_key,
                                                                                       req.api_version, b),
                                      req.api_version))
        except Exception:  # noqa: BLE001
            log.exception("control request failed %s", kv(api=req.api_name))
            body = self._error_body(req, Errors.UNKNOWN_SERVER_ERROR, all_partitions=True)
        if dropped:
            return None
        return codecs.ControlResponse(api_key=req.api_key, api_version=req.api_version,
                                      error_code=int(body.get("error_code", 0)), body=body,
                                      broker_id=self.broker_id, broker_epoch=my_epoch)

    def _apply(self, request: ControlMessage, version: int) -> dict:
        """Apply ``request``; its typed response written at the request's ``version`` (the body the response
        znode carries)."""
        if isinstance(request, LeaderAndIsrRequestData):
            return self.apis.handle_leader_and_isr(request).to_json(version)
        if isinstance(request, StopReplicaRequestData):
            return self.apis.handle_stop_replica(request).to_json(version)
        if isinstance(request, UpdateMetadataRequestData):
            return self.apis.handle_update_metadata(request).to_json(version)
        return {"error_code": int(Errors.INVALID_REQUEST)}

    def _check_epoch_jump(self, epoch: int) -> Errors:
        """NONE if ``/controller_epoch`` has reached ``epoch``; else the error that refuses the request."""
        try:
            self.zk.sync(paths.CONTROLLER_EPOCH)
            data, _ = self.zk.get(paths.CONTROLLER_EPOCH)
            current = codecs.decode_controller_epoch(data)
        except Exception as e:  # noqa: BLE001 - NoNode, malformed, connection loss: the controller resends
            log.warning("cannot check a new controller epoch; refusing for now %s",
                        kv(epoch=epoch, error=type(e).__name__))
            return Errors.INVALID_REQUEST
        if epoch <= current:
            return Errors.NONE
        self.metrics["unproven_controller_epoch"] += 1
        log.error("refusing a control request whose controller epoch is ahead of /controller_epoch %s",
                  kv(epoch=epoch, controller_epoch_znode=current, highest_seen=self.controller_epoch))
        return Errors.STALE_CONTROLLER_EPOCH

    @staticmethod
    def _error_body(req, error: Errors, all_partitions: bool = False) -> dict:
        code = int(error)
        if req.api_key == ApiKeys.STOP_REPLICA:
            parts = []
            if all_partitions:
                parts = [{"topic_name": t["topic_name"], "partition_index": p["partition_index"], "error_code": code}
                         for t in req.body.get("topic_states", []) for p in t.get("partition_states", [])]
            return {"error_code": code, "partition_errors": parts}
        if req.api_key == ApiKeys.LEADER_AND_ISR:
            topics = [{"topic_id": t.get("topic_id"),
                       "partition_errors": [{"partition_index": p["partition_index"], "error_code": code}
                                            for p in t.get("partition_states", [])]}
                      for t in req.body.get("topic_states", [])]
            return {"error_code": code, "topics": topics}
        return {"error_code": code}


def _envelope(data: bytes | None) -> tuple[int, int] | None:
    """``(api_key, api_version)`` of a request znode whose body is bad but whose envelope names them, else None."""
    try:
        js = json.loads(data or b"")
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(js, dict):
        return None
    key, version = js.get("api_key"), js.get("api_version")
    if type(key) is int and type(version) is int and 0 <= key < 1 << 15 and 0 <= version < 1 << 15:
        return key, version
    return None
