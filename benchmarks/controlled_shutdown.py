"""Controlled shutdown and restart of the broker leading the most partitions, on one 3-broker cluster (RF 3) that
grows through the sizes of ``--sizes`` (default 1,000 / 5,000 / 20,000 partitions, topics of 1,000), against the
raw ZooKeeper writes each needs, measured in the same run (issue 27).

Per size:

1. **controlled shutdown**: SIGTERM to the broker (not the controller) leading the most partitions; it sends
   ControlledShutdown to the controller, which elects new leaders for the partitions it leads and takes it out of
   every other ISR (one ``state`` write per partition it hosts: every partition, with RF 3 on 3 brokers).
   Measured: SIGTERM until the ``state`` znodes name it leader of nothing (polled with multiReads), the broker's
   request round trip (its ``controlled shutdown succeeded ms=`` log line), the controller's handling (its
   ``controlled shutdown handled ... ms=`` line) and SIGTERM to process exit.
2. **restart**: the broker started again, until every ISR is full (it rejoined every partition's ISR: one
   conditional ``state`` write per partition by the leaders).

The baseline: the same number of writes of the ``state`` znodes' current payloads (to copies of them, under
``/kafkatier-bench-scratch``: writing the znodes themselves bumped their versions behind the controller), the fastest
of two batched forms: pipelined ``set_data`` calls (1,000 in flight) and fenced multis of 500 (one
``/controller_epoch`` check + 500 writes each, 10 in flight, how kafkatier's controller writes).  Goals (issue
27): shutdown (SIGTERM -> leadership moved) <= 3x the raw writes at every size and <= 5 s at 10,000 led
partitions (Kafka 1.1 published ~3 s); restart -> every ISR full <= 20 s at 20,000 partitions.

Where the time went (from the brokers' log stamps): SIGTERM until the broker starts its controlled shutdown,
until the controller starts handling the request, until the elections are written (its ``elected leaders`` line),
until it has handled the request.  ``--py-spy DIR`` records the controller and the shutting-down broker from just
before the SIGTERM until the broker exited (collapsed stacks, ``pip install py-spy``).  ``--no-last-restart``
skips the restart of the last size (its numbers are then not reported).

    .venv/bin/python benchmarks/controlled_shutdown.py [--sizes 1000,5000,20000] [--quick] [--py-spy DIR]
        [--no-last-restart]   # KEEP=1: keep logs
"""
from __future__ import annotations

import argparse
import calendar
import collections
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from _py_spy import PySpy  # noqa: E402
from kafkatier.cluster.manager import ClusterManager  # noqa: E402
from kafkatier.waiting import wait_for  # noqa: E402
from kafkatier.zk import paths  # noqa: E402
from kafkatier.zk.client import get_many, start_client  # noqa: E402
from kafkatier.zk.kafka_zk_client import KafkaZkClient  # noqa: E402

MULTI_SIZE = 500
MULTIS_IN_FLIGHT = 10
SETS_IN_FLIGHT = 1000


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def state_paths(topics: dict[str, int]) -> list[str]:
    return [paths.partition_state(t, p) for t, n in sorted(topics.items()) for p in range(n)]


def states(zk, topics: dict[str, int]) -> dict[str, dict]:
    znodes = state_paths(topics)
    return {z: (json.loads(r[0]) if r is not None else {"leader": -1, "isr": []})
            for z, r in zip(znodes, get_many(zk, znodes))}


def wait_full_isr(zk, topics: dict[str, int], timeout: float) -> float:
    t0 = time.monotonic()
    last = [0.0]

    def full() -> bool:
        short = sum(1 for s in states(zk, topics).values() if len(s["isr"]) < 3)
        if time.monotonic() - last[0] > 15:
            print(f"  ... {short:,} partitions without a full ISR", flush=True)
            last[0] = time.monotonic()
        return short == 0
    wait_for(full, timeout, interval=0.2, message="every partition with a full ISR")
    return time.monotonic() - t0


def wait_brokers_applied(m: ClusterManager, topics: dict[str, int], live: set[int], timeout: float) -> None:
    """Every live broker's Metadata shows every partition with a leader: nothing from the topics' creation is
    still in flight when the shutdown starts."""
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    from kafkatier.server.broker_client import BrokerClient, BrokerConnectionError

    def knows(b: dict) -> bool:
        client = BrokerClient("127.0.0.1", b["port"], client_id="bench", timeout_s=60.0)
        try:
            resp = client.send(MetadataRequest[1](topics=None), MetadataResponse, 1)
        except (BrokerConnectionError, OSError):
            return False
        finally:
            client.close()
        led = {(t[1], p[1]) for t in resp.topics for p in t[3] if p[2] >= 0}
        return len(led) >= sum(topics.values())
    wait_for(lambda: all(knows(b) for b in m.state["brokers"] if b["id"] in live), timeout, interval=0.5,
             message="every broker to have applied the topics' creation")


def last_ms(log_path: str, pattern: str) -> float | None:
    with open(log_path, errors="replace") as f:
        found = re.findall(pattern + r".*? ms=([0-9.]+)", f.read())
    return float(found[-1]) if found else None


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z ")


def stamp_after(log_path: str, pattern: str, since: float) -> float | None:
    """The wall time of the first log line at or after ``since`` (less a second of rounding) matching
    ``pattern``."""
    with open(log_path, errors="replace") as f:
        for line in f:
            m = _STAMP.match(line)
            if m is None or not re.search(pattern, line):
                continue
            t = calendar.timegm(time.strptime(m.group(1)[:19], "%Y-%m-%dT%H:%M:%S")) + int(m.group(1)[20:]) / 1000
            if t >= since - 1:
                return t
    return None


def breakdown(m: ClusterManager, controller: int, victim: int, sigterm_wall: float) -> str:
    """SIGTERM -> the broker starts its controlled shutdown -> the controller starts handling it -> the elections
    are written -> handled, from the log stamps (ms resolution; the clocks are one machine's)."""
    marks = [("broker starts", m._log_path(victim), r"starting controlled shutdown"),
             ("controller starts", m._log_path(controller), r"shutting down broker broker=%d" % victim),
             ("elections written", m._log_path(controller), r"elected leader.*ControlledShutdown"),
             ("handled", m._log_path(controller), r"controlled shutdown handled broker=%d" % victim),
             ("broker answered", m._log_path(victim), r"controlled shutdown succeeded")]
    out, last = [], sigterm_wall
    for name, path, pattern in marks:
        t = stamp_after(path, pattern, sigterm_wall)
        if t is None:
            out.append(f"{name} -")
            continue
        out.append(f"{name} +{(t - last) * 1000:.0f} ms")
        last = t
    return "SIGTERM -> " + ", ".join(out)


def baseline_pipelined(zk, payloads: dict[str, bytes]) -> float:
    t0 = time.monotonic()
    window: collections.deque = collections.deque()
    for p, d in payloads.items():
        if len(window) >= SETS_IN_FLIGHT:
            window.popleft().get()
        window.append(zk.set_async(p, d))
    while window:
        window.popleft().get()
    return time.monotonic() - t0


def baseline_multi(zk, payloads: dict[str, bytes]) -> float:
    epoch_version = zk.get(paths.CONTROLLER_EPOCH)[1].version
    items = list(payloads.items())
    t0 = time.monotonic()
    window: collections.deque = collections.deque()
    for i in range(0, len(items), MULTI_SIZE):
        if len(window) >= MULTIS_IN_FLIGHT:
            window.popleft().get()
        t = zk.transaction()
        t.check(paths.CONTROLLER_EPOCH, epoch_version)
        for p, d in items[i:i + MULTI_SIZE]:
            t.set_data(p, d)
        window.append(t.commit_async())
    while window:
        window.popleft().get()
    return time.monotonic() - t0


# The baseline writes copies of the state znodes under this root, not the znodes themselves: each write bumps
# a znode's version behind the controller's back (no ISR change notification), which no component of a cluster
# does, and which made the controller's version-conditional election writes fail and start over; an
# unconditional write of a payload read earlier could also undo a leader's ISR change made in between.
SCRATCH_ROOT = "/kafkatier-bench-scratch"


def _create_scratch(zk, paths_to_create: list[str]) -> None:
    """Create each path that is missing (parents first: the caller passes them in depth order), pipelined."""
    from kazoo.exceptions import NodeExistsError
    window: collections.deque = collections.deque()
    for p in paths_to_create:
        if len(window) >= SETS_IN_FLIGHT:
            try:
                window.popleft().get()
            except NodeExistsError:
                pass
        window.append(zk.create_async(p, b""))
    while window:
        try:
            window.popleft().get()
        except NodeExistsError:
            pass


def raw_writes_s(zk, topics: dict[str, int], victim: int) -> float:
    """The fastest batched form of one write per partition the victim hosts (the writes its shutdown needs): the
    same payloads written to copies of those ``state`` znodes under :data:`SCRATCH_ROOT` (same count, same
    batching, paths one component deeper)."""
    znodes = state_paths(topics)
    now = {z: r[0] for z, r in zip(znodes, get_many(zk, znodes)) if r is not None}
    payloads = {z: d for z, d in now.items() if victim in json.loads(d)["isr"] or json.loads(d)["leader"] == victim}
    if not payloads:
        payloads = now
    scratch = {SCRATCH_ROOT + z: d for z, d in payloads.items()}
    zk.ensure_path(SCRATCH_ROOT + paths.BROKER_TOPICS)
    for depth in (4, 5, 6, 7):   # /root/brokers/topics/T, .../partitions, .../P, .../state
        level = sorted({"/".join(z.split("/")[:depth + 1]) for z in scratch})
        _create_scratch(zk, level)
    return min(min(baseline_pipelined(zk, scratch) for _ in range(3)),
               min(baseline_multi(zk, scratch) for _ in range(3)))


def grow(kzc: KafkaZkClient, topics: dict[str, int], total: int, topic_partitions: int) -> None:
    have = sum(topics.values())
    while have < total:
        n = min(topic_partitions, total - have)
        name = f"cs-{len(topics):03d}"
        kzc.create_topic(name, {p: [1 + (p + i + len(topics)) % 3 for i in range(3)] for p in range(n)}, {})
        topics[name] = n
        have += n


def run_size(m: ClusterManager, zk, kzc: KafkaZkClient, topics: dict[str, int], total: int,
             topic_partitions: int, spy: PySpy, restart: bool = True) -> dict:
    print(f"[{total:,}] creating partitions (load {load_average()})", flush=True)
    grow(kzc, topics, total, topic_partitions)
    wait_full_isr(zk, topics, timeout=max(300.0, total / 10))
    wait_brokers_applied(m, topics, {1, 2, 3}, timeout=max(300.0, total / 10))
    controller = json.loads(zk.get(paths.CONTROLLER)[0])["brokerid"]
    before = states(zk, topics)
    led_by = collections.Counter(s["leader"] for s in before.values())
    victim = max((b for b in (1, 2, 3) if b != controller), key=lambda b: led_by[b])
    led = led_by[victim]
    print(f"[{total:,}] broker {victim} leads {led:,} partitions; controller is {controller} "
          f"(load {load_average()})", flush=True)
    raw = raw_writes_s(zk, topics, victim)
    spy.start({b["id"]: b["pid"] for b in m.state["brokers"] if b["id"] in (controller, victim)}, f"{total}-cs")

    t0, sigterm_wall = time.monotonic(), time.time()
    exited: list[float] = []
    stopper = threading.Thread(target=lambda: (m.stop_broker(victim, timeout=600),
                                               exited.append(time.monotonic() - t0)), daemon=True)
    stopper.start()
    moved = None
    led_znodes = [z for z, st in before.items() if st["leader"] == victim]   # polled alone: a finer clock
    while moved is None and time.monotonic() - t0 < 600:
        still = sum(1 for r in get_many(zk, led_znodes) if r is not None and json.loads(r[0])["leader"] == victim)
        if still == 0:
            moved = time.monotonic() - t0
        elif exited:
            break
        else:
            time.sleep(0.005)  # the poll itself is the clock's resolution: keep the gap small
    stopper.join(600)
    spy.stop()
    handled = last_ms(m._log_path(controller), r"controlled shutdown handled broker=%d" % victim)
    round_trip = last_ms(m._log_path(victim), r"controlled shutdown succeeded")
    print(f"[{total:,}] leadership moved in {moved if moved is not None else float('nan'):.2f} s, "
          f"exited in {exited[0] if exited else float('nan'):.2f} s (load {load_average()})", flush=True)
    print(f"[{total:,}] {breakdown(m, controller, victim, sigterm_wall)}", flush=True)
    row = dict(partitions=total, led=led, moved_s=moved, exit_s=exited[0] if exited else None,
               handled_ms=handled, round_trip_ms=round_trip, raw_s=raw, serving_s=None, rejoin_s=None,
               raw_rejoin_s=None, load=load_average())
    if not restart:
        return row

    t1 = time.monotonic()
    m.start_broker(victim, wait=True, timeout=900)
    serving = time.monotonic() - t1
    wait_full_isr(zk, topics, timeout=900)
    rejoined = time.monotonic() - t1
    raw_rejoin = raw_writes_s(zk, topics, victim)
    print(f"[{total:,}] restarted: serving in {serving:.1f} s, every ISR full in {rejoined:.1f} s", flush=True)
    row.update(serving_s=serving, rejoin_s=rejoined, raw_rejoin_s=raw_rejoin, load=load_average())
    return row


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f} s"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.1f}x"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,5000,20000", help="comma-separated total partitions, increasing")
    ap.add_argument("--quick", action="store_true", help="sizes 300,1000")
    ap.add_argument("--topic-partitions", type=int, default=1000)
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--py-spy", default=None, metavar="DIR", help="record the controller and the shutting-down "
                    "broker during each shutdown")
    ap.add_argument("--no-last-restart", action="store_true", help="do not restart the broker after the last size")
    args = ap.parse_args()
    sizes = [300, 1000] if args.quick else [int(s) for s in args.sizes.split(",")]
    data_dir = tempfile.mkdtemp(prefix="kafkatier-cs-bench-", dir=args.tmp)

    def interrupted(signum, frame):  # SIGTERM: stop, and clean up below
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, interrupted)
    m = ClusterManager(data_dir)
    spy = PySpy(args.py_spy, rate=100)
    zk = None
    rows, failed = [], []
    try:
        m.up(brokers=3, log_dirs_per_broker=1, overrides={"auto.leader.rebalance.enable": "false"}, timeout=300)
        zk = start_client(m.zookeeper, timeout=30.0)
        kzc = KafkaZkClient(zk)
        topics: dict[str, int] = {}
        for i, total in enumerate(sizes):
            try:
                rows.append(run_size(m, zk, kzc, topics, total, args.topic_partitions, spy,
                                     restart=not (args.no_last_restart and i == len(sizes) - 1)))
            except Exception as e:  # noqa: BLE001 - report the size and stop (the cluster is in no known state)
                print(f"row {total:,} did not finish: {type(e).__name__}: {e} (load {load_average()})", flush=True)
                failed += [total] + sizes[i + 1:]
                break
    finally:
        spy.stop()
        if zk is not None:
            zk.stop()
        m.down()
        if not os.environ.get("KEEP"):
            shutil.rmtree(data_dir, ignore_errors=True)
        else:
            print("kept", data_dir)
    print()
    print(f"3 brokers, RF 3, {os.cpu_count()} CPUs; raw = the fastest of {SETS_IN_FLIGHT} pipelined set_data and "
          f"fenced multis of {MULTI_SIZE} ({MULTIS_IN_FLIGHT} in flight), copies of the same znodes, same run")
    print("| partitions | led by the broker | SIGTERM -> leadership moved | raw writes | ratio (goal <= 3x; "
          "<= 5 s at 10,000 led) | broker round trip | controller handling | SIGTERM -> exit "
          "| restart -> every ISR full | raw writes | ratio (goal <= 20 s at 20,000) | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['partitions']:,} | {r['led']:,} | {_s(r['moved_s'])} | {_s(r['raw_s'])} "
              f"| {_ratio(r['moved_s'], r['raw_s'])} | {_s(r['round_trip_ms'] and r['round_trip_ms'] / 1000)} "
              f"| {_s(r['handled_ms'] and r['handled_ms'] / 1000)} | {_s(r['exit_s'])} | {_s(r['rejoin_s'])} "
              f"({_s(r['rejoin_s'] and r['rejoin_s'] - r['serving_s'])} after serving) "
              f"| {_s(r['raw_rejoin_s'])} | {_ratio(r['rejoin_s'], r['raw_rejoin_s'])} | {r['load']} |")
    for total in failed:
        print(f"| {total:,} | not completed |||||||||||")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
