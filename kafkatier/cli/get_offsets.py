"""``kafkatier get-offsets``: kafka-get-offsets (GetOffsetShell).

``--topic`` is a regular expression of topic names (all topics without it), ``--partitions`` a comma-separated
list of partition ids, ``--time`` one of ``-1`` / ``latest``, ``-2`` / ``earliest``, ``-3`` / ``max-timestamp``
or a timestamp in ms.  One line per partition, sorted by topic then partition, in Kafka's form
``topic:partition:offset``; a partition with no offset for the time (a timestamp after its last record) prints
``topic:partition:`` as Kafka does.  The offsets are asked with ListOffsets through confluent-kafka's admin client.
"""
from __future__ import annotations

import re

from kafkatier.cli import common
from kafkatier.cli.main import UsageError

TIME_NAMES = {"-1": -1, "latest": -1, "-2": -2, "earliest": -2, "-3": -3, "max-timestamp": -3}
TIMEOUT_S = 30.0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "get-offsets", help="print partitions' offsets for a time (kafka-get-offsets)",
        description="Print topic:partition:offset for the partitions of the matching topics at --time.")
    common.add_connection_options(p)
    p.add_argument("--topic", help="a regular expression of topic names (default: all topics)")
    p.add_argument("--partitions", metavar="P[,P...]", help="comma-separated partition ids (default: all)")
    p.add_argument("--time", default="-1",
                   help="-1 or latest (default), -2 or earliest, -3 or max-timestamp, or a timestamp in ms")
    p.add_argument("--exclude-internal-topics", action="store_true", help="leave out __consumer_offsets etc.")
    p.set_defaults(func=run)


def parse_time(text: str) -> int:
    if text in TIME_NAMES:
        return TIME_NAMES[text]
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"Malformed time argument {text}. Please use -1 or latest / -2 or earliest / -3 or "
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
        raise UsageError(f"--partitions must be comma-separated integers, not {text!r}") from None


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
    partitions = parse_partitions(args.partitions)
    try:
        pattern = re.compile(args.topic) if args.topic else None
    except re.error as e:
        raise UsageError(f"--topic is not a valid regular expression: {e}") from None
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
        if pattern is not None and not pattern.fullmatch(name):
            continue
        if args.exclude_internal_topics and name.startswith("__"):
            continue
        for p in t.partitions:
            if partitions is None or p in partitions:
                wanted[TopicPartition(name, p)] = spec
    if not wanted:
        if args.topic or partitions is not None:
            return common.print_error("get-offsets", f"Could not match any topic-partitions with the specified "
                                                     f"filters ({args.topic or '.*'}, {args.partitions or 'all'})")
        return 0
    results = {}
    for tp, fut in admin.list_offsets(wanted, request_timeout=TIMEOUT_S).items():
        try:
            results[(tp.topic, tp.partition)] = fut.result().offset
        except KafkaException as e:
            return common.print_error("get-offsets", f"{tp.topic}-{tp.partition}: {e.args[0].str()}")
    for (topic, part), offset in sorted(results.items()):
        print(f"{topic}:{part}:{offset if offset >= 0 else ''}")
    return 0
