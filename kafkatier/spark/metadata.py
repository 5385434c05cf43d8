"""What the driver asks the brokers before any task runs: are they reachable, do the topics exist, which
partitions do they have and what are their log start and end offsets.

Spark's Kafka source asks the same questions through its ``KafkaOffsetReader`` (a Java consumer on the
driver).  Here a writer's checks use one producer; a read is planned by one consumer
(:class:`OffsetReader`) asking for every partition's offsets at once.  Every call has a deadline, and every
failure is one :class:`BrokerCheckError` that names the brokers and the topic.
"""
from __future__ import annotations

import errno
import re
import socket
from collections.abc import Iterable, Mapping

from kafkatier.spark.options import DataSourceOptionError, Subscription, TopicPartition

DEFAULT_TIMEOUT_S = 10.0
# ListOffsets' special timestamps: the log start offset and the log end (or last stable) offset.
LIST_EARLIEST, LIST_LATEST = -2, -1
DRIVER_GROUP_ID = "kafkatier-spark-driver"
# How long the driver's first TCP probe of a bootstrap address may take before librdkafka is asked.
PROBE_TIMEOUT_S = 1.0
# librdkafka reports refused connections itself at level 3; the driver reports them in one error instead.
QUIET = {"log_level": 0}


class BrokerCheckError(RuntimeError):
    """The brokers cannot answer, or a topic or partition the job needs does not exist."""


def _unreachable(servers: str, timeout_s: float, e: BaseException) -> BrokerCheckError:
    return BrokerCheckError(f"cannot reach the Kafka brokers at {servers} within {timeout_s:g} s: {e}")


def probe_bootstrap(servers: str, timeout_s: float) -> None:
    """Fail at once when every bootstrap address refuses TCP connections or does not resolve (no broker
    listens there): librdkafka would retry until the whole timeout ran out.  An address that accepts, or
    answers nothing within the probe's timeout (a firewall, a paused host), is left to the client's checks."""
    reasons = []
    for server in servers.split(","):
        host, _, port = server.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=min(PROBE_TIMEOUT_S, timeout_s)):
                return
        except socket.gaierror as e:
            reasons.append(f"{server}: {e.strerror or e}")
        except ConnectionRefusedError:
            reasons.append(f"{server}: connection refused")
        except OSError as e:
            if e.errno not in (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH):
                return                          # a timeout: unknown, let librdkafka wait for it
            reasons.append(f"{server}: {e.strerror or e}")
    raise BrokerCheckError(f"cannot reach the Kafka brokers at {servers}: {'; '.join(reasons)}")


def check_topic_writable(producer_config: Mapping[str, str], topic: str | None, timeout_s: float) -> None:
    """The brokers answer Metadata and ``topic`` (when given) exists or is auto-created by them.

    The Metadata request carries the producer's ``allow.auto.create.topics`` (librdkafka's producer default
    is true, like the Java producer), so a broker with ``auto.create.topics.enable=true`` creates the topic as
    the first write would have."""
    from confluent_kafka import KafkaError, KafkaException, Producer

    servers = producer_config["bootstrap.servers"]
    try:        # librdkafka refuses unknown or ill-typed properties when a client is built
        producer = Producer({**producer_config, **QUIET})
    except (KafkaException, ValueError, TypeError) as e:
        raise DataSourceOptionError(f"bad kafka.* option: {e}") from None
    try:
        probe_bootstrap(servers, timeout_s)
        try:
            md = producer.list_topics(topic, timeout=timeout_s)
        except KafkaException as e:
            raise _unreachable(servers, timeout_s, e) from None
        if not md.brokers:
            raise _unreachable(servers, timeout_s, "no broker in the Metadata answer")
        if topic is None:
            return
        t = md.topics.get(topic)
        if t is None or (t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            raise BrokerCheckError(f"topic {topic!r} does not exist and was not auto-created "
                                   f"(brokers {servers}; create it first, or enable auto.create.topics.enable "
                                   "on the brokers and allow.auto.create.topics on the producer)")
    finally:
        producer.flush(0)


def resolve_subscription(subscription: Subscription, topics: Mapping[str, int]) -> list[TopicPartition]:
    """The partitions a subscription covers, sorted; a named topic or partition that does not exist raises."""
    if subscription.kind == "subscribe":
        missing = [t for t in subscription.topics if t not in topics]
        if missing:
            raise BrokerCheckError(f"topic(s) {', '.join(map(repr, missing))} do not exist")
        return [TopicPartition(t, p) for t in sorted(set(subscription.topics)) for p in range(topics[t])]
    if subscription.kind == "subscribePattern":
        rx = re.compile(subscription.pattern)
        matched = sorted(t for t in topics if rx.fullmatch(t) and not t.startswith("__"))
        if not matched:
            raise BrokerCheckError(f"no topic matches subscribePattern {subscription.pattern!r}")
        return [TopicPartition(t, p) for t in matched for p in range(topics[t])]
    for tp in subscription.partitions:
        if tp.topic not in topics:
            raise BrokerCheckError(f"topic {tp.topic!r} (option assign) does not exist")
        if not 0 <= tp.partition < topics[tp.topic]:
            raise BrokerCheckError(f"partition {tp} (option assign) does not exist: {tp.topic!r} has "
                                   f"{topics[tp.topic]} partition(s)")
    return sorted(set(subscription.partitions), key=lambda tp: (tp.topic, tp.partition))


class OffsetReader:
    """The driver's questions for a read (Spark's ``KafkaOffsetReader``): one librdkafka consumer, built
    once per job, answers them all, and the offsets of every partition come in one ListOffsets per leader
    for the log start offsets and one for the log end offsets (librdkafka groups the partitions by leader).

    Building the consumer checks the ``kafka.*`` options (librdkafka refuses unknown or ill-typed
    properties), so a bad option is reported before the brokers are asked anything.  The consumer joins no
    group and commits nothing; ``isolation.level`` is the job's, so ``latest`` is the last stable offset
    under read_committed, as the tasks' consumers will see it."""

    def __init__(self, consumer_config: Mapping[str, str], timeout_s: float):
        from confluent_kafka import Consumer, KafkaException

        self.servers = consumer_config["bootstrap.servers"]
        self.timeout_s = timeout_s
        try:
            self._consumer = Consumer({**consumer_config, **QUIET, "group.id": DRIVER_GROUP_ID,
                                       "enable.auto.commit": "false"})
        except (KafkaException, ValueError, TypeError) as e:
            raise DataSourceOptionError(f"bad kafka.* option: {e}") from None

    def __enter__(self) -> OffsetReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._consumer.close()

    def topic_partitions(self) -> dict[str, int]:
        """``{topic: partition count}`` of every topic the brokers list (internal topics included)."""
        from confluent_kafka import KafkaException

        probe_bootstrap(self.servers, self.timeout_s)
        try:
            md = self._consumer.list_topics(timeout=self.timeout_s)
        except KafkaException as e:
            raise _unreachable(self.servers, self.timeout_s, e) from None
        if not md.brokers:
            raise _unreachable(self.servers, self.timeout_s, "no broker in the Metadata answer")
        return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}

    def watermarks(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """``{tp: (log start offset, log end offset)}`` from the partitions' leaders (ListOffsets for
        ``earliest`` and ``latest``, every partition at once).

        With tiered storage the log start offset is the first offset still in remote storage, so reading from
        it reads the remote tier."""
        partitions = list(partitions)
        if not partitions:
            return {}
        low = self._list_offsets(partitions, LIST_EARLIEST)
        high = self._list_offsets(partitions, LIST_LATEST)
        return {tp: (low[tp], high[tp]) for tp in partitions}

    def _list_offsets(self, partitions: list[TopicPartition], spec: int) -> dict[TopicPartition, int]:
        """One ListOffsets per leader; a leader that just died answers nothing until the controller elects
        another, so the partitions without an answer are asked again until the deadline."""
        from confluent_kafka import KafkaException
        from confluent_kafka import TopicPartition as CkTopicPartition
        from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

        out: dict[TopicPartition, int] = {}

        def ask() -> None:
            pending = [tp for tp in partitions if tp not in out]
            answers = self._consumer.offsets_for_times(
                [CkTopicPartition(tp.topic, tp.partition, spec) for tp in pending], timeout=min(self.timeout_s, 5.0))
            failed = {}
            for tp, a in zip(pending, answers):
                if a.error is None and a.offset >= 0:
                    out[tp] = a.offset
                else:
                    failed[tp] = a.error or f"no offset in the answer ({a.offset})"
            if failed:
                raise _Unanswered(failed)

        retrying = Retrying(stop=stop_after_delay(self.timeout_s), wait=wait_exponential(multiplier=0.1, max=1.0),
                            retry=retry_if_exception_type((KafkaException, _Unanswered)), reraise=True)
        try:
            retrying(ask)
        except (KafkaException, _Unanswered) as e:
            pending = [tp for tp in partitions if tp not in out]
            whose = "its leader" if len(pending) == 1 else "their leaders"
            reason = next(iter(e.errors.values())) if isinstance(e, _Unanswered) else e
            raise BrokerCheckError(f"cannot read the offsets of {', '.join(map(str, pending))} from {whose} "
                                   f"within {self.timeout_s:g} s: {reason}") from None
        return out


class _Unanswered(Exception):
    """Partitions whose leader gave no offset: ``{tp: error}``."""

    def __init__(self, errors: dict):
        super().__init__(errors)
        self.errors = errors
