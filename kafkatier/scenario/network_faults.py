"""Network faults as scenario actions, on a cluster run with ``[cluster] links = true`` (``cluster/links.py``).

| action | fields | effect |
|---|---|---|
| ``partition`` | ``shape`` = isolate / isolate-zookeeper (``target``: a broker, ``controller``, ``leader:t/p``...), isolate-leader (``topic``, ``partition``), halves, random-halves (the step's pick shuffles), bridge; or ``from`` / ``to`` (node lists: broker ids, ``broker:N``, ``zookeeper``, ``brokers``) with ``one_way``; ``blackhole = true`` makes the cut silent | the shape's links cut for ``duration_s`` (0: until the heal phase) |
| ``link_fault`` | ``from``, ``to``, ``both_ways``, ``direction``, and one of ``latency_ms`` (+ ``jitter_ms``), ``bandwidth`` (bytes/s or ``"1MB/s"``), ``blackhole`` | as ``cluster link-fault`` |
| ``heal_links`` | -- | every link fault removed now |

Nemesis menu entries (``NEMESIS_MENU``) draw the same actions with a random target and a duration of 1-4 s.
Every fault is a ``nemesis`` history entry ``link-fault`` (``value``: the brokers it touches; ``links``, ``kind``,
``description``) and its end a ``link-heal`` entry with the same ``fault``; the timeline draws each as a bar
on the lanes of the brokers it touches, labelled with who they are cut from (:func:`draw_timeline`).  A
fault's own heal removes its kind from its links, except those another active fault of the same kind holds.
"""
from __future__ import annotations

import threading

import attrs

from kafkatier.cluster.link_faults import (BANDWIDTH, BLACKHOLE, DIRECTIONS, LATENCY, PARTITION, SHAPES, LinkFault,
                                           LinkFaultError, LinkFaultPlan, brokers_of, node_broker_id, parse_rate)
from kafkatier.cluster.link_manager import LinkManager
from kafkatier.logsetup import get_logger, kv
from kafkatier.scenario.faults import FaultError

log = get_logger("scenario.network_faults")

LINK_ACTIONS = ("partition", "link_fault", "heal_links")
PARTITION_SHAPES = tuple(s for s in SHAPES if s != "one-way")
_BROKER_SHAPES = ("isolate", "isolate-zookeeper")

# Nemesis menu entries: action fields (``[nemesis] menu = ["partition-isolate", ...]``).
NEMESIS_MENU = {
    "partition-isolate": dict(action="partition", target="random", link=dict(shape="isolate")),
    "partition-isolate-zookeeper": dict(action="partition", target="random", link=dict(shape="isolate-zookeeper")),
    "partition-leader": dict(action="partition", link=dict(shape="isolate-leader")),
    "partition-halves": dict(action="partition", link=dict(shape="random-halves")),
    "partition-bridge": dict(action="partition", link=dict(shape="bridge")),
    "partition-one-way": dict(action="partition", target="random", link=dict(one_way=True)),
    "blackhole-isolate": dict(action="partition", target="random", link=dict(shape="isolate", blackhole=True)),
    "link-latency": dict(action="link_fault", link=dict(sources=("brokers",), destinations=("brokers",),
                                                        latency_ms=50.0, jitter_ms=10.0)),
    "link-bandwidth": dict(action="link_fault", link=dict(sources=("brokers",), destinations=("brokers",),
                                                          bandwidth=200_000)),
}
NEMESIS_DURATIONS = {name: (1.0, 4.0) for name in NEMESIS_MENU}


@attrs.frozen
class LinkActionSpec:
    shape: str | None = None
    sources: tuple[str, ...] | None = None
    destinations: tuple[str, ...] | None = None
    one_way: bool = False
    blackhole: bool = False
    both_ways: bool = False
    direction: str = "both"
    latency_ms: float | None = None
    jitter_ms: float = 0.0
    bandwidth: int | None = None

    def describe(self) -> str:
        parts = []
        if self.shape:
            parts.append(f"shape={self.shape}")
        if self.sources:
            parts.append(f"from={','.join(self.sources)} to={','.join(self.destinations or ())}")
        for name in ("one_way", "blackhole", "both_ways"):
            if getattr(self, name):
                parts.append(name)
        if self.latency_ms is not None:
            parts.append(f"latency={self.latency_ms:g}±{self.jitter_ms:g}ms")
        if self.bandwidth is not None:
            parts.append(f"bandwidth={self.bandwidth}B/s")
        if self.direction != "both":
            parts.append(f"direction={self.direction}")
        return " ".join(parts)


def _nodes(v) -> tuple[str, ...]:
    return tuple(str(x) for x in (v if isinstance(v, list) else [v]))


def parse_action(a: dict, where: str, links_enabled: bool, brokers: int) -> LinkActionSpec | None:
    """The link fields of a ``[[schedule]]`` step (None for other actions); ``ValueError`` naming the field."""
    kind = a["action"]
    if kind not in LINK_ACTIONS:
        for key in ("shape", "from", "to", "one_way", "blackhole", "latency_ms", "jitter_ms", "bandwidth",
                    "direction", "both_ways"):
            if key == "latency_ms" and kind == "inject_errors":
                continue  # a request fault's added latency (request_faults.py)
            if key in a:
                raise ValueError(f"{where}.{key}: only for the link actions ({', '.join(LINK_ACTIONS)})")
        return None
    if not links_enabled:
        raise ValueError(f"{where}.action: {kind!r} needs [cluster] links = true")
    shape = a.get("shape")
    between = "from" in a or "to" in a
    if kind == "partition":
        if (shape is None) == (not between):
            raise ValueError(f"{where}: a partition gives `shape`, or `from` and `to`")
        if between and not ("from" in a and "to" in a):
            raise ValueError(f"{where}: `from` and `to` go together")
        if shape in _BROKER_SHAPES and "target" not in a:
            raise ValueError(f"{where}.target: required for shape {shape!r}")
        if shape == "isolate-leader" and "topic" not in a:
            raise ValueError(f"{where}.topic: required for shape 'isolate-leader'")
        if shape in ("bridge",) and brokers < 3 or shape in ("halves", "random-halves") and brokers < 2:
            raise ValueError(f"{where}.shape: {shape!r} needs more brokers")
        if a.get("one_way") and not between:
            raise ValueError(f"{where}.one_way: only with `from` and `to`")
    if kind == "link_fault":
        if not ("from" in a and "to" in a):
            raise ValueError(f"{where}: a link_fault gives `from` and `to`")
        given = [k for k in ("latency_ms", "bandwidth", "blackhole") if a.get(k)]
        if len(given) != 1:
            raise ValueError(f"{where}: a link_fault gives one of latency_ms, bandwidth, blackhole")
        if "jitter_ms" in a and "latency_ms" not in a:
            raise ValueError(f"{where}.jitter_ms: only with latency_ms")
    bandwidth = a.get("bandwidth")
    try:
        if isinstance(bandwidth, str):
            bandwidth = parse_rate(bandwidth)
        spec = LinkActionSpec(shape=shape, sources=_nodes(a["from"]) if "from" in a else None,
                              destinations=_nodes(a["to"]) if "to" in a else None, one_way=a.get("one_way", False),
                              blackhole=a.get("blackhole", False), both_ways=a.get("both_ways", False),
                              direction=a.get("direction", "both"), latency_ms=a.get("latency_ms"),
                              jitter_ms=float(a.get("jitter_ms", 0.0)), bandwidth=bandwidth)
        if kind == "link_fault":
            fault_of(spec)  # checks the values
    except LinkFaultError as e:
        raise ValueError(f"{where}: {e}") from None
    return spec


def fault_of(spec: LinkActionSpec) -> LinkFault:
    if spec.latency_ms is not None:
        return LinkFault(LATENCY, spec.direction, latency_ms=float(spec.latency_ms), jitter_ms=spec.jitter_ms)
    if spec.bandwidth is not None:
        return LinkFault(BANDWIDTH, spec.direction, rate_bytes_per_s=int(spec.bandwidth))
    if spec.blackhole:
        return LinkFault(BLACKHOLE, spec.direction)
    return LinkFault(PARTITION)


def _brokers_touched(plan: LinkFaultPlan) -> list[int]:
    out = set()
    for name, _ in plan.faults:
        for node in name.split("->"):
            if (b := node_broker_id(node)) is not None:
                out.add(b)
    return sorted(out)


def _cut_from(plan: LinkFaultPlan) -> dict[str, list[str]]:
    """node -> the nodes it lost (or slowed) a path to, for the history and the timeline's labels."""
    out: dict[str, set[str]] = {}
    for name, _ in plan.faults:
        a, b = name.split("->")
        out.setdefault(a, set()).add(b)
        out.setdefault(b, set()).add(a)
    return {k: sorted(v) for k, v in sorted(out.items())}


class NetworkFaults:
    """Applies the link actions of a run.  ``resolve(target, pick) -> broker id``: the scenario's target
    resolution (``Faults.resolve``); ``partition_of(pick) -> (topic, partition)``: a partition the pick chooses
    among the scenario's topics (a topic-less ``isolate-leader``)."""

    def __init__(self, links: LinkManager, history, resolve, partition_of):
        self.links = links
        self.history = history
        self.resolve = resolve
        self.partition_of = partition_of
        self._timers: list[threading.Timer] = []
        self._lock = threading.Lock()
        self._next = 0
        self._active: dict[int, tuple[LinkFaultPlan, str]] = {}   # fault id -> (plan, kind), until its heal

    def apply(self, action: str, spec: LinkActionSpec | None, target, topic: str | None, partition: int,
              pick: float, duration_s: float) -> None:
        if action == "heal_links":
            healed = self.links.heal(by="scenario")
            self.history.info("nemesis", "link-heal", [], links=healed, fault=None)
            return
        try:
            plan, kind = self._plan(action, spec, target, topic, partition, pick)
            if not plan.faults:
                raise FaultError(f"no link to fault: {plan.description}")
            self.links.apply(plan, by="scenario")
        except LinkFaultError as e:
            raise FaultError(str(e)) from None
        with self._lock:
            self._next += 1
            fid = self._next
            self._active[fid] = (plan, kind)
        self.history.info("nemesis", "link-fault", _brokers_touched(plan), fault=fid, kind=kind,
                          description=plan.description, links=plan.link_names(), cut_from=_cut_from(plan),
                          duration_s=duration_s)
        log.info("link fault %s", kv(fault=fid, what=plan.description, links=len(plan.faults)))
        if duration_s:
            t = threading.Timer(duration_s, self._heal_one, args=(fid, plan, kind))
            t.daemon = True
            with self._lock:
                self._timers.append(t)
            t.start()

    def _plan(self, action, spec: LinkActionSpec, target, topic, partition, pick) -> tuple[LinkFaultPlan, str]:
        if action == "link_fault":
            fault = fault_of(spec)
            return self.links.fault_plan(spec.sources, spec.destinations, fault, spec.both_ways), fault.kind
        kind = BLACKHOLE if spec.blackhole else PARTITION
        if spec.shape is None:
            sources = spec.sources
            destinations = spec.destinations
            if sources is None:   # a nemesis one-way cut: the target cannot reach the other brokers
                b = self.resolve(target, pick)
                sources = (str(b),)
                destinations = tuple(str(x) for x in self._broker_ids() if x != b) + ("zookeeper",)
            return self.links.cut_plan(sources, destinations, spec.one_way, kind), \
                BLACKHOLE if spec.one_way else kind
        node = self.resolve(target, pick) if spec.shape in _BROKER_SHAPES else None
        tp = None
        if spec.shape == "isolate-leader":
            tp = (topic, partition) if topic is not None else self.partition_of(pick)
        seed = int(pick * 1_000_000)
        return self.links.shape_plan(spec.shape, node=node, topic_partition=tp, seed=seed, kind=kind), kind

    def _broker_ids(self) -> list[int]:
        return brokers_of(self.links.table())

    def _heal_one(self, fid: int, plan: LinkFaultPlan, kind: str) -> None:
        """End one fault: its kind removed from its links, except links another active fault of that kind holds."""
        with self._lock:
            self._active.pop(fid, None)
            held = {n for p, k in self._active.values() if k == kind for n in p.link_names()}
        names = [n for n in plan.link_names() if n not in held]
        try:
            healed = self.links.heal(names, kinds=[kind], by="scenario", restart=False) if names else []
        except Exception:  # noqa: BLE001 - the heal phase heals everything anyway
            log.exception("could not heal link fault %s", fid)
            return
        self.history.info("nemesis", "link-heal", _brokers_touched(plan), fault=fid, links=healed)

    def heal(self) -> None:
        """The heal phase: cancel pending heals, remove every fault, restart a dead link process."""
        with self._lock:
            timers, self._timers = self._timers, []
            self._active.clear()
        for t in timers:
            t.cancel()
        healed = self.links.heal(by="scenario")
        if healed:
            self.history.info("nemesis", "link-heal", [], links=healed, fault=None)


# --- the timeline -----------------------------------------------------------------------------------------------
KIND_COLOURS = {PARTITION: "#4e342e", BLACKHOLE: "#000000", LATENCY: "#0277bd", BANDWIDTH: "#00897b"}


def link_spans(entries: list[dict], end_s: float) -> list[dict]:
    """Each link fault of a history as ``{t0, t1, kind, brokers, cut_from, description}``."""
    open_: dict[int, dict] = {}
    spans = []
    for e in entries:
        if e.get("process") != "nemesis" or e.get("f") not in ("link-fault", "link-heal"):
            continue
        t = e["time"] / 1e9
        if e["f"] == "link-fault":
            open_[e.get("fault")] = {"t0": t, "kind": e.get("kind"), "brokers": e.get("value") or [],
                                     "cut_from": e.get("cut_from") or {}, "description": e.get("description")}
        elif e.get("fault") is None:  # heal of every link
            for fid in list(open_):
                spans.append({**open_.pop(fid), "t1": t})
        elif e.get("fault") in open_:
            spans.append({**open_.pop(e["fault"]), "t1": t})
    spans += [{**s, "t1": end_s} for s in open_.values()]
    return sorted(spans, key=lambda s: s["t0"])


def _short(node: str) -> str:
    return node.replace("broker:", "").replace("zookeeper:", "zk")


def draw_timeline(ax, entries: list[dict], lanes: dict[str, int], end_s: float) -> None:
    """A bar at the top of each touched broker's lane for each link fault, labelled ``cut from 2,3,zk1`` (or
    ``latency ...`` / ``bandwidth ...``)."""
    for s in link_spans(entries, end_s):
        colour = KIND_COLOURS.get(s["kind"], "#4e342e")
        for b in s["brokers"]:
            lane = lanes.get(f"broker {b}")
            if lane is None:
                continue
            ax.barh(lane + 0.24, s["t1"] - s["t0"], left=s["t0"], height=0.12, color=colour)
            peers = s["cut_from"].get(f"broker:{b}", [])
            verb = {PARTITION: "cut from", BLACKHOLE: "blackholed to"}.get(s["kind"], s["kind"] + " to")
            ax.text(s["t0"], lane + 0.36, f"{verb} {','.join(_short(p) for p in peers)}", fontsize=6, color=colour,
                    va="bottom")


def menu_action(name: str) -> dict:
    """The ActionSpec fields of a nemesis menu entry (``link``: a LinkActionSpec)."""
    d = dict(NEMESIS_MENU[name])
    d["link"] = LinkActionSpec(**d["link"])
    return d


__all__ = ["LINK_ACTIONS", "NEMESIS_MENU", "NEMESIS_DURATIONS", "LinkActionSpec", "NetworkFaults", "parse_action",
           "draw_timeline", "link_spans", "menu_action", "DIRECTIONS", "PARTITION_SHAPES"]
