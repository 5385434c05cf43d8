"""``kafkatier producer-perf-test`` and ``consumer-perf-test``: kafka-producer-perf-test and
kafka-consumer-perf-test, on confluent-kafka (librdkafka) so that the client is not the bottleneck.

producer-perf-test prints Kafka's ``ProducerPerformance`` lines: a progress line every 5 s
(``N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max latency.``) and the final line with the
50th, 95th, 99th and 99.9th latency percentiles.  ``--producer-props`` takes Java client names
(``acks=all linger.ms=5 batch.size=65536``), passed to librdkafka as they are (librdkafka speaks the same names for
the common settings); ``--producer.config`` a properties file of the same.

consumer-perf-test prints Kafka's ``ConsumerPerformance`` header and one summary row (or a row per
``--reporting-interval`` with ``--show-detailed-stats``).
"""
from __future__ import annotations

import os
import sys
import time

from kafkatier.cli import common
from kafkatier.cli.get_offsets import confluent_config
from kafkatier.cli.main import UsageError

REPORTING_INTERVAL_MS = 5000
MB = 1024 * 1024
CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                   "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")


def register(subparsers) -> None:
    p = common.add_client_command(subparsers, "producer-perf-test", run_producer,
                                  help="measure produce throughput and latency (kafka-producer-perf-test)",
                                  description="Send generated records as fast as --throughput allows and print Kafka's "
                                              "ProducerPerformance lines.")
    p.add_argument("--topic", required=True)
    p.add_argument("--num-records", type=int, required=True)
    p.add_argument("--record-size", type=int, help="bytes per record (or --payload-file)")
    p.add_argument("--payload-file", help="records are lines of this file, picked at random")
    p.add_argument("--throughput", type=float, required=True, help="records/sec at most; -1 for no limit")
    p.add_argument("--producer-props", nargs="+", default=[], metavar="KEY=VALUE")
    p.add_argument("--producer.config", dest="producer_config", metavar="FILE")
    p.add_argument("--transactional-id", help="send in transactions of --transaction-duration-ms")
    p.add_argument("--transaction-duration-ms", type=int, default=3000)

    c = common.add_client_command(subparsers, "consumer-perf-test", run_consumer,
                                  help="measure consume throughput (kafka-consumer-perf-test)",
                                  description="Consume --messages records and print Kafka's ConsumerPerformance "
                                              "statistics.")
    c.add_argument("--topic", required=True)
    c.add_argument("--messages", type=int, required=True, help="records to consume")
    c.add_argument("--group", default=None, help="consumer group (default perf-consumer-<random>)")
    c.add_argument("--fetch-size", type=int, default=1024 * 1024, help="max.partition.fetch.bytes")
    c.add_argument("--from-latest", action="store_true", help="start at the end instead of the earliest offset")
    c.add_argument("--timeout", type=int, default=10000, help="ms with no record before giving up")
    c.add_argument("--show-detailed-stats", action="store_true")
    c.add_argument("--reporting-interval", type=int, default=REPORTING_INTERVAL_MS, metavar="MS")
    c.add_argument("--hide-header", action="store_true")
    c.add_argument("--consumer.config", dest="consumer_config", metavar="FILE")


def _props(pairs: list[str], path: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as e:
            raise UsageError(f"cannot read {path}: {e.strerror}") from None
        pairs = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith(("#", "!"))] + pairs
    for kv in pairs:
        key, sep, value = kv.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"Invalid property '{kv}': expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def _percentile(sorted_ms: list[int], q: float) -> int:
    return sorted_ms[min(len(sorted_ms) - 1, int(len(sorted_ms) * q))] if sorted_ms else 0


class Stats:
    """ProducerPerformance's Stats: a window printed every 5 s and the totals printed at the end."""

    def __init__(self, num_records: int, clock=time.monotonic) -> None:
        self.clock = clock
        self.start = self.window_start = clock()
        self.count = self.bytes = self.max_latency = self.total_latency = 0
        self.w_count = self.w_bytes = self.w_max = self.w_total = 0
        self.latencies: list[int] = []
        self.sampling = max(1, num_records // 500000)

    def record(self, i: int, latency_ms: int, size: int) -> None:
        self.count += 1
        self.bytes += size
        self.total_latency += latency_ms
        self.max_latency = max(self.max_latency, latency_ms)
        self.w_count += 1
        self.w_bytes += size
        self.w_total += latency_ms
        self.w_max = max(self.w_max, latency_ms)
        if i % self.sampling == 0:
            self.latencies.append(latency_ms)
        if (self.clock() - self.window_start) * 1000 >= REPORTING_INTERVAL_MS:
            self.print_window()

    def print_window(self) -> None:
        elapsed = max(self.clock() - self.window_start, 1e-9)
        rate = self.w_count / elapsed
        print(f"{self.w_count} records sent, {rate:.1f} records/sec ({self.w_bytes / elapsed / MB:.2f} MB/sec), "
              f"{self.w_total / max(self.w_count, 1):.1f} ms avg latency, {float(self.w_max):.1f} ms max latency.",
              flush=True)
        self.window_start = self.clock()
        self.w_count = self.w_bytes = self.w_max = self.w_total = 0

    def final_line(self) -> str:
        elapsed = max(self.clock() - self.start, 1e-9)
        lat = sorted(self.latencies)
        return (f"{self.count} records sent, {self.count / elapsed:f} records/sec "
                f"({self.bytes / elapsed / MB:.2f} MB/sec), {self.total_latency / max(self.count, 1):.2f} ms avg "
                f"latency, {float(self.max_latency):.2f} ms max latency, {_percentile(lat, 0.5)} ms 50th, "
                f"{_percentile(lat, 0.95)} ms 95th, {_percentile(lat, 0.99)} ms 99th, "
                f"{_percentile(lat, 0.999)} ms 99.9th.")


def run_producer(args) -> int:
    from confluent_kafka import KafkaException, Producer

    if args.num_records < 0:
        raise UsageError("--num-records must not be negative")
    if (args.record_size is None) == (args.payload_file is None):
        raise UsageError("either --record-size or --payload-file must be specified but not both")
    if args.record_size is not None and args.record_size < 0:
        raise UsageError("--record-size must not be negative")
    props = _props(args.producer_props, args.producer_config)
    payloads = None
    if args.payload_file:
        try:
            with open(args.payload_file, encoding="utf-8") as f:
                payloads = [ln.encode() for ln in f.read().split("\n") if ln]
        except OSError as e:
            raise UsageError(f"cannot read {args.payload_file}: {e.strerror}") from None
        if not payloads:
            raise UsageError(f"File does not contain any payloads: {args.payload_file}")
    if not (args.bootstrap_server or args.zookeeper or args.data_dir) and props.get("bootstrap.servers"):
        args.bootstrap_server = props["bootstrap.servers"]   # Kafka's --producer-props bootstrap.servers=...
    conn = common.connection_from_args(args)
    cfg = confluent_config(conn)
    props.pop("bootstrap.servers", None)
    cfg.update(props)
    if args.transactional_id:
        cfg["transactional.id"] = args.transactional_id
    try:
        producer = Producer(cfg)
    except KafkaException as e:
        raise UsageError(f"producer config: {e.args[0].str()}") from None
    value = os.urandom(args.record_size) if payloads is None else None
    stats = Stats(args.num_records)
    errors: list[str] = []
    start = time.monotonic()
    if args.transactional_id:
        producer.init_transactions(30)
        producer.begin_transaction()
    txn_start = time.monotonic()

    def callback_for(i: int, sent: float, size: int):
        def cb(err, _msg):
            if err is not None:
                if not errors:
                    errors.append(err.str())
                return
            stats.record(i, int((time.monotonic() - sent) * 1000), size)
        return cb

    for i in range(args.num_records):
        payload = value if payloads is None else payloads[i % len(payloads)]
        sent = time.monotonic()
        while True:
            try:
                producer.produce(args.topic, payload, callback=callback_for(i, sent, len(payload)))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        if args.transactional_id and (time.monotonic() - txn_start) * 1000 >= args.transaction_duration_ms:
            producer.commit_transaction(30)
            producer.begin_transaction()
            txn_start = time.monotonic()
        if args.throughput > 0:
            ahead = (i + 1) / args.throughput - (time.monotonic() - start)
            if ahead > 0:
                producer.poll(ahead)  # throttle, serving callbacks meanwhile
    if args.transactional_id:
        producer.commit_transaction(30)
    remaining = producer.flush(120)
    print(stats.final_line(), flush=True)
    if errors or remaining:
        return common.print_error("producer-perf-test", errors[0] if errors else f"{remaining} records not sent")
    return 0


def _fmt_time(t: float) -> str:
    lt = time.localtime(t)
    return time.strftime("%Y-%m-%d %H:%M:%S", lt) + f":{int(t * 1000) % 1000:03d}"


def consumer_row(start: float, end: float, nbytes: int, nmsgs: int, rebalance_ms: int, fetch_ms: int) -> str:
    elapsed = max(end - start, 1e-9)
    mb = nbytes / MB
    fetch_s = fetch_ms / 1000
    return (f"{_fmt_time(start)}, {_fmt_time(end)}, {mb:.4f}, {mb / elapsed:.4f}, {nmsgs}, {nmsgs / elapsed:.4f}, "
            f"{rebalance_ms}, {fetch_ms}, {mb / fetch_s if fetch_s > 0 else 0:.4f}, "
            f"{nmsgs / fetch_s if fetch_s > 0 else 0:.4f}")


def run_consumer(args) -> int:
    from confluent_kafka import Consumer, KafkaException

    if args.messages <= 0:
        raise UsageError("--messages must be positive")
    props = _props([], args.consumer_config)
    conn = common.connection_from_args(args)
    cfg = confluent_config(conn)
    cfg.update({"group.id": args.group or f"perf-consumer-{os.getpid()}", "enable.auto.commit": False,
                "auto.offset.reset": "latest" if args.from_latest else "earliest",
                "max.partition.fetch.bytes": args.fetch_size})
    cfg.update(props)
    assigned_at: list[float] = []
    try:
        consumer = Consumer(cfg)
    except KafkaException as e:
        raise UsageError(f"consumer config: {e.args[0].str()}") from None
    start = time.monotonic()
    wall_start = time.time()
    consumer.subscribe([args.topic], on_assign=lambda c, parts: assigned_at.append(time.monotonic()))
    nmsgs = nbytes = 0
    last_record = time.monotonic()
    if not args.hide_header:
        print(CONSUMER_HEADER, flush=True)
    w_start, w_bytes, w_msgs = time.monotonic(), 0, 0
    try:
        while nmsgs < args.messages:
            msgs = consumer.consume(min(500, args.messages - nmsgs), 0.1)
            now = time.monotonic()
            for m in msgs:
                if m.error():
                    continue
                nmsgs += 1
                size = len(m.value() or b"") + len(m.key() or b"")
                nbytes += size
                w_msgs += 1
                w_bytes += size
                last_record = now
            if not msgs and (now - last_record) * 1000 > args.timeout:
                print(f"WARNING: Exiting before consuming the expected number of messages: timeout "
                      f"({args.timeout} ms) exceeded. You can use the --timeout option to increase the timeout.",
                      file=sys.stderr, flush=True)
                break
            if args.show_detailed_stats and (now - w_start) * 1000 >= args.reporting_interval:
                print(consumer_row(wall_start + (w_start - start), time.time(), w_bytes, w_msgs, 0,
                                   int((now - w_start) * 1000)), flush=True)
                w_start, w_bytes, w_msgs = now, 0, 0
    finally:
        consumer.close()
    end = time.monotonic()
    rebalance_ms = int((assigned_at[0] - start) * 1000) if assigned_at else 0
    if not args.show_detailed_stats:
        print(consumer_row(wall_start, wall_start + (end - start), nbytes, nmsgs, rebalance_ms,
                           int((end - start) * 1000) - rebalance_ms), flush=True)
    return 0
