"""KIP-950 disablement latency: time from the AlterConfigs request until the topic's ``tieredstorage/state``
znode says DISABLED, for topics of 1, 100 and 1,000 partitions (RF 3, 3 brokers), next to the time of the same
number of sequential raw ZooKeeper round trips (``zk.exists``) measured in the same run.

The benchmark starts its own cluster (embedded ZooKeeper + 3 broker processes, ClusterManager) in a temp dir
and tears it down at the end.  Per size it creates one tiered topic (no records), waits until every broker has
drained its control queue, then times, one after the other:

* a read-only disablement (``remote.log.copy.disable=true``), then re-enables copying;
* a delete disablement (``remote.storage.enable=false, remote.log.delete.on.disable=true``).

Each timing covers: the IncrementalAlterConfigs round trip (sent to a broker that is not the controller, so it
is forwarded), the controller's ZooKeeper multi, StopReplica v5 to all 3 brokers over the ZooKeeper control
channel, every replica's work (config re-read from ZooKeeper, task cancellation; for delete also the log start
offset move and the remote metadata listing), the answers, and the fenced DISABLED write, observed through a
data watch.

Two baselines, measured in the same run (median of 3 rounds each):

* ``floor`` (the honest one): the ZooKeeper operations the design cannot avoid, issued pipelined with kazoo's
  async calls -- one fenced multi (check ``/controller_epoch``, set a config, create a notification), one
  request/response per broker (create the request znode, read it, create the response, read it, delete both),
  and the remote-metadata listing of every partition (one ``get_children`` each).  The delete disablement must
  stay within 3x of it;
* ``N zk.exists``: N sequential ``exists`` calls on one znode (the previous, pessimistic yardstick).  The controller's own measure of the
disablement (from its log) is shown too.  RLM tasks run every 30 s so that they do not compete, and each
timing starts once every leader's copy task has made its first pass (after the topic's creation, and again
after the re-enablement, which restarts them)::

    .venv/bin/python benchmarks/disable.py [--quick] [--sizes 1,100,1000]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kazoo.exceptions import NoNodeError  # noqa: E402
from kazoo.recipe.watchers import DataWatch  # noqa: E402

from kafkatier.admin.admin_zk_client import AdminZkClient  # noqa: E402
from kafkatier.admin.client import AdminClient  # noqa: E402
from kafkatier.cluster.manager import ClusterManager  # noqa: E402
from kafkatier.waiting import wait_for  # noqa: E402
from kafkatier.zk import codecs, paths  # noqa: E402
from kafkatier.zk.client import start_client  # noqa: E402

BROKERS = 3
RLMM_ROOT = "/kafkatier/remote_log_metadata"   # ZkRemoteLogMetadataManager's root
OVERRIDES = {"remote.log.storage.system.enable": "true", "remote.log.manager.task.interval.ms": "30000",
             "log.initial.task.delay.ms": "30000"}
READ_ONLY = {"remote.log.copy.disable": "true", "local.retention.bytes": "-2", "local.retention.ms": "-2"}
DELETE = {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}


def raw_round_trips(zk, n: int, rounds: int = 3) -> float:
    """Median seconds of ``n`` sequential ``exists`` calls."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            zk.exists(paths.CONTROLLER_EPOCH)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def floor_round_trips(zk, topic: str, n: int, topic_id: str, rounds: int = 3) -> float:
    """Median seconds of the unavoidable ZooKeeper work of a disablement of ``n`` partitions, pipelined."""
    scratch = "/kafkatier/bench-floor"
    zk.ensure_path(scratch)
    payload = json.dumps({"topic": topic, "partitions": list(range(n))}).encode()   # a request of n entries
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        _, stat = zk.get(paths.CONTROLLER_EPOCH)
        t = zk.transaction()                                          # 1. the fenced multi
        t.check(paths.CONTROLLER_EPOCH, stat.version)
        t.set_data(scratch, payload)
        t.create(f"{scratch}/config_change_", b"{}", sequence=True)
        t.commit()
        reqs = [zk.create_async(f"{scratch}/request_{b}_", payload, sequence=True)   # 2. request/response
                for b in range(1, BROKERS + 1)]
        req_paths = [r.get(timeout=30) for r in reqs]
        for r in [zk.get_async(pth) for pth in req_paths]:
            r.get(timeout=30)
        resps = [zk.create_async(f"{pth}_response", b"{}") for pth in req_paths]
        resp_paths = [r.get(timeout=30) for r in resps]
        for r in [zk.get_async(pth) for pth in resp_paths]:
            r.get(timeout=30)
        listings = [zk.get_children_async(f"{RLMM_ROOT}/{topic}-{p}-{topic_id}") for p in range(n)]   # 3.
        for r in listings:
            try:
                r.get(timeout=30)
            except NoNodeError:
                pass
        for r in [zk.delete_async(pth) for pth in resp_paths + req_paths]:
            r.get(timeout=30)
        times.append(time.perf_counter() - start)
    zk.delete(scratch, recursive=True)
    return statistics.median(times)


def quiet(zk, timeout: float = 300) -> None:
    """Every broker has answered every control request (the ZooKeeper control channel is empty)."""
    def empty() -> bool:
        return all(not zk.get_children(paths.control_requests(b)) for b in range(1, BROKERS + 1))
    wait_for(empty, timeout, interval=0.1, message="control queues drained")


def create_topic(zk, admin_zk: AdminZkClient, topic: str, partitions: int) -> None:
    admin_zk.create_topic(topic, partitions, BROKERS, {"remote.storage.enable": "true"})

    def online() -> bool:
        pending = [zk.get_async(paths.partition_state(topic, p)) for p in range(partitions)]
        return all(json.loads(r.get(timeout=30)[0])["leader"] >= 0 for r in pending)
    wait_for(online, 300, interval=0.2, ignore=(Exception,), message=f"{topic} online")
    quiet(zk)


def copy_tasks_started(data_dir: str, topic: str, n: int, tiered_epoch: int, timeout: float = 300) -> None:
    """Every leader's copy task of ``topic`` has run its first pass at ``tiered_epoch`` (a new task starts at
    once and reads the remote metadata of its partition; 1,000 of them would otherwise compete with the
    disablement being timed)."""
    pattern = re.compile(rf"event=copy_task_initialized partition=\S+:{re.escape(topic)}-(\d+) leader_epoch=\S+ "
                         rf"tiered_epoch={tiered_epoch} ")

    def started() -> bool:
        seen = set()
        for b in range(1, BROKERS + 1):
            with open(os.path.join(data_dir, "logs", f"broker-{b}.log"), errors="replace") as f:
                seen.update(pattern.findall(f.read()))
        return len(seen) >= n
    wait_for(started, timeout, interval=0.2, ignore=(OSError,), message=f"{topic}'s copy tasks started")


def time_disablement(zk, admin: AdminClient, topic: str, configs: dict) -> float:
    """Seconds from sending the change until ``state`` is DISABLED (seen by a data watch)."""
    done = threading.Event()
    armed = threading.Event()

    def on_state(data, stat, event=None):
        if armed.is_set() and data and codecs.TieredState.decode(data).state == codecs.TIERED_DISABLED:
            done.set()
            return False
        return not done.is_set()
    DataWatch(zk, paths.tiered_state(topic), on_state)
    armed.set()
    start = time.perf_counter()
    admin.alter_configs("topics", topic, configs)
    if not done.wait(600):
        raise RuntimeError(f"{topic} did not reach DISABLED")
    return time.perf_counter() - start


def controller_duration_ms(data_dir: str, controller: int, topic: str, epoch: int) -> float | None:
    """The controller's own measure (its log line follows the DISABLED write by a moment)."""
    pattern = re.compile(rf"tiered storage disablement completed topic={re.escape(topic)} tiered_epoch={epoch} "
                         rf"duration_ms=([0-9.]+)")

    def find() -> float | None:
        with open(os.path.join(data_dir, "logs", f"broker-{controller}.log"), errors="replace") as f:
            found = pattern.findall(f.read())
        return float(found[-1]) if found else None
    try:
        return wait_for(find, 10, interval=0.05, ignore=(OSError,), message="the controller's log line")
    except TimeoutError:
        return None


def _stamp(line: str) -> float:
    """Seconds of the day of a log line's ``2026-01-01T08:00:00.123Z`` timestamp."""
    hms = line.split("T", 1)[1][:12]
    h, mi, sec = hms.split(":")
    return int(h) * 3600 + int(mi) * 60 + float(sec)


def breakdown(data_dir: str, controller: int, topic: str, epoch: int) -> str:
    """Where a disablement's time went, from the brokers' logs: the controller's start -> StopReplica sent, then
    each broker's last ``remote_partition_disabled`` line for the topic, then DISABLED written."""
    def lines(b: int) -> list[str]:
        with open(os.path.join(data_dir, "logs", f"broker-{b}.log"), errors="replace") as f:
            return f.read().splitlines()
    ctl = lines(controller)
    started = [_stamp(x) for x in ctl if f"disablement started topic={topic} tiered_epoch={epoch}" in x]
    done = [_stamp(x) for x in ctl if f"disablement completed topic={topic} tiered_epoch={epoch} " in x]
    if not started or not done:
        return "-"
    sent = [_stamp(x) for x in ctl if "sent StopReplica v5" in x and started[-1] <= _stamp(x) <= done[-1]]
    marks = [f"sent +{(sent[0] - started[-1]) * 1000:.0f}" if sent else "sent ?"]
    for b in range(1, BROKERS + 1):
        mine = [_stamp(x) for x in lines(b) if f"event=remote_partition_disabled partition={topic}-" in x
                and "policy=delete" in x and started[-1] <= _stamp(x) <= done[-1]]
        marks.append(f"b{b} +{(max(mine) - started[-1]) * 1000:.0f}" if mine else f"b{b} ?")
    marks.append(f"DISABLED +{(done[-1] - started[-1]) * 1000:.0f}")
    return ", ".join(marks) + " ms"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller topics (1, 10, 100 partitions)")
    p.add_argument("--sizes", default=None, help="comma-separated partition counts (default 1,100,1000)")
    p.add_argument("--dir", default=None, help="where to put the cluster (default: a temp dir, removed afterwards)")
    args = p.parse_args(argv)
    sizes = [int(s) for s in (args.sizes or ("1,10,100" if args.quick else "1,100,1000")).split(",") if s.strip()]

    print(f"disable: topics of {sizes} partitions, RF {BROKERS}, {BROKERS} brokers; AlterConfigs -> DISABLED "
          f"vs N sequential zk.exists", flush=True)
    work = tempfile.mkdtemp(prefix="kafkatier-disable-", dir=args.dir)
    m = ClusterManager(work)
    rows = []
    try:
        m.up(brokers=BROKERS, log_dirs_per_broker=1, overrides=OVERRIDES)
        zk = start_client(m.zookeeper)
        admin_zk = AdminZkClient(zk, broker_config={"remote.log.storage.system.enable": "true"})
        controller = json.loads(zk.get(paths.CONTROLLER)[0])["brokerid"]
        via = next(b for b in m.state["brokers"] if b["id"] != controller)   # forwarded to the controller
        with AdminClient([f"127.0.0.1:{via['port']}"]) as admin:
            for n in sizes:
                topic = f"disable-{n}"
                t0 = time.perf_counter()
                create_topic(zk, admin_zk, topic, n)
                copy_tasks_started(m.data_dir, topic, n, 0)
                setup = time.perf_counter() - t0
                raw = raw_round_trips(zk, n)
                topic_id = codecs.TopicAssignment.decode(zk.get(paths.topic(topic))[0]).topic_id
                floor = floor_round_trips(zk, topic, n, topic_id)
                ro = time_disablement(zk, admin, topic, READ_ONLY)
                ro_ctl = controller_duration_ms(m.data_dir, controller, topic, 1)
                admin.alter_configs("topics", topic, {"remote.log.copy.disable": "false"})   # ENABLED again
                quiet(zk)
                copy_tasks_started(m.data_dir, topic, n, 1)   # the copy tasks the re-enablement restarted
                de = time_disablement(zk, admin, topic, DELETE)
                de_ctl = controller_duration_ms(m.data_dir, controller, topic, 2)
                print(f"  {n:5d} partitions: delete breakdown {breakdown(m.data_dir, controller, topic, 2)}",
                      flush=True)
                quiet(zk)
                rows.append((n, raw, floor, ro, ro_ctl, de, de_ctl))
                print(f"  {n:5d} partitions: topic ready in {setup:.1f}s; read-only {ro * 1000:.0f} ms, "
                      f"delete {de * 1000:.0f} ms, floor {floor * 1000:.1f} ms, {n} zk.exists {raw * 1000:.1f} ms",
                      flush=True)
        zk.stop()
        zk.close()
    finally:
        m.down()
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"{'partitions':>10} {'replicas':>8} {'floor ms':>9} {'N zk.exists ms':>15} {'policy':>10} "
          f"{'to DISABLED ms':>15} {'controller ms':>14} {'x floor':>8} {'x exists':>8}")
    for n, raw, floor, ro, ro_ctl, de, de_ctl in rows:
        for policy, t, ctl in (("read-only", ro, ro_ctl), ("delete", de, de_ctl)):
            ctl_s = f"{ctl:.0f}" if ctl is not None else "-"
            print(f"{n:>10} {n * BROKERS:>8} {floor * 1000:>9.1f} {raw * 1000:>15.1f} {policy:>10} "
                  f"{t * 1000:>15.1f} {ctl_s:>14} {t / floor:>8.1f} {t / raw:>8.1f}")
    for n, raw, floor, ro, _, de, _ in rows:
        print(f"summary: {n} partitions: read-only {ro * 1000:.0f} ms, delete {de * 1000:.0f} ms; floor "
              f"{floor * 1000:.1f} ms (delete {de / floor:.1f}x, target <= 3x); {n} zk.exists {raw * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
