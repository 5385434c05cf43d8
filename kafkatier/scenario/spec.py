"""Scenario files: a TOML document (the library: ``kafkatier/scenario/library/``) validated against ``scenario.schema.json`` and turned into
frozen value types.

A scenario says what cluster to run (``[cluster]``), which topics to create (``[[topics]]``), which client
workloads run during the workload phase (``[[workloads]]``), which actions and faults happen at fixed or seeded
times or when a condition holds (``[[schedule]]``), optionally a random fault generator (``[nemesis]``), the
bound on the heal phase (``[heal]``), a shorter ``[quick]`` profile for CI, and outcomes it must show besides
the checkers passing (``[expect]``).

A bad file is a :class:`ScenarioSpecError` whose message is one line naming the field
(``schedule[2].target: 'leader' does not match ...``); the CLI prints it and exits 2.
"""
from __future__ import annotations

import json
import os
import tomllib
from functools import lru_cache
from typing import Any

import attrs
from jsonschema import Draft202012Validator

from kafkatier.cluster.request_faults import build_faults
from kafkatier.common.errors import UsageError
from kafkatier.protocol.errors import Errors
from kafkatier.scenario.network_faults import NEMESIS_MENU as LINK_MENU
from kafkatier.scenario.network_faults import LINK_ACTIONS, LinkActionSpec, parse_action

SCHEMA_FILE = os.path.join(os.path.dirname(__file__), "scenario.schema.json")
# The scenario library, installed with the package (``scenarios/`` in a checkout is a link to it).
LIBRARY_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "library")

# Faults drive the brokers quickly through failure detection: a short session and fast tiered tasks.
DEFAULT_SESSION_TIMEOUT_MS = 4000
TIERED_OVERRIDES = {"remote.log.storage.system.enable": "true", "remote.log.manager.task.interval.ms": "500",
                    "log.retention.check.interval.ms": "500", "log.initial.task.delay.ms": "0"}


class ScenarioSpecError(ValueError):
    """A scenario file that cannot be used; the message is one line naming the field."""


Time = float | tuple[float, float]  # a fixed time, or a range the seed picks from


@attrs.frozen
class ClusterSpec:
    brokers: int = 3
    log_dirs_per_broker: int = 1
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    tiered: bool = False
    zookeeper: str | None = None           # an external ZooKeeper (HOST:PORT), or "ensemble" (3 containers)
    overrides: dict[str, str] = attrs.field(factory=dict)
    links: bool = False                    # broker -> broker and broker -> ZooKeeper paths through links
    client_groups: tuple[str, ...] = ()     # client groups, each a listener reached through links (implies links)
    racks: dict[int, str] = attrs.field(factory=dict)   # broker.rack per broker id (every broker, or none)

    def rack_brokers(self, rack: str) -> tuple[int, ...]:
        """The ids of the brokers of ``rack`` (a ``rack:RACK`` target)."""
        return tuple(sorted(b for b, r in self.racks.items() if r == rack))

    def broker_overrides(self) -> dict[str, str]:
        out = dict(TIERED_OVERRIDES) if self.tiered else {}
        out.update(self.overrides)
        return out


@attrs.frozen
class TopicSpec:
    name: str
    partitions: int = 1
    replication_factor: int = 3
    configs: dict[str, str] = attrs.field(factory=dict)


@attrs.frozen
class WorkloadSpec:
    type: str                               # producer | consumer | offsets
    topic: str
    count: int = 1
    rate: float = 100.0                     # records per second per producer
    acks: str = "all"
    idempotence: bool = True
    keys: int = 0                           # distinct keys; 0 sends without keys
    value_bytes: int = 16
    delivery_timeout_ms: int = 30000
    seek: str = "beginning"
    reseek_s: float = 0.0                   # consumer: seek back to `seek` this often (0 = never)
    interval_s: float = 0.5                 # offsets sampler period
    rows: int = 1000                        # spark_producer: rows of the job (value_bytes each)
    start_s: float = 0.0                    # spark_producer: when the job starts
    exactly_once: bool = False              # spark_producer: exactlyOnce=true (transactions the driver commits)
    kill_task_after_s: float = 0.0          # spark_producer: kill -9 its task workers this long after its 1st record
    client_group: str | None = None         # bootstrap through this client group's links
    isolation_level: str = "read_committed"  # consumer (librdkafka's default)
    txn_sends: int = 4                      # txn_producer: sends per transaction (rate: transactions per second)
    abort_ratio: float = 0.0                # txn_producer: share of transactions it aborts on purpose
    transaction_timeout_ms: int = 10000     # txn_producer: transaction.timeout.ms
    zombie_at_s: float = 0.0                # txn_producer: leave a transaction open then, fenced by a new instance
    zombie_pause_s: float = 2.0             # txn_producer: how long the fenced instance sleeps before it commits
    client_rack: str | None = None          # consumer: client.rack (KIP-392 follower fetching)
    output_topic: str | None = None         # ctp: the topic the consume-transform-produce job writes
    txn_records: int = 10                   # ctp: most input records per transaction


@attrs.frozen
class ConditionSpec:
    topic: str | None = None
    tiered_state: str | None = None
    tiered_epoch_at_least: int | None = None
    controller_epoch_at_least: int | None = None
    acked_at_least: int | None = None
    partition: int = 0                      # the partition of `topic` that `leader` / `isr` are about
    leader: int | None = None               # its leader in ZooKeeper (-1: none or not registered: offline)
    isr: tuple[int, ...] | None = None      # its ISR, as a set
    timeout_s: float = 30.0


@attrs.frozen
class ActionSpec:
    action: str
    at: Time | None = None
    when: ConditionSpec | None = None
    delay_s: float = 0.0                    # after `when` holds, wait this long
    target: int | str | None = None
    signal: str = "KILL"
    duration_s: Time = 0.0
    down_s: Time = 0.0
    topic: str | None = None
    partition: int = 0
    offset: int | str | None = None
    timeout_ms: int = 5000
    set: dict[str, str] = attrs.field(factory=dict)
    delete: tuple[str, ...] = ()
    expect_error: str | None = None         # `expect`: the admin operation's outcome (an error name, NONE, any)
    exclude: tuple[int | str, ...] = ()     # `not`: brokers the target never resolves to
    dir: int | None = None                  # fail_log_dir / move_replica: index of a log dir of the target
    server: str = "follower"                # zk_pause_server: the ensemble's leader or a follower
    replicas: tuple[int, ...] | None = None  # reassign: the target replicas (None: a random set of live brokers)
    via: str = "api"                        # reassign: AlterPartitionReassignments, or the legacy znode
    rate: int | None = None                 # throttle: replication throttled rate, bytes/s
    clear: bool = False                     # throttle: remove the throttles instead (inject_errors: the faults)
    # inject_errors / clock_skew (scenario/request_faults.py)
    api: str | int | None = None
    errors: tuple[str | int, ...] = ()
    count: int | None = None
    latency_ms: float | None = None
    drop_response_nth: int | None = None
    close_connection_nth: int | None = None
    offset_ms: float | None = None
    drift_ppm: float | None = None
    link: LinkActionSpec | None = None      # partition / link_fault: the link fields (scenario/network_faults.py)
    client: str | None = None               # kill_client / restart_client: a ctp workload or one instance of it
    phase: str = "any"                      # kill_client / restart_client: where in a transaction the kill lands


@attrs.frozen
class NemesisSpec:
    menu: tuple[str, ...]
    interval_s: Time = (2.0, 5.0)
    start_s: float = 1.0
    stop_s: float | None = None              # default: the end of the workload phase
    swarm: bool = False
    via: str = "api"                         # reassign faults: api | znode | mixed (the seed picks)
    throttle_rate: Time = (100_000.0, 1_000_000.0)


@attrs.frozen
class ExpectSpec:
    failed_sends: str = "any"               # some | none | any
    tiered_states_seen: tuple[str, ...] = ()
    controller_changes_at_least: int = 0
    accept_unclean_loss: bool = False       # unclean elections allowed: their loss is reported as accepted
    replicas_across_racks: bool = False     # topics created with replicas in min(RF, racks) racks
    consumers_read_while_down: bool = False  # every consumer polled records while killed brokers were down


@attrs.frozen
class ScenarioSpec:
    name: str
    path: str | None
    description: str
    duration_s: float
    cluster: ClusterSpec
    topics: tuple[TopicSpec, ...]
    workloads: tuple[WorkloadSpec, ...]
    schedule: tuple[ActionSpec, ...]
    nemesis: NemesisSpec | None
    heal_timeout_s: float
    expect: ExpectSpec
    quick_duration_s: float | None = None
    quick_rate_scale: float = 1.0

    def topic(self, name: str) -> TopicSpec:
        for t in self.topics:
            if t.name == name:
                return t
        raise KeyError(name)

    def profile(self, quick: bool) -> "ScenarioSpec":
        """The scenario as run: with ``quick``, the shorter duration, scaled rates and ``at`` times."""
        if not quick or self.quick_duration_s is None and self.quick_rate_scale == 1.0:
            return self
        duration = self.quick_duration_s or self.duration_s
        scale = duration / self.duration_s if self.duration_s else 1.0

        def scaled(t: Time | None) -> Time | None:
            if t is None:
                return None
            return (t[0] * scale, t[1] * scale) if isinstance(t, tuple) else t * scale
        schedule = tuple(attrs.evolve(a, at=scaled(a.at)) for a in self.schedule)
        workloads = tuple(attrs.evolve(w, rate=w.rate * self.quick_rate_scale) for w in self.workloads)
        nemesis = self.nemesis and attrs.evolve(
            self.nemesis, start_s=self.nemesis.start_s * scale,
            stop_s=None if self.nemesis.stop_s is None else self.nemesis.stop_s * scale)
        return attrs.evolve(self, duration_s=duration, schedule=schedule, workloads=workloads, nemesis=nemesis)


# ------------------------------------------------------------------------------------------------ loading

@lru_cache(maxsize=1)
def _validator() -> Draft202012Validator:
    with open(SCHEMA_FILE) as f:
        return Draft202012Validator(json.load(f))


def _field(path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def validate(doc: dict) -> None:
    errors = sorted(_validator().iter_errors(doc), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if not errors:
        return
    e = errors[0]
    # Name the field; keep the message to one short line (a oneOf failure repeats the whole value).
    message = e.message if len(e.message) <= 160 else e.message[:157] + "..."
    raise ScenarioSpecError(f"{_field(e.absolute_path)}: {message}")


def library() -> list[str]:
    """The library's scenario files, sorted."""
    return sorted(os.path.join(LIBRARY_DIR, f) for f in os.listdir(LIBRARY_DIR) if f.endswith(".toml"))


def resolve(name_or_path: str) -> str:
    """A scenario file: ``name_or_path`` itself if it is a file, else the library's scenario of that name
    (``nemesis-broker-faults`` or ``nemesis-broker-faults.toml``)."""
    if os.path.isfile(name_or_path):
        return os.path.abspath(name_or_path)
    base = os.path.basename(name_or_path)
    candidate = os.path.join(LIBRARY_DIR, base if base.endswith(".toml") else base + ".toml")
    if os.sep not in name_or_path and os.path.isfile(candidate):
        return candidate
    raise ScenarioSpecError(f"{name_or_path}: no such scenario file, and no scenario of that name in the library "
                            f"(kafkatier scenario list)")


def in_library(path: str | None) -> bool:
    return path is not None and os.path.dirname(os.path.realpath(path)) == os.path.realpath(LIBRARY_DIR)


def load(path: str) -> ScenarioSpec:
    """Read, validate and convert one scenario file."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise ScenarioSpecError(f"{path}: no such scenario file") from None
    except OSError as e:
        raise ScenarioSpecError(f"{path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ScenarioSpecError(f"{path}: not valid TOML ({e})") from None
    try:
        return from_dict(doc, path=path)
    except ScenarioSpecError as e:
        raise ScenarioSpecError(f"{os.path.basename(path)}: {e}") from None


def _time(v: Any) -> Time | None:
    if v is None:
        return None
    if isinstance(v, list):
        lo, hi = float(v[0]), float(v[1])
        if hi < lo:
            raise ScenarioSpecError(f"time range [{lo}, {hi}] has its high end below its low end")
        return (lo, hi)
    return float(v)


def _configs(d: dict | None) -> dict[str, str]:
    return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (d or {}).items()}


def from_dict(doc: dict, path: str | None = None) -> ScenarioSpec:
    validate(doc)
    c = doc.get("cluster", {})
    cluster = ClusterSpec(brokers=c.get("brokers", 3), log_dirs_per_broker=c.get("log_dirs_per_broker", 1),
                          session_timeout_ms=c.get("session_timeout_ms", DEFAULT_SESSION_TIMEOUT_MS),
                          tiered=c.get("tiered", False), zookeeper=c.get("zookeeper"),
                          overrides=_configs(c.get("overrides")),
                          links=c.get("links", False) or bool(c.get("client_groups")),
                          client_groups=tuple(c.get("client_groups", ())),
                          racks=_racks(c.get("racks"), c.get("brokers", 3)))
    topics = tuple(TopicSpec(name=t["name"], partitions=t.get("partitions", 1),
                             replication_factor=t.get("replication_factor", min(3, cluster.brokers)),
                             configs=_configs(t.get("configs"))) for t in doc["topics"])
    names = {t.name for t in topics}
    for i, t in enumerate(topics):
        if t.replication_factor > cluster.brokers:
            raise ScenarioSpecError(f"topics[{i}].replication_factor: {t.replication_factor} is more than the "
                                    f"{cluster.brokers} brokers of the cluster")
    workloads = []
    for i, w in enumerate(doc.get("workloads", [])):
        if w["topic"] not in names:
            raise ScenarioSpecError(f"workloads[{i}].topic: unknown topic {w['topic']!r}")
        if w.get("client_group") is not None and w["client_group"] not in cluster.client_groups:
            raise ScenarioSpecError(f"workloads[{i}].client_group: {w['client_group']!r} is not in "
                                    f"cluster.client_groups")
        kw = {k: v for k, v in w.items() if k != "acks"}
        acks = str(w.get("acks", "all"))
        workload = WorkloadSpec(acks="all" if acks == "-1" else acks, **kw)
        _check_client_settings(workload, f"workloads[{i}]", "idempotence" in w)
        if workload.client_rack is not None and workload.type != "consumer":
            raise ScenarioSpecError(f"workloads[{i}].client_rack: only for a consumer")
        _check_ctp(workload, f"workloads[{i}]", names)
        workloads.append(workload)
    schedule = []
    duration = float(doc.get("duration_s", 20.0))
    for i, a in enumerate(doc.get("schedule", [])):
        schedule.append(_action(a, i, {t.name: t.partitions for t in topics}, cluster))
        _check_client_step(schedule[-1], f"schedule[{i}]", workloads)
        _check_within_run(schedule[-1], f"schedule[{i}]", duration)
    n = doc.get("nemesis")
    nemesis = None
    if n is not None:
        nemesis = NemesisSpec(menu=tuple(n["menu"]), interval_s=_time(n.get("interval_s", [2.0, 5.0])),
                              start_s=float(n.get("start_s", 1.0)), stop_s=n.get("stop_s"),
                              swarm=n.get("swarm", False), via=n.get("via", "api"),
                              throttle_rate=_time(n.get("throttle_rate", [100_000, 1_000_000])))
        links = [m for m in nemesis.menu if m in LINK_MENU]
        if links and not cluster.links:
            raise ScenarioSpecError(f"nemesis.menu: {links[0]!r} needs [cluster] links = true")
    e = doc.get("expect", {})
    expect = ExpectSpec(failed_sends=e.get("failed_sends", "any"),
                        tiered_states_seen=tuple(e.get("tiered_states_seen", ())),
                        controller_changes_at_least=e.get("controller_changes_at_least", 0),
                        accept_unclean_loss=e.get("accept_unclean_loss", False),
                        replicas_across_racks=e.get("replicas_across_racks", False),
                        consumers_read_while_down=e.get("consumers_read_while_down", False))
    if expect.replicas_across_racks and not cluster.racks:
        raise ScenarioSpecError("expect.replicas_across_racks: needs cluster.racks")
    _check_unclean_allowed(cluster, topics, schedule, nemesis, expect)
    q = doc.get("quick", {})
    return ScenarioSpec(name=doc["name"], path=os.path.abspath(path) if path else None,
                        description=doc.get("description", ""), duration_s=duration,
                        cluster=cluster, topics=topics, workloads=tuple(workloads), schedule=tuple(schedule),
                        nemesis=nemesis, heal_timeout_s=float(doc.get("heal", {}).get("timeout_s", 90.0)),
                        expect=expect, quick_duration_s=q.get("duration_s"),
                        quick_rate_scale=float(q.get("rate_scale", 1.0)))


def _racks(racks: dict | None, brokers: int) -> dict[int, str]:
    """``cluster.racks``: every broker's rack or none (Kafka refuses a rack-aware assignment when only some
    brokers have a rack)."""
    if not racks:
        return {}
    out = {int(b): r for b, r in racks.items()}
    for b in sorted(out):
        if not 1 <= b <= brokers:
            raise ScenarioSpecError(f"cluster.racks: no broker {b} (brokers are 1..{brokers})")
    missing = sorted(set(range(1, brokers + 1)) - set(out))
    if missing:
        raise ScenarioSpecError(f"cluster.racks: broker {missing[0]} has no rack (give every broker one: rack-aware "
                                f"assignment needs them all)")
    return out


def _check_client_settings(w: WorkloadSpec, where: str, idempotence_given: bool) -> None:
    """Producer settings that cannot work together, refused before anything starts (the clients would refuse
    them at run time): an idempotent producer needs acks=all (KIP-98; librdkafka and the Java client both fail)."""
    if w.type == "producer" and w.idempotence and w.acks != "all":
        why = "idempotence = true" if idempotence_given else "idempotence (on by default)"
        raise ScenarioSpecError(f"{where}.acks: {w.acks!r} cannot work with {why}: an idempotent producer needs "
                                f"acks = \"all\"; set idempotence = false for acks = {w.acks!r}")


def _check_ctp(w: WorkloadSpec, where: str, topics: set[str]) -> None:
    """A consume-transform-produce job reads ``topic`` and writes ``output_topic``: another topic of the scenario."""
    if w.type != "ctp":
        if w.output_topic is not None:
            raise ScenarioSpecError(f"{where}.output_topic: only for type 'ctp'")
        return
    if w.output_topic is None:
        raise ScenarioSpecError(f"{where}.output_topic: required for type 'ctp'")
    if w.output_topic not in topics:
        raise ScenarioSpecError(f"{where}.output_topic: unknown topic {w.output_topic!r}")
    if w.output_topic == w.topic:
        raise ScenarioSpecError(f"{where}.output_topic: the job cannot write the topic it reads ({w.topic!r})")


def _check_within_run(a: ActionSpec, where: str, duration_s: float) -> None:
    """A step's ``at`` lies inside the workload phase: a time after its end would never come (``--quick`` scales
    both alike)."""
    latest = a.at[1] if isinstance(a.at, tuple) else a.at
    if latest is not None and latest > duration_s:
        raise ScenarioSpecError(f"{where}.at: {latest:g} is after the run's duration_s {duration_s:g}: the step "
                                f"would never happen")


CLIENT_ACTIONS = ("kill_client", "restart_client")


def _check_client_step(a: ActionSpec, where: str, workloads: list[WorkloadSpec]) -> None:
    """``kill_client`` / ``restart_client`` name a ``ctp`` workload (``ctp-N``) or one of its instances
    (``ctp-N-K``); ``client`` and ``phase`` belong to those actions only."""
    if a.action not in CLIENT_ACTIONS:
        if a.client is not None or a.phase != "any":
            raise ScenarioSpecError(f"{where}.{'client' if a.client is not None else 'phase'}: only for actions "
                                    f"{', '.join(CLIENT_ACTIONS)}")
        return
    if a.client is None:
        raise ScenarioSpecError(f"{where}.client: required for action {a.action!r}")
    index, _, instance = a.client[4:].partition("-")
    n = int(index)
    if n >= len(workloads) or workloads[n].type != "ctp":
        raise ScenarioSpecError(f"{where}.client: {a.client!r} names no ctp workload (workloads[{n}] is "
                                f"{workloads[n].type if n < len(workloads) else 'missing'})")
    if instance and (workloads[n].count == 1 or int(instance) >= workloads[n].count):
        raise ScenarioSpecError(f"{where}.client: {a.client!r}: workloads[{n}] has "
                                f"{'one instance, ctp-' + index if workloads[n].count == 1 else f'instances 0..{workloads[n].count - 1}'}")


ENSEMBLE_FAULTS = ("zk_kill_leader", "zk_pause_server", "zk_restart_ensemble")
_NEEDS_TOPIC = ("alter_config", "delete_records", "move_replica", "reassign", "unclean-election")
# Actions whose outcome is an admin operation's answer (`expect` applies to them).
ADMIN_ACTIONS = ("alter_config", "delete_records", "move_replica", "reassign", "cancel-reassignment",
                 "preferred-election", "unclean-election")
RACK_ACTIONS = ("kill", "terminate", "restart", "start")   # the actions a ``rack:RACK`` target may take
_NEEDS_TARGET = ("kill", "terminate", "restart", "start", "pause", "expire_session", "fail_log_dir", "move_replica",
                 "controlled-shutdown", "inject_errors", "clock_skew")
UNCLEAN_CONFIG = "unclean.leader.election.enable"


def _check_unclean_allowed(cluster: ClusterSpec, topics: tuple[TopicSpec, ...],
                           schedule: list[ActionSpec], nemesis: NemesisSpec | None, expect: ExpectSpec) -> None:
    """An unclean election may lose acknowledged records (Kafka accepts it); a scenario that can cause one says
    so with ``[expect] accept_unclean_loss = true``, so the checkers report that loss as accepted, never hide
    it by accident."""
    if expect.accept_unclean_loss:
        return
    why = "an unclean election may lose acknowledged records: set [expect] accept_unclean_loss = true"
    for i, a in enumerate(schedule):
        if a.action == "unclean-election":
            raise ScenarioSpecError(f"schedule[{i}].action: 'unclean-election' needs it ({why})")
    if nemesis is not None and "unclean-election" in nemesis.menu:
        raise ScenarioSpecError(f"nemesis.menu: 'unclean-election' needs it ({why})")
    if cluster.overrides.get(UNCLEAN_CONFIG) == "true":
        raise ScenarioSpecError(f"cluster.overrides.{UNCLEAN_CONFIG}: {why}")
    for i, t in enumerate(topics):
        if t.configs.get(UNCLEAN_CONFIG) == "true":
            raise ScenarioSpecError(f"topics[{i}].configs.{UNCLEAN_CONFIG}: {why}")
    for i, a in enumerate(schedule):
        if a.set.get(UNCLEAN_CONFIG) == "true":
            raise ScenarioSpecError(f"schedule[{i}].set.{UNCLEAN_CONFIG}: {why}")


def _action(a: dict, i: int, topics: dict[str, int], cluster: ClusterSpec) -> ActionSpec:
    """One ``[[schedule]]`` step; ``topics``: the scenario's topic names and partition counts."""
    where = f"schedule[{i}]"
    if ("at" in a) == ("when" in a):
        raise ScenarioSpecError(f"{where}: give exactly one of `at` and `when`")
    kind = a["action"]
    if kind in _NEEDS_TOPIC and "topic" not in a:
        raise ScenarioSpecError(f"{where}.topic: required for action {kind!r}")
    if kind in _NEEDS_TARGET and "target" not in a:
        raise ScenarioSpecError(f"{where}.target: required for action {kind!r}")
    if "topic" in a and a["topic"] not in topics:
        raise ScenarioSpecError(f"{where}.topic: unknown topic {a['topic']!r}")
    target = a.get("target")
    if isinstance(target, int) and not 1 <= target <= cluster.brokers:
        raise ScenarioSpecError(f"{where}.target: no broker {target} (brokers are 1..{cluster.brokers})")
    if isinstance(target, str) and target.startswith("rack:"):
        if kind not in RACK_ACTIONS:
            raise ScenarioSpecError(f"{where}.target: a rack target is for the actions {', '.join(RACK_ACTIONS)}, "
                                    f"not {kind!r}")
        if not cluster.rack_brokers(target[5:]):
            raise ScenarioSpecError(f"{where}.target: no broker in rack {target[5:]!r} (cluster.racks names "
                                    f"{', '.join(sorted(set(cluster.racks.values()))) or 'no rack'})")
        if "not" in a:
            raise ScenarioSpecError(f"{where}.not: not with a rack target")
    elif isinstance(target, str) and ":" in target and not target.startswith("txn-coordinator:") and \
            target.split(":", 1)[1].split("/")[0] not in topics:
        raise ScenarioSpecError(f"{where}.target: unknown topic in {target!r}")
    if kind == "delete_records" and "offset" not in a:
        raise ScenarioSpecError(f"{where}.offset: required for action 'delete_records'")
    if kind == "fail_log_dir" and "dir" not in a:
        raise ScenarioSpecError(f"{where}.dir: required for action 'fail_log_dir'")
    if kind in ("fail_log_dir", "move_replica") and cluster.log_dirs_per_broker < 2:
        raise ScenarioSpecError(f"{where}.action: {kind!r} needs cluster.log_dirs_per_broker >= 2")
    if a.get("dir", 0) >= cluster.log_dirs_per_broker:
        raise ScenarioSpecError(f"{where}.dir: no log dir {a['dir']} (brokers have dirs 0.."
                                f"{cluster.log_dirs_per_broker - 1})")
    if "replicas" in a and kind != "reassign":
        raise ScenarioSpecError(f"{where}.replicas: only for action 'reassign'")
    for b in a.get("replicas", ()):
        if not 1 <= b <= cluster.brokers:
            raise ScenarioSpecError(f"{where}.replicas: no broker {b} (brokers are 1..{cluster.brokers})")
    if kind == "throttle" and ("rate" in a) == bool(a.get("clear", False)):
        raise ScenarioSpecError(f"{where}.rate: give a rate, or clear = true")
    if "topic" not in a and "partition" in a:
        raise ScenarioSpecError(f"{where}.topic: required with partition")
    if "partition" in a and a.get("topic") in topics and a["partition"] >= topics[a["topic"]]:
        raise ScenarioSpecError(f"{where}.partition: {a['topic']} has partitions 0..{topics[a['topic']] - 1}")
    _check_request_fault(a, where, kind)
    if "expect" in a and "expect_error" in a:
        raise ScenarioSpecError(f"{where}.expect: give `expect` or its older name `expect_error`, not both")
    expect = a.get("expect", a.get("expect_error"))
    key = "expect" if "expect" in a else "expect_error"
    if expect is not None:
        if kind not in ADMIN_ACTIONS:
            raise ScenarioSpecError(f"{where}.{key}: only for the admin actions ({', '.join(ADMIN_ACTIONS)})")
        if expect != "any" and expect not in Errors.__members__:
            raise ScenarioSpecError(f"{where}.{key}: {expect!r} is not a Kafka error name (NONE for success, or any)")
    if "not" in a:
        if "target" not in a:
            raise ScenarioSpecError(f"{where}.not: only with a `target`")
        if target in a["not"]:
            raise ScenarioSpecError(f"{where}.not: excludes the target {target!r} itself")
        for e in a["not"]:
            if isinstance(e, int) and not 1 <= e <= cluster.brokers:
                raise ScenarioSpecError(f"{where}.not: no broker {e} (brokers are 1..{cluster.brokers})")
            if isinstance(e, str) and ":" in e and e.split(":", 1)[1].split("/")[0] not in topics:
                raise ScenarioSpecError(f"{where}.not: unknown topic in {e!r}")
    when = None
    if kind in ENSEMBLE_FAULTS and cluster.zookeeper != "ensemble":
        raise ScenarioSpecError(f"{where}.action: {kind!r} needs cluster.zookeeper = \"ensemble\"")
    if "when" in a:
        w = a["when"]
        for key in ("tiered_state", "partition", "leader", "isr"):
            if key in w and "topic" not in w:
                raise ScenarioSpecError(f"{where}.when.topic: required with {key}")
        if "topic" in w and w["topic"] not in topics:
            raise ScenarioSpecError(f"{where}.when.topic: unknown topic {w['topic']!r}")
        if "partition" in w and w["partition"] >= topics[w["topic"]]:
            raise ScenarioSpecError(f"{where}.when.partition: {w['topic']} has partitions 0.."
                                    f"{topics[w['topic']] - 1}")
        when = ConditionSpec(**dict(w, isr=tuple(sorted(w["isr"])) if "isr" in w else None))
    try:
        link = parse_action(a, where, cluster.links, cluster.brokers)
    except ValueError as e:
        raise ScenarioSpecError(str(e)) from None
    return ActionSpec(action=kind, at=_time(a.get("at")), when=when, delay_s=float(a.get("delay_s", 0.0)),
                      target=target, signal=a.get("signal", "KILL"),
                      duration_s=_time(a.get("duration_s", 0.0)), down_s=_time(a.get("down_s", 0.0)),
                      topic=a.get("topic"), partition=a.get("partition", 0), offset=a.get("offset"),
                      timeout_ms=a.get("timeout_ms", 5000), set=_configs(a.get("set")),
                      delete=tuple(a.get("delete", ())), expect_error=expect, exclude=tuple(a.get("not", ())),
                      dir=a.get("dir"),
                      server=a.get("server", "follower"),
                      replicas=tuple(a["replicas"]) if "replicas" in a else None, via=a.get("via", "api"),
                      rate=a.get("rate"), clear=a.get("clear", False), api=a.get("api"),
                      errors=tuple(a.get("errors", ())), count=a.get("count"), latency_ms=a.get("latency_ms"),
                      drop_response_nth=a.get("drop_response_nth"),
                      close_connection_nth=a.get("close_connection_nth"), offset_ms=a.get("offset_ms"),
                      drift_ppm=a.get("drift_ppm"), link=link, client=a.get("client"),
                      phase=a.get("phase", "any"))


_REQUEST_FAULT_KINDS = ("errors", "latency_ms", "drop_response_nth", "close_connection_nth")
_REQUEST_FAULT_FIELDS = ("api", "count") + _REQUEST_FAULT_KINDS


def _check_request_fault(a: dict, where: str, kind: str) -> None:
    """``inject_errors`` / ``clock_skew`` fields: only on those actions, one fault kind, known names."""
    if kind != "inject_errors":
        for key in _REQUEST_FAULT_FIELDS:
            if key == "latency_ms" and kind in LINK_ACTIONS:
                continue  # a link's latency (network_faults.py)
            if key == "latency_ms" and key in a:
                raise ScenarioSpecError(f"{where}.latency_ms: only for the link actions "
                                        f"({', '.join(LINK_ACTIONS)}) and 'inject_errors'")
            if key in a:
                raise ScenarioSpecError(f"{where}.{key}: only for action 'inject_errors'")
    if kind != "clock_skew":
        for key in ("offset_ms", "drift_ppm"):
            if key in a:
                raise ScenarioSpecError(f"{where}.{key}: only for action 'clock_skew'")
    if kind == "clock_skew" and "offset_ms" not in a and "drift_ppm" not in a:
        raise ScenarioSpecError(f"{where}.offset_ms: give offset_ms and/or drift_ppm")
    if kind != "inject_errors":
        return
    given = [k for k in _REQUEST_FAULT_KINDS if k in a]
    if a.get("clear", False):
        if given:
            raise ScenarioSpecError(f"{where}.clear: not with {given[0]}")
        return
    if len(given) != 1 or "api" not in a:
        raise ScenarioSpecError(f"{where}: inject_errors needs `api` and one of {', '.join(_REQUEST_FAULT_KINDS)}")
    try:
        build_faults(a["api"], errors=a.get("errors"), latency_ms=a.get("latency_ms"),
                     drop_response_nth=a.get("drop_response_nth"), close_connection_nth=a.get("close_connection_nth"),
                     count=a.get("count"), topic=a.get("topic"), partition=a.get("partition", 0) if "topic" in a
                     else None)
    except UsageError as e:
        raise ScenarioSpecError(f"{where}: {e}") from None
