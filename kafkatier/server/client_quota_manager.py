"""ClientQuotaManager: per-client byte-rate quotas (KIP-13, KIP-55 user and client-id quotas), Kafka's
``ClientQuotaManager`` in ZooKeeper mode.

Quotas live in ``/config/users/<user>``, ``/config/clients/<client-id>`` and
``/config/users/<user>/clients/<client-id>`` (``<default>`` names the default entity), in Kafka's entity config JSON
(``{"version":1,"config":{"producer_byte_rate":"1048576"}}``), and change notifications under ``/config/changes``
reach every broker through ``server/dynamic_config_manager.py``.  A request is charged to the most specific quota
that applies, in KIP-55's order: user+client, user+default client, user, default user+client, default
user+default client, default user, client, default client.

Rates are measured as Kafka's ``Rate`` over a ``SampledStat``: ``quota.window.num`` (11) samples of
``quota.window.size.seconds`` (1 s); the window is at least ``num - 1`` samples long, so a new client may burst.
The request-time quota (KIP-124) is ``server/client_request_quota_manager.py``; the managers of one broker are
built together in ``server/quota_factory.py``.
When the measured rate is over the quota the throttle time is Kafka's ``QuotaUtils.throttleTime``:
``(rate - quota) / quota * window``.  The broker answers at once with ``throttle_time_ms`` and mutes the channel
for that time (Kafka 2.0+, KIP-219).
"""
from __future__ import annotations

import threading
import time
from typing import Callable

import attrs

from kafkatier.logsetup import get_logger, kv

log = get_logger("server.client-quota")

DEFAULT = "<default>"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
#: Kafka's ``QuotaConfigs`` client quota keys (DescribeClientQuotas / AlterClientQuotas).
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE)
_INTEGER_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE)

QUOTA_WINDOW_NUM = "quota.window.num"
QUOTA_WINDOW_SIZE_SECONDS = "quota.window.size.seconds"


def parse_quota_value(key: str, value: str | float) -> float:
    """A quota's value as Kafka validates it: byte rates are longs, the others doubles, all > 0.
    Raises ValueError with Kafka's wording."""
    if key not in QUOTA_KEYS:
        raise ValueError(f"Invalid configuration key {key}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"Invalid value {value} for configuration {key}") from None
    if key in _INTEGER_KEYS and number != int(number):
        raise ValueError(f"Integer value {value} for configuration {key} must be an integer")
    if number <= 0:
        raise ValueError(f"Invalid value {value} for configuration {key}: Value must be positive")
    return number


class Rate:
    """Kafka's ``Rate`` over ``SampledStat``: ``samples`` windows of ``window_s`` seconds."""

    def __init__(self, samples: int = 11, window_s: float = 1.0):
        if samples < 2 or window_s <= 0:
            raise ValueError("a rate needs at least 2 samples of a positive length")
        self.samples = samples
        self.window_s = window_s
        self._windows: list[list[float]] = []   # [start, value], oldest first

    def _purge(self, now: float) -> None:
        expire = self.samples * self.window_s
        self._windows = [w for w in self._windows if now - w[0] < expire]

    def record(self, value: float, now: float) -> None:
        self._purge(now)
        if not self._windows or now - self._windows[-1][0] >= self.window_s:
            self._windows.append([now, 0.0])
            del self._windows[:-self.samples]
        self._windows[-1][1] += value

    def window_size(self, now: float) -> float:
        """Kafka's ``Rate.windowSize``: the time since the oldest sample, at least ``samples - 1`` windows."""
        self._purge(now)
        elapsed = now - self._windows[0][0] if self._windows else 0.0
        full = int(elapsed // self.window_s)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_s
        return elapsed

    def measure(self, now: float) -> float:
        size = self.window_size(now)
        return sum(w[1] for w in self._windows) / size if size > 0 else 0.0


@attrs.frozen
class QuotaEntity:
    """The entity a request is charged to: the user (principal name) and client id of its connection."""
    user: str
    client_id: str


def throttle_time_ms(rate: float, quota: float, window_s: float) -> int:
    """Kafka's ``QuotaUtils.throttleTime``: how long to wait for the rate to come back to the quota."""
    if rate <= quota or quota <= 0:
        return 0
    return int(round((rate - quota) / quota * window_s * 1000))


class ClientQuotaManager:
    """One quota type (``producer_byte_rate`` or ``consumer_byte_rate``): the configured quotas by entity and one
    :class:`Rate` per quota entity (all clients sharing a quota share its rate, as in Kafka)."""

    def __init__(self, quota_key: str, *, samples: int = 11, window_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        self.quota_key = quota_key
        self.samples = samples
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        # (user or None, client or None) -> quota; DEFAULT for a default entity
        self._quotas: dict[tuple[str | None, str | None], float] = {}
        self._rates: dict[tuple[str | None, str | None], Rate] = {}
        self.throttled_count = 0

    @property
    def quotas_enabled(self) -> bool:
        return bool(self._quotas)

    def update_quota(self, user: str | None, client_id: str | None, quota: float | None) -> None:
        with self._lock:
            key = (user, client_id)
            if quota is None:
                self._quotas.pop(key, None)
            else:
                self._quotas[key] = quota
            self._rates.clear()   # the quota each entity falls under may have changed

    def quota_for(self, entity: QuotaEntity) -> tuple[tuple[str | None, str | None], float] | None:
        """KIP-55's precedence: the most specific configured quota for the entity, with its key."""
        u, c = entity.user, entity.client_id
        for key in ((u, c), (u, DEFAULT), (u, None), (DEFAULT, c), (DEFAULT, DEFAULT), (DEFAULT, None),
                    (None, c), (None, DEFAULT)):
            q = self._quotas.get(key)
            if q is not None:
                # the metric is shared by every entity matched through a default: keyed by the sanitized entity
                metric_key = (u if key[0] is not None else None, c if key[1] is not None else None)
                return metric_key, q
        return None

    def max_value_in_quota_window(self, entity: QuotaEntity) -> int:
        """Kafka's ``getMaxValueInQuotaWindow``: the most the entity may move in one measurement window,
        ``quota * (samples - 1) * window`` (a fetch is capped to it); without a quota, no bound."""
        with self._lock:
            found = self.quota_for(entity)
        if found is None:
            return 2 ** 31 - 1
        return max(1, min(2 ** 31 - 1, int(found[1] * (self.samples - 1) * self.window_s)))

    def unrecord(self, entity: QuotaEntity, value: float) -> None:
        """Take back ``value`` charged by :meth:`record_and_get_throttle_time_ms` (Kafka's ``unrecordQuotaSensor``: a
        throttled Fetch is answered without its records, so its bytes are not charged)."""
        with self._lock:
            found = self.quota_for(entity)
            rate = self._rates.get(found[0]) if found is not None else None
            if rate is not None:
                rate.record(-value, self._clock())

    def record_and_get_throttle_time_ms(self, entity: QuotaEntity, value: float) -> int:
        """Charge ``value`` (bytes) to the entity's quota; the throttle time its client must wait (0: none)."""
        return self._measure_throttle(entity, value)

    def _rate(self, key: tuple[str | None, str | None]) -> Rate:
        rate = self._rates.get(key)
        if rate is None:
            rate = self._rates[key] = Rate(self.samples, self.window_s)
        return rate

    def _measure_throttle(self, entity: QuotaEntity, value: float | None) -> int:
        """Charge ``value`` (None: nothing) to the entity's rate, then the throttle time from the rate measured now;
        a throttle after a charge is logged."""
        if not self._quotas:
            return 0
        now = self._clock()
        with self._lock:
            found = self.quota_for(entity)
            if found is None:
                return 0
            key, quota = found
            rate = self._rate(key)
            if value is not None:
                rate.record(self._charge(value), now)
            measured = rate.measure(now)
            throttle = self._throttle_time_ms(measured, quota, rate.window_size(now))
        if throttle > 0:
            self.throttled_count += 1
            if value is not None:
                log.debug("throttled %s", kv(quota=self.quota_key, user=entity.user, client_id=entity.client_id,
                                             **self._measured_fields(measured, quota), throttle_ms=throttle))
        return throttle

    def _charge(self, value: float) -> float:
        """What a charge of ``value`` records in the rate (bytes here; a subclass converts its unit)."""
        return value

    def _throttle_time_ms(self, measured: float, quota: float, window_s: float) -> int:
        return throttle_time_ms(measured, quota, window_s)

    def _measured_fields(self, measured: float, quota: float) -> dict:
        return {"rate": int(measured), "limit": int(quota)}
