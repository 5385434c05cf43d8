"""RF 3 acks=all produce to topics created before any traffic against topics created while the cluster carries
traffic, in one run on one 3-broker cluster (the baseline is the first kind).

On a quiet machine a topic created after another topic has carried traffic was produced to at about a third of
the rate of one created up front (56-67 MB/s against 147-183 MB/s, 1 MiB batches, 64 MB per topic), and the gap
closed with ``replica.fetch.wait.max.ms=50``: some follower fetch that covers the new topic's partitions waits
out its ``replica.fetch.wait.max.ms`` instead of being woken by their appends.  It is not traffic itself: a topic
created 5 s after the first one, with no traffic at all, was as slow on its first 32 MB (33 MB/s) and then fast
(186 MB/s) once the first topic had been produced to: partitions added to a follower's running fetcher, for a
while after they were added.  The incremental fetch session is not the cause (the same with
``max.incremental.fetch.session.cache.slots=0``).  ``--override K=V`` passes a broker setting to every broker::

    .venv/bin/python benchmarks/rf3_new_topics.py [--mb 64] [--topics 2] [--override replica.fetch.wait.max.ms=50]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from peer_table import create_topic, produce_confluent  # noqa: E402

from kafkatier.cluster.manager import ClusterManager  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=64, help="MB of 1 KiB values per topic")
    ap.add_argument("--topics", type=int, default=2, help="topics of each kind")
    ap.add_argument("--quick", action="store_true", help="16 MB per topic")
    ap.add_argument("--override", action="append", default=[], metavar="K=V", help="a broker setting")
    args = ap.parse_args()
    mb = 16 if args.quick else args.mb
    records, value = mb * 1024, b"x" * 1024
    work = tempfile.mkdtemp(prefix="kafkatier-rf3-new-topics-")
    m = ClusterManager(os.path.join(work, "cluster"))
    before, after = [], []
    try:
        m.up(brokers=3, log_dirs_per_broker=1, overrides=dict(kv.split("=", 1) for kv in args.override))
        bs = m.bootstrap_servers
        early = [f"early-{i}" for i in range(args.topics)]
        for t in early:
            create_topic(bs, t, 3, 3, {"min.insync.replicas": "2"})
        for i in range(args.topics):
            before.append(mb / produce_confluent(bs, early[i], records, value, 1024 * 1024, 5))
            print(f"  topic created up front: {before[-1]:.1f} MB/s", flush=True)
            late = f"late-{i}"
            create_topic(bs, late, 3, 3, {"min.insync.replicas": "2"})
            after.append(mb / produce_confluent(bs, late, records, value, 1024 * 1024, 5))
            print(f"  topic created under traffic: {after[-1]:.1f} MB/s", flush=True)
    finally:
        m.down()
        shutil.rmtree(work, ignore_errors=True)
    b, a = statistics.median(before), statistics.median(after)
    print(f"summary: rf3 produce to a topic created under traffic {a:.1f} MB/s vs created up front {b:.1f} MB/s "
          f"= {a / b:.2f} (1.0 expected)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
