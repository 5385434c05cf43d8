"""``kafkatier produce``: send records with kafka-python's ``KafkaProducer``.

Two modes:

- stdin (kafka-console-producer): one record per line; with ``--parse-key`` the text before the first
  ``--key-separator`` is the key (a line without it is reported and skipped);
- ``--num-records N --record-size B`` (kafka-producer-perf-test): N records of B bytes, a progress bar on a
  terminal, then ``N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max latency, F failed
  sends.``

Every send's future is checked (callbacks count successes and failures, and sends still unresolved after the
final flush count as failed); the exit status is 1 if any record was not acknowledged.  Idempotence is off
unless ``--idempotence`` is given (it needs ``--acks all`` and the brokers' InitProducerId).
"""
from __future__ import annotations

import argparse
import random
import string
import sys
import threading
import time
from typing import BinaryIO, Iterator

import attrs

from kafkatier.admin.bootstrap import NoReachableBrokerError
from kafkatier.admin.client import format_error
from kafkatier.cli import common
from kafkatier.cli.console_properties import add_property_option, apply_properties
from kafkatier.cli.main import UsageError

COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = {"all": "all", "-1": "all", "1": 1, "0": 0}
MB = 1024 * 1024

# --property names (Kafka's console tools) -> the option each sets
PROPERTIES = {"parse.key": "parse_key", "key.separator": "key_separator"}


def register(subparsers) -> None:
    p = common.add_client_command(subparsers, "produce", run,
                                  help="send records from stdin or generated ones (console producer / producer perf "
                                       "test)",
                                  description="Send stdin lines as records, or --num-records generated records of "
                                              "--record-size bytes.")
    p.add_argument("--topic", required=True)
    p.add_argument("--num-records", type=int, help="generate this many records instead of reading stdin")
    p.add_argument("--record-size", type=int, help="bytes per generated record (default 100)")
    p.add_argument("--acks", default="all", choices=sorted(ACKS), help="all (default), 1 or 0")
    p.add_argument("--parse-key", action="store_true", help="stdin: the text before --key-separator is the key")
    p.add_argument("--key-separator", default="\t", help="stdin: key/value separator (default: tab)")
    p.add_argument("--partition", type=int, help="send every record to this partition")
    p.add_argument("--batch-size", type=int, help="producer batch.size in bytes (default 16384)")
    p.add_argument("--linger-ms", type=int, help="producer linger.ms (default 0)")
    p.add_argument("--compression-type", choices=COMPRESSION_TYPES, default="none")
    p.add_argument("--request-timeout-ms", type=int, help="producer request.timeout.ms (default 30000)")
    p.add_argument("--delivery-timeout-ms", type=int, default=120000,
                   help="give up on a record after this long (default 120000)")
    p.add_argument("--max-block-ms", type=int, default=60000,
                   help="how long a send may wait for metadata or buffer space (default 60000)")
    p.add_argument("--idempotence", action="store_true", help="idempotent producer (needs --acks all)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_property_option(p, tuple(PROPERTIES))


# ------------------------------------------------------------------------------------------------ inputs


def check_args(args: argparse.Namespace) -> None:
    apply_properties(args, "produce", PROPERTIES)
    if args.num_records is not None:
        if args.num_records < 1:
            raise UsageError("--num-records must be at least 1")
        if args.parse_key:
            raise UsageError("--parse-key reads stdin; it cannot be used with --num-records")
    elif args.record_size is not None:
        raise UsageError("--record-size needs --num-records")
    if args.record_size is not None and args.record_size < 1:
        raise UsageError("--record-size must be at least 1")
    if not args.key_separator:
        raise UsageError("--key-separator must not be empty")
    for name in ("batch_size", "linger_ms", "request_timeout_ms", "delivery_timeout_ms", "max_block_ms"):
        value = getattr(args, name)
        if value is not None and value < 0:
            raise UsageError(f"--{name.replace('_', '-')} must not be negative")
    if args.partition is not None and args.partition < 0:
        raise UsageError("--partition must not be negative")
    if args.idempotence and ACKS[args.acks] != "all":
        raise UsageError("--idempotence needs --acks all")


def check_codec(compression_type: str) -> None:
    """A codec kafka-python cannot load is a usage error, not a crash at the first batch."""
    from kafka import codec
    available = {"none": lambda: True, "gzip": codec.has_gzip, "snappy": codec.has_snappy, "lz4": codec.has_lz4,
                 "zstd": codec.has_zstd}
    if not available[compression_type]():
        package = {"snappy": "python-snappy", "lz4": "lz4", "zstd": "zstandard"}.get(compression_type, "?")
        raise UsageError(f"--compression-type {compression_type} needs the Python package {package}, "
                         f"which is not installed")


def topic_missing(conn: common.Connection, topic: str) -> str | None:
    """Kafka's error when ``topic`` does not exist and will not be created (a Metadata request that allows auto
    creation answers UNKNOWN_TOPIC_OR_PARTITION), so a send fails at once instead of after --max-block-ms."""
    from kafka.protocol.metadata import MetadataRequest
    with common.open_admin(conn) as admin:
        response = admin.send_request(MetadataRequest[4](topics=[topic], allow_auto_topic_creation=True))
    for t in response.topics:
        code, name = t[0], t[1]
        if name == topic and code == 3:
            return (f"UnknownTopicOrPartitionError: Topic {topic} not present in metadata "
                    f"(UNKNOWN_TOPIC_OR_PARTITION; auto.create.topics.enable is off)")
        if name == topic and code == 17:
            return f"InvalidTopicError: {topic} is not a valid topic name (INVALID_TOPIC_EXCEPTION)"
    return None


def producer_kwargs(args: argparse.Namespace, conn: common.Connection) -> dict:
    kwargs = {**conn.client_kwargs, "bootstrap_servers": list(conn.bootstrap_servers),
              "acks": ACKS[args.acks], "enable_idempotence": bool(args.idempotence),
              "compression_type": None if args.compression_type == "none" else args.compression_type,
              "delivery_timeout_ms": args.delivery_timeout_ms, "max_block_ms": args.max_block_ms}
    kwargs.setdefault("client_id", "kafkatier-producer")
    for name in ("batch_size", "linger_ms", "request_timeout_ms"):
        if getattr(args, name) is not None:
            kwargs[name] = getattr(args, name)
    limit = int(kwargs.get("max_request_size", 1048576))
    if args.record_size is not None and args.record_size > limit:
        # Kafka's RecordTooLargeException, before anything is generated or sent
        raise UsageError(f"--record-size {args.record_size}: the message is larger than {limit}, which is the value "
                         "of the max.request.size configuration")
    if kwargs.get("request_timeout_ms") and kwargs["delivery_timeout_ms"] < kwargs["request_timeout_ms"] + \
            kwargs.get("linger_ms", 0):
        raise UsageError("--delivery-timeout-ms must be at least --request-timeout-ms + --linger-ms")
    return kwargs


class PayloadSource:
    """Generated values: the record number in decimal, right-padded to ``record_size`` with random uppercase
    letters chosen once (cut to ``record_size`` if the number is longer)."""

    def __init__(self, record_size: int, seed: int = 0):
        rnd = random.Random(seed)
        self.record_size = record_size
        self._fill = "".join(rnd.choice(string.ascii_uppercase) for _ in range(record_size)).encode("ascii")

    def value(self, i: int) -> bytes:
        head = str(i).encode("ascii")[:self.record_size]
        return head + self._fill[len(head):]


@attrs.frozen
class LineRecord:
    line_number: int
    key: bytes | None
    value: bytes | None
    error: str | None = None


def read_lines(stream: BinaryIO, parse_key: bool, separator: bytes) -> Iterator[LineRecord]:
    """Records from stdin lines (``\\n`` or ``\\r\\n`` stripped); with ``parse_key`` a line without the separator
    yields a record with ``error`` set."""
    for number, raw in enumerate(stream, start=1):
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.endswith(b"\r"):
            line = line[:-1]
        if not parse_key:
            yield LineRecord(number, None, line)
            continue
        key, sep, value = line.partition(separator)
        if not sep:
            yield LineRecord(number, None, None, error=f"line {number}: no key separator "
                                                       f"{separator.decode(errors='replace')!r} found")
            continue
        yield LineRecord(number, key, value)


# ------------------------------------------------------------------------------------------------ sending

class SendTracker:
    """Counts acknowledged and failed sends from their futures' callbacks, with latency and the first error.
    Input lines that could not become a record are counted apart (``skipped``)."""

    def __init__(self, progress=None):
        self._lock = threading.Lock()
        self.sent = self.acked = self.send_failed = self.skipped = 0
        self.bytes_acked = 0
        self.latency_total_ms = self.latency_max_ms = 0.0
        self.first_error: str | None = None
        self._progress = progress

    def track(self, future, size: int) -> None:
        start = time.perf_counter()
        with self._lock:
            self.sent += 1
        future.add_callback(self._ok, start, size)
        future.add_errback(self._err)

    def _ok(self, start: float, size: int, _metadata) -> None:
        ms = (time.perf_counter() - start) * 1000
        with self._lock:
            self.acked += 1
            self.bytes_acked += size
            self.latency_total_ms += ms
            self.latency_max_ms = max(self.latency_max_ms, ms)
        if self._progress is not None:
            self._progress.update(1)

    def _err(self, exc: BaseException) -> None:
        self.send_failure(format_error(exc))

    def send_failure(self, text: str, count: int = 1) -> None:
        with self._lock:
            self.send_failed += count
            self.first_error = self.first_error or text

    def skip(self, text: str) -> None:
        with self._lock:
            self.skipped += 1
            self.first_error = self.first_error or text

    def settle(self) -> int:
        """After the final flush: count sends whose future never resolved as failed; returns all failures."""
        with self._lock:
            unresolved = self.sent - self.acked - self.send_failed
        if unresolved > 0:
            self.send_failure(f"{unresolved} sends unresolved after the final flush", count=unresolved)
        return self.failed

    @property
    def failed(self) -> int:
        with self._lock:
            return self.send_failed + self.skipped


def summary_line(records: int, elapsed_s: float, total_bytes: int, avg_latency_ms: float, max_latency_ms: float,
                 failed: int) -> str:
    """``N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max latency, F failed sends.``"""
    elapsed_s = max(elapsed_s, 1e-9)
    return (f"{records} records sent, {records / elapsed_s:.1f} records/sec "
            f"({total_bytes / MB / elapsed_s:.2f} MB/sec), {avg_latency_ms:.2f} ms avg latency, "
            f"{max_latency_ms:.2f} ms max latency, {failed} failed sends.")


def run(args: argparse.Namespace) -> int:
    check_args(args)
    check_codec(args.compression_type)
    from kafka import KafkaProducer
    from kafka.errors import KafkaError, KafkaTimeoutError
    try:
        conn = common.connection_from_args(args)
        kwargs = producer_kwargs(args, conn)
        missing = topic_missing(conn, args.topic)
        if missing:
            return common.print_error("produce", missing)
        producer = KafkaProducer(**kwargs)
    except (NoReachableBrokerError, KafkaError) as e:
        return common.print_error("produce", e)
    perf = args.num_records is not None
    progress = None
    if perf and not args.no_progress and common.stderr_is_tty():
        from tqdm import tqdm
        progress = tqdm(total=args.num_records, unit="rec", file=sys.stderr, dynamic_ncols=True)
    tracker = SendTracker(progress)
    start = time.perf_counter()
    aborted = None
    try:
        records = _generated(args) if perf else read_lines(sys.stdin.buffer, args.parse_key,
                                                           args.key_separator.encode("utf-8"))
        for rec in records:
            if rec.error is not None:
                print(f"kafkatier produce: {rec.error}", file=sys.stderr)
                tracker.skip(rec.error)
                continue
            try:
                future = producer.send(args.topic, value=rec.value, key=rec.key, partition=args.partition)
            except (KafkaError, ValueError, TypeError) as e:
                aborted = format_error(e)
                if isinstance(e, KafkaTimeoutError):   # no metadata for the topic within --max-block-ms
                    aborted += f" (does topic '{args.topic}' exist?)"
                tracker.send_failure(aborted)
                break
            tracker.track(future, len(rec.value or b"") + len(rec.key or b""))
        producer.flush(timeout=(args.delivery_timeout_ms + args.max_block_ms) / 1000)
    except KeyboardInterrupt:
        aborted = "interrupted"
    except KafkaError as e:   # flush timed out
        aborted = format_error(e)
    finally:
        elapsed = time.perf_counter() - start
        producer.close(timeout=5)
        if progress is not None:
            progress.close()
    failed = tracker.settle()
    if perf:   # a record never sent (the run stopped early) counts as failed too
        failed = max(failed, args.num_records - tracker.acked)
        avg = tracker.latency_total_ms / tracker.acked if tracker.acked else 0.0
        print(summary_line(tracker.acked, elapsed, tracker.bytes_acked, avg, tracker.latency_max_ms, failed))
    if aborted:
        print(f"kafkatier produce: stopped: {aborted}", file=sys.stderr)
    if failed:
        print(f"kafkatier produce: {failed} record(s) not sent; first error: {tracker.first_error}",
              file=sys.stderr)
        return 1
    return 1 if aborted else 0


def _generated(args: argparse.Namespace) -> Iterator[LineRecord]:
    payloads = PayloadSource(args.record_size or 100)
    for i in range(args.num_records):
        yield LineRecord(i + 1, None, payloads.value(i))
