"""``kafkatier get-offsets``: kafka-get-offsets (GetOffsetShell).

``--topic`` is a regular expression of topic names (all topics without it), ``--partitions`` a comma-separated
list of partition ids, ``--time`` one of ``-1`` / ``latest``, ``-2`` / ``earliest``, ``-3`` / ``max-timestamp``
or a timestamp in ms.  One line per partition, sorted by topic then partition, in Kafka's form
``topic:partition:offset``; a partition with no offset for the time (a timestamp after its last record) is left
out, and one whose request fails is reported on stderr (``Skip getting offsets for topic-partition ...``), as
Kafka does.  ``--topic-partitions`` takes Kafka's patterns instead: ``REGEX[:P | :P-Q | :P- | :-Q]`` separated by
commas.  The offsets are asked with ListOffsets through confluent-kafka's admin client.
"""
from __future__ import annotations

import re
import sys

import attrs

from kafkatier.cli import common
from kafkatier.cli.main import UsageError

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
TIME_NAMES = {"-1": -1, "latest": -1, "-2": -2, "earliest": -2, "-3": -3, "max-timestamp": -3}
TIMEOUT_S = 30.0
TOPIC_PARTITION_PATTERN = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
INT_MAX = 2 ** 31 - 1


@attrs.frozen
class PartitionRule:
    """One topic-partition filter: topics matching ``topic`` (a regular expression), partitions in
    ``partitions`` (a set; empty: all) or in ``[low, high)``."""

    topic: re.Pattern
    partitions: frozenset[int] = frozenset()
    low: int = 0
    high: int = INT_MAX

    def allows_topic(self, topic: str) -> bool:
        return self.topic.fullmatch(topic) is not None

    def allows(self, topic: str, partition: int) -> bool:
        if not self.allows_topic(topic):
            return False
        if self.partitions:
            return partition in self.partitions
        return self.low <= partition < self.high


def _regex(text: str) -> re.Pattern:
    try:
        return re.compile(text)
    except re.error as e:
        raise UsageError(f"{text!r} is not a valid regular expression: {e}") from None


def parse_topic_partitions(text: str) -> list[PartitionRule]:
    """Kafka's ``--topic-partitions`` list."""
    rules = []
    for spec in text.split(","):
        m = TOPIC_PARTITION_PATTERN.fullmatch(spec)
        if not m:
            raise UsageError(f"Invalid rule specification: {spec}")
        topic = _regex(m.group(1) or ".*")
        if m.group(2):
            rules.append(PartitionRule(topic, frozenset({int(m.group(2))})))
        else:
            rules.append(PartitionRule(topic, low=int(m.group(3) or 0), high=int(m.group(4) or INT_MAX)))
    return rules


def register(subparsers) -> None:
    p = common.add_client_command(subparsers, "get-offsets", run,
                                  help="print partitions' offsets for a time (kafka-get-offsets)",
                                  description="Print topic:partition:offset for the partitions of the matching "
                                              "topics at --time.")
    p.add_argument("--topic", help="a regular expression of topic names (default: all topics)")
    p.add_argument("--topic-partitions", metavar="REGEX[:P|:P-Q],...",
                   help="topic-partition patterns (not with --topic / --partitions)")
    p.add_argument("--partitions", metavar="P[,P...]", help="comma-separated partition ids (default: all)")
    p.add_argument("--time", default="-1",
                   help="-1 or latest (default), -2 or earliest, -3 or max-timestamp, or a timestamp in ms")
    p.add_argument("--exclude-internal-topics", action="store_true", help="leave out __consumer_offsets etc.")


def parse_time(text: str) -> int:
    if text in TIME_NAMES:
        return TIME_NAMES[text]
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"Malformed time argument {text}, please use -1 or latest / -2 or earliest / -3 or "
                         "max-timestamp, or a specified long format timestamp") from None
    if value < 0:
        raise UsageError(f"Malformed time argument {text}: negative values other than -1, -2, -3")
    return value


def parse_partitions(text: str | None) -> set[int] | None:
    if not text:
        return None
    try:
        return {int(p) for p in common.split_list(text)}
    except ValueError:
        raise UsageError(f"--partitions expects a comma separated list of numeric partition ids, but received: "
                         f"{text}") from None


def confluent_config(conn: common.Connection) -> dict:
    """librdkafka settings for the resolved brokers (only PLAINTEXT listeners from --command-config's
    security settings are mapped; see docs/cli.md)."""
    cfg = {"bootstrap.servers": ",".join(conn.bootstrap_servers), "log_level": 0}
    kw = conn.client_kwargs
    mapping = {"security_protocol": "security.protocol", "sasl_mechanism": "sasl.mechanism",
               "sasl_plain_username": "sasl.username", "sasl_plain_password": "sasl.password",
               "ssl_cafile": "ssl.ca.location", "ssl_certfile": "ssl.certificate.location",
               "ssl_keyfile": "ssl.key.location", "client_id": "client.id"}
    for k, v in kw.items():
        if k in mapping and v is not None:
            cfg[mapping[k]] = v
    return cfg


def run(args) -> int:
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    when = parse_time(args.time)
    if args.topic_partitions is not None:
        if args.topic is not None or args.partitions is not None:
            raise UsageError("--topic-partitions cannot be used with --topic or --partitions")
        rules = parse_topic_partitions(args.topic_partitions)
    else:
        rules = [PartitionRule(_regex(args.topic or ".*"), frozenset(parse_partitions(args.partitions) or ()))]
    conn = common.connection_from_args(args)
    admin = AdminClient(confluent_config(conn))
    spec = {-1: OffsetSpec.latest(), -2: OffsetSpec.earliest(), -3: OffsetSpec.max_timestamp()}.get(when) \
        or OffsetSpec.for_timestamp(when)
    try:
        md = admin.list_topics(timeout=TIMEOUT_S)
    except KafkaException as e:
        return common.print_error("get-offsets", str(e.args[0]))
    wanted = {}
    for name, t in md.topics.items():
        if args.exclude_internal_topics and name in INTERNAL_TOPICS:
            continue
        for p in t.partitions:
            if any(r.allows(name, p) for r in rules):
                wanted[TopicPartition(name, p)] = spec
    if not wanted:
        return common.print_error("get-offsets", "Could not match any topic-partitions with the specified filters")
    results = {}
    for tp, fut in admin.list_offsets(wanted, request_timeout=TIMEOUT_S).items():
        try:
            offset = fut.result().offset
        except KafkaException as e:
            print(f"Skip getting offsets for topic-partition {tp.topic}:{tp.partition} due to error: "
                  f"{e.args[0].str()}", file=sys.stderr)
            continue
        if offset >= 0:
            results[(tp.topic, tp.partition)] = offset
    for (topic, part), offset in sorted(results.items()):
        print(f"{topic}:{part}:{offset}")
    return 0
