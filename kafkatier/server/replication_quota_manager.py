"""ReplicationQuotaManager: one byte-rate limit shared by several threads (Kafka's ``ReplicationQuotaManager``),
used three times per broker as in Kafka's ``QuotaFactory``: the intra-broker move throttle
(``alterLogDirsReplicationQuotaManager``) and the two inter-broker replication throttles, ``leader`` (a leader
answering a follower's fetch) and ``follower`` (the replica fetcher), whose rates are the dynamic broker configs
``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate``.

Kafka samples the bytes moved in ``alter.log.dirs.replication.quota.window.num`` (11) windows of
``alter.log.dirs.replication.quota.window.size.seconds`` (1 s) and lets a move thread skip a round while the
measured rate is above the limit.  Here the same contract is kept with a token bucket, which gives the same
long-run rate with less code and an exact answer to "how long until the next read may run":

- :meth:`allowance` says how many bytes the next read may take (0 = wait :meth:`wait_time` first);
- :meth:`record` charges the bytes actually read (a read may exceed the allowance by one record batch: the
  bucket goes into debt and the next reads wait for it);
- :meth:`set_rate` applies a new limit at once (threads waiting on the old one are woken) and forgives the
  debt run up under the old limit, so raising a throttle takes effect immediately.

``LONG_MAX`` (the default) means unlimited.  The burst is one second of the rate, at least one byte.

Which partitions a replication throttle applies to (Kafka's ``markThrottled`` / ``isThrottled``) comes from the
topic configs ``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas``:
``*`` (every replica) or ``partition:broker,...``, of which a broker keeps the entries naming itself
(Kafka's ``QuotaConfigHandler.parseThrottledPartitions``).  :class:`ThrottledReplicas` reads them through the
broker's topic config cache when asked, parsing each distinct value once, instead of Kafka's push from the
topic config handler: a value set before the broker started needs no separate bootstrap, and a change is seen
as soon as the cache has it.  As in Kafka (``shouldLeaderThrottle`` / ``shouldFollowerThrottle``) a throttled
partition is only held back while its replica is out of sync and the measured rate is over the limit
(:meth:`ReplicationQuotaManager.is_quota_exceeded`); partitions not listed are never slowed.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Mapping

from kafkatier.logsetup import get_logger, kv

log = get_logger("server.replication-quota")

LONG_MAX = (1 << 63) - 1

LEADER_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE = "follower.replication.throttled.rate"
LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"

#: Every partition of the topic is throttled (the ``*`` value).
ALL_REPLICAS = "*"


def parse_throttled_partitions(value: str, broker_id: int) -> frozenset[int] | str:
    """Kafka's ``parseThrottledPartitions``: the partitions of ``value`` (``*`` or ``partition:broker,...``)
    whose replica is on ``broker_id``, or :data:`ALL_REPLICAS`.  Raises ValueError for a malformed value (the
    topic config validator refuses those; one written to ZooKeeper by hand is ignored by the caller)."""
    text = value.strip()
    if text == ALL_REPLICAS:
        return ALL_REPLICAS
    out = set()
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        partition, sep, broker = item.partition(":")
        if not sep or not partition.strip().isdigit() or not broker.strip().isdigit():
            raise ValueError(f"not a partition:broker pair: {item!r}")
        if int(broker) == broker_id:
            out.add(int(partition))
    return frozenset(out)


class ThrottledReplicas:
    """Which of this broker's replicas one throttle applies to: ``(topic, partition) -> bool``, from the topic
    config ``config_name`` as the broker's topic config cache (``topic -> overrides``) holds it."""

    def __init__(self, broker_id: int, config_name: str, topic_config: Callable[[str], Mapping[str, str]]):
        self.broker_id = broker_id
        self.config_name = config_name
        self._topic_config = topic_config
        self._parsed: dict[str, frozenset[int] | str] = {}  # value -> partitions; a few distinct values at most

    def __call__(self, topic: str, partition: int) -> bool:
        value = self._topic_config(topic).get(self.config_name)
        if not value:
            return False
        parsed = self._parsed.get(value)
        if parsed is None:
            try:
                parsed = parse_throttled_partitions(value, self.broker_id)
            except ValueError as e:
                log.warning("ignoring a malformed throttled replica list %s",
                            kv(topic=topic, config=self.config_name, value=value, error=e))
                parsed = frozenset()
            if len(self._parsed) > 1000:
                self._parsed.clear()
            self._parsed[value] = parsed
        return parsed == ALL_REPLICAS or partition in parsed


class ReplicationQuotaManager:
    def __init__(self, rate_bytes_per_s: int = LONG_MAX, clock: Callable[[], float] = time.monotonic,
                 throttled: Callable[[str, int], bool] | None = None):
        self._clock = clock
        self._throttled = throttled
        self._cond = threading.Condition()
        self._rate = LONG_MAX
        self._tokens = 0.0
        self._last = clock()
        self._total = 0
        self.set_rate(rate_bytes_per_s)

    @property
    def rate(self) -> int:
        return self._rate

    @property
    def unlimited(self) -> bool:
        return self._rate >= LONG_MAX

    @property
    def total_bytes(self) -> int:
        """Bytes recorded since start-up (for metrics)."""
        return self._total

    def set_rate(self, rate_bytes_per_s: int) -> None:
        if rate_bytes_per_s < 0:
            raise ValueError(f"a replication quota must be >= 0, got {rate_bytes_per_s}")
        with self._cond:
            self._rate = rate_bytes_per_s
            self._last = self._clock()
            self._tokens = 0.0 if self.unlimited else min(float(self._burst()), max(self._tokens, 0.0))
            self._cond.notify_all()

    def _burst(self) -> int:
        return max(1, self._rate)

    def _refill(self) -> None:
        now = self._clock()
        if not self.unlimited:
            self._tokens = min(float(self._burst()), self._tokens + (now - self._last) * self._rate)
        self._last = now

    def allowance(self) -> int:
        """Bytes the next read may take (LONG_MAX when unlimited, 0 when the caller must wait)."""
        with self._cond:
            if self.unlimited:
                return LONG_MAX
            self._refill()
            return int(self._tokens) if self._tokens >= 1 else 0

    def wait_time(self) -> float:
        """Seconds until at least one byte is allowed."""
        with self._cond:
            if self.unlimited:
                return 0.0
            self._refill()
            if self._tokens >= 1:
                return 0.0
            return (1 - self._tokens) / self._rate if self._rate > 0 else 3600.0

    def is_throttled(self, topic: str, partition: int) -> bool:
        """Whether this throttle applies to the partition (never, without a throttled replica list)."""
        return self._throttled is not None and self._throttled(topic, partition)

    def is_quota_exceeded(self) -> bool:
        """Kafka's ``isQuotaExceeded``: the bytes recorded are ahead of the rate (no byte allowed right now)."""
        return self.allowance() == 0

    def record(self, n_bytes: int) -> None:
        with self._cond:
            self._total += n_bytes
            if not self.unlimited:
                self._refill()
                self._tokens -= n_bytes

    def await_allowance(self, stop: threading.Event, max_wait_s: float = 1.0) -> int:
        """Wait (at most ``max_wait_s``, less if the rate changes or ``stop`` is set) for a positive allowance;
        returns it, or 0 if there is none yet."""
        allowed = self.allowance()
        if allowed > 0 or stop.is_set():
            return allowed
        with self._cond:
            self._cond.wait(min(max_wait_s, max(self.wait_time(), 0.001)))
        return self.allowance()


class ReplicationQuotas:
    """The two inter-broker replication throttles of one broker (Kafka's ``QuotaFactory.QuotaManagers``
    ``leader`` and ``follower``), each applied to the replicas its topic config lists for this broker."""

    RATE_CONFIGS = frozenset({LEADER_THROTTLED_RATE, FOLLOWER_THROTTLED_RATE})

    def __init__(self, broker_id: int, topic_config: Callable[[str], Mapping[str, str]]):
        self.leader = ReplicationQuotaManager(
            throttled=ThrottledReplicas(broker_id, LEADER_THROTTLED_REPLICAS, topic_config))
        self.follower = ReplicationQuotaManager(
            throttled=ThrottledReplicas(broker_id, FOLLOWER_THROTTLED_REPLICAS, topic_config))

    def reconfigure(self, effective: Mapping[str, str]) -> None:
        """Apply the broker's effective ``*.replication.throttled.rate`` values (absent: unlimited)."""
        for quota, name in ((self.leader, LEADER_THROTTLED_RATE), (self.follower, FOLLOWER_THROTTLED_RATE)):
            value = effective.get(name)
            rate = int(value) if value is not None else LONG_MAX
            if rate != quota.rate:
                log.info("replication throttle changed %s", kv(config=name, rate=rate))
                quota.set_rate(rate)
