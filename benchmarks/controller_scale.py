"""The control plane at scale (issue 15), measured in one run on one 3-broker cluster that grows through the
partition counts of ``--sizes`` (default 1,000 / 5,000 / 20,000; RF 3, topics of ``--topic-partitions``):

1. **topic creation**: the new topics written to ZooKeeper (as ``kafka-topics --create`` does) until every
   partition has a leader in ZooKeeper and every broker's Metadata answer gives every partition that leader
   (then, not counted, until no partition is under-replicated: the controller is killed in a healthy cluster).
2. **controller kill -9**: from the kill until a new controller has finished its failover, every partition
   is led by a live broker and every live broker's metadata agrees with ZooKeeper.  Reported next to the new
   controller's own failover time (its ``controller failover done ... ms=`` log line) and to two baselines
   taken in the same run just before the kill, both reading every topic and partition-state znode without
   decoding: the issue's raw pipelined async read (kazoo ``get_async`` per znode, 1,000 in flight: how Kafka's
   controller reads) and a raw multiRead (200 paths per request, 10 in flight: how kafkatier's controller
   reads).  Goal: failover <= 2 x the raw pipelined async read.  The
   end-to-end time also holds the ZooKeeper session timeout (Kafka's default ``zookeeper.session.timeout.ms=18000``,
   as here) that passes before ``/controller`` disappears.
3. **broker restart**: the killed broker started again, until it is registered and serving (its logs loaded),
   until every broker's metadata lists it as live again, every partition led, and until it is back in every
   ISR (issue 27's goal: <= 20 s at 20,000 partitions; the leaders write its ISR expansions in batches).
4. **RSS per partition**: each broker's resident memory over its replicas, above the RSS it had with no topic.

    .venv/bin/python benchmarks/controller_scale.py [--quick] [--sizes 1000,5000,20000] [--tmp DIR]
        [--session-timeout-ms 18000] [--py-spy DIR] [--keep-logs DIR] [--idle-only] [--idle-seconds 10]

``--idle-only`` stops each size after its idle CPU and RSS (no kill, no restart): a quick check of an idle
cluster's work; ``--idle-seconds`` sets the idle-CPU window (10 s by default).

The cluster (embedded ZooKeeper, three broker processes, one log dir each) lives in a temp dir that is removed
at the end.  Every wait has a generous bound and prints progress every ~15 s; a size that does not finish
prints why (and the sizes after it are skipped: the cluster is no longer in a known state), never hangs.  A
table (with the load average at the end of each row) and ``summary:`` lines are printed.  ``--py-spy DIR``
(a dev tool: ``pip install py-spy``) records the surviving brokers with py-spy from the kill until the
failover is over, and every broker from the killed broker's restart until it is back in every ISR, as
collapsed stacks in ``DIR`` (and every broker during the idle-CPU window, ``<size>-idle-broker-<id>.txt``).
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
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kafka.protocol.metadata import MetadataRequest  # noqa: E402

from _py_spy import PySpy  # noqa: E402
from kafkatier.cluster.manager import ClusterManager  # noqa: E402
from kafkatier.server.broker_client import BrokerClient, BrokerConnectionError  # noqa: E402
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


def cpu_s(pid: int) -> float:
    """User + system CPU seconds the process has used (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


IDLE_SECONDS = 10.0


def idle_cpu_percent(pids: dict[int, int], seconds: float | None = None) -> dict[int, float]:
    """Each broker's CPU use over ``seconds`` (``--idle-seconds``) of an idle cluster, in % of one core
    (replication fetches only)."""
    seconds = seconds or IDLE_SECONDS
    before = {b: cpu_s(pid) for b, pid in pids.items()}
    time.sleep(seconds)  # a measurement window, not a synchronisation
    return {b: round(100 * (cpu_s(pid) - before[b]) / seconds, 1) for b, pid in pids.items()}


def gc_stats(m: ClusterManager) -> dict[int, dict]:
    """Each broker's garbage-collection pauses so far (its status file's ``gc``: server/gc_tuning.py)."""
    out = {}
    for b in m.state["brokers"]:
        try:
            with open(os.path.join(m.data_dir, "status", f"broker-{b['id']}.json")) as f:
                out[b["id"]] = json.load(f).get("gc") or {}
        except (OSError, ValueError):
            out[b["id"]] = {}
    return out


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


def metadata_v1_leaders(body: bytes) -> tuple[dict[tuple[str, int], int], set[int]]:
    """(leader per partition, broker ids) of a Metadata v1 response body, read with ``struct`` alone: the
    bench polls 20,000-partition answers while the brokers fail over on the same cores, and a generic decoder
    took seconds per answer there (its polling stole CPU from the brokers it measured)."""
    i16, i32 = struct.Struct(">h").unpack_from, struct.Struct(">i").unpack_from
    off = 0

    def string() -> str | None:
        nonlocal off
        (n,) = i16(body, off)
        off += 2
        if n < 0:
            return None
        off += n
        return bytes(body[off - n:off]).decode()

    (n_brokers,) = i32(body, off)
    off += 4
    brokers = set()
    for _ in range(n_brokers):
        brokers.add(i32(body, off)[0])
        off += 4
        string()
        off += 4  # port
        string()  # rack
    off += 4  # controller id
    (n_topics,) = i32(body, off)
    off += 4
    leaders = {}
    for _ in range(n_topics):
        off += 2  # error code
        name = string()
        off += 1  # is internal
        (n_parts,) = i32(body, off)
        off += 4
        for _ in range(n_parts):
            _err, index, leader = struct.unpack_from(">hii", body, off)
            off += 10
            (n,) = i32(body, off)
            off += 4 + 4 * n   # replicas
            (n,) = i32(body, off)
            off += 4 + 4 * n   # isr
            leaders[(name, index)] = leader
    return leaders, brokers


def broker_leaders(port: int, answered: list | None = None) -> tuple[dict[tuple[str, int], int], set[int]] | None:
    """(leader per partition, live broker ids) from one broker's Metadata answer, None if it does not answer.
    ``answered``: the monotonic time the answer arrived (before it is decoded) is appended to it."""
    client = BrokerClient("127.0.0.1", port, client_id="controller-scale-bench", timeout_s=60.0)
    try:
        body = client.send_encoded(3, 1, MetadataRequest[1](topics=None).encode(version=1))
        if answered is not None:
            answered.append(time.monotonic())
    except (BrokerConnectionError, OSError):
        return None
    finally:
        client.close()
    return metadata_v1_leaders(body)


def all_agree(zk, m: ClusterManager, topics: dict[str, int], live: set[int],
              answered: list | None = None) -> tuple[bool, str]:
    """Every partition led by a live broker in ZooKeeper, and every live broker's metadata says the same;
    with what is still missing.  ``answered``: each broker's answer time is appended to it."""
    want = zk_leaders(zk, topics)
    unled = sum(1 for l in want.values() if l not in live)
    if unled:
        return False, f"{unled:,} of {len(want):,} partitions without a live leader in ZooKeeper"
    for b in m.state["brokers"]:
        if b["id"] not in live:
            continue
        got = broker_leaders(b["port"], answered)
        if got is None:
            return False, f"broker {b['id']} does not answer Metadata"
        if got[1] != live:
            return False, f"broker {b['id']} lists brokers {sorted(got[1])}, live are {sorted(live)}"
        differ = sum(1 for tp, l in want.items() if got[0].get(tp) != l)
        if differ:
            return False, f"broker {b['id']}'s metadata differs from ZooKeeper on {differ:,} partitions"
    return True, "all led and agreeing"


class RowFailed(Exception):
    """A size that did not finish: says which phase and why."""


class IdleOnly(Exception):
    """``--idle-only``: the size stopped after its idle measurement (not a failure)."""


def wait_phase(what: str, check, timeout: float, interval: float = 1.0, every: float = 15.0):
    """Wait until ``check()`` returns ``(True, status)``, printing the status every ``every`` seconds; raise
    :class:`RowFailed` with the last status after ``timeout`` seconds.  ``check`` may also return a bool."""
    t0 = time.monotonic()
    last_print = t0
    status = "not checked yet"
    while True:
        try:
            res = check()
        except Exception as e:  # noqa: BLE001 - a broker or ZooKeeper hiccup while polling: report and go on
            res = (False, f"{type(e).__name__}: {e}")
        ok, status = res if isinstance(res, tuple) else (bool(res), "")
        if ok:
            return
        now = time.monotonic()
        if now - t0 >= timeout:
            raise RowFailed(f"{what}: not reached within {timeout:.0f} s; last: {status or 'not yet'}")
        if now - last_print >= every:
            print(f"  ... {what}: {now - t0:.0f} s{': ' + status if status else ''}", flush=True)
            last_print = now
        time.sleep(interval)


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _znodes(topics: dict[str, int]) -> list[str]:
    return [paths.topic(t) for t in topics] + [paths.partition_state(t, p) for t, n in topics.items()
                                               for p in range(n)]


def raw_read_s(zk, topics: dict[str, int], in_flight: int = 1000) -> float:
    """The issue's baseline: kazoo ``get_async`` of every topic and partition-state znode, ``in_flight`` at
    once, without decoding."""
    znodes = _znodes(topics)
    t0 = time.monotonic()
    window: collections.deque = collections.deque()
    for path in znodes:
        if len(window) >= in_flight:
            window.popleft().get()
        window.append(zk.get_async(path))
    while window:
        window.popleft().get()
    return time.monotonic() - t0


def raw_multi_read_s(zk, topics: dict[str, int]) -> float:
    """The same znodes in multiReads (:func:`get_many`: 200 paths per request, 10 in flight), without
    decoding: what reading costs the way kafkatier's controller reads."""
    znodes = _znodes(topics)
    t0 = time.monotonic()
    get_many(zk, znodes)
    return time.monotonic() - t0


def controller_id(zk) -> int | None:
    try:
        return json.loads(zk.get("/controller")[0])["brokerid"]
    except Exception:  # noqa: BLE001 - no controller right now
        return None


def failover_lines(m: ClusterManager, broker_id: int) -> int:
    """How many ``controller failover done`` lines the broker's log has (a broker may have been the controller of
    an earlier size: only a line written after the kill is this failover's)."""
    with open(os.path.join(m.data_dir, "logs", f"broker-{broker_id}.log"), errors="replace") as f:
        return len(re.findall(r"controller failover done ", f.read()))


def last_failover_ms(m: ClusterManager, broker_id: int) -> float | None:
    """``ms=`` of the last ``controller failover done`` line in the broker's log."""
    with open(os.path.join(m.data_dir, "logs", f"broker-{broker_id}.log"), errors="replace") as f:
        found = re.findall(r"controller failover done .*?ms=([0-9.]+)", f.read())
    return float(found[-1]) if found else None


def failover_phases(m: ClusterManager, broker_id: int) -> str:
    """The phases of the last ``controller failover done`` line (``read_ms=... states_ms=... send_ms=...
    other_ms=...``): reading ZooKeeper, the state machines (elections, their writes), queueing the requests."""
    with open(os.path.join(m.data_dir, "logs", f"broker-{broker_id}.log"), errors="replace") as f:
        found = re.findall(r"controller failover done .*? ms=[0-9.]+ (.*)", f.read())
    return found[-1].strip() if found else "-"


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z ")


def _stamp(line: str) -> float | None:
    m = _STAMP.match(line)
    if m is None:
        return None
    return calendar.timegm(time.strptime(m.group(1)[:19], "%Y-%m-%dT%H:%M:%S")) + int(m.group(1)[20:]) / 1000


def restart_phases(m: ClusterManager, broker_id: int, started_at: float) -> str:
    """Where the restarted broker's time to registering went, from its log: the process start until its first
    line (Python start-up and imports), until its logs loaded (ZooKeeper session and configs, then the load:
    the ``logs_loaded ... ms=`` line), until it registered (the rest of start-up)."""
    first = loaded = loaded_ms = registered = None
    with open(os.path.join(m.data_dir, "logs", f"broker-{broker_id}.log"), errors="replace") as f:
        for line in f:
            t = _stamp(line)
            if t is None or t < started_at - 1:
                continue
            if first is None and "broker properties" in line:
                first = t
            elif loaded is None and "event=logs_loaded" in line:
                loaded, loaded_ms = t, float(re.search(r" ms=(\d+)", line).group(1))
            elif registered is None and "registered path=/brokers/ids/" in line:
                registered = t
    if None in (first, loaded, registered):
        return "-"
    return (f"start-up and imports {first - started_at:.1f} s, ZooKeeper and configs "
            f"{loaded - loaded_ms / 1000 - first:.1f} s, loading logs {loaded_ms / 1000:.1f} s, "
            f"the rest until registered {registered - loaded:.1f} s")


def run_size(m: ClusterManager, zk, kzc: KafkaZkClient, ids: list[int], base_rss: dict[int, int],
             topics: dict[str, int], total: int, topic_partitions: int, spy: PySpy,
             session_timeout_s: float, restart: bool = True, idle_only: bool = False) -> dict:
    """One row: grow the cluster to ``total`` partitions, kill -9 the controller, restart it."""
    # 1. creation of the partitions that take the cluster to ``total``
    print(f"[{total:,}] creating topics (load {load_average()})", flush=True)
    t0 = time.monotonic()
    have = sum(topics.values())
    while have < total:
        n = min(topic_partitions, total - have)
        name = f"scale-{len(topics):03d}"
        kzc.create_topic(name, {p: [ids[(p + i + len(topics)) % 3] for i in range(REPLICATION)]
                                for p in range(n)}, {})
        topics[name] = n
        have += n
    wait_phase(f"[{total:,}] created partitions led and in every broker's metadata",
               lambda: all_agree(zk, m, topics, set(ids)), 1800)
    create_s = time.monotonic() - t0
    rss = {b["id"]: rss_kb(b["pid"]) for b in m.state["brokers"]}
    replicas_per_broker = total * REPLICATION / len(ids)
    rss_per_partition = max((rss[i] - base_rss[i]) * 1024 / replicas_per_broker for i in ids)
    t_isr = time.monotonic()

    def isr_full():
        # The controller is killed only in a healthy cluster: a follower still out of the ISR cannot take over,
        # so a partition whose ISR is the killed broker alone would stay offline (no unclean election).
        states = zk_states(zk, topics)
        short = sum(1 for st in states.values() if len(st["isr"]) < REPLICATION)
        return short == 0, f"{short:,} under-replicated partitions"
    wait_phase(f"[{total:,}] no under-replicated partition", isr_full, 1800, interval=2.0)
    isr_s = time.monotonic() - t_isr
    spy.start({b["id"]: b["pid"] for b in m.state["brokers"]}, f"{total}-idle")
    try:
        idle = idle_cpu_percent({b["id"]: b["pid"] for b in m.state["brokers"]})
    finally:
        spy.stop()
    print(f"summary: partitions={total} idle_cpu_percent_per_broker="
          + ",".join(f"{b}:{v}" for b, v in sorted(idle.items())), flush=True)
    gcs = gc_stats(m)
    print("  gc so far per broker (full collections, longest ms; frozen objects): " + ", ".join(
        f"{b}: {g.get('gen2', {}).get('collections', '-')}, {g.get('gen2', {}).get('max_ms', '-')}; "
        f"{g.get('frozen_objects', '-')}" for b, g in sorted(gcs.items())), flush=True)
    if idle_only:
        rss_now = {b["id"]: rss_kb(b["pid"]) for b in m.state["brokers"]}
        print(f"summary: partitions={total} rss_per_replica_bytes=" + ",".join(
            f"{i}:{(rss_now[i] - base_rss[i]) * 1024 / replicas_per_broker:.0f}" for i in ids)
            + f" load={load_average()} (idle only)", flush=True)
        raise IdleOnly
    # The baseline, in the state the failover starts from (a healthy cluster), just before the kill.
    raw = min(raw_read_s(zk, topics) for _ in range(3))
    raw_multi = min(raw_multi_read_s(zk, topics) for _ in range(3))
    # 2. kill -9 the controller
    old = controller_id(zk)
    if old is None:
        raise RowFailed(f"[{total:,}] no controller before the kill")
    live = set(ids) - {old}
    print(f"[{total:,}] kill -9 controller {old} (load {load_average()})", flush=True)
    spy.start({b["id"]: b["pid"] for b in m.state["brokers"] if b["id"] in live}, f"{total}")
    lines_before = {b: failover_lines(m, b) for b in live}
    t1 = time.monotonic()
    try:
        m.kill_broker(old)
        wait_phase(f"[{total:,}] a new controller",
                   lambda: (controller_id(zk) in live, f"controller {controller_id(zk)}"), 180, interval=0.05)
        new = controller_id(zk)
        # Timed to the last Metadata answer of the check that passed, as it arrived (not once decoded).
        answered: list = []

        def agreeing():
            answered.clear()
            return all_agree(zk, m, topics, live, answered)
        wait_phase(f"[{total:,}] every partition led again, metadata agreeing", agreeing, 900, interval=0.2)
        failover_s = max(answered) - t1
    finally:
        spy.stop()
    wait_phase(f"[{total:,}] the failover log line", lambda: failover_lines(m, new) > lines_before[new], 60)
    ctrl_ms = last_failover_ms(m, new)
    phases = failover_phases(m, new)
    if not restart:
        row = dict(rejoin_s=None, idle=idle, session_s=session_timeout_s, partitions=total, create_s=create_s,
                   isr_s=isr_s, kill9_s=failover_s, ctrl_ms=ctrl_ms, raw_ms=raw * 1000, ratio=ctrl_ms / (raw * 1000),
                   raw_multi_ms=raw_multi * 1000, ratio_multi=ctrl_ms / (raw_multi * 1000), registered_s=None,
                   restart_s=None, rss_b=rss_per_partition, load=load_average())
        print(f"summary: partitions={total} kill9_to_all_led_and_agreeing_s={failover_s:.1f} "
              f"controller_failover_ms={ctrl_ms:.0f} raw_async_read_ms={raw * 1000:.0f} "
              f"raw_multi_read_ms={raw_multi * 1000:.0f} load={row['load']} (no restart)", flush=True)
        print(f"  controller failover phases (ms): {phases}", flush=True)
        return row
    # 3. restart the killed broker
    print(f"[{total:,}] restarting broker {old}", flush=True)
    t2, wall2 = time.monotonic(), time.time()
    m.start_broker(old, wait=True, timeout=900)
    registered_s = time.monotonic() - t2
    restarted_pid = next(b["pid"] for b in m.state["brokers"] if b["id"] == old)
    registered_cpu_s = cpu_s(restarted_pid)  # what the start-up costs whatever the machine's load
    # Every broker's CPU from here until the restarted one is back in every ISR: the work the rejoin costs.
    pids_now = {b["id"]: b["pid"] for b in m.state["brokers"]}
    cpu_at_registered = {b: cpu_s(pid) for b, pid in pids_now.items()}
    spy.start({b["id"]: b["pid"] for b in m.state["brokers"]}, f"{total}-restart")
    try:
        wait_phase(f"[{total:,}] the restarted broker back in every broker's metadata",
                   lambda: all_agree(zk, m, topics, set(ids)), 900)
        restart_s = time.monotonic() - t2
        wait_phase(f"[{total:,}] the restarted broker back in every ISR", isr_full, 1800, interval=0.5)
        rejoin_s = time.monotonic() - t2
        rejoin_cpu_s = cpu_s(restarted_pid)
        rejoin_cpu = {b: round(cpu_s(pid) - cpu_at_registered[b], 1) for b, pid in pids_now.items()}
    finally:
        spy.stop()
    row = dict(rejoin_s=rejoin_s, idle=idle, session_s=session_timeout_s, partitions=total, create_s=create_s, isr_s=isr_s, kill9_s=failover_s, ctrl_ms=ctrl_ms,
               raw_ms=raw * 1000, ratio=ctrl_ms / (raw * 1000), raw_multi_ms=raw_multi * 1000,
               ratio_multi=ctrl_ms / (raw_multi * 1000), registered_s=registered_s,
               restart_s=restart_s, rss_b=rss_per_partition, load=load_average())
    print(f"summary: partitions={total} create_s={create_s:.1f} then_isr_full_s={isr_s:.1f} "
          f"kill9_to_all_led_and_agreeing_s={failover_s:.1f} controller_failover_ms={ctrl_ms:.0f} "
          f"raw_async_read_ms={raw * 1000:.0f} ratio={ctrl_ms / (raw * 1000):.2f} "
          f"raw_multi_read_ms={raw_multi * 1000:.0f} ratio_multi={ctrl_ms / (raw_multi * 1000):.2f} "
          f"broker_restart_serving_s={registered_s:.1f} broker_restart_all_agreeing_s={restart_s:.1f} "
          f"broker_restart_every_isr_full_s={rejoin_s:.1f} after_registering_s={rejoin_s - registered_s:.1f} "
          f"rss_per_replica_bytes={rss_per_partition:.0f} load={row['load']}", flush=True)
    print(f"  controller failover phases (ms): {phases}", flush=True)
    print(f"  restart until registered: {restart_phases(m, old, wall2)}; the broker's CPU until registered "
          f"{registered_cpu_s:.1f} s, until back in every ISR {rejoin_cpu_s:.1f} s", flush=True)
    print("  CPU seconds per broker from registered until every ISR full (load-independent): "
          + ", ".join(f"{b}: {v}" for b, v in sorted(rejoin_cpu.items())), flush=True)
    return row


def _restart_cell(r: dict) -> str:
    if r["rejoin_s"] is None:
        return "not run"
    return (f"{r['registered_s']:.1f} s / {r['restart_s']:.1f} s / {r['rejoin_s']:.1f} s "
            f"({'met' if r['rejoin_s'] <= 20 else 'missed' if r['partitions'] >= 20000 else '-'}; "
            f"{r['rejoin_s'] - r['registered_s']:.1f} s after registering)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="sizes 300,1000 instead of 1000,5000,20000")
    ap.add_argument("--sizes", default=None, help="comma-separated total partition counts, increasing")
    ap.add_argument("--topic-partitions", type=int, default=1000, help="partitions per topic")
    ap.add_argument("--session-timeout-ms", type=int, default=18000,
                    help="the brokers' zookeeper.session.timeout.ms (Kafka's default 18000)")
    ap.add_argument("--py-spy", default=None, metavar="DIR", help="record the surviving brokers during failover")
    ap.add_argument("--py-spy-gil", action="store_true",
                    help="with --py-spy: only samples of the thread holding the GIL (where the CPU goes)")
    ap.add_argument("--no-last-restart", action="store_true",
                    help="do not restart the killed broker after the last size (no restart numbers for it)")
    ap.add_argument("--idle-only", action="store_true",
                    help="stop each size after its idle CPU and RSS (no kill, no restart): a quick check of idle work")
    ap.add_argument("--idle-seconds", type=float, default=10.0,
                    help="the idle-CPU window (default %(default)s s)")
    ap.add_argument("--tmp", default=None, help="where the cluster's data goes")
    ap.add_argument("--keep-logs", default=None, metavar="DIR", help="copy the brokers' logs here at the end")
    ap.add_argument("--override", action="append", default=[], metavar="K=V",
                    help="a broker property for every broker (e.g. max.incremental.fetch.session.cache.slots=0)")
    args = ap.parse_args()
    if not args.idle_seconds > 0:   # a cluster was started, then the idle window failed with a traceback
        ap.error(f"--idle-seconds must be above 0, got {args.idle_seconds}")
    global IDLE_SECONDS
    IDLE_SECONDS = args.idle_seconds
    sizes = [int(s) for s in (args.sizes or ("300,1000" if args.quick else "1000,5000,20000")).split(",")]
    tmp = tempfile.mkdtemp(prefix="kafkatier-controller-scale-", dir=args.tmp)
    m = ClusterManager(tmp)
    spy = PySpy(args.py_spy, gil=args.py_spy_gil)

    def interrupted(signum, frame):  # SIGTERM (and SIGINT, ignored in background jobs): stop the row, clean up
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, interrupted)
    rows: list[dict] = []
    failed: list[tuple[int, str]] = []
    try:
        m.up(brokers=3, log_dirs_per_broker=1, session_timeout_ms=args.session_timeout_ms, timeout=300,
             overrides=dict(o.split("=", 1) for o in args.override))
        zk = start_client(m.zookeeper, timeout=30.0)
        kzc = KafkaZkClient(zk)
        ids = sorted(b["id"] for b in m.state["brokers"])
        base_rss = {b["id"]: rss_kb(b["pid"]) for b in m.state["brokers"]}
        topics: dict[str, int] = {}
        for i, total in enumerate(sizes):
            try:
                rows.append(run_size(m, zk, kzc, ids, base_rss, topics, total, args.topic_partitions, spy,
                                     args.session_timeout_ms / 1000,
                                     restart=not (args.no_last_restart and i == len(sizes) - 1),
                                     idle_only=args.idle_only))
            except IdleOnly:
                continue
            except (RowFailed, KeyboardInterrupt) as e:
                why = str(e) if isinstance(e, RowFailed) else "interrupted"
                print(f"row {total:,} did not finish: {why} (load {load_average()})", flush=True)
                failed.append((total, why))
                failed += [(later, "skipped: an earlier size did not finish") for later in sizes[i + 1:]]
                break
        zk.stop()
        zk.close()
    finally:
        spy.stop()
        m.down()
        if args.keep_logs:
            shutil.copytree(os.path.join(tmp, "logs"), args.keep_logs, dirs_exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(f"3 brokers, RF 3, zookeeper.session.timeout.ms={args.session_timeout_ms}, {os.cpu_count()} CPUs")
    print("| partitions (RF 3) | create -> all led, metadata agreeing (then ISR full) "
          "| kill -9 controller -> every survivor's Metadata all led (goal <= session timeout + 3 s) "
          "| controller failover | raw async read | failover / raw (goal <= 1.2x) | raw multiRead "
          "| broker restart: serving / all agreeing / every ISR full (goal <= 20 s at 20,000; and the part after the "
          "broker registered, which excludes process start and log recovery) "
          "| idle CPU per broker (goal <= 10 % at 20,000) | broker RSS per replica | load avg (1/5/15 min) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        goal = r["session_s"] + 3
        print(f"| {r['partitions']:,} | {r['create_s']:.1f} s (+{r['isr_s']:.1f} s) "
              f"| {r['kill9_s']:.1f} s ({'met' if r['kill9_s'] <= goal else 'missed'}: {goal:.0f} s) "
              f"| {r['ctrl_ms']:.0f} ms | {r['raw_ms']:.0f} ms | {r['ratio']:.2f}x "
              f"| {r['raw_multi_ms']:.0f} ms | {_restart_cell(r)} "
              f"| {min(r['idle'].values()):.1f}-{max(r['idle'].values()):.1f} % "
              f"| {r['rss_b'] / 1024:.1f} KiB | {r['load']} |")
    for total, why in failed:
        print(f"| {total:,} | not completed: {why} |||||||||")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
