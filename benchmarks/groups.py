"""Consumer group costs on a 3-broker kafkatier cluster, next to a produce round trip measured in the same run.

The benchmark starts its own cluster (embedded ZooKeeper + 3 broker processes) in a temp dir and measures, with
confluent-kafka (librdkafka):

* produce round trip (the baseline): one record produced with acks=all (RF 3) and flushed, repeated;
* commit latency: a synchronous ``commit()`` of one partition's offset by a group member (OffsetCommit to the
  coordinator, which appends to ``__consumer_offsets`` with acks=all), repeated;
* rebalance time after a member leaves: three consumers share a 6-partition topic; one closes (LeaveGroup);
  the time until both others have their new assignment (heartbeat answered REBALANCE_IN_PROGRESS, JoinGroup,
  SyncGroup), repeated with a fresh third member each round.

Latencies are medians in ms; ratios are against the produce round trip::

    .venv/bin/python benchmarks/groups.py [--quick] [--rounds 5] [--commits 200]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kafkatier.cluster.manager import ClusterManager  # noqa: E402
from kafkatier.waiting import wait_for  # noqa: E402

TOPIC, PARTITIONS = "bench-groups", 6
HEARTBEAT_MS, SESSION_MS = 500, 6000


class Member:
    """A group consumer polled on its own thread; records when its assignment last changed."""

    def __init__(self, bs: str, group: str, name: str, pump: bool = True):
        self.name = name
        self.assigned: list[int] = []
        self.assigned_at = 0.0
        self.consumer = Consumer({"bootstrap.servers": bs, "group.id": group, "client.id": name,
                                  "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        self.consumer.subscribe([TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        if pump:
            self._thread.start()
        else:   # the caller polls (a synchronous commit must not race another thread's poll for its result)
            wait_for(lambda: self.consumer.poll(0.05) is None and self.assigned, 60, interval=0,
                     message=f"{name} assigned")

    def _on_assign(self, consumer, parts) -> None:
        self.assigned = sorted(p.partition for p in parts)
        self.assigned_at = time.perf_counter()

    def _on_revoke(self, consumer, parts) -> None:
        self.assigned = []

    def _run(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(0.05)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        self.consumer.close()      # LeaveGroup


def produce_round_trips(bs: str, n: int) -> list[float]:
    p = Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 0})
    p.produce(TOPIC, b"warm-up", partition=0)
    p.flush(30)
    out = []
    for i in range(n):
        t = time.perf_counter()
        p.produce(TOPIC, b"x" * 100, partition=i % PARTITIONS)
        p.flush(30)
        out.append((time.perf_counter() - t) * 1000)
    return out


def commit_latencies(bs: str, n: int) -> list[float]:
    m = Member(bs, "bench-commit", "committer", pump=False)
    part = m.assigned[0]
    out = []
    for i in range(n):
        t = time.perf_counter()
        m.consumer.commit(offsets=[TopicPartition(TOPIC, part, i)], asynchronous=False)
        out.append((time.perf_counter() - t) * 1000)
    m.close()
    return out


def rebalance_times(bs: str, rounds: int) -> list[float]:
    group = "bench-rebalance"
    stay = [Member(bs, group, f"stay-{i}") for i in range(2)]
    out = []
    try:
        for r in range(rounds):
            leaver = Member(bs, group, f"leaver-{r}")
            members = [*stay, leaver]
            wait_for(lambda: sorted(p for m in members for p in m.assigned) == list(range(PARTITIONS))
                     and all(m.assigned for m in members), 60, interval=0.01, message="3 members assigned")
            before = {m.name: m.assigned_at for m in stay}
            t0 = time.perf_counter()
            leaver.close()
            wait_for(lambda: all(m.assigned_at > before[m.name] for m in stay)
                     and sorted(p for m in stay for p in m.assigned) == list(range(PARTITIONS)), 60, interval=0.005,
                     message="2 members took over")
            out.append((max(m.assigned_at for m in stay) - t0) * 1000)
    finally:
        for m in stay:
            m.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (CI smoke run)")
    ap.add_argument("--rounds", type=int, default=5, help="rebalances measured")
    ap.add_argument("--commits", type=int, default=200, help="commits / produce round trips measured")
    args = ap.parse_args()
    rounds, n = (2, 50) if args.quick else (args.rounds, args.commits)
    work = tempfile.mkdtemp(prefix="kafkatier-bench-groups-")
    m = ClusterManager(work)
    try:
        m.up(brokers=3, log_dirs_per_broker=1, overrides={"group.initial.rebalance.delay.ms": "0"})
        bs = m.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(60)
        produce = produce_round_trips(bs, n)
        commits = commit_latencies(bs, n)
        rebalances = rebalance_times(bs, rounds)
    finally:
        m.down()
        shutil.rmtree(work, ignore_errors=True)
    p50 = statistics.median(produce)
    c50 = statistics.median(commits)
    r50 = statistics.median(rebalances)
    print(f"produce round trip (acks=all, RF 3): median {p50:.2f} ms over {len(produce)}")
    print(f"commit (OffsetCommit, sync):         median {c50:.2f} ms over {len(commits)}  "
          f"ratio {c50 / p50:.2f}x produce")
    print(f"rebalance after a member leaves:     median {r50:.1f} ms over {len(rebalances)} "
          f"(min {min(rebalances):.1f}, max {max(rebalances):.1f})  ratio {r50 / p50:.0f}x produce")
    print(f"summary: produce_rtt_ms={p50:.2f} commit_ms={c50:.2f} commit_ratio={c50 / p50:.2f} "
          f"rebalance_ms={r50:.1f} rebalance_ratio={r50 / p50:.0f} heartbeat_interval_ms={HEARTBEAT_MS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
