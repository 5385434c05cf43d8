"""Controlled shutdown, both broker ends: the ControlledShutdown request handler (apiKey 7, v0-3; Kafka's
``KafkaApis.handleControlledShutdownRequest``) and the shutting-down broker's side (Kafka's
``KafkaServer.controlledShutdown``).

Transport: like Kafka, the shutting-down broker sends ControlledShutdown **over the Kafka protocol** to the
active controller's listener (found in ``/controller``, its endpoint in the metadata cache, else in its
registration), the way our brokers already reach the controller for forwarded requests.  The ZooKeeper control
channel (``controller/channel_manager.py``) stays one-way, controller to brokers, as Kafka's.

Broker side (:class:`ControlledShutdown`): up to ``controlled.shutdown.max.retries`` (3) attempts,
``controlled.shutdown.retry.backoff.ms`` (5000) apart; an attempt succeeds when the controller answers NONE with
no remaining partitions.  After the last failed attempt the broker shuts down anyway (Kafka's "unclean
shutdown").  ``controlled.shutdown.enable=false`` skips it all.

Handler: CLUSTER_ACTION on CLUSTER when an authorizer is configured (else CLUSTER_AUTHORIZATION_FAILED); the
controller's answer or error code (controller/controlled_shutdown.py: STALE_CONTROLLER_EPOCH,
BROKER_NOT_AVAILABLE, STALE_BROKER_EPOCH).
"""
from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Any, Callable, Mapping

import attrs
import tenacity

from kafkatier.common.structs import TopicPartition
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.control_messages import (ControlledShutdownRemainingPartition, ControlledShutdownRequestData,
                                                 ControlledShutdownResponseData, ControlMessageError)
from kafkatier.protocol.control_requests import ControlledShutdownResponse
from kafkatier.protocol.errors import Errors, KafkaError
from kafkatier.server.auth_helper import AuthHelper
from kafkatier.server.broker_client import BrokerClient, BrokerConnectionError
from kafkatier.server.config import broker_setting

log = get_logger("server.controlled-shutdown")

VERSIONS = (0, 3)
REQUEST_VERSION = 3


@attrs.frozen
class ControlledShutdownConfig:
    enable: bool = True
    max_retries: int = 3
    retry_backoff_ms: int = 5000
    request_timeout_ms: int = 30000

    @classmethod
    def from_props(cls, props: Mapping[str, Any], request_timeout_ms: int = 30000) -> ControlledShutdownConfig:
        """From the broker's settings, typed and checked by their definitions (server/config.py)."""
        return cls(enable=broker_setting(props, "controlled.shutdown.enable"),
                   max_retries=max(1, broker_setting(props, "controlled.shutdown.max.retries")),
                   retry_backoff_ms=broker_setting(props, "controlled.shutdown.retry.backoff.ms"),
                   request_timeout_ms=request_timeout_ms)


@attrs.frozen
class ControlledShutdownResult:
    """One attempt's answer."""

    error: Errors
    remaining: tuple[TopicPartition, ...] = ()

    @property
    def succeeded(self) -> bool:
        return self.error == Errors.NONE and not self.remaining


class ControlledShutdownNotDone(Exception):
    """An attempt that did not succeed (retried)."""


# --- the request handler (runs on the controller) ---------------------------------------------------------------
class ControlledShutdownApis:
    def __init__(self, controller, auth: AuthHelper | None = None):
        self.controller = controller
        self.auth = auth or AuthHelper()  # Kafka's ACL checks; allows all without an authorizer

    def handlers(self) -> dict[int, tuple[tuple[int, int], Callable]]:
        return {ApiKeys.CONTROLLED_SHUTDOWN: (VERSIONS, self.handle_controlled_shutdown)}


    def handle_controlled_shutdown(self, header, req, context) -> Future:
        """The network layer's entry: the decoded request in, a future of the encoded-ready response out; the
        work is :meth:`controlled_shutdown` on the typed messages."""
        v = header.request_api_version
        out: Future = Future()
        try:
            request = ControlledShutdownRequestData.from_wire(req)
        except ControlMessageError as e:
            log.warning("malformed controlled shutdown request %s", kv(error=e))
            out.set_result(_response(Errors.INVALID_REQUEST, ()).to_wire(v))
            return out
        self.controlled_shutdown(request, v, context).add_done_callback(
            lambda f: out.set_result(f.result().to_wire(v)))
        return out

    def controlled_shutdown(self, request: ControlledShutdownRequestData, version: int,
                            context) -> Future:
        """Kafka's ``handleControlledShutdownRequest``: a future of the typed response."""
        out: Future = Future()
        if not self.auth.authorize_cluster(context, "ClusterAction"):
            out.set_result(_response(Errors.CLUSTER_AUTHORIZATION_FAILED, ()))
            return out
        epoch = request.broker_epoch if version >= 2 else -1

        def answered(f: Future) -> None:
            exc = f.exception()
            if isinstance(exc, KafkaError):
                out.set_result(_response(exc.error, ()))
            elif exc is not None:
                log.error("controlled shutdown failed %s", kv(broker=request.broker_id, error=repr(exc)))
                out.set_result(_response(Errors.UNKNOWN_SERVER_ERROR, ()))
            else:
                out.set_result(_response(Errors.NONE, sorted(f.result())))
        self.controller.controlled_shutdown(request.broker_id, epoch).add_done_callback(answered)
        return out


def _response(error: Errors, remaining) -> ControlledShutdownResponseData:
    return ControlledShutdownResponseData(error_code=int(error), remaining_partitions=tuple(
        ControlledShutdownRemainingPartition(topic_name=tp.topic, partition_index=tp.partition)
        for tp in remaining))


# --- the shutting-down broker -------------------------------------------------------------------------------------
class ControlledShutdown:
    """Kafka's ``KafkaServer.controlledShutdown``: ask the controller to move this broker's leaders away."""

    def __init__(self, broker_id: int, broker_epoch: Callable[[], int], controller_endpoint: Callable[[], tuple | None],
                 config: ControlledShutdownConfig, sleep: Callable[[float], None] = time.sleep, login=None):
        """``controller_endpoint()`` returns ``(controller id, host, port)`` or None when no controller is known;
        ``login``: how to reach it (server/broker_client.py)."""
        self.broker_id = broker_id
        self.login = login
        self.broker_epoch = broker_epoch
        self.controller_endpoint = controller_endpoint
        self.config = config
        self.sleep = sleep

    def run(self) -> bool:
        """True when the controller moved every leader away; False after the last failed attempt (or when
        disabled)."""
        c = self.config
        if not c.enable:
            return False
        log.info("starting controlled shutdown %s", kv(broker=self.broker_id, max_retries=c.max_retries))
        t0 = time.monotonic()

        def before_sleep(rs: tenacity.RetryCallState) -> None:
            log.info("retrying controlled shutdown after the previous attempt failed %s",
                     kv(attempt=rs.attempt_number, reason=rs.outcome.exception(), backoff_ms=c.retry_backoff_ms))
        try:
            for attempt in tenacity.Retrying(stop=tenacity.stop_after_attempt(c.max_retries),
                                             wait=tenacity.wait_fixed(c.retry_backoff_ms / 1000.0),
                                             retry=tenacity.retry_if_exception_type(ControlledShutdownNotDone),
                                             sleep=self.sleep, before_sleep=before_sleep, reraise=True):
                with attempt:
                    self._attempt()
        except ControlledShutdownNotDone as e:
            log.warning("proceeding to do an unclean shutdown as all the controlled shutdown attempts failed %s",
                        kv(broker=self.broker_id, last=e))
            return False
        log.info("controlled shutdown succeeded %s", kv(broker=self.broker_id,
                                                        ms=round((time.monotonic() - t0) * 1000, 1)))
        return True

    def _attempt(self) -> None:
        endpoint = self.controller_endpoint()
        if endpoint is None:
            raise ControlledShutdownNotDone("no controller known")
        cid, host, port = endpoint
        client = BrokerClient(host, port, client_id=f"broker-{self.broker_id}-controlled-shutdown",
                              timeout_s=self.config.request_timeout_ms / 1000.0, login=self.login)
        try:
            request = ControlledShutdownRequestData(broker_id=self.broker_id, broker_epoch=self.broker_epoch())
            resp = ControlledShutdownResponseData.from_wire(client.send(
                request.to_wire(REQUEST_VERSION), ControlledShutdownResponse, REQUEST_VERSION))
        except BrokerConnectionError as e:
            raise ControlledShutdownNotDone(f"controller {cid}: {e}") from e
        except ControlMessageError as e:
            raise ControlledShutdownNotDone(f"malformed answer from controller {cid}: {e}") from e
        finally:
            client.close()
        result = ControlledShutdownResult(Errors(resp.error_code), tuple(
            TopicPartition(p.topic_name, p.partition_index) for p in resp.remaining_partitions))
        if not result.succeeded:
            if result.error != Errors.NONE:
                raise ControlledShutdownNotDone(f"error from controller {cid}: {result.error.name}")
            raise ControlledShutdownNotDone(f"remaining partitions to move: "
                                            f"{','.join(map(str, result.remaining[:20]))}"
                                            f"{'...' if len(result.remaining) > 20 else ''}")
