"""The control plane at scale (issue 15), measured in one run on one 3-broker cluster that grows through the
partition counts of ``--sizes`` (default 1,000 / 5,000 / 20,000; RF 3, topics of ``--topic-partitions``):

1. **topic creation**: the new topics written to ZooKeeper (as ``kafka-topics --create`` does) until every
   partition has a leader in ZooKeeper and every broker's Metadata answer gives every partition that leader
   (then, not counted, until no partition is under-replicated: the controller is killed in a healthy cluster).
2. **controller kill -9**: from the kill until a new controller has finished its failover, every partition
   is led by a live broker and every live broker's metadata agrees with ZooKeeper.  Reported next to the new
   controller's own failover time (its ``controller failover done ... ms=`` log line) and to the baseline: a raw
   pipelined async read (kazoo ``get_async``, 1,000 in flight, no decoding) of the same znodes (every topic and
   partition-state znode), taken in the same run.  Goal: failover <= 2 x raw read.  The end-to-end time also
   holds the ZooKeeper session timeout (6 s) that passes before ``/controller`` disappears.
3. **broker restart**: the killed broker started again, until it is registered and serving (its logs loaded),
   and until every broker's metadata lists it as live again, every partition led.
4. **RSS per partition**: each broker's resident memory over its replicas, above the RSS it had with no topic.

    .venv/bin/python benchmarks/controller_scale.py [--quick] [--sizes 1000,5000,20000] [--tmp DIR]

The cluster (embedded ZooKeeper, three broker processes, one log dir each) lives in a temp dir that is removed
at the end.  A table and ``summary:`` lines are printed.
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

from kafka.protocol.metadata import MetadataRequest, MetadataResponse  # noqa: E402

from kafkatier.cluster.manager import ClusterManager  # noqa: E402
from kafkatier.server.broker_client import BrokerClient, BrokerConnectionError  # noqa: E402
from kafkatier.waiting import wait_for  # noqa: E402
from kafkatier.zk import paths  # noqa: E402
from kafkatier.zk.client import get_many, start_client  # noqa: E402
from kafkatier.zk.kafka_zk_client import KafkaZkClient  # noqa: E402

REPLICATION = 3


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def zk_states(zk, topics: dict[str, int]) -> dict[tuple[str, int], dict]:
    """Every partition's state znode (leader -1 and an empty ISR when missing)."""
    tps = [(t, p) for t, n in sorted(topics.items()) for p in range(n)]
    out = {}
    for tp, res in zip(tps, get_many(zk, [paths.partition_state(t, p) for t, p in tps])):
        out[tp] = json.loads(res[0]) if res is not None else {"leader": -1, "isr": []}
    return out


def zk_leaders(zk, topics: dict[str, int]) -> dict[tuple[str, int], int]:
    """Leader of every partition from its state znode (-1 when missing or unled)."""
    return {tp: st["leader"] for tp, st in zk_states(zk, topics).items()}


def fully_replicated(zk, topics: dict[str, int]) -> bool:
    """No under-replicated partition.  The controller is killed only then: a follower still out of the ISR
    (a broker creating thousands of logs can take longer than replica.lag.time.max.ms) cannot take over, so
    a partition whose ISR is the killed broker alone would stay offline, as in Kafka without unclean election."""
    return all(len(st["isr"]) == REPLICATION for st in zk_states(zk, topics).values())


def broker_leaders(port: int) -> tuple[dict[tuple[str, int], int], set[int]] | None:
    """(leader per partition, live broker ids) from one broker's Metadata answer, None if it does not answer."""
    client = BrokerClient("127.0.0.1", port, client_id="controller-scale-bench", timeout_s=60.0)
    try:
        resp = client.send(MetadataRequest[1](topics=None), MetadataResponse, 1)
    except (BrokerConnectionError, OSError):
        return None
    finally:
        client.close()
    leaders = {}
    for t in resp.topics:
        name, parts = t[1], t[3]
        for p in parts:
            leaders[(name, p[1])] = p[2]
    return leaders, {b[0] for b in resp.brokers}


def all_agree(zk, m: ClusterManager, topics: dict[str, int], live: set[int]) -> bool:
    """Every partition led by a live broker in ZooKeeper, and every live broker's metadata says the same."""
    want = zk_leaders(zk, topics)
    if any(l not in live for l in want.values()):
        return False
    for b in m.state["brokers"]:
        if b["id"] not in live:
            continue
        got = broker_leaders(b["port"])
        if got is None or got[1] != live or any(got[0].get(tp) != l for tp, l in want.items()):
            return False
    return True


def raw_read_s(zk, topics: dict[str, int]) -> float:
    """Pipelined async read of every topic and partition-state znode, without decoding: the baseline."""
    znodes = [paths.topic(t) for t in topics] + [paths.partition_state(t, p) for t, n in topics.items()
                                                  for p in range(n)]
    t0 = time.monotonic()
    get_many(zk, znodes)
    return time.monotonic() - t0


def controller_id(zk) -> int | None:
    try:
        return json.loads(zk.get("/controller")[0])["brokerid"]
    except Exception:  # noqa: BLE001 - no controller right now
        return None


def last_failover_ms(m: ClusterManager, broker_id: int) -> float | None:
    """``ms=`` of the last ``controller failover done`` line in the broker's log."""
    with open(os.path.join(m.data_dir, "logs", f"broker-{broker_id}.log"), errors="replace") as f:
        found = re.findall(r"controller failover done .*?ms=([0-9.]+)", f.read())
    return float(found[-1]) if found else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="sizes 300,1000 instead of 1000,5000,20000")
    ap.add_argument("--sizes", default=None, help="comma-separated total partition counts, increasing")
    ap.add_argument("--topic-partitions", type=int, default=1000, help="partitions per topic")
    ap.add_argument("--tmp", default=None, help="where the cluster's data goes")
    args = ap.parse_args()
    sizes = [int(s) for s in (args.sizes or ("300,1000" if args.quick else "1000,5000,20000")).split(",")]
    tmp = tempfile.mkdtemp(prefix="kafkatier-controller-scale-", dir=args.tmp)
    m = ClusterManager(tmp)
    rows = []
    try:
        m.up(brokers=3, log_dirs_per_broker=1, timeout=180)
        zk = start_client(m.zookeeper)
        kzc = KafkaZkClient(zk)
        ids = sorted(b["id"] for b in m.state["brokers"])
        base_rss = {b["id"]: rss_kb(b["pid"]) for b in m.state["brokers"]}
        topics: dict[str, int] = {}
        for total in sizes:
            # 1. creation of the partitions that take the cluster to ``total``
            t0 = time.monotonic()
            have = sum(topics.values())
            while have < total:
                n = min(args.topic_partitions, total - have)
                name = f"scale-{len(topics):03d}"
                kzc.create_topic(name, {p: [ids[(p + i + len(topics)) % 3] for i in range(REPLICATION)]
                                        for p in range(n)}, {})
                topics[name] = n
                have += n
            wait_for(lambda: all_agree(zk, m, topics, set(ids)), 1800, interval=1.0,
                     message=f"{total} partitions led and in every broker's metadata")
            create_s = time.monotonic() - t0
            rss = {b["id"]: rss_kb(b["pid"]) for b in m.state["brokers"]}
            replicas_per_broker = total * REPLICATION / len(ids)
            rss_per_partition = max((rss[i] - base_rss[i]) * 1024 / replicas_per_broker for i in ids)
            raw = min(raw_read_s(zk, topics) for _ in range(3))
            t_isr = time.monotonic()
            wait_for(lambda: fully_replicated(zk, topics), 1800, interval=2.0, message="no under-replicated partition")
            isr_s = time.monotonic() - t_isr
            # 2. kill -9 the controller
            old = controller_id(zk)
            t1 = time.monotonic()
            m.kill_broker(old)
            live = set(ids) - {old}
            wait_for(lambda: controller_id(zk) in live, 120, interval=0.05, message="a new controller")
            new = controller_id(zk)
            wait_for(lambda: all_agree(zk, m, topics, live), 600, interval=0.5,
                     message="every partition led again, metadata agreeing")
            failover_s = time.monotonic() - t1
            wait_for(lambda: last_failover_ms(m, new) is not None, 60, message="the failover log line")
            ctrl_ms = last_failover_ms(m, new)
            # 3. restart the killed broker
            t2 = time.monotonic()
            m.start_broker(old, wait=True, timeout=600)
            registered_s = time.monotonic() - t2
            wait_for(lambda: all_agree(zk, m, topics, set(ids)), 600, interval=1.0,
                     message="the restarted broker back in every broker's metadata")
            restart_s = time.monotonic() - t2
            rows.append(dict(partitions=total, create_s=create_s, isr_s=isr_s, kill9_s=failover_s, ctrl_ms=ctrl_ms,
                             raw_ms=raw * 1000, ratio=ctrl_ms / (raw * 1000), registered_s=registered_s,
                             restart_s=restart_s, rss_b=rss_per_partition))
            print(f"summary: partitions={total} create_s={create_s:.1f} then_isr_full_s={isr_s:.1f} "
                  f"kill9_to_all_led_and_agreeing_s="
                  f"{failover_s:.1f} controller_failover_ms={ctrl_ms:.0f} raw_async_read_ms={raw * 1000:.0f} "
                  f"ratio={ctrl_ms / (raw * 1000):.2f} broker_restart_serving_s={registered_s:.1f} "
                  f"broker_restart_all_agreeing_s={restart_s:.1f} rss_per_replica_bytes={rss_per_partition:.0f}",
                  flush=True)
        zk.stop()
        zk.close()
    finally:
        m.down()
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print("| partitions (RF 3) | create -> all led, metadata agreeing (then ISR full) "
          "| kill -9 controller -> all led, agreeing "
          "| controller failover | raw async read | failover / raw | broker restart: serving / all agreeing "
          "| broker RSS per replica |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['partitions']:,} | {r['create_s']:.1f} s (+{r['isr_s']:.1f} s) | {r['kill9_s']:.1f} s | {r['ctrl_ms']:.0f} ms "
              f"| {r['raw_ms']:.0f} ms | {r['ratio']:.2f}x | {r['registered_s']:.1f} s / {r['restart_s']:.1f} s "
              f"| {r['rss_b'] / 1024:.1f} KiB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
