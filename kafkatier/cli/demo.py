"""``kafkatier demo``: the main job, on a local 3-broker cluster (embedded ZooKeeper, tiered storage on).

The core: a replicated topic produced with acks=all (kafka-python), the controller killed with SIGKILL and the
failover, everything consumed back, the broker restarted, the topic deleted.  Then the mission:

- a tiered topic offloading segments to the remote storage (small ``segment.bytes``, ``local.retention.bytes=1``,
  ``remote.log.manager.task.interval.ms=500``);
- a KIP-950 delete disablement caught in DISABLING: one follower is frozen with SIGSTOP so that its StopReplica
  v5 stays unanswered, the controller is killed with SIGKILL, the new controller sends StopReplica v5 again, the
  follower is continued (SIGCONT: its ZooKeeper session expired meanwhile, so it re-registers) and the old
  controller restarted, and the new controller completes the disablement (DISABLED);
- a re-enable (same tiered epoch, uploads resume from the local log start offset) and a DeleteRecords whose
  remote segment below the new log start offset is then deleted;
- a KIP-113 move: one replica moved to its broker's other log dir (AlterReplicaLogDirs) while the topic is
  produced to, the ``<tp>.move`` future log catching up and swapped in;

and it ends with one short failover scenario (``scenarios/controller-session-expiry.toml``, quick profile) on a
cluster of its own, saying where its timeline picture is.

Every step says what it waits for (conditions with deadlines, no fixed sleeps) and what the user can check
with ``kafkatier zookeeper shell`` and ``kafkatier tiered describe`` (with ``--keep`` the cluster stays up).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import tempfile
import time

DEADLINE_S = 30.0          # bound on every wait
SESSION_TIMEOUT_MS = 6000  # zookeeper.session.timeout.ms: failover and restarts take about this long
TIERED_BROKER_OVERRIDES = {"remote.log.manager.task.interval.ms": "500", "log.retention.check.interval.ms": "500",
                           "log.initial.task.delay.ms": "0"}
TIERED = "tiered"
# One 100-byte record per batch: six batches fill a 1024-byte segment.
TIERED_CONFIG = {"remote.storage.enable": "true", "segment.bytes": "1024", "local.retention.bytes": "1",
                 "file.delete.delay.ms": "0"}
PER_SEGMENT = 6


def register(sub) -> None:
    p = sub.add_parser("demo", help="run the end-to-end demonstration on a local 3-broker cluster")
    p.add_argument("--data-dir", default=None, help="keep the cluster's files here (default: a temporary dir)")
    p.add_argument("--records", type=int, default=2000, help="records to produce (default 2000)")
    p.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    p.add_argument("--no-scenario", action="store_true", help="skip the closing failover scenario")
    p.add_argument("--runs-dir", default="runs", help="where the closing scenario's run is recorded (default runs)")
    p.set_defaults(func=_demo)


class _Steps:
    def __init__(self):
        self.n = 0
        self.t0 = time.monotonic()

    def step(self, title: str) -> None:
        self.n += 1
        print(f"\n[{self.n}] {title}  (t={time.monotonic() - self.t0:.1f}s)", flush=True)

    @staticmethod
    def info(text: str) -> None:
        print(f"    {text}", flush=True)

    @staticmethod
    def check(command: str) -> None:
        print(f"    check: {command}", flush=True)

    def wait(self, what: str, condition, timeout: float = DEADLINE_S, **kw):
        """Wait for ``condition`` (at most ``timeout`` s), saying what is awaited and how long it took."""
        from kafkatier.waiting import wait_for
        t = time.monotonic()
        print(f"    waiting for {what} ...", end="", flush=True)
        value = wait_for(condition, timeout, message=what, **kw)
        print(f" {time.monotonic() - t:.1f}s", flush=True)
        return value


def _demo(args) -> int:
    from kafkatier.cluster.manager import CLUSTER_UP_DEFAULTS, ClusterManager
    from kafkatier.zk.client import start_client

    s = _Steps()
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="kafkatier-demo-")
    m = ClusterManager(data_dir)
    zk = None
    ok = False
    frozen: list[int] = []  # pids stopped with SIGSTOP, continued whatever happens
    try:
        s.step("Starting an embedded ZooKeeper and 3 brokers (2 log dirs each, tiered storage on)")
        m.up(brokers=3, log_dirs_per_broker=2, session_timeout_ms=SESSION_TIMEOUT_MS,
             overrides={**CLUSTER_UP_DEFAULTS, **TIERED_BROKER_OVERRIDES})
        s.info(f"zookeeper={m.zookeeper} bootstrap_servers={m.bootstrap_servers}")
        s.info(f"remote.log.storage.system.enable=true, remote storage in {m.state['remote_storage_dir']}")
        s.info(f"D = {data_dir} in the check commands below"
               + ("" if args.data_dir or args.keep else " (removed at the end; keep it with --keep)"))
        zk = start_client(m.zookeeper)
        ctrl = json.loads(zk.get("/controller")[0])
        s.info(f"controller: broker {ctrl['brokerid']}, /controller_epoch={zk.get('/controller_epoch')[0].decode()}")
        s.check(f"kafkatier zookeeper shell --zookeeper {m.zookeeper} get /controller")

        _core(s, m, zk, args.records, ctrl["brokerid"])
        tid = _tiered_topic(s, m, zk, data_dir)
        controller, frozen_broker, frozen_epoch = _disable_while_controller_dies(s, m, zk, data_dir, tid, frozen)
        _finish_disablement(s, m, zk, data_dir, tid, controller, frozen_broker, frozen_epoch, frozen)
        _re_enable(s, m, zk, data_dir, tid)
        _delete_records(s, m, zk, data_dir, tid)
        _move_between_log_dirs(s, m, zk)
        ok = True
    finally:
        for pid in frozen:
            _signal(pid, signal.SIGCONT)
        if zk is not None:
            zk.stop()
            zk.close()
        if not args.keep:
            s.step("Stopping the cluster")
            m.down() if m.state else None
            if not args.data_dir:
                shutil.rmtree(data_dir, ignore_errors=True)
        else:
            print(f"\ncluster left running; stop it with: kafkatier cluster down --data-dir {data_dir}")
    if ok and not args.no_scenario:
        ok = _failover_scenario(s, args.runs_dir)
    print(f"\ndemo {'completed' if ok else 'FAILED'} in {time.monotonic() - s.t0:.1f}s")
    return 0 if ok else 1


# ------------------------------------------------------------------------------------------------ KIP-113

MOVING = "moving"


def _move_between_log_dirs(s: _Steps, m, zk) -> None:
    """One replica of ``moving-0`` moved to the other log dir of its broker while records keep arriving."""
    from kafka.admin import KafkaAdminClient, NewTopic

    from kafkatier.admin.client import AdminClient

    s.step(f"KIP-113: moving a replica of '{MOVING}-0' to its broker's other log dir (AlterReplicaLogDirs)")
    admin = KafkaAdminClient(bootstrap_servers=m.bootstrap_servers, client_id="kafkatier-demo")
    admin.create_topics([NewTopic(MOVING, 1, 3)])
    admin.close()
    s.wait("a leader", lambda: _state(zk, MOVING, 0)["leader"] >= 0, ignore=(Exception,))
    _produce(m.bootstrap_servers, 0, 200, topic=MOVING)
    broker = _state(zk, MOVING, 0)["leader"]
    client = AdminClient(m.bootstrap_servers.split(","))
    try:
        def where(future: bool = False) -> str | None:
            """The log dir holding the replica (or, with ``future``, its future log), as the broker reports."""
            for b in client.describe_log_dirs(brokers=[broker]):
                for d in b["log_dirs"]:
                    for t in d.get("topics") or []:
                        if t["name"] == MOVING and any(p["partition_index"] == 0 and bool(p["is_future_key"]) == future
                                                       for p in t["partitions"]):
                            return d["log_dir"]
            return None
        source = s.wait(f"broker {broker} to report the replica's log dir", where, ignore=(Exception,))
        dirs = next(b["log_dirs"] for b in m.state["brokers"] if b["id"] == broker)
        target = next(d for d in dirs if os.path.abspath(d) != os.path.abspath(source))
        s.info(f"broker {broker}: {MOVING}-0 in {source}; moving it to {target}")
        errors = client.alter_replica_log_dirs({(MOVING, 0, broker): target})
        s.info(f"AlterReplicaLogDirs answered {errors}")
        _produce(m.bootstrap_servers, 200, 100, topic=MOVING)   # appended while the future log catches up
        s.wait(f"the replica to be served from {target} (the future log swapped in)",
               lambda: where() is not None and os.path.abspath(where()) == os.path.abspath(target)
               and where(future=True) is None, ignore=(Exception,))
    finally:
        client.close()
    s.info(f"{MOVING}-0 on broker {broker} now lives in {target}; its future log is gone")
    s.check(f"kafkatier log-dirs --bootstrap-server {m.bootstrap_servers} --describe --broker {broker} "
            f"--topics {MOVING}")


# ------------------------------------------------------------------------------------------------ a scenario

FAILOVER_SCENARIO = "controller-session-expiry.toml"


def _failover_scenario(s: _Steps, runs_dir: str) -> bool:
    """The closing failover scenario on a cluster of its own; True when the run is valid."""
    from kafkatier.scenario.runner import run_scenario

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "scenarios", FAILOVER_SCENARIO)
    s.step(f"A failover scenario: {FAILOVER_SCENARIO} (quick profile, its own cluster)")
    if not os.path.exists(path):
        s.info(f"{path} not found (the scenarios ship with the repository); skipped")
        return True
    result = run_scenario(path, seed=1, quick=True, runs_dir=runs_dir, progress=False,
                          out=lambda line: print(f"    {line}", flush=True))
    s.info(f"valid={result.valid} anomalies={len(result.anomalies)}")
    s.info(f"timeline picture: {os.path.join(result.run_dir, 'timeline.png')} "
           f"(report: {os.path.join(result.run_dir, 'index.html')})")
    return result.valid


# ------------------------------------------------------------------------------------------------ the core

def _core(s: _Steps, m, zk, records: int, old: int) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    s.step("Creating topic 'demo' (3 partitions, replication factor 3, min.insync.replicas=2)")
    admin = KafkaAdminClient(bootstrap_servers=m.bootstrap_servers, client_id="kafkatier-demo")
    admin.create_topics([NewTopic("demo", 3, 3, topic_configs={"min.insync.replicas": "2"})])
    admin.close()
    s.wait("a leader for every partition", lambda: all(_state(zk, "demo", p)["leader"] >= 0 for p in range(3)),
           ignore=(Exception,))
    for p in range(3):
        st = _state(zk, "demo", p)
        s.info(f"demo-{p}: leader={st['leader']} isr={st['isr']} leader_epoch={st['leader_epoch']}")
    s.check(f"kafkatier zookeeper shell --zookeeper {m.zookeeper} get /brokers/topics/demo/partitions/0/state")

    s.step(f"Producing {records} records with acks=all (kafka-python)")
    producer = KafkaProducer(bootstrap_servers=m.bootstrap_servers, acks="all", linger_ms=5,
                             retries=10, max_in_flight_requests_per_connection=1)
    t = time.monotonic()
    futures = [producer.send("demo", key=str(i % 3).encode(), value=f"record-{i}".encode())
               for i in range(records)]
    producer.flush()
    acked = sum(1 for f in futures if f.succeeded())
    s.info(f"acknowledged {acked}/{records} in {time.monotonic() - t:.2f}s")

    s.step(f"Killing the controller (broker {old}) with SIGKILL")
    t = time.monotonic()
    m.kill_broker(old)
    new = s.wait(f"another controller (broker {old}'s ZooKeeper session to expire, ~{SESSION_TIMEOUT_MS} ms)",
                 lambda: _controller(zk) not in (None, old) and _controller(zk))
    s.info(f"broker {new} became controller after {time.monotonic() - t:.2f}s, "
           f"/controller_epoch={zk.get('/controller_epoch')[0].decode()}")
    s.wait(f"new leaders for broker {old}'s partitions",
           lambda: all(_state(zk, "demo", p)["leader"] not in (old, -1) for p in range(3)))
    for p in range(3):
        st = _state(zk, "demo", p)
        s.info(f"demo-{p}: leader={st['leader']} isr={st['isr']} leader_epoch={st['leader_epoch']}")

    s.step("Consuming everything back from the surviving brokers")
    expected = {f"record-{i}".encode() for i, f in enumerate(futures) if f.succeeded()}
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=m.bootstrap_servers, enable_auto_commit=False, group_id=None,
                             auto_offset_reset="earliest")
    tps = [TopicPartition("demo", p) for p in range(3)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    seen: set[bytes] = set()

    def all_consumed() -> bool:
        for batch in consumer.poll(timeout_ms=500).values():
            seen.update(r.value for r in batch)
        return expected <= seen
    try:
        s.wait(f"all {len(expected)} acknowledged records", all_consumed, timeout=60, interval=0)
    finally:
        consumer.close()
    s.info(f"consumed {len(seen)} distinct records; all acknowledged present: {expected <= seen}")

    s.step(f"Restarting broker {old}; it rejoins with a new broker epoch")
    t = time.monotonic()
    m.start_broker(old)
    s.info(f"registered and serving after {time.monotonic() - t:.1f}s; "
           f"/brokers/ids/{old} czxid={zk.exists(f'/brokers/ids/{old}').czxid}")
    s.check(f"kafkatier cluster start-broker --id {old} --data-dir D (returns once registered and serving)")

    s.step("Deleting topic 'demo'")
    admin = KafkaAdminClient(bootstrap_servers=m.bootstrap_servers, client_id="kafkatier-demo")
    admin.delete_topics(["demo"])
    admin.close()
    s.wait("the deletion to complete", lambda: zk.exists("/brokers/topics/demo") is None
           and zk.exists("/admin/delete_topics/demo") is None, timeout=60)
    s.info("/brokers/topics/demo, /config/topics/demo and /admin/delete_topics/demo are gone")


# ----------------------------------------------------------------------------------------- tiered storage

def _tiered_topic(s: _Steps, m, zk, data_dir: str) -> str:
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    s.step(f"Tiered storage: topic '{TIERED}' (1 partition, RF 3, "
           + ", ".join(f"{k}={v}" for k, v in TIERED_CONFIG.items()) + ")")

    def create() -> bool:
        admin = KafkaAdminClient(bootstrap_servers=m.bootstrap_servers, client_id="kafkatier-demo")
        try:
            admin.create_topics([NewTopic(TIERED, 1, 3, topic_configs=TIERED_CONFIG)])
        except TopicAlreadyExistsError:
            pass
        finally:
            admin.close()
        return True
    s.wait(f"'{TIERED}' to be created", create, ignore=(KafkaError,))
    s.wait(f"'{TIERED}-0' to be online with 3 in-sync replicas",
           lambda: len(_state(zk, TIERED, 0)["isr"]) == 3 and _state(zk, TIERED, 0)["leader"] >= 0,
           ignore=(Exception,))
    _produce(m.bootstrap_servers, 0, 30)
    s.info(f"produced offsets 0-29 (one 100-byte record per batch: {PER_SEGMENT} per segment)")
    tid = _describe(zk, data_dir)["topic_id"]
    s.wait("segments 0-23 offloaded and deleted locally (only the active segment 24 left on each replica)",
           lambda: _finished(zk, data_dir) == _ranges(0, 24) and all(
               _local_bases(m, b) == [24] for b in _brokers(m)))
    _show_tiered(s, zk, data_dir)
    s.check(f"kafkatier tiered describe --topic {TIERED} --data-dir D")
    s.check(f"kafkatier zookeeper shell --zookeeper {m.zookeeper} ls "
            f"/kafkatier/remote_log_metadata/{TIERED}-0-{tid}")
    s.check(f"ls D/remote-storage/kafka-tiered-storage/{TIERED}-0-{tid}")
    return tid


def _disable_while_controller_dies(s: _Steps, m, zk, data_dir: str, tid: str, frozen: list[int]):
    controller = _controller(zk)
    leader = _state(zk, TIERED, 0)["leader"]
    follower = next(b for b in _brokers(m) if b not in (controller, leader))
    survivor = next(b for b in _brokers(m) if b not in (controller, follower))
    s.step("KIP-950 delete disablement, caught in DISABLING")
    s.info(f"controller: broker {controller}; {TIERED}-0 leader: broker {leader}")
    s.info(f"freezing follower broker {follower} with SIGSTOP: it cannot answer its StopReplica v5, so the "
           f"disablement stays DISABLING while we kill the controller")
    pid = m.broker(follower)["pid"]
    frozen_epoch = zk.exists(f"/brokers/ids/{follower}").czxid
    _signal(pid, signal.SIGSTOP)
    frozen.append(pid)
    change = {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
    s.info("IncrementalAlterConfigs to the controller: " + ",".join(f"{k}={v}" for k, v in change.items()))
    _alter(m.broker(controller)["port"], change)
    s.info(f"tiered state now {_tiered_state(zk)}: the controller wrote the config, tiered_epoch 0 -> 1 and "
           "DISABLING in one fenced ZooKeeper multi")
    s.check(f"kafkatier zookeeper shell --zookeeper {m.zookeeper} get /brokers/topics/{TIERED}/tieredstorage/state")
    live = [b for b in _brokers(m) if b != follower]
    s.wait(f"brokers {live} to answer StopReplica v5 (DisableRemotePartition=true)",
           lambda: all(_disabled_events(data_dir, b) >= 1 for b in live))
    s.wait("the leader to delete the remote segments",
           lambda: _describe(zk, data_dir)["remote_segments"] == 0 and not _remote_files(m, tid))
    s.info(f"still {_tiered_state(zk)}: broker {follower}'s replica has not answered")

    s.step(f"Killing the controller (broker {controller}) with SIGKILL while DISABLING")
    m.kill_broker(controller)
    s.wait(f"broker {survivor} to become controller (broker {controller}'s session to expire)",
           lambda: _controller(zk) == survivor)
    s.info(f"/controller_epoch={zk.get('/controller_epoch')[0].decode()}; the new controller found the DISABLING "
           f"state in ZooKeeper and sends StopReplica v5 to every replica again")
    s.wait(f"broker {survivor} to answer the repeated StopReplica v5 (NONE: already disabled)",
           lambda: _disabled_events(data_dir, survivor) >= 2)
    s.info(f"tiered state {_tiered_state(zk)}: brokers {controller} (killed) and {follower} (frozen) are pending")
    s.check(f"kafkatier tiered describe --topic {TIERED} --data-dir D   (PendingReplicas)")
    return controller, follower, frozen_epoch


def _finish_disablement(s: _Steps, m, zk, data_dir: str, tid: str, controller: int, follower: int,
                        frozen_epoch: int, frozen: list[int]) -> None:
    s.step(f"Continuing broker {follower} (SIGCONT) and restarting broker {controller}")
    expired = zk.exists(f"/brokers/ids/{follower}") is None
    pid = frozen.pop()
    _signal(pid, signal.SIGCONT)
    if expired:
        s.info(f"broker {follower} was frozen longer than its session timeout: ZooKeeper expired its session "
               f"and deleted /brokers/ids/{follower}; it re-registers with a new broker epoch and the controller "
               "sends it StopReplica v5")
        epoch = s.wait(f"broker {follower} to re-register",
                       lambda: (st := zk.exists(f"/brokers/ids/{follower}")) and st.czxid > frozen_epoch and st.czxid)
        s.info(f"broker epoch {frozen_epoch} -> {epoch}")
    else:
        s.info(f"broker {follower}'s session survived the freeze; it now answers its StopReplica v5")
    t = time.monotonic()
    m.start_broker(controller)
    s.info(f"broker {controller} registered and serving after {time.monotonic() - t:.1f}s")
    s.wait("the controller to write DISABLED", lambda: _tiered_state(zk) == "DISABLED (tiered_epoch 1)")
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError
    consumer = KafkaConsumer(bootstrap_servers=m.bootstrap_servers, group_id=None)
    tp = TopicPartition(TIERED, 0)
    earliest = s.wait("ListOffsets earliest to answer the former local log start offset 24",
                      lambda: consumer.beginning_offsets([tp])[tp] == 24 and 24, ignore=(KafkaError,))
    consumer.close()
    s.info(f"earliest offset {earliest}; remote segments: {_describe(zk, data_dir)['remote_segments']}; "
           f"remote files: {len(_remote_files(m, tid))}")
    s.check(f"kafkatier zookeeper shell --zookeeper {m.zookeeper} get /brokers/topics/{TIERED}/tieredstorage/state")


def _re_enable(s: _Steps, m, zk, data_dir: str, tid: str) -> None:
    s.step("Re-enabling tiered storage (remote.storage.enable=true)")
    _alter(m.broker(_controller(zk))["port"], {"remote.storage.enable": "true"})
    s.info(f"tiered state {_tiered_state(zk)}: the same tiered epoch, new copies carry it")
    _produce(m.bootstrap_servers, 30, 12)
    s.info("produced offsets 30-41")
    s.wait("segments 24-35 offloaded at tiered epoch 1 (copying restarts at the local log start offset)",
           lambda: _finished(zk, data_dir, tiered_epoch=1) == _ranges(24, 36))
    _show_tiered(s, zk, data_dir)


def _delete_records(s: _Steps, m, zk, data_dir: str, tid: str) -> None:
    from kafkatier.cli.main import main
    s.step(f"DeleteRecords: {TIERED}-0 before offset 30 (KIP-107)")
    offsets = os.path.join(data_dir, "delete-records.json")
    with open(offsets, "w") as f:
        json.dump({"partitions": [{"topic": TIERED, "partition": 0, "offset": 30}], "version": 1}, f)
    s.info(f"$ kafkatier delete-records --bootstrap-server B --offset-json-file {offsets}")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["delete-records", "--bootstrap-server", m.bootstrap_servers, "--offset-json-file", offsets])
    for line in out.getvalue().splitlines():
        s.info(f"  {line}")
    if rc != 0 or "low_watermark: 30" not in out.getvalue():
        raise RuntimeError(f"delete-records did not answer low_watermark 30 (exit status {rc})")
    s.wait("the remote segment 24-29, now below the log start offset, to be deleted",
           lambda: _remote_ranges(zk, data_dir) == _ranges(30, 36))
    _show_tiered(s, zk, data_dir)
    s.check(f"kafkatier consume --bootstrap-server B --topic {TIERED} --from-beginning   (starts at offset 30)")


# -------------------------------------------------------------------------------------------------- helpers

def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _brokers(m) -> list[int]:
    return [b["id"] for b in m.state["brokers"]]


def _state(zk, topic: str, partition: int) -> dict:
    return json.loads(zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")[0])


def _controller(zk) -> int | None:
    try:
        return json.loads(zk.get("/controller")[0])["brokerid"]
    except Exception:  # noqa: BLE001 - no controller right now
        return None


def _describe(zk, data_dir: str) -> dict:
    from kafkatier.cli.tiered import describe_topic
    return describe_topic(zk, TIERED, data_dir=data_dir)


def _tiered_state(zk) -> str:
    d = _describe(zk, None)
    return f"{d['tiered_state']} (tiered_epoch {d['tiered_epoch']})"


def _finished(zk, data_dir: str, tiered_epoch: int | None = None) -> list[tuple[int, int]]:
    return [(g["start_offset"], g["end_offset"]) for p in _describe(zk, data_dir)["partitions"]
            for g in p["segments"] if g["state"] == "COPY_SEGMENT_FINISHED"
            and (tiered_epoch is None or g["tiered_epoch"] == tiered_epoch)]


def _remote_ranges(zk, data_dir: str) -> list[tuple[int, int]]:
    """Every remote segment of tiered-0 still recorded, whatever its state."""
    return [(g["start_offset"], g["end_offset"]) for p in _describe(zk, data_dir)["partitions"] for g in p["segments"]]


def _ranges(first: int, last_exclusive: int) -> list[tuple[int, int]]:
    return [(o, o + PER_SEGMENT - 1) for o in range(first, last_exclusive, PER_SEGMENT)]


def _show_tiered(s: _Steps, zk, data_dir: str) -> None:
    d = _describe(zk, data_dir)
    s.info(f"TieredEpoch: {d['tiered_epoch']}  TieredState: {d['tiered_state']}  "
           f"RemoteSegments: {d['remote_segments']}  RemoteBytes: {d['remote_bytes']}")
    for p in d["partitions"]:
        for g in p["segments"]:
            s.info(f"  remote segment {g['start_offset']}-{g['end_offset']}: {g['state']} "
                   f"tiered_epoch={g['tiered_epoch']} size={g['size']}")


def _local_bases(m, broker_id: int) -> list[int]:
    for d in m.broker(broker_id)["log_dirs"]:
        pdir = os.path.join(d, f"{TIERED}-0")
        if os.path.isdir(pdir):
            return sorted(int(n[:20]) for n in os.listdir(pdir) if n.endswith(".log"))
    return []


def _remote_files(m, tid: str) -> list[str]:
    pdir = os.path.join(m.state["remote_storage_dir"], "kafka-tiered-storage", f"{TIERED}-0-{tid}")
    return sorted(os.listdir(pdir)) if os.path.isdir(pdir) else []


def _disabled_events(data_dir: str, broker_id: int) -> int:
    """How many StopReplica v5 disablements of tiered-0 the broker performed (from its log)."""
    try:
        with open(os.path.join(data_dir, "logs", f"broker-{broker_id}.log"), errors="replace") as f:
            text = f.read()
    except OSError:
        return 0
    return len(re.findall(rf"event=remote_partition_disabled partition={TIERED}-0 ", text))


def _produce(bootstrap: str, first: int, n: int, topic: str = TIERED) -> None:
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, retries=10,
                             request_timeout_ms=30000)
    try:
        for i in range(first, first + n):
            producer.send(topic, f"v{i}".encode().ljust(100, b"."), partition=0).get(timeout=DEADLINE_S)
    finally:
        producer.close()


def _alter(port: int, configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs of the tiered topic, sent to one broker (the controller decides tiering changes;
    the frozen broker must not be picked as a client's "least loaded" node)."""
    from kafka.protocol.admin import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse

    from kafkatier.server.broker_client import BrokerClient
    request = IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=2, resource_name=TIERED, configs=[
            IncrementalAlterConfigsRequest.AlterConfigsResource.AlterableConfig(name=k, config_operation=0, value=v)
            for k, v in configs.items()])], validate_only=False)
    client = BrokerClient("127.0.0.1", port, client_id="kafkatier-demo", timeout_s=DEADLINE_S)
    try:
        response = client.send(request, IncrementalAlterConfigsResponse, 1)
    finally:
        client.close()
    for r in response.responses:
        if r.error_code:
            raise RuntimeError(f"IncrementalAlterConfigs failed: error {r.error_code} {r.error_message}")
