"""What recording a scenario's history costs a producer: the same confluent-kafka workload (the scenario's own
``ProducerWorkload``, acks=all, idempotent, as fast as it goes) with history recording on and off, alternating,
in one run against one cluster, as wall-clock throughput and as records per CPU second of the client process
(the latter barely moves with other load on a shared machine).  As in the runner, entries are serialised to ``history.jsonl`` after the
workload (reported separately as "flush"), not while the producer is measured::

    .venv/bin/python benchmarks/scenario_recording.py [--quick] [--records N] [--rounds R]

Prints records/s per round and ``summary: recording on/off throughput ratio X (goal >= 0.9)``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kafkatier.cluster.manager import ClusterManager  # noqa: E402
from kafkatier.scenario.history import History  # noqa: E402
from kafkatier.scenario.spec import WorkloadSpec  # noqa: E402
from kafkatier.scenario.workloads import ProducerWorkload  # noqa: E402


def one_round(bootstrap: str, topic: str, records: int, record: bool, tmp: str, n: int) -> float:
    history = History(os.path.join(tmp, f"history-{n}.jsonl"), enabled=record)
    spec = WorkloadSpec(type="producer", topic=topic, rate=1e9, acks="all", idempotence=True)
    w = ProducerWorkload(f"producer-{n}", spec, bootstrap, history, max_records=records)
    t0, c0 = time.perf_counter(), time.process_time()
    w.run()
    left = w.finish(60)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    CPU_RATE[record].append(records / cpu)
    t1 = time.perf_counter()
    history.flush()
    if record:
        FLUSH_S.append(time.perf_counter() - t1)
    if left or w.acked != records:
        raise SystemExit(f"round {n}: {w.acked} of {records} acknowledged, {left} outstanding")
    return records / elapsed


FLUSH_S: list[float] = []
CPU_RATE: dict[bool, list[float]] = {True: [], False: []}   # records per CPU second of this process


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer records and rounds")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args()
    records = args.records or (20000 if args.quick else 100000)
    rounds = args.rounds or (3 if args.quick else 5)
    with tempfile.TemporaryDirectory(prefix="kafkatier-bench-rec-") as tmp:
        m = ClusterManager(os.path.join(tmp, "cluster"))
        m.up(brokers=1, log_dirs_per_broker=1)
        try:
            from confluent_kafka.admin import AdminClient, NewTopic
            admin = AdminClient({"bootstrap.servers": m.bootstrap_servers})
            for f in admin.create_topics([NewTopic("bench", 1, 1)]).values():
                f.result(30)
            one_round(m.bootstrap_servers, "bench", 2000, False, tmp, 0)   # warm-up
            on, off = [], []
            for r in range(rounds):
                for record in ((False, True) if r % 2 == 0 else (True, False)):
                    rate = one_round(m.bootstrap_servers, "bench", records, record, tmp, len(on) + len(off) + 1)
                    (on if record else off).append(rate)
                    print(f"round {r + 1}: recording {'on ' if record else 'off'} {rate:10.0f} records/s", flush=True)
        finally:
            m.down()
    ratio = statistics.median(on) / statistics.median(off)
    print(f"median records/s: recording on {statistics.median(on):.0f}, off {statistics.median(off):.0f}")
    print(f"serialising the history after the workload: median {statistics.median(FLUSH_S):.2f} s per "
          f"{records} records ({2 * records} entries)")
    cpu_ratio = statistics.median(CPU_RATE[True]) / statistics.median(CPU_RATE[False])
    print(f"records per CPU second of the client process (less sensitive to other load on the machine): "
          f"recording on {statistics.median(CPU_RATE[True]):.0f}, off {statistics.median(CPU_RATE[False]):.0f}, "
          f"ratio {cpu_ratio:.3f}")
    print(f"summary: recording on/off throughput ratio {ratio:.3f} (goal >= 0.9); per CPU second {cpu_ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
