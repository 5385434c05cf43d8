"""Links and link faults: the value types of kafkatier's user-space network (no Kafka class; Toxiproxy's proxies
and toxics, Jepsen's grudges and partition shapes; docs/network-faults.md).

A **link** is one directed TCP path of a cluster, served by the link process (``cluster/links.py``): its
``source`` dials ``127.0.0.1:<port>`` and the link connects on to ``upstream``.  Node names:
``broker:<id>``, ``zookeeper:<n>`` (the n-th server of ``zookeeper.connect``, from 1) and ``client:<group>``.
Bytes from source to destination flow ``forward``; the answers flow ``backward``.

A **fault** acts on one link, in one or both directions:

| kind | effect |
|---|---|
| ``partition`` | new connections are accepted and reset at once (SO_LINGER 0); open ones are reset |
| ``blackhole`` | bytes are read and thrown away (the peer's writes succeed, it hears nothing and times out); healing resets the connections that lost bytes, whose Kafka framing is broken |
| ``latency`` | each chunk is delivered ``latency_ms ± jitter_ms`` (uniform) after it was read, order kept |
| ``bandwidth`` | at most ``rate_bytes_per_s`` per link and direction, shared by its connections |

A one-way cut (``a`` cannot reach ``b``, ``b`` still reaches ``a``) is a ``blackhole`` of the bytes from ``a``:
forward on ``a -> b`` and backward on ``b -> a`` (:func:`one_way`).  A link holds at most one fault per
(kind, direction): applying one again replaces it.
"""
from __future__ import annotations

import json
import random

import attrs

FORWARD = "forward"
BACKWARD = "backward"
BOTH = "both"
DIRECTIONS = (BOTH, FORWARD, BACKWARD)

PARTITION = "partition"
BLACKHOLE = "blackhole"
LATENCY = "latency"
BANDWIDTH = "bandwidth"
KINDS = (PARTITION, BLACKHOLE, LATENCY, BANDWIDTH)

#: The named shapes of :func:`shape_faults` (Jepsen's names where it has one).
SHAPES = ("isolate", "isolate-zookeeper", "isolate-leader", "halves", "random-halves", "bridge", "one-way")


class LinkFaultError(ValueError):
    """A fault, shape or link name that does not exist or makes no sense (the CLI's one line, exit 2)."""


def _direction(value: str) -> str:
    if value not in DIRECTIONS:
        raise LinkFaultError(f"unknown direction {value!r} (one of {', '.join(DIRECTIONS)})")
    return value


@attrs.frozen
class LinkFault:
    kind: str
    direction: str = attrs.field(default=BOTH, converter=_direction)
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    rate_bytes_per_s: int = 0
    applied_at: float = 0.0  # wall-clock seconds

    def __attrs_post_init__(self):
        if self.kind not in KINDS:
            raise LinkFaultError(f"unknown link fault {self.kind!r} (one of {', '.join(KINDS)})")
        if self.kind == PARTITION and self.direction != BOTH:
            raise LinkFaultError("a partition cuts both directions; a one-way cut is a blackhole of one direction")
        if self.kind == LATENCY and not (self.latency_ms > 0 and 0 <= self.jitter_ms <= self.latency_ms):
            raise LinkFaultError(f"latency needs latency_ms > 0 and 0 <= jitter_ms <= latency_ms, "
                                 f"got {self.latency_ms} ± {self.jitter_ms}")
        if self.kind == BANDWIDTH and self.rate_bytes_per_s <= 0:
            raise LinkFaultError(f"bandwidth needs a rate > 0 bytes/s, got {self.rate_bytes_per_s}")

    def covers(self, direction: str) -> bool:
        return self.direction in (BOTH, direction)

    def describe(self) -> str:
        arrow = {BOTH: "", FORWARD: " forward", BACKWARD: " backward"}[self.direction]
        if self.kind == LATENCY:
            return f"latency {self.latency_ms:g}±{self.jitter_ms:g}ms{arrow}"
        if self.kind == BANDWIDTH:
            return f"bandwidth {self.rate_bytes_per_s}B/s{arrow}"
        return f"{self.kind}{arrow}"

    def to_json(self) -> dict:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "LinkFault":
        return cls(**{f.name: d[f.name] for f in attrs.fields(cls) if f.name in d})


@attrs.frozen
class DirectionBehaviour:
    """What a link does to the bytes of one direction, all its faults taken together."""
    cut: bool = False
    drop: bool = False
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    rate_bytes_per_s: int = 0

    @property
    def healthy(self) -> bool:
        return self == HEALTHY

    def delay_s(self, rng: random.Random) -> float:
        if not self.latency_ms:
            return 0.0
        return max(0.0, self.latency_ms + rng.uniform(-self.jitter_ms, self.jitter_ms)) / 1000.0


HEALTHY = DirectionBehaviour()


def behaviour(faults, direction: str) -> DirectionBehaviour:
    fs = [f for f in faults if f.covers(direction)]
    lat = next((f for f in fs if f.kind == LATENCY), None)
    bw = next((f for f in fs if f.kind == BANDWIDTH), None)
    return DirectionBehaviour(cut=any(f.kind == PARTITION for f in fs), drop=any(f.kind == BLACKHOLE for f in fs),
                              latency_ms=lat.latency_ms if lat else 0.0, jitter_ms=lat.jitter_ms if lat else 0.0,
                              rate_bytes_per_s=bw.rate_bytes_per_s if bw else 0)


def _key(f: LinkFault) -> tuple[str, str]:
    return f.kind, f.direction


@attrs.frozen
class Link:
    source: str
    destination: str
    upstream: str                # host:port the link connects to, or a broker's port file (:func:`resolve_upstream`)
    port: int = 0                # the link's own listening port on 127.0.0.1 (0 until the link process binds it)
    faults: tuple[LinkFault, ...] = ()

    @property
    def name(self) -> str:
        return link_name(self.source, self.destination)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def with_fault(self, fault: LinkFault) -> "Link":
        """This link with ``fault`` added, replacing one of the same kind and direction (a ``both`` fault
        replaces the one-direction faults of its kind, and the other way round)."""
        def replaced(f: LinkFault) -> bool:
            return f.kind == fault.kind and (f.direction == fault.direction or BOTH in (f.direction, fault.direction))
        kept = tuple(f for f in self.faults if not replaced(f))
        return attrs.evolve(self, faults=kept + (fault,))

    def healed(self, kinds=None) -> "Link":
        return attrs.evolve(self, faults=tuple(f for f in self.faults if kinds is not None and f.kind not in kinds))

    def to_json(self) -> dict:
        return {"source": self.source, "destination": self.destination, "upstream": self.upstream,
                "port": self.port, "faults": [f.to_json() for f in self.faults]}

    @classmethod
    def from_json(cls, d: dict) -> "Link":
        return cls(d["source"], d["destination"], d["upstream"], int(d.get("port") or 0),
                   tuple(LinkFault.from_json(f) for f in d.get("faults", ())))


def link_name(source: str, destination: str) -> str:
    return f"{source}->{destination}"


#: An upstream read from a port file at each connect: ``status:<path>`` (its ``port``) or
#: ``status:<path>#<LISTENER>`` (that listener's port).  Brokers bind their own ports and publish them in that
#: file, so a link to a broker is created before the broker knows its port, and follows it across restarts.
STATUS_UPSTREAM = "status:"


def port_file_upstream(path: str, listener: str | None = None) -> str:
    return f"{STATUS_UPSTREAM}{path}" + (f"#{listener}" if listener else "")


def fixed_upstream_port(upstream: str) -> int | None:
    """The port of a ``host:port`` upstream; None for a port-file upstream."""
    if upstream.startswith(STATUS_UPSTREAM):
        return None
    return int(upstream.rpartition(":")[2])


def resolve_upstream(upstream: str) -> tuple[str, int]:
    """Where a link connects now; OSError while a port file names no port (the broker is not listening yet)."""
    if not upstream.startswith(STATUS_UPSTREAM):
        host, _, port = upstream.rpartition(":")
        return host, int(port)
    path, _, listener = upstream[len(STATUS_UPSTREAM):].partition("#")
    try:
        with open(path) as f:
            published = json.load(f)
        port = published["listeners"][listener] if listener else published["port"]
    except (ValueError, KeyError, TypeError) as e:
        raise OSError(f"no port published in {path}{'#' + listener if listener else ''}: {e}") from None
    if not isinstance(port, int) or port <= 0:
        raise OSError(f"no port published in {path}")
    return "127.0.0.1", port


def broker_node(broker_id: int) -> str:
    return f"broker:{broker_id}"


def zookeeper_node(n: int) -> str:
    return f"zookeeper:{n}"


def client_node(group: str) -> str:
    return f"client:{group}"


def zookeeper_servers(connect: str) -> tuple[list[str], str]:
    """``h1:p1,h2:p2/chroot`` as (``["h1:p1", "h2:p2"]``, ``"/chroot"``); the chroot is ``""`` when absent."""
    servers, slash, chroot = connect.partition("/")
    return [s.strip() for s in servers.split(",") if s.strip()], slash + chroot


def linked_zookeeper_connect(table: LinkTable, broker_id: int, connect: str) -> str:
    """A broker's ``zookeeper.connect`` through its links: one link per server of ``connect``, chroot kept."""
    servers, chroot = zookeeper_servers(connect)
    return ",".join(table.link(link_name(broker_node(broker_id), zookeeper_node(n))).address
                    for n in range(1, len(servers) + 1)) + chroot


def check_client_group(name: str) -> str:
    import re
    if not re.fullmatch(r"[a-z][a-z0-9_-]*", name) or name == "plaintext":
        raise LinkFaultError(f"bad client group name {name!r} (lower-case letters, digits, - and _)")
    return name


def node_broker_id(node: str) -> int | None:
    kind, _, rest = node.partition(":")
    return int(rest) if kind == "broker" and rest.isdigit() else None


@attrs.frozen
class LinkTable:
    """The link process's state file (``<data-dir>/links/links.json``): every link with its port and faults, the
    control port, the serving process and a generation bumped by every change."""
    links: tuple[Link, ...] = ()
    control_port: int = 0
    pid: int | None = None
    generation: int = 0

    def link(self, name: str) -> Link:
        for link in self.links:
            if link.name == name:
                return link
        raise LinkFaultError(f"no link {name!r} (links: {', '.join(li.name for li in self.links) or 'none'})")

    def nodes(self) -> set[str]:
        return {li.source for li in self.links} | {li.destination for li in self.links}

    def replace(self, changed: dict[str, Link]) -> "LinkTable":
        return attrs.evolve(self, links=tuple(changed.get(li.name, li) for li in self.links),
                            generation=self.generation + 1)

    def faulty(self) -> tuple[Link, ...]:
        return tuple(li for li in self.links if li.faults)

    def to_json(self) -> dict:
        return {"generation": self.generation, "control_port": self.control_port, "pid": self.pid,
                "links": [li.to_json() for li in self.links]}

    @classmethod
    def from_json(cls, d: dict) -> "LinkTable":
        return cls(tuple(Link.from_json(x) for x in d.get("links", ())), int(d.get("control_port") or 0),
                   d.get("pid"), int(d.get("generation", 0)))


# --- shapes -----------------------------------------------------------------------------------------------------
@attrs.frozen
class LinkFaultPlan:
    """Faults to add, by link name: what a shape or a one-link command computes, before it is applied."""
    faults: tuple[tuple[str, LinkFault], ...]
    description: str

    def link_names(self) -> list[str]:
        return sorted({name for name, _ in self.faults})


def _between(table: LinkTable, a: set[str], b: set[str]) -> list[str]:
    """Every link from a node of ``a`` to a node of ``b`` or back."""
    return [li.name for li in table.links
            if (li.source in a and li.destination in b) or (li.source in b and li.destination in a)]


def cut(table: LinkTable, a: set[str], b: set[str], kind: str = PARTITION,
        now: float = 0.0) -> list[tuple[str, LinkFault]]:
    if kind not in (PARTITION, BLACKHOLE):
        raise LinkFaultError(f"a cut is a partition or a blackhole, not {kind!r}")
    return [(name, LinkFault(kind, applied_at=now)) for name in _between(table, a, b)]


def one_way(table: LinkTable, sources: set[str], destinations: set[str],
            now: float = 0.0) -> list[tuple[str, LinkFault]]:
    """Bytes from ``sources`` never reach ``destinations``; the other way they still flow."""
    out = []
    for li in table.links:
        if li.source in sources and li.destination in destinations:
            out.append((li.name, LinkFault(BLACKHOLE, FORWARD, applied_at=now)))
        elif li.source in destinations and li.destination in sources:
            out.append((li.name, LinkFault(BLACKHOLE, BACKWARD, applied_at=now)))
    return out


def brokers_of(table: LinkTable) -> list[int]:
    return sorted({b for n in table.nodes() if (b := node_broker_id(n)) is not None})


def zookeepers_of(table: LinkTable) -> set[str]:
    return {n for n in table.nodes() if n.startswith("zookeeper:")}


def check_brokers(table: LinkTable, ids) -> list[int]:
    known = brokers_of(table)
    for i in ids:
        if i not in known:
            raise LinkFaultError(f"unknown broker {i} (brokers: {', '.join(map(str, known))})")
    return list(ids)


def resolve_nodes(table: LinkTable, text) -> set[str]:
    """``1,2`` / ``broker:1`` / ``brokers`` / ``zookeeper`` / ``zookeeper:2`` / ``client:producers`` (or a list
    of them) as node names of ``table``."""
    items = text.split(",") if isinstance(text, str) else [str(x) for x in text]
    nodes = table.nodes()
    out: set[str] = set()
    for item in (x.strip() for x in items):
        if not item:
            continue
        if item.isdigit():
            item = broker_node(int(item))
        if item == "brokers":
            out |= {broker_node(b) for b in brokers_of(table)}
        elif item == "zookeeper":
            out |= zookeepers_of(table)
        elif item in nodes:
            out.add(item)
        elif item.startswith("broker:"):
            raise LinkFaultError(f"unknown broker {item[7:]} (brokers: {', '.join(map(str, brokers_of(table)))})")
        else:
            raise LinkFaultError(f"unknown node {item!r} (nodes: {', '.join(sorted(nodes))})")
    if not out:
        raise LinkFaultError(f"no node in {text!r}")
    return out


def links_between(table: LinkTable, sources: set[str], destinations: set[str], both_ways: bool = False) -> list[str]:
    names = [li.name for li in table.links if (li.source in sources and li.destination in destinations)
             or (both_ways and li.source in destinations and li.destination in sources)]
    if not names:
        raise LinkFaultError(f"no link from {sorted(sources)} to {sorted(destinations)}")
    return names


def halves(ids: list[int]) -> tuple[list[int], list[int]]:
    """Jepsen's ``bisect``: the smaller half first."""
    k = len(ids) // 2
    return ids[:k], ids[k:]


def shape_faults(table: LinkTable, shape: str, *, node: int | None = None, leader: int | None = None,
                 followers=(), seed: int = 0, kind: str = PARTITION, now: float = 0.0) -> LinkFaultPlan:
    """A named shape as per-link faults (``kind``: ``partition`` resets, ``blackhole`` is silent).

    - ``isolate``: ``node`` cut from every other broker and from ZooKeeper (Jepsen's ``split-one``);
    - ``isolate-zookeeper``: ``node`` cut from ZooKeeper only;
    - ``isolate-leader``: ``leader`` cut from ``followers`` (the caller reads them from ZooKeeper);
    - ``halves`` / ``random-halves``: the brokers in two halves (``random-``: shuffled by ``seed``); ZooKeeper
      stays with the larger half, so the smaller half is cut from it too;
    - ``bridge``: two halves and one broker of the larger half that still reaches both (Jepsen's ``bridge``);
      ZooKeeper stays with the larger half.
    """
    brokers = brokers_of(table)
    bn = {b: broker_node(b) for b in brokers}
    zk = zookeepers_of(table)
    if shape not in SHAPES or shape == "one-way":
        raise LinkFaultError(f"unknown shape {shape!r} (one of {', '.join(s for s in SHAPES if s != 'one-way')})")
    if shape in ("isolate", "isolate-zookeeper"):
        if node is None:
            raise LinkFaultError(f"shape {shape} needs a broker (--node)")
        check_brokers(table, [node])
        others = {bn[b] for b in brokers if b != node} if shape == "isolate" else set()
        faults = cut(table, {bn[node]}, others | zk, kind, now)
        what = "every peer and ZooKeeper" if shape == "isolate" else "ZooKeeper"
        return LinkFaultPlan(tuple(faults), f"broker {node} isolated from {what}")
    if shape == "isolate-leader":
        if leader is None:
            raise LinkFaultError("shape isolate-leader needs a partition with a leader")
        check_brokers(table, [leader, *followers])
        faults = cut(table, {bn[leader]}, {bn[f] for f in followers if f != leader}, kind, now)
        return LinkFaultPlan(tuple(faults), f"leader {leader} isolated from followers {sorted(followers)}")
    order = list(brokers)
    if shape == "random-halves":
        random.Random(seed).shuffle(order)
    if len(order) < 2:
        raise LinkFaultError(f"shape {shape} needs at least 2 brokers")
    small, large = halves(order)
    if shape == "bridge":
        if len(order) < 3:
            raise LinkFaultError("shape bridge needs at least 3 brokers")
        bridge, rest = large[0], large[1:]
        faults = cut(table, {bn[b] for b in small}, {bn[b] for b in rest} | zk, kind, now)
        return LinkFaultPlan(tuple(faults), f"brokers {sorted(small)} | {sorted(rest)} + ZooKeeper, "
                                            f"bridged by broker {bridge}")
    faults = cut(table, {bn[b] for b in small}, {bn[b] for b in large} | zk, kind, now)
    return LinkFaultPlan(tuple(faults), f"brokers {sorted(small)} | {sorted(large)} + ZooKeeper")


def parse_rate(text: str) -> int:
    """``1MB/s``, ``512KB/s``, ``250000`` (bytes/s; K/M/G are 1000s, KiB/MiB/GiB 1024s)."""
    t = text.strip().replace(" ", "")
    if t.lower().endswith("/s"):
        t = t[:-2]
    units = {"gib": 1 << 30, "mib": 1 << 20, "kib": 1 << 10, "gb": 10 ** 9, "mb": 10 ** 6, "kb": 10 ** 3,
             "g": 10 ** 9, "m": 10 ** 6, "k": 10 ** 3, "b": 1}
    lower = t.lower()
    for suffix, mult in units.items():
        if lower.endswith(suffix):
            number, factor = t[:-len(suffix)], mult
            break
    else:
        number, factor = t, 1
    try:
        value = float(number)
    except ValueError:
        raise LinkFaultError(f"bad rate {text!r} (e.g. 1MB/s, 512KiB/s, 250000)") from None
    if not value > 0:
        raise LinkFaultError(f"bad rate {text!r}: must be > 0")
    return int(value * factor)
