"""Transactions on a 3-broker kafkatier cluster, each next to its non-transactional counterpart in the same run.

The benchmark starts its own cluster (embedded ZooKeeper + 3 broker processes, ``__transaction_state`` with 3
partitions) in a temp dir and measures, with confluent-kafka (librdkafka), on a 6-partition topic with RF 3:

* produce throughput: the same records (1 KiB values) produced by an idempotent producer (acks=all), then by a
  transactional producer committing every 100 records (issue 23's goal: >= 0.7x the idempotent rate);
* fetch throughput: all those records read from the beginning by a read_uncommitted consumer, then by a
  read_committed one (goal: >= 0.9x).

Both producers use librdkafka's defaults but ``linger.ms`` 5 (the same batching; acks=all, idempotence on) and are
warmed up (connections, metadata, producer id) before the clock starts.  Like kafka-producer-perf-test with
``--transaction-duration-ms``, the transactional side sends asynchronously and commits (which flushes) at each
transaction's end; here the transaction ends after a fixed 100 records, as the issue states the goal.  Rates are
records/s; each measurement is repeated and the median kept.  It also prints the median time of one
transaction and where the coordinator spent it (the ``prepare_ms``, ``markers_ms`` and ``complete_ms`` of the
brokers' "transaction completed" log lines: the PrepareCommit write, the markers, the CompleteCommit write)::

    .venv/bin/python benchmarks/transactions.py [--quick] [--records 20000] [--repeat 3] [--per-txn 100]

``--per-txn N`` changes the transaction size (e.g. 10,000 records: about the 10 MB that kafka-producer-perf-test's
``--transaction-duration-ms 100`` commits at these rates), to show how the fixed cost of a commit is spread.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kafkatier.cluster.manager import ClusterManager  # noqa: E402
from kafkatier.waiting import wait_for  # noqa: E402

PARTITIONS, VALUE = 6, b"x" * 1024
PER_TXN = 100


def create_topic(bs: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(60)
    wait_for(lambda: all(p.leader >= 0 for p in admin.list_topics(topic, timeout=5).topics[topic].partitions.values())
             and len(admin.list_topics(topic, timeout=5).topics[topic].partitions) == PARTITIONS, 60, interval=0.2,
             ignore=(Exception,), message=f"{topic} online")


def warm_up(p: Producer, topic: str) -> None:
    """One record to each partition, delivered: connections, metadata and the producer id are set up before the
    clock starts, on both sides (the transactional one is also warmed by ``init_transactions``)."""
    for i in range(PARTITIONS):
        p.produce(topic, value=VALUE, partition=i)
    if p.flush(60):
        raise RuntimeError("warm-up records not delivered")


def idempotent_rate(bs: str, topic: str, n: int) -> float:
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    warm_up(p, topic)
    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=VALUE, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(120)
    return n / (time.perf_counter() - start)


def transactional_rate(bs: str, topic: str, n: int, txn_ms: list[float], per_txn: int = PER_TXN) -> float:
    """Records/s; appends each transaction's duration (begin to commit answered, ms) to ``txn_ms``."""
    p = Producer({"bootstrap.servers": bs, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}", "linger.ms": 5})
    p.init_transactions(60)
    p.begin_transaction()
    warm_up(p, topic)
    p.commit_transaction(60)
    start = time.perf_counter()
    for first in range(0, n, per_txn):
        began = time.perf_counter()
        p.begin_transaction()
        for i in range(first, min(first + per_txn, n)):
            while True:
                try:
                    p.produce(topic, value=VALUE, partition=i % PARTITIONS)
                    break
                except BufferError:
                    p.poll(0.01)
        p.commit_transaction(60)
        txn_ms.append((time.perf_counter() - began) * 1000)
    return n / (time.perf_counter() - start)


STEP = re.compile(r"transaction completed .*prepare_ms=([\d.]+) markers_ms=([\d.]+) complete_ms=([\d.]+)")


def coordinator_steps(work: str) -> dict[str, float]:
    """Medians of the coordinator's per-transaction steps, from the brokers' logs."""
    steps: dict[str, list[float]] = {"prepare_ms": [], "markers_ms": [], "complete_ms": []}
    for path in glob.glob(os.path.join(work, "logs", "broker-*.log")):
        with open(path, errors="replace") as f:
            for line in f:
                m = STEP.search(line)
                if m:
                    for k, v in zip(steps, m.groups()):
                        steps[k].append(float(v))
    return {k: statistics.median(v) for k, v in steps.items() if v}


def fetch_rate(bs: str, topic: str, n: int, isolation: str) -> float:
    c = Consumer({"bootstrap.servers": bs, "group.id": f"bench-{uuid.uuid4()}", "enable.auto.commit": False,
                  "isolation.level": isolation, "fetch.max.bytes": 8 << 20})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            if m.error() is None:
                got += 1
            elif m.error().code() != KafkaError._PARTITION_EOF:
                raise RuntimeError(m.error())
    elapsed = time.perf_counter() - start
    c.close()
    if got < n:
        raise RuntimeError(f"read {got} of {n} records ({isolation})")
    return n / elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer records and one repetition (CI smoke run)")
    ap.add_argument("--records", type=int, default=20000, help="records per measurement")
    ap.add_argument("--repeat", type=int, default=3, help="repetitions of each measurement (median kept)")
    ap.add_argument("--per-txn", type=int, default=PER_TXN, help="records per transaction (the goal is stated at 100)")
    args = ap.parse_args()
    n, repeat = (3000, 1) if args.quick else (args.records, args.repeat)
    work = tempfile.mkdtemp(prefix="kafkatier-bench-txn-")
    m = ClusterManager(work)
    idem, txn, unc, com, txn_ms = [], [], [], [], []
    steps: dict[str, float] = {}
    try:
        m.up(brokers=3, log_dirs_per_broker=1, overrides={"transaction.state.log.num.partitions": "3"})
        bs = m.bootstrap_servers
        for r in range(repeat):
            plain, trans = f"bench-idem-{r}", f"bench-txn-{r}"
            create_topic(bs, plain)
            create_topic(bs, trans)
            idem.append(idempotent_rate(bs, plain, n))
            txn.append(transactional_rate(bs, trans, n, txn_ms, args.per_txn))
            unc.append(fetch_rate(bs, trans, n, "read_uncommitted"))
            com.append(fetch_rate(bs, trans, n, "read_committed"))
        steps = coordinator_steps(work)
    finally:
        m.down()
        shutil.rmtree(work, ignore_errors=True)
    i50, t50, u50, c50 = (statistics.median(x) for x in (idem, txn, unc, com))
    print(f"idempotent produce (acks=all):          {i50:,.0f} records/s")
    print(f"transactional produce ({args.per_txn}/txn):       {t50:,.0f} records/s  ratio {t50 / i50:.2f}x (goal >= 0.7)")
    txn_ms.sort()
    print(f"one transaction (begin to committed):   {statistics.median(txn_ms):.1f} ms median, "
          f"{statistics.mean(txn_ms):.1f} mean, {txn_ms[len(txn_ms) * 9 // 10]:.1f} p90; coordinator: "
          + ", ".join(f"{k} {v:.1f}" for k, v in steps.items()))
    print(f"read_uncommitted fetch:                 {u50:,.0f} records/s")
    print(f"read_committed fetch:                   {c50:,.0f} records/s  ratio {c50 / u50:.2f}x (goal >= 0.9)")
    print(f"summary: records={n} repeat={repeat} per_txn={args.per_txn} idempotent_rps={i50:.0f} transactional_rps={t50:.0f} "
          f"produce_ratio={t50 / i50:.2f} read_uncommitted_rps={u50:.0f} read_committed_rps={c50:.0f} "
          f"fetch_ratio={c50 / u50:.2f} txn_ms={statistics.median(txn_ms):.1f} txn_mean_ms={statistics.mean(txn_ms):.1f} "
          + " ".join(f"{k}={v:.1f}" for k, v in steps.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
