"""ClientRequestQuotaManager: the request-time quota of a user / client id (KIP-124, ``request_percentage``),
Kafka's ``ClientRequestQuotaManager``.

A quota of ``request_percentage = P`` allows the entity's requests ``P`` percent of one request thread's time:
``200`` is two threads.  Each request is charged its handler time, converted to percent of a second (Kafka's
``nanosToPercentage``: ``nanos * 100 / 1e9``), into the same sampled :class:`Rate` the byte-rate quotas use.
Over the quota, the throttle time is ``(rate - quota) / quota * window``, bounded by one quota window
(``quota.window.size.seconds``, Kafka's ``maxThrottleTimeMs``), and the broker answers with it in
``throttle_time_ms`` and mutes the channel for as long (KIP-219).

Exempt, as in Kafka: the controller's requests to brokers, replica fetches, and the requests that precede or
make authentication (ApiVersions answered by the network layer, SaslHandshake, SaslAuthenticate).

Difference from Kafka: only handler time is charged.  Kafka adds each request's network-thread time (reading the
request, writing the response) after the response is sent; here one I/O thread serves every connection and its
time is not attributed per request.
"""
from __future__ import annotations

import time
from typing import Callable

from kafkatier.server.client_quota_manager import (REQUEST_PERCENTAGE, ClientQuotaManager, QuotaEntity,
                                                   throttle_time_ms)

NANOS_TO_PERCENTAGE = 100.0 / 1e9


def nanos_to_percentage(nanos: int) -> float:
    """Kafka's ``ClientRequestQuotaManager.nanosToPercentage``: thread time as percent of one second."""
    return nanos * NANOS_TO_PERCENTAGE


class ClientRequestQuotaManager(ClientQuotaManager):
    """``request_percentage`` quotas by entity and one :class:`Rate` (percent) per quota entity."""

    def __init__(self, *, samples: int = 11, window_s: float = 1.0, clock: Callable[[], float] = time.monotonic):
        super().__init__(REQUEST_PERCENTAGE, samples=samples, window_s=window_s, clock=clock)
        self.max_throttle_time_ms = int(window_s * 1000)

    def record(self, entity: QuotaEntity, nanos: int) -> None:
        """Charge a request's thread time without deciding a throttle (Produce and Fetch decide theirs when they
        answer, from :meth:`throttle_time_ms`)."""
        if not self._quotas:
            return
        now = self._clock()
        with self._lock:
            found = self.quota_for(entity)
            if found is not None:
                self._rate(found[0]).record(nanos_to_percentage(nanos), now)

    def throttle_time_ms(self, entity: QuotaEntity) -> int:
        """The entity's throttle time from the rate measured now (0: within its quota or no quota)."""
        return self._measure_throttle(entity, None)

    def record_and_get_throttle_time_ms(self, entity: QuotaEntity, value: float) -> int:
        """Charge ``value`` nanoseconds of thread time; the throttle time the client must wait (0: none)."""
        return self._measure_throttle(entity, value)

    def _charge(self, value: float) -> float:
        return nanos_to_percentage(int(value))

    def _throttle_time_ms(self, measured: float, quota: float, window_s: float) -> int:
        return min(throttle_time_ms(measured, quota, window_s), self.max_throttle_time_ms)

    def _measured_fields(self, measured: float, quota: float) -> dict:
        return {"percent": round(measured, 2), "limit": quota}
