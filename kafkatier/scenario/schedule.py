"""The schedule of a run, derived from the scenario and one seed.

Every random choice of a run is drawn here, before the cluster starts, from ``random.Random(seed)``: times in
``[low, high]`` ranges, durations, nemesis faults and their times, and for each step a ``pick`` in [0, 1) that
chooses among the candidates of a ``random`` / ``non-controller`` / ``follower:`` target at run time
(``candidates[int(pick * len(candidates))]`` over the sorted candidate ids).  So one seed gives one schedule,
printed before the run starts, and replaying a seed replays the same choices; which broker a ``controller``
target means still depends on what the cluster does, and is recorded in the history.

Swarm testing (Groce et al.): with ``nemesis.swarm`` the seed also draws which faults of the menu are enabled
and their weights, so different seeds explore different fault mixes.
"""
from __future__ import annotations

import random

import attrs

from kafkatier.scenario import request_faults
from kafkatier.scenario import network_faults
from kafkatier.scenario.spec import ActionSpec, ScenarioSpec, Time

# Nemesis menu entries as schedule actions.
_MENU = {
    "kill": dict(action="kill", target="random"),
    "terminate": dict(action="terminate", target="random"),
    "restart": dict(action="restart", target="random", signal="KILL"),
    "pause": dict(action="pause", target="random"),
    "expire_session": dict(action="expire_session", target="random"),
    "zk_pause": dict(action="zk_pause"),
    "zk_restart": dict(action="zk_restart"),
    "kill_controller": dict(action="kill", target="controller"),
    "pause_controller": dict(action="pause", target="controller"),
    # Kafka's admin operations (admin_faults.py): a topic-less step means a partition the seed picks
    # (reassign) or every partition of the scenario's topics (the others).
    "controlled-shutdown": dict(action="controlled-shutdown", target="random"),
    "reassign": dict(action="reassign"),
    "cancel-reassignment": dict(action="cancel-reassignment"),
    "preferred-election": dict(action="preferred-election"),
    "unclean-election": dict(action="unclean-election"),
    "throttle": dict(action="throttle"),
    **request_faults.MENU,   # inject_errors, request_latency, clock_skew
}
_PAUSES = ("pause", "zk_pause", "pause_controller", "throttle") + request_faults.TIMED   # drawn a duration_s
_RESTARTS = ("restart", "zk_restart", "controlled-shutdown")        # drawn a down_s


@attrs.frozen
class Step:
    """One action of the schedule with every random choice made."""

    number: int
    action: ActionSpec
    at: float | None            # seconds after the workload starts; None for a `when` step
    pick: float                 # chooses among a random target's candidates
    duration_s: float
    down_s: float
    origin: str                 # "schedule[i]" or "nemesis"

    def describe(self) -> str:
        a = self.action
        when = f"at {self.at:6.2f}s" if self.at is not None else f"when {_condition(a)}" + (
            f" + {a.delay_s:g}s" if a.delay_s else "")
        parts = [a.action]
        if a.target is not None and a.action not in ("zk_pause", "zk_restart", "zk_kill_leader", "zk_restart_ensemble"):
            parts.append(f"target={a.target}")
        if a.action in ("kill", "restart", "rolling_restart", "kill_all") or a.signal != "KILL":
            parts.append(f"signal={a.signal}")
        if a.client is not None:
            parts.append(f"client={a.client}" + (f" phase={a.phase}" if a.phase != "any" else ""))
        if a.action == "reassign":
            parts.append(f"via={a.via}" + (f" replicas={','.join(map(str, a.replicas))}" if a.replicas else ""))
        if a.rate is not None:
            parts.append(f"rate={a.rate}B/s")
        if a.api is not None:
            parts.append(f"api={a.api}" + "".join(
                f" {k}={v}" for k, v in (("errors", ",".join(map(str, a.errors))), ("count", a.count),
                                         ("latency_ms", a.latency_ms), ("drop_response_nth", a.drop_response_nth),
                                         ("close_connection_nth", a.close_connection_nth)) if v))
        if a.offset_ms is not None or a.drift_ppm is not None:
            parts.append(f"offset_ms={a.offset_ms or 0:g} drift_ppm={a.drift_ppm or 0:g}")
        if a.clear:
            parts.append("clear")
        if a.link is not None:
            parts.append(a.link.describe())
        if self.duration_s:
            parts.append(f"for={self.duration_s:.2f}s")
        if self.down_s:
            parts.append(f"down={self.down_s:.2f}s")
        if a.topic:
            parts.append(f"topic={a.topic}" + (f"/{a.partition}" if a.action in _PARTITION_ACTIONS else ""))
        if a.set:
            parts.append("set=" + ",".join(f"{k}={v}" for k, v in a.set.items()))
        if a.offset is not None:
            parts.append(f"partition={a.partition} offset={a.offset}")
        return f"#{self.number:<2} {when}  {' '.join(parts)}  ({self.origin}, pick={self.pick:.3f})"


_PARTITION_ACTIONS = ("reassign", "cancel-reassignment", "preferred-election", "unclean-election")


def _condition(a: ActionSpec) -> str:
    c = a.when
    parts = [f"{k}={v}" for k, v in attrs.asdict(c).items() if v is not None and k != "timeout_s"]
    return "{" + ", ".join(parts) + f"}} within {c.timeout_s:g}s"


@attrs.frozen
class Schedule:
    seed: int
    steps: tuple[Step, ...]
    swarm_weights: dict[str, float] | None = None

    def in_time_order(self) -> list[Step]:
        """The timed steps by time, then the steps that wait for a condition (their time is not known)."""
        return sorted(self.steps, key=lambda s: (s.at is None, s.at or 0.0, s.number))

    def describe(self) -> str:
        lines = [f"seed {self.seed}: {len(self.steps)} steps"]
        if self.swarm_weights is not None:
            lines.append("swarm weights: " + ", ".join(f"{k}={v:.2f}" for k, v in self.swarm_weights.items()))
        lines += ["  " + s.describe() for s in self.in_time_order()]
        return "\n".join(lines)

    def digest(self) -> str:
        """A short digest of the drawn schedule: two runs (or sweep rows) with the same digest drew the same
        steps."""
        import hashlib
        text = "\n".join(s.describe() for s in self.steps) + f"\n{self.swarm_weights}"
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def to_json(self) -> list[dict]:
        return [{"number": s.number, "action": s.action.action, "at": s.at, "pick": s.pick, "origin": s.origin,
                 "target": s.action.target, "duration_s": s.duration_s, "down_s": s.down_s,
                 "describe": s.describe()} for s in self.steps]


def _draw(rng: random.Random, t: Time | None) -> float:
    if t is None:
        return 0.0
    if isinstance(t, tuple):
        return round(rng.uniform(t[0], t[1]), 3)
    return float(t)


def derive(spec: ScenarioSpec, seed: int) -> Schedule:
    rng = random.Random(seed)
    steps: list[tuple[float, int, Step]] = []
    for i, a in enumerate(spec.schedule):
        at = None if a.at is None else _draw(rng, a.at)
        steps.append((at if at is not None else -1.0, i, Step(
            number=0, action=a, at=at, pick=round(rng.random(), 6), duration_s=_draw(rng, a.duration_s),
            down_s=_draw(rng, a.down_s), origin=f"schedule[{i}]")))
    weights = None
    n = spec.nemesis
    if n is not None:
        menu = list(n.menu)
        if n.swarm:
            # Each fault kind is enabled with probability 1/2 (at least one), with a random weight.
            enabled = [m for m in menu if rng.random() < 0.5] or [rng.choice(menu)]
            weights = {m: round(rng.uniform(0.1, 1.0), 3) for m in enabled}
        kinds = list(weights) if weights else menu
        kind_weights = list(weights.values()) if weights else [1.0] * len(menu)
        stop = n.stop_s if n.stop_s is not None else spec.duration_s * 0.8
        t = n.start_s + _draw(rng, n.interval_s) * 0.5
        k = 0
        while t < stop:
            kind = rng.choices(kinds, kind_weights)[0]
            if kind in network_faults.NEMESIS_MENU:   # link faults: their own fields and durations
                a = ActionSpec(at=t, **network_faults.menu_action(kind))
                lo, hi = network_faults.NEMESIS_DURATIONS[kind]
                steps.append((t, 1000 + k, Step(number=0, action=a, at=round(t, 3), pick=round(rng.random(), 6),
                                                duration_s=round(rng.uniform(lo, hi), 3), down_s=0.0,
                                                origin="nemesis")))
                t += _draw(rng, n.interval_s)
                k += 1
                continue
            a = ActionSpec(at=t, **_MENU[kind])
            duration = round(rng.uniform(0.5, 2.0), 3) if kind in _PAUSES else 0.0
            down = round(rng.uniform(0.2, 1.5), 3) if kind in _RESTARTS else 0.0
            if kind == "reassign":
                via = n.via if n.via != "mixed" else rng.choice(("api", "znode"))
                a = attrs.evolve(a, via=via)
            elif kind == "throttle":
                a = attrs.evolve(a, rate=int(_draw(rng, n.throttle_rate)))
                duration = round(duration * 2, 3)   # 1-4 s: long enough to slow a catching-up replica
            steps.append((t, 1000 + k, Step(number=0, action=a, at=round(t, 3), pick=round(rng.random(), 6),
                                            duration_s=duration, down_s=down, origin="nemesis")))
            t += _draw(rng, n.interval_s)
            k += 1
    steps.sort(key=lambda x: (x[0], x[1]))
    numbered = tuple(attrs.evolve(s, number=i + 1) for i, (_, _, s) in enumerate(steps))
    return Schedule(seed=seed, steps=numbered, swarm_weights=weights)
