"""Controlled shutdown of a broker leading a third of ``--partitions`` partitions (default 3,000; 3 brokers, RF 3),
against the raw ZooKeeper writes it needs, measured in the same run.

The shutdown: SIGTERM to a broker that is not the controller; it sends ControlledShutdown to the controller, which
moves the ~1/3 of the leaders it holds and takes it out of every other ISR (one partition-state write per
partition, since with RF 3 on 3 brokers it hosts a replica of every partition), sends LeaderAndIsr /
StopReplica / UpdateMetadata, and answers once every broker has applied them.  Reported: the controller's
handling time (its log), the broker's request round trip (its log) and SIGTERM-to-exit (wall clock).

The baseline: the same number of ``set_data`` calls on the same partition ``state`` znodes with their current
payloads, after the shutdown, two ways: pipelined (every call issued, then all awaited) and as multis of 50
(one ``/controller_epoch`` version check + 50 writes, how a fenced controller could batch them).  The ratio is
the controller's handling time over the faster baseline.  (Kafka 1.1 reported 3 s for 10,000 partitions.)

    .venv/bin/python benchmarks/controlled_shutdown.py [--partitions 3000] [--quick]   # KEEP=1: keep the logs
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kafkatier.cluster.manager import ClusterManager  # noqa: E402
from kafkatier.waiting import wait_for  # noqa: E402
from kafkatier.zk.client import start_client  # noqa: E402
from kafkatier.zk.kafka_zk_client import KafkaZkClient  # noqa: E402

TOPIC = "cs-bench"
MULTI_SIZE = 50


def wait_full_isr(zk, partitions: int, timeout: float) -> None:
    from tqdm import tqdm
    paths = [f"/brokers/topics/{TOPIC}/partitions/{p}/state" for p in range(partitions)]
    done: set[str] = set()
    bar = tqdm(total=partitions, desc="partitions with a full ISR", unit="p", file=sys.stderr)

    def check() -> bool:
        pending = [p for p in paths if p not in done]
        asyncs = [(p, zk.get_async(p)) for p in pending]
        for p, a in asyncs:
            try:
                if len(json.loads(a.get()[0])["isr"]) == 3:
                    done.add(p)
                    bar.update(1)
            except Exception:  # noqa: BLE001 - not created yet
                pass
        return len(done) == partitions
    try:
        wait_for(check, timeout, interval=0.5, message="every partition with a full ISR")
    finally:
        bar.close()


def wait_brokers_applied(m: ClusterManager, partitions: int, timeout: float) -> None:
    """Every broker's Metadata shows every partition with a leader: it has applied the LeaderAndIsr requests
    queued before its UpdateMetadata (one FIFO control queue per broker), so nothing from the topic's creation
    is still in flight when the shutdown starts."""
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    from kafkatier.server.broker_client import BrokerClient, BrokerConnectionError

    def knows(b: dict) -> bool:
        client = BrokerClient("127.0.0.1", b["port"], client_id="bench", timeout_s=30.0)
        try:
            resp = client.send(MetadataRequest[1](topics=[TOPIC]), MetadataResponse, 1)
        except (BrokerConnectionError, OSError):
            return False
        finally:
            client.close()
        parts = resp.topics[0].partitions if resp.topics else []
        return len(parts) == partitions and all(p.leader_id >= 0 for p in parts)
    wait_for(lambda: all(knows(b) for b in m.state["brokers"]), timeout, interval=0.5,
             message="every broker to have applied the topic's creation")


def last_ms(log_path: str, pattern: str) -> float | None:
    with open(log_path, errors="replace") as f:
        found = re.findall(pattern + r".*? ms=([0-9.]+)", f.read())
    return float(found[-1]) if found else None


def baseline_pipelined(zk, payloads: dict[str, bytes]) -> float:
    t0 = time.monotonic()
    asyncs = [zk.set_async(p, d) for p, d in payloads.items()]
    for a in asyncs:
        a.get()
    return time.monotonic() - t0


def baseline_multi(zk, payloads: dict[str, bytes]) -> float:
    epoch_version = zk.get("/controller_epoch")[1].version
    items = list(payloads.items())
    t0 = time.monotonic()
    for i in range(0, len(items), MULTI_SIZE):
        t = zk.transaction()
        t.check("/controller_epoch", epoch_version)
        for p, d in items[i:i + MULTI_SIZE]:
            t.set_data(p, d)
        t.commit()
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=3000)
    ap.add_argument("--quick", action="store_true", help="300 partitions")
    ap.add_argument("--tmp", default=None)
    args = ap.parse_args()
    partitions = 300 if args.quick else args.partitions
    data_dir = tempfile.mkdtemp(prefix="kafkatier-cs-bench-", dir=args.tmp)
    m = ClusterManager(data_dir)
    zk = None
    try:
        m.up(brokers=3, log_dirs_per_broker=1, overrides={"auto.leader.rebalance.enable": "false"}, timeout=180)
        zk = start_client(m.zookeeper)
        assignment = {p: [1 + (p + i) % 3 for i in range(3)] for p in range(partitions)}
        t0 = time.monotonic()
        KafkaZkClient(zk).create_topic(TOPIC, assignment, {})
        wait_full_isr(zk, partitions, timeout=max(120.0, partitions / 10))
        wait_brokers_applied(m, partitions, timeout=max(120.0, partitions / 10))
        print(f"topic {TOPIC}: {partitions} partitions, RF 3, online with a full ISR in "
              f"{time.monotonic() - t0:.1f} s", flush=True)
        controller = json.loads(zk.get("/controller")[0])["brokerid"]
        victim = next(b for b in (1, 2, 3) if b != controller)
        states = {p: json.loads(zk.get(f"/brokers/topics/{TOPIC}/partitions/{p}/state")[0]) for p in range(partitions)}
        led = sum(1 for s in states.values() if s["leader"] == victim)
        print(f"broker {victim} leads {led} partitions and follows {partitions - led}; controller is {controller}",
              flush=True)

        t0 = time.monotonic()
        m.stop_broker(victim, timeout=600)
        wall = time.monotonic() - t0
        handled = last_ms(m._log_path(controller), r"controlled shutdown handled broker=%d" % victim)
        round_trip = last_ms(m._log_path(victim), r"controlled shutdown succeeded")
        after = {p: json.loads(zk.get(f"/brokers/topics/{TOPIC}/partitions/{p}/state")[0])
                 for p in range(partitions)}
        still = sum(1 for s in after.values() if s["leader"] == victim)
        in_isr = sum(1 for s in after.values() if victim in s["isr"])
        print(f"after: partitions still led by {victim}: {still}; ISRs still holding it: {in_isr}", flush=True)

        payloads = {f"/brokers/topics/{TOPIC}/partitions/{p}/state": zk.get(
            f"/brokers/topics/{TOPIC}/partitions/{p}/state")[0] for p in range(partitions)}
        pipelined = min(baseline_pipelined(zk, payloads) for _ in range(3))
        multi = min(baseline_multi(zk, payloads) for _ in range(3))
        best = min(pipelined, multi)
        print()
        print(f"controlled shutdown, controller handling : {handled / 1000 if handled else float('nan'):8.3f} s")
        print(f"controlled shutdown, broker round trip   : {round_trip / 1000 if round_trip else float('nan'):8.3f} s")
        print(f"SIGTERM to process exit                  : {wall:8.3f} s")
        print(f"raw ZooKeeper writes, {partitions} set_data pipelined : {pipelined:8.3f} s")
        print(f"raw ZooKeeper writes, multis of {MULTI_SIZE} (fenced)    : {multi:8.3f} s")
        if handled:
            print(f"ratio controller handling / fastest raw writes: {handled / 1000 / best:.1f}x")
        if round_trip:
            print(f"ratio broker round trip / fastest raw writes  : {round_trip / 1000 / best:.1f}x")
        return 0
    finally:
        if zk is not None:
            zk.stop()
        m.down()
        if not os.environ.get("KEEP"):
            shutil.rmtree(data_dir, ignore_errors=True)
        else:
            print("kept", data_dir)


if __name__ == "__main__":
    sys.exit(main())
