"""KIP-113 replica moves between log dirs, measured in one run against baselines of the same run:

1. **unthrottled move** of one partition of ``--mb`` MiB (default 1024) from one log dir to the other on the
   same disk, from the AlterReplicaLogDirs request to the swap (``<tp>`` in the destination, no ``.move``),
   against ``cp -r`` of the same partition directory on the same disk (the copy is fsynced, as the move fsyncs its copy before the swap, and removed afterwards).
   Goal: move rate >= 0.8 x cp rate.
2. **throttled moves** at three rates: ``intra.broker.throttled.rate`` set, a move started, its future log's
   growth sampled through DescribeLogDirs over ``--throttle-seconds`` (after a one-second warm-up), then the
   move cancelled.  Goal: measured rate within +/-10% of the setting.
3. **producer latency**: p50/p99 of ``acks=1`` sends (kafka-python, 1 KiB, a fixed rate) to another partition
   of the same broker, without a move and during an unthrottled move of the big partition.

The benchmark starts its own cluster (embedded ZooKeeper + one broker with two log dirs, ClusterManager) in a
temp dir under ``--tmp`` (default: the system temp dir; it needs about 3 x ``--mb`` free) and removes it at the
end.  The data is produced with confluent-kafka (1 MiB batches).  Both the move and ``cp`` read from the page
cache when the partition fits in memory: the comparison is of the copying work, not of the disk.

    .venv/bin/python benchmarks/replica_move.py [--quick] [--mb 1024] [--rates 4,8,16]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kafkatier.admin.client import AdminClient  # noqa: E402
from kafkatier.cluster.manager import ClusterManager  # noqa: E402
from kafkatier.waiting import wait_for  # noqa: E402

BIG, SMALL = "big", "probe"
MIB = 1 << 20


def dir_size(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def fsync_tree(path: str) -> None:
    for root, _, files in os.walk(path):
        for f in files:
            fd = os.open(os.path.join(root, f), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fd = os.open(root, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def produce_big(bootstrap: str, mb: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20, "batch.size": MIB,
                  "compression.type": "none", "queue.buffering.max.kbytes": 512 * 1024})
    value = os.urandom(1000) * 1  # incompressible-ish, same for every record (no per-record work in the loop)
    n = mb * MIB // len(value)
    for i in range(n):
        while True:
            try:
                p.produce(BIG, value=value, partition=0)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10000 == 0:
            p.poll(0)
    p.flush(120)


def where(dirs: list[str], name: str) -> str | None:
    for d in dirs:
        if os.path.isdir(os.path.join(d, name)):
            return d
    return None


def future_size(admin: AdminClient, broker: int) -> int | None:
    for b in admin.describe_log_dirs(topic_partitions={BIG: [0]}, brokers=[broker]):
        for d in b["log_dirs"]:
            for t in d["topics"]:
                for p in t["partitions"]:
                    if p["is_future_key"]:
                        return p["partition_size"]
    return None


def latencies(bootstrap: str, seconds: float, rate: int) -> list[float]:
    """Send latencies (ms) of acks=1 sends at ``rate`` records/s for ``seconds``."""
    from kafka import KafkaProducer
    prod = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=0)
    out: list[float] = []
    lock = threading.Lock()
    try:
        start = time.monotonic()
        i = 0
        while time.monotonic() - start < seconds:
            t0 = time.monotonic()
            fut = prod.send(SMALL, value=b"x" * 1024, partition=0)
            fut.add_callback(lambda _m, t0=t0: (lock.acquire(), out.append((time.monotonic() - t0) * 1000),
                                                lock.release()))
            i += 1
            ahead = start + i / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)  # pacing the load generator, not synchronisation
        prod.flush(30)
    finally:
        prod.close(10)
    return out


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="128 MiB and shorter throttled runs")
    ap.add_argument("--mb", type=int, default=None, help="size of the moved partition in MiB (default 1024)")
    ap.add_argument("--rates", default="4,8,16", help="throttles to check, MB/s (default 4,8,16)")
    ap.add_argument("--throttle-seconds", type=float, default=None, help="sampling time per throttle (default 6)")
    ap.add_argument("--tmp", default=None, help="where the cluster's data goes")
    args = ap.parse_args()
    mb = args.mb or (128 if args.quick else 1024)
    tsec = args.throttle_seconds or (3.0 if args.quick else 6.0)
    rates = [int(float(r) * MIB) for r in args.rates.split(",")]
    tmp = tempfile.mkdtemp(prefix="kafkatier-replica-move-", dir=args.tmp)
    free = shutil.disk_usage(tmp).free
    if free < 3 * mb * MIB:
        print(f"not enough free disk in {tmp}: {free // MIB} MiB, need {3 * mb} MiB; use --mb or --tmp")
        return 1
    m = ClusterManager(tmp)
    try:
        m.up(brokers=1, log_dirs_per_broker=2, overrides={"num.replica.alter.log.dirs.threads": "1"})
        boot = m.bootstrap_servers
        dirs = [os.path.abspath(d) for d in m.broker(1)["log_dirs"]]
        with AdminClient(boot.split(",")) as admin:
            from kafkatier.admin.client import NewTopicSpec
            admin.create_topics([NewTopicSpec(BIG, 1, 1, replica_assignment={0: (1,)},
                                              configs={"segment.bytes": str(256 * MIB),
                                                       "file.delete.delay.ms": "1000"}),
                                 NewTopicSpec(SMALL, 1, 1, replica_assignment={0: (1,)})])
            wait_for(lambda: where(dirs, f"{BIG}-0") and where(dirs, f"{SMALL}-0"), 60, message="topics")
            t0 = time.monotonic()
            produce_big(boot, mb)
            src = where(dirs, f"{BIG}-0")
            size = dir_size(os.path.join(src, f"{BIG}-0"))
            print(f"produced {size / MIB:.0f} MiB in {time.monotonic() - t0:.1f}s into {src}")
            dst = [d for d in dirs if d != src][0]

            # 1. cp -r baseline, then the unthrottled move, on the same disk; the produced data is made durable
            # first, so neither copy competes with its write-back
            fsync_tree(os.path.join(src, f"{BIG}-0"))
            copy = os.path.join(dst, "cp-baseline")
            t0 = time.monotonic()
            subprocess.run(["cp", "-r", os.path.join(src, f"{BIG}-0"), copy], check=True)
            fsync_tree(copy)  # the move fsyncs its copy before the swap; cp's copy is made durable the same way
            cp_s = time.monotonic() - t0
            shutil.rmtree(copy)
            t0 = time.monotonic()
            admin.alter_replica_log_dirs({(BIG, 0, 1): dst})
            wait_for(lambda: where(dirs, f"{BIG}-0") == dst and not os.path.exists(os.path.join(dst, f"{BIG}-0.move")),
                     3600, interval=0.005, message="the move")
            move_s = time.monotonic() - t0
            cp_rate, move_rate = size / cp_s / MIB, size / move_s / MIB
            print(f"cp -r:          {cp_s:7.2f}s  {cp_rate:7.1f} MB/s")
            print(f"move (no limit): {move_s:6.2f}s  {move_rate:7.1f} MB/s")
            print(f"summary: unthrottled move {move_rate:.1f} MB/s vs cp -r {cp_rate:.1f} MB/s: "
                  f"ratio {move_rate / cp_rate:.2f} (goal >= 0.8)")
            src, dst = dst, src

            # 2. throttled moves
            for rate in rates:
                admin.alter_configs("brokers", "1", {"intra.broker.throttled.rate": str(rate)})
                time.sleep(0.5)  # let the broker apply the config before the move starts (timed runs only)
                admin.alter_replica_log_dirs({(BIG, 0, 1): dst})
                wait_for(lambda: future_size(admin, 1) is not None, 30, interval=0.05, message="the move started")
                time.sleep(1.0)  # warm-up: the first round may take one burst
                s0, t0 = future_size(admin, 1), time.monotonic()
                time.sleep(tsec)
                s1, t1 = future_size(admin, 1), time.monotonic()
                admin.alter_replica_log_dirs({(BIG, 0, 1): "any"})
                measured = (s1 - s0) / (t1 - t0)
                err = (measured - rate) / rate
                print(f"summary: throttle {rate / MIB:.1f} MB/s -> measured {measured / MIB:.2f} MB/s "
                      f"({err:+.1%}, goal within 10%)")
            admin.alter_configs("brokers", "1", delete_configs=["intra.broker.throttled.rate"])

            # 3. producer latency without and during a move
            base = latencies(boot, 5.0, 500)
            admin.alter_replica_log_dirs({(BIG, 0, 1): dst})
            during = latencies(boot, 5.0, 500)
            moving = os.path.exists(os.path.join(dst, f"{BIG}-0.move"))
            print(f"summary: producer p50/p99 without a move {pct(base, .5):.1f}/{pct(base, .99):.1f} ms, "
                  f"during a move {pct(during, .5):.1f}/{pct(during, .99):.1f} ms "
                  f"({'move still running at the end' if moving else 'move finished within the window'})")
    finally:
        m.down()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
