"""``kafkatier consume``: print records with kafka-python's ``KafkaConsumer`` (kafka-console-consumer).

Without ``--group`` the consumer assigns itself the topic's partitions (or ``--partition``) and seeks: to
``--offset``, to the beginning with ``--from-beginning``, else to the end.  With ``--group`` it subscribes as a
member of that consumer group (the brokers must then serve the group coordinator APIs) and commits offsets.

Each record prints as kafka-console-consumer's default formatter does: the optional fields
(``CreateTime:<ms>``, ``Partition:<p>``, ``Offset:<o>``, the key) then the value, separated by
``--key-separator`` (tab); a null key or value prints ``null``.  The command stops after ``--max-messages`` or
when nothing arrives for ``--timeout-ms``, then prints ``Processed a total of N messages`` on stderr.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, BinaryIO

import attrs
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_exponential

from kafkatier.admin.bootstrap import NoReachableBrokerError
from kafkatier.cli import common
from kafkatier.cli.console_properties import add_property_option, apply_properties
from kafkatier.cli.main import UsageError

ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
POLL_MS = 500
METADATA_WAIT_S = 10.0

# --property names (Kafka's console tools) -> the option each sets
PROPERTIES = {"print.key": "print_key", "print.offset": "print_offset",
              "print.partition": "print_partition", "print.timestamp": "print_timestamp",
              "key.separator": "key_separator"}


def register(subparsers) -> None:
    p = common.add_client_command(subparsers, "consume", run, help="print records of a topic (console consumer)",
                                  description="Print the records of a topic, as kafka-console-consumer does.")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, help="read only this partition")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    start.add_argument("--offset", help="start offset (a number, earliest or latest); needs --partition")
    p.add_argument("--max-messages", type=int, help="exit after this many records")
    p.add_argument("--timeout-ms", type=int, help="exit when no record arrives for this long")
    p.add_argument("--group", help="consume as a member of this consumer group (subscribe, commit offsets)")
    p.add_argument("--isolation-level", choices=ISOLATION_LEVELS, default="read_uncommitted")
    p.add_argument("--print-key", action="store_true", help="print the key before the value")
    p.add_argument("--print-offset", action="store_true", help="print Offset:<n> first")
    p.add_argument("--print-partition", action="store_true", help="print Partition:<n> first")
    p.add_argument("--print-timestamp", action="store_true", help="print CreateTime:<ms> (or LogAppendTime) first")
    p.add_argument("--key-separator", default="\t", help="field separator (default: tab)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_property_option(p, tuple(PROPERTIES))


# ------------------------------------------------------------------------------------------------ inputs

def parse_offset(text: str | None) -> int | str | None:
    """``--offset``: a non-negative number, ``earliest`` or ``latest``."""
    if text is None:
        return None
    t = text.strip().lower()
    if t in ("earliest", "latest"):
        return t
    try:
        n = int(t)
    except ValueError:
        n = -1
    if n < 0:
        raise UsageError(f"--offset must be a non-negative number, earliest or latest, not {text!r}")
    return n


def check_args(args: argparse.Namespace) -> None:
    apply_properties(args, "consume", PROPERTIES)
    if args.offset is not None and args.partition is None:
        raise UsageError("The partition is required when offset is specified.")
    if args.group is not None and args.partition is not None:
        raise UsageError("Options group and partition cannot be specified together.")
    if args.partition is not None and args.partition < 0:
        raise UsageError("--partition must not be negative")
    if args.max_messages is not None and args.max_messages < 1:
        raise UsageError("--max-messages must be at least 1")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise UsageError("--timeout-ms must not be negative")
    if not args.group and args.group is not None:
        raise UsageError("--group must not be empty")


def consumer_kwargs(args: argparse.Namespace, conn: common.Connection) -> dict[str, Any]:
    kwargs = {**conn.client_kwargs, "bootstrap_servers": list(conn.bootstrap_servers),
              "group_id": args.group, "enable_auto_commit": args.group is not None,
              "auto_offset_reset": "earliest" if args.from_beginning else "latest",
              "isolation_level": args.isolation_level}
    kwargs.setdefault("client_id", "kafkatier-consumer")
    return kwargs


# ------------------------------------------------------------------------------------------------ output

_TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


def format_record(record: Any, *, print_key: bool = False, print_offset: bool = False,
                  print_partition: bool = False, print_timestamp: bool = False, separator: bytes = b"\t") -> bytes:
    """One output line (without the newline) in kafka-console-consumer's default format."""
    fields: list[bytes] = []
    if print_timestamp:
        ttype = _TIMESTAMP_TYPES.get(record.timestamp_type, "NO_TIMESTAMP")
        fields.append(f"{ttype}:{record.timestamp}".encode() if record.timestamp is not None and
                      record.timestamp >= 0 else b"NO_TIMESTAMP")
    if print_partition:
        fields.append(f"Partition:{record.partition}".encode())
    if print_offset:
        fields.append(f"Offset:{record.offset}".encode())
    if print_key:
        fields.append(b"null" if record.key is None else bytes(record.key))
    fields.append(b"null" if record.value is None else bytes(record.value))
    return separator.join(fields)


# ------------------------------------------------------------------------------------------------ consuming

def _partitions(consumer: Any, topic: str, wait_s: float) -> set[int]:
    """The topic's partition ids, waiting (bounded) for metadata of a topic that was just created."""
    retrying = Retrying(retry=retry_if_result(lambda parts: not parts), stop=stop_after_delay(wait_s),
                        wait=wait_exponential(multiplier=0.1, max=1.0), retry_error_callback=lambda state: set())
    return retrying(lambda: set(consumer.partitions_for_topic(topic) or ()))


def _position(consumer: Any, args: argparse.Namespace) -> str | None:
    """Assign and seek as the options say; an error text if the topic or partition does not exist."""
    from kafka import TopicPartition
    if args.group is not None:
        consumer.subscribe([args.topic])
        return None
    wait_s = min(METADATA_WAIT_S, args.timeout_ms / 1000) if args.timeout_ms else METADATA_WAIT_S
    parts = _partitions(consumer, args.topic, wait_s)
    if not parts:
        return f"UNKNOWN_TOPIC_OR_PARTITION: Topic '{args.topic}' does not exist (no metadata)"
    if args.partition is not None and args.partition not in parts:
        return (f"UNKNOWN_TOPIC_OR_PARTITION: Partition {args.partition} does not exist in topic '{args.topic}' "
                f"(partitions: 0-{max(parts)})")
    tps = [TopicPartition(args.topic, p) for p in sorted(parts)
           if args.partition is None or p == args.partition]
    consumer.assign(tps)
    offset = parse_offset(args.offset)
    if isinstance(offset, int):
        consumer.seek(tps[0], offset)
    elif args.from_beginning or offset == "earliest":
        consumer.seek_to_beginning(*tps)
    else:
        consumer.seek_to_end(*tps)
    return None


@attrs.define
class Tally:
    """Records printed so far (kept outside the loop so an error part-way still reports it)."""

    count: int = 0


def consume_loop(consumer: Any, out: BinaryIO, args: argparse.Namespace, progress=None,
                 tally: Tally | None = None) -> int:
    """Poll and print until ``--max-messages`` or ``--timeout-ms`` of silence; returns the count printed."""
    fmt = dict(print_key=args.print_key, print_offset=args.print_offset, print_partition=args.print_partition,
               print_timestamp=args.print_timestamp, separator=args.key_separator.encode("utf-8"))
    tally = tally if tally is not None else Tally()
    last = time.monotonic()
    while args.max_messages is None or tally.count < args.max_messages:
        wait_ms = POLL_MS
        if args.timeout_ms is not None:
            left = args.timeout_ms - (time.monotonic() - last) * 1000
            if left <= 0:
                break
            wait_ms = max(1, min(POLL_MS, int(left)))
        remaining = None if args.max_messages is None else args.max_messages - tally.count
        batches = consumer.poll(timeout_ms=wait_ms, max_records=remaining)
        before = tally.count
        for records in batches.values():
            for record in records:
                out.write(format_record(record, **fmt) + b"\n")
                tally.count += 1
        if tally.count > before:
            out.flush()
            last = time.monotonic()
            if progress is not None:
                progress.update(tally.count - before)
    return tally.count


def run(args: argparse.Namespace) -> int:
    check_args(args)
    parse_offset(args.offset)
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError
    try:
        conn = common.connection_from_args(args)
        consumer = KafkaConsumer(**consumer_kwargs(args, conn))
    except (NoReachableBrokerError, KafkaError) as e:
        return common.print_error("consume", e)
    progress = None
    if args.max_messages is not None and not args.no_progress and common.stderr_is_tty():
        from tqdm import tqdm
        progress = tqdm(total=args.max_messages, unit="msg", file=sys.stderr, dynamic_ncols=True)
    tally, rc = Tally(), 0
    try:
        error = _position(consumer, args)
        if error is not None:
            rc = common.print_error("consume", error)
        else:
            consume_loop(consumer, sys.stdout.buffer, args, progress, tally)
    except KafkaError as e:
        rc = common.print_error("consume", e)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:   # e.g. piped into head: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        if progress is not None:
            progress.close()
        try:
            consumer.close(autocommit=args.group is not None)
        except KafkaError:
            pass
    print(f"Processed a total of {tally.count} messages", file=sys.stderr)
    return rc
