"""The options of the ``kafkatier`` data source, checked and typed once on the driver.

Follows Spark's ``KafkaSourceProvider`` option rules (``kafka.*`` options go to the Kafka client without the
prefix; the options Spark owns are refused; ``topic`` on the sink overrides a ``topic`` column) and its offset
JSON (``{"t":{"0":23,"1":-2}}``, -2 = earliest, -1 = latest).  Options arrive from Spark as strings in a
case-insensitive dict; everything here turns them into frozen values before any task runs, so a bad option is
one :class:`DataSourceOptionError` on the driver and never a failure inside a task.

Differences from Spark: the client inside the tasks is confluent-kafka (librdkafka), so ``kafka.*`` options
take librdkafka's names.  Java-only names (``buffer.memory``, ``max.block.ms``, ...) are refused on the driver
with librdkafka's own message rather than ignored.
"""
from __future__ import annotations

import difflib
import json
import re
import uuid
from collections.abc import Iterable, Mapping

import attrs

from kafkatier.common.structs import TopicPartition

KAFKA_PREFIX = "kafka."
EARLIEST, LATEST = -2, -1

# Options Spark's Kafka source and sink refuse: the data source owns them.
REFUSED_KAFKA_OPTIONS = {
    "group.id": "the data source assigns partitions itself and joins no consumer group",
    "auto.offset.reset": "use startingOffsets/endingOffsets and failOnDataLoss instead",
    "key.serializer": "keys are sent as bytes (a string key is UTF-8 encoded)",
    "value.serializer": "values are sent as bytes (a string value is UTF-8 encoded)",
    "key.deserializer": "keys are always read as binary",
    "value.deserializer": "values are always read as binary",
    "enable.auto.commit": "the data source commits no offsets",
    "interceptor.classes": "librdkafka has no interceptors",
}

# The producer's settings unless a ``kafka.*`` option says otherwise: Spark's sink is acks=all through the
# Java client's defaults; idempotence keeps librdkafka's retries from writing a batch twice; murmur2 is the
# Java client's partitioner, so a keyed row lands where a Java producer would put it.
PRODUCER_DEFAULTS = {
    "acks": "all",
    "enable.idempotence": "true",
    "partitioner": "murmur2_random",
    "linger.ms": "5",
    "delivery.report.only.error": "true",
}

# read_committed (librdkafka's default; the Java client's is read_uncommitted): a reader sees what
# exactly-once jobs committed, never an aborted or still-open transaction's records, and ``latest`` is the
# last stable offset.
CONSUMER_DEFAULTS = {
    "isolation.level": "read_committed",
    "enable.auto.commit": "false",
    "enable.partition.eof": "true",
    "check.crcs": "false",
}


class DataSourceOptionError(ValueError):
    """A bad option or DataFrame schema, found on the driver before any task runs."""


# The data source's own options (``kafka.*`` ones go to librdkafka, which checks their names itself).  Spark
# ignores options a source does not know, so a misspelt ``startingOffset`` would silently read the whole
# topic: a name close to one of these is refused with the right one.  ``path`` is Spark's own (``save(path)``).
WRITER_OPTION_NAMES = ("topic", "exactlyOnce", "transactionalIdPrefix", "metadataTimeoutMs")
READER_OPTION_NAMES = ("subscribe", "subscribePattern", "assign", "startingOffsets", "endingOffsets",
                       "failOnDataLoss", "includeHeaders", "minPartitions", "kafkaConsumer.pollTimeoutMs",
                       "maxRecordsPerBatch", "isolation.level", "metadataTimeoutMs")
KNOWN_OPTION_NAMES = frozenset(WRITER_OPTION_NAMES + READER_OPTION_NAMES + ("path",))
SUGGESTION_CUTOFF = 0.8


def check_option_names(options: Mapping[str, str]) -> None:
    """A non-``kafka.*`` option whose name is close to (but not) one of the data source's options is a typo:
    refuse it, naming the option meant (``startingOffset`` -> ``startingOffsets``).  Other unknown names are
    ignored, as Spark's Kafka source ignores them."""
    known = {k.lower(): k for k in KNOWN_OPTION_NAMES}
    for name in options:
        lowered = name.lower()
        if lowered in known or lowered.startswith(KAFKA_PREFIX):
            continue
        close = difflib.get_close_matches(lowered, list(known), n=1, cutoff=SUGGESTION_CUTOFF)
        if close:
            raise DataSourceOptionError(f"unknown option {name!r}: did you mean {known[close[0]]!r}?")
        if lowered.startswith("kafka") and lowered[5:6] != ".":
            raise DataSourceOptionError(f"unknown option {name!r}: did you mean 'kafka.{name[5:].lstrip('_-:')}'? "
                                        "(Kafka client options take the prefix 'kafka.')")
        if f"{KAFKA_PREFIX}{lowered}" in _CLIENT_OPTION_HINTS:
            raise DataSourceOptionError(f"unknown option {name!r}: did you mean 'kafka.{name}'? (Kafka client "
                                        "options take the prefix 'kafka.')")


# Client options users most often give without the ``kafka.`` prefix.
_CLIENT_OPTION_HINTS = frozenset({"kafka.bootstrap.servers", "kafka.acks", "kafka.linger.ms", "kafka.compression.type",
                                  "kafka.security.protocol", "kafka.transaction.timeout.ms",
                                  "kafka.request.timeout.ms", "kafka.batch.size", "kafka.client.id"})


def metadata_timeout_s(options: Mapping[str, str], default_s: float) -> float:
    """How long the driver's broker checks may take: ``metadataTimeoutMs``, else ``kafka.request.timeout.ms``,
    else ``default_s``."""
    given = _int(options, "metadataTimeoutMs", None, 1)
    if given is None:
        given = _int(options, "kafka.request.timeout.ms", None, 1)
    return given / 1000 if given is not None else default_s


# ---------------------------------------------------------------------------------------------- common

def _get(options: Mapping[str, str], name: str) -> str | None:
    """Options are case-insensitive in Spark; a plain dict (tests, jobs) is searched the same way."""
    if name in options:
        return options[name]
    lowered = name.lower()
    for k, v in options.items():
        if k.lower() == lowered:
            return v
    return None


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = _get(options, name)
    if text is None:
        return default
    t = str(text).strip().lower()
    if t not in ("true", "false"):
        raise DataSourceOptionError(f"option {name} must be true or false, got {text!r}")
    return t == "true"


def _int(options: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    text = _get(options, name)
    if text is None:
        return default
    try:
        value = int(str(text).strip())
    except ValueError:
        raise DataSourceOptionError(f"option {name} must be an integer, got {text!r}") from None
    if value < minimum:
        raise DataSourceOptionError(f"option {name} must be >= {minimum}, got {value}")
    return value


def kafka_params(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options without their prefix; a refused one or a missing bootstrap list raises."""
    params = {}
    for k, v in options.items():
        if k.lower().startswith(KAFKA_PREFIX):
            name = k[len(KAFKA_PREFIX):]
            reason = REFUSED_KAFKA_OPTIONS.get(name.lower())
            if reason:
                raise DataSourceOptionError(f"Kafka option '{name}' is not supported: {reason}")
            params[name] = str(v)
    servers = [s.strip() for s in params.get("bootstrap.servers", "").split(",") if s.strip()]
    if not servers:
        raise DataSourceOptionError("option kafka.bootstrap.servers is required (comma-separated host:port)")
    for s in servers:
        if not re.fullmatch(r"[^\s:]+:\d+", s):
            raise DataSourceOptionError(f"kafka.bootstrap.servers: {s!r} is not host:port")
    params["bootstrap.servers"] = ",".join(servers)
    return params


# ---------------------------------------------------------------------------------------------- writer

# Exactly-once writes: Kafka's default transaction.max.timeout.ms, so the transaction a task leaves open for the
# driver to commit survives a long job.
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000
# Attempts above the highest one reported whose ids the driver fences too: the later attempts of a task that
# failed every time (Spark's spark.task.maxFailures defaults to 4), or a speculative copy.
SPARE_ATTEMPTS = 4


@attrs.frozen
class ExactlyOnce:
    """``exactlyOnce=true``: each task attempt writes in a transaction ``<prefix>-<partition id>-<attempt>``
    that the driver commits; ``prefix`` is ``transactionalIdPrefix`` (a job id: a re-run with the same one
    fences the previous run's open transactions) or a random one per job.

    One id per attempt, not per partition: a failed attempt's Python worker can outlive its task and call
    InitProducerId after the retried attempt did; with a shared id that late call would fence the attempt whose
    result Spark keeps.  The driver fences the other attempts' ids instead (:meth:`attempt_ids`)."""

    prefix: str
    timeout_ms: int

    def transactional_id(self, partition_id: int, attempt: int) -> str:
        return f"{self.prefix}-{partition_id}-{attempt}"

    def attempt_ids(self, partitions: Iterable[int], highest_attempt: int) -> list[str]:
        """Every id the tasks of ``partitions`` may have used, attempts 0 to ``highest_attempt`` and the spares."""
        return [self.transactional_id(p, a) for p in partitions
                for a in range(highest_attempt + 1 + SPARE_ATTEMPTS)]


@attrs.frozen
class WriterOptions:
    """What the sink needs in every task: the producer's configuration and the ``topic`` option."""

    producer_config: dict[str, str]
    topic: str | None
    flush_timeout_s: float
    exactly_once: ExactlyOnce | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriterOptions:
        check_option_names(options)
        params = kafka_params(options)
        config = {**PRODUCER_DEFAULTS, **params}
        # Handled by confluent-kafka's Python layer, which wants a bool rather than librdkafka's strings.
        config["delivery.report.only.error"] = str(config["delivery.report.only.error"]).lower() == "true"
        topic = _get(options, "topic")
        if topic is not None and not topic.strip():
            raise DataSourceOptionError("option topic is empty")
        # librdkafka gives up on a record after message.timeout.ms (default 300 s); flush waits a bit longer.
        timeout_ms = _int(config, "message.timeout.ms", 300_000, 0) or 300_000
        exactly_once = None
        if _bool(options, "exactlyOnce", False):
            if "transactional.id" in config:
                raise DataSourceOptionError("Kafka option 'transactional.id' is not supported: with exactlyOnce each "
                                            "task attempt's id is <transactionalIdPrefix>-<partition id>-<attempt>")
            prefix = _get(options, "transactionalIdPrefix")
            if prefix is not None and not prefix.strip():
                raise DataSourceOptionError("option transactionalIdPrefix is empty")
            prefix = prefix.strip() if prefix else f"kafkatier-spark-{uuid.uuid4().hex[:12]}"
            txn_timeout = _int(config, "transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS, 1000)
            config["transaction.timeout.ms"] = str(txn_timeout)
            if config.get("enable.idempotence", "true").lower() == "false" or config.get("acks") not in ("all", "-1"):
                raise DataSourceOptionError("exactlyOnce needs kafka.acks=all and kafka.enable.idempotence=true")
            exactly_once = ExactlyOnce(prefix, txn_timeout)
            timeout_ms = min(timeout_ms, txn_timeout)
        elif _get(options, "transactionalIdPrefix") is not None:
            raise DataSourceOptionError("option transactionalIdPrefix needs exactlyOnce=true")
        return cls(producer_config=config, topic=topic.strip() if topic else None,
                   flush_timeout_s=timeout_ms / 1000 + 30, exactly_once=exactly_once)


# ---------------------------------------------------------------------------------------------- reader

@attrs.frozen
class Subscription:
    """Exactly one of Spark's ``subscribe`` / ``subscribePattern`` / ``assign``."""

    kind: str                                   # "subscribe" | "subscribePattern" | "assign"
    topics: tuple[str, ...] = ()                # subscribe
    pattern: str | None = None                  # subscribePattern
    partitions: tuple[TopicPartition, ...] = ()  # assign

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Subscription:
        given = {k: _get(options, k) for k in ("subscribe", "subscribePattern", "assign")}
        given = {k: v for k, v in given.items() if v is not None}
        if len(given) != 1:
            raise DataSourceOptionError("exactly one of the options subscribe, subscribePattern, assign is required"
                                        + (f" (got {', '.join(sorted(given))})" if given else ""))
        kind, text = next(iter(given.items()))
        if kind == "subscribe":
            topics = tuple(t.strip() for t in text.split(",") if t.strip())
            if not topics:
                raise DataSourceOptionError("option subscribe lists no topic")
            return cls(kind, topics=topics)
        if kind == "subscribePattern":
            try:
                re.compile(text)
            except re.error as e:
                raise DataSourceOptionError(f"option subscribePattern is not a regular expression: {e}") from None
            return cls(kind, pattern=text)
        try:
            parsed = json.loads(text)
            tps = tuple(TopicPartition(str(t), int(p)) for t, ps in parsed.items() for p in ps)
        except (ValueError, TypeError, AttributeError):
            raise DataSourceOptionError(f'option assign must be JSON like {{"topicA":[0,1]}}, got {text!r}') from None
        if not tps:
            raise DataSourceOptionError("option assign lists no partition")
        return cls(kind, partitions=tps)


@attrs.frozen
class OffsetSpec:
    """``earliest``, ``latest`` or per-partition offsets (EARLIEST / LATEST allowed as values)."""

    kind: str                                             # "earliest" | "latest" | "json"
    offsets: tuple[tuple[TopicPartition, int], ...] = ()

    @classmethod
    def parse(cls, name: str, text: str | None, default: str) -> OffsetSpec:
        t = (text if text is not None else default).strip()
        if t.lower() in ("earliest", "latest"):
            if name == "endingOffsets" and t.lower() == "earliest":
                raise DataSourceOptionError("option endingOffsets cannot be earliest")
            return cls(t.lower())
        try:
            parsed = json.loads(t)
            offsets = tuple((TopicPartition(str(topic), int(p)), int(o))
                            for topic, parts in parsed.items() for p, o in parts.items())
        except (ValueError, TypeError, AttributeError):
            raise DataSourceOptionError(f'option {name} must be earliest, latest or JSON like {{"t":{{"0":23,"1":-2}}}}, '
                                        f"got {text!r}") from None
        for tp, o in offsets:
            if o < EARLIEST or (name == "endingOffsets" and o == EARLIEST):
                raise DataSourceOptionError(f"option {name}: offset {o} for {tp} is not valid")
        return cls("json", offsets)

    def as_dict(self) -> dict[TopicPartition, int]:
        return dict(self.offsets)


@attrs.frozen
class ReaderOptions:
    consumer_config: dict[str, str]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    fail_on_data_loss: bool
    include_headers: bool
    min_partitions: int | None
    poll_timeout_s: float
    batch_rows: int

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReaderOptions:
        check_option_names(options)
        params = kafka_params(options)
        isolation = _get(options, "isolation.level")
        if isolation is not None:
            params["isolation.level"] = isolation
        level = params.get("isolation.level", CONSUMER_DEFAULTS["isolation.level"])
        if level not in ("read_committed", "read_uncommitted"):
            raise DataSourceOptionError(f"option isolation.level must be read_committed or read_uncommitted, "
                                        f"got {level!r}")
        return cls(
            consumer_config={**CONSUMER_DEFAULTS, **params},
            subscription=Subscription.parse(options),
            starting=OffsetSpec.parse("startingOffsets", _get(options, "startingOffsets"), "earliest"),
            ending=OffsetSpec.parse("endingOffsets", _get(options, "endingOffsets"), "latest"),
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            include_headers=_bool(options, "includeHeaders", False),
            min_partitions=_int(options, "minPartitions", None, 1),
            # Spark's name and default for how long a task waits for records it knows exist.
            poll_timeout_s=(_int(options, "kafkaConsumer.pollTimeoutMs", 120_000, 1) or 120_000) / 1000,
            batch_rows=_int(options, "maxRecordsPerBatch", 10_000, 1) or 10_000,
        )


def include_headers(options: Mapping[str, str]) -> bool:
    return _bool(options, "includeHeaders", False)
