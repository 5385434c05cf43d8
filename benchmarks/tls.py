"""Produce throughput over TLS next to PLAINTEXT, in one run, on one cluster (docs/security.md#tls).

Starts a ``cluster up --tls`` cluster (embedded ZooKeeper, brokers with a PLAINTEXT and an SSL listener) in a temp
dir and, with confluent-kafka's ``Producer`` (librdkafka: its own TLS is not the bottleneck), sends the same records
to one topic per run (RF 1 by default, so the number measures the client listener, not replication), acks=1,
batches of ``--batch-kb`` (default 1 MiB), timed from the first send until every record is acknowledged.  Runs
alternate PLAINTEXT / SSL ``--rounds`` times; the median of each is reported with the ratio SSL / PLAINTEXT (goal
>= 0.6 at 1 MiB batches)::

    .venv/bin/python benchmarks/tls.py [--quick] [--mb 128] [--batch-kb 1024] [--rounds 3] [--mtls] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kafkatier.cluster.manager import ClusterManager  # noqa: E402

MB = 1024 * 1024
GOAL = 0.6


def produce(conf: dict, topic: str, total_mb: int, value: bytes, batch_kb: int) -> float:
    p = Producer({**conf, "acks": 1, "linger.ms": 5, "batch.size": batch_kb * 1024, "message.max.bytes": 4 * MB,
                  "queue.buffering.max.kbytes": 262144, "compression.type": "none"})
    n = total_mb * MB // len(value)
    failed = []

    def done(err, msg):
        if err is not None:
            failed.append(err)
    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, on_delivery=done)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(300)
    elapsed = time.perf_counter() - start
    if failed:
        raise RuntimeError(f"{len(failed)} records failed: {failed[0]}")
    return total_mb / elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=128)
    ap.add_argument("--batch-kb", type=int, default=1024)
    ap.add_argument("--record-kb", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--brokers", type=int, default=1)
    ap.add_argument("--mtls", action="store_true", help="present the client certificate (ssl.client.auth=required)")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 16 MB, one round")
    args = ap.parse_args()
    if args.quick:
        args.mb, args.rounds = 16, 1
    work = tempfile.mkdtemp(prefix="kafkatier-bench-tls-")
    m = ClusterManager(os.path.join(work, "cluster"))
    try:
        overrides = {"ssl.client.auth": "required"} if args.mtls else {}
        state = m.up(brokers=args.brokers, log_dirs_per_broker=1, overrides=overrides, tls=True)
        tls = state["tls"]
        plain = {"bootstrap.servers": state["bootstrap_servers"]}
        ssl_conf = {"bootstrap.servers": tls["bootstrap_servers"], "security.protocol": "SSL",
                    "ssl.ca.location": tls["ca"]}
        if args.mtls:
            ssl_conf.update({"ssl.certificate.location": tls["client_certificate"],
                             "ssl.key.location": tls["client_key"]})
        admin = AdminClient(plain)
        topics = [f"{kind}-{r}" for r in range(args.rounds) for kind in ("plain", "ssl")]
        for f in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
            f.result(60)
        del admin  # librdkafka would go on reconnecting (and logging) after the cluster is down
        value = os.urandom(args.record_kb * 1024)
        rates: dict[str, list[float]] = {"PLAINTEXT": [], "SSL": []}
        for r in range(args.rounds):
            rates["PLAINTEXT"].append(produce(plain, f"plain-{r}", args.mb, value, args.batch_kb))
            rates["SSL"].append(produce(ssl_conf, f"ssl-{r}", args.mb, value, args.batch_kb))
            print(f"round {r}: PLAINTEXT {rates['PLAINTEXT'][-1]:.1f} MB/s  SSL {rates['SSL'][-1]:.1f} MB/s",
                  flush=True)
        med = {k: statistics.median(v) for k, v in rates.items()}
        ratio = med["SSL"] / med["PLAINTEXT"]
        print(f"summary: median: PLAINTEXT {med['PLAINTEXT']:.1f} MB/s, SSL{' (mTLS)' if args.mtls else ''} "
              f"{med['SSL']:.1f} MB/s, ratio {ratio:.2f} (goal >= {GOAL})")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"mb": args.mb, "batch_kb": args.batch_kb, "record_kb": args.record_kb, "rates": rates,
                           "median": med, "ratio": ratio, "mtls": args.mtls}, f, indent=2)
        return 0 if ratio >= GOAL else 1
    finally:
        m.down()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
