"""Reproduces a librdkafka stall the consume-transform-produce workload met (docs/transactions.md): after a kill -9
of a consumer group's coordinator, ``send_offsets_to_transaction(timeout=5)`` never returns, also after the broker
is back.

On one 3-broker cluster (ZooKeeper session timeout 3 s, no automatic leader rebalance):

1. a read_committed consumer in group ``g`` reads 30 records of ``in``; a transactional producer commits one
   transaction with ``send_offsets_to_transaction`` (its coordinator cache now names the group's coordinator);
2. a second transaction: records produced and flushed, then the group's coordinator is killed -9 (restarted 10 s
   later) and, 6 s after the kill (its registration gone, the metadata without it: librdkafka decommissions its
   broker handle), ``send_offsets_to_transaction(timeout=5)`` is called.

AddOffsetsToTxn is answered at once (the transaction coordinator is another broker); librdkafka then sends
TxnOffsetCommit through its coordinator-request machinery, whose cached coordinator is the decommissioned handle:
it waits for that handle to come up (it never will) and has no timer of its own, so the call blocks until some
other broker connection goes up or down -- here none does.  Kafka's brokers answer the same way (a dead broker
leaves the metadata once its session expires); the stall is librdkafka's (its GitHub issues 5456 and 5511).  The
scenario engine's ctp worker ends itself when a call blocks past its timeout (``ctp_worker.Watchdog``).

    .venv/bin/python benchmarks/librdkafka_offsets_stall.py [--wait 60]   # KEEP=1: keep the cluster's logs

It prints ``summary: stalled`` (the bug is present: measured 2026-11-27 with confluent-kafka 2.16.1 / librdkafka
2.16.0, still blocked after 60 s, load 12) or ``summary: returned``; both exit 0.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kafkatier.cluster.manager import ClusterManager  # noqa: E402

RECORDS = 3 * 10
KILLED_FOR_S = 10.0
DECOMMISSIONED_AFTER_S = 6.0


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def blocked_s(call, limit_s: float, keep_alive) -> tuple[str, float]:
    """Runs ``call()`` in a thread; ``(outcome, seconds)``, outcome ``"STILL BLOCKED"`` after ``limit_s``."""
    result: dict[str, str] = {}

    def run() -> None:
        try:
            call()
            result["r"] = "returned: ok"
        except KafkaException as e:
            result["r"] = f"returned: {e.args[0].name() if e.args else e!r}"
    t0 = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while thread.is_alive() and time.monotonic() - t0 < limit_s:
        keep_alive()
    return result.get("r", "STILL BLOCKED"), time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wait", type=float, default=60.0, help="how long to wait for the 5 s call")
    ap.add_argument("--tmp", default=None)
    args = ap.parse_args()
    data_dir = tempfile.mkdtemp(prefix="kafkatier-offsets-stall-", dir=args.tmp)
    m = ClusterManager(data_dir)
    try:
        m.up(brokers=3, log_dirs_per_broker=1, session_timeout_ms=3000, timeout=300, overrides={
            "auto.leader.rebalance.enable": "false", "offsets.topic.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "0"})
        boot = m.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": boot})
        for f in admin.create_topics([NewTopic(t, 3, 3) for t in ("in", "out")]).values():
            f.result(60)
        seed = Producer({"bootstrap.servers": boot})
        for i in range(RECORDS):
            seed.produce("in", value=f"v{i}", partition=i % 3)
        seed.flush(60)
        common = {"bootstrap.servers": boot, "socket.timeout.ms": 5000, "topic.metadata.refresh.interval.ms": 1000,
                  "reconnect.backoff.max.ms": 500}
        consumer = Consumer(common | {"group.id": "g", "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                      "isolation.level": "read_committed", "session.timeout.ms": 6000})
        consumer.subscribe(["in"])
        msgs: list = []
        deadline = time.monotonic() + 60
        while len(msgs) < RECORDS and time.monotonic() < deadline:
            msgs += [msg for msg in consumer.consume(RECORDS, 0.5) if msg.error() is None]
        # The coordinator cache lives metadata.max.age.ms (3 x the refresh interval unless set): kept long here
        # so that the second transaction finds the dead coordinator there, as a busy job does.
        producer = Producer(common | {"transactional.id": "stall", "acks": "all", "request.timeout.ms": 5000,
                                      "transaction.timeout.ms": 120000, "metadata.max.age.ms": 120000})
        producer.init_transactions(60)
        offsets = [TopicPartition("in", msg.partition(), msg.offset() + 1) for msg in msgs[:3]]

        def transaction() -> None:
            producer.begin_transaction()
            for msg in msgs[:3]:
                producer.produce("out", value=msg.value(), partition=0)
            producer.flush(30)
        transaction()
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 5)
        producer.commit_transaction(30)
        coordinator = admin.describe_consumer_groups(["g"])["g"].result(30).coordinator.id
        transaction()
        m.stop_broker(coordinator, kill=True)
        print(f"killed broker {coordinator} (the group's coordinator) at {time.strftime('%H:%M:%S')}", flush=True)
        restart = threading.Timer(KILLED_FOR_S, lambda: m.start_broker(coordinator))
        restart.start()
        time.sleep(DECOMMISSIONED_AFTER_S)      # the fault's shape, not a synchronisation: see the docstring
        outcome, took = blocked_s(
            lambda: producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 5),
            args.wait, lambda: consumer.poll(0.2))
        restart.join()
        print(f"send_offsets_to_transaction(timeout=5): {outcome} after {took:.1f}s "
              f"(broker {coordinator} restarted {KILLED_FOR_S:g}s after its kill; load {load_average()})", flush=True)
        print(f"summary: {'stalled' if outcome == 'STILL BLOCKED' else 'returned'}", flush=True)
    finally:
        m.down()
        if not os.environ.get("KEEP"):
            shutil.rmtree(data_dir, ignore_errors=True)
        else:
            print(f"kept {data_dir}")
    sys.stdout.flush()
    os._exit(0)       # a stalled client cannot be closed


if __name__ == "__main__":
    main()
