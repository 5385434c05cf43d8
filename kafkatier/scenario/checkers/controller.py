"""Controller invariants (docs/controller.md#becoming-controller, docs/zookeeper.md#fenced-controller-writes) over
the observer's ``controller`` and ``partition`` observations.

- **controller-epoch-decreased**: ``/controller_epoch`` observed going down.
- **two-controllers-one-epoch**: one epoch held by two different ``/controller`` registrations.
- **epoch-not-increased**: a new ``/controller`` registration (new czxid) without a larger epoch.
- **write-from-fenced-epoch**: a partition ``state`` write that elected a leader (leader epoch bumped) stamped
  with a controller epoch older than the epoch already in ZooKeeper at that write's zxid -- a deposed
  controller's write got through.  The epoch in force at a zxid is the largest observed epoch whose
  ``/controller_epoch`` mzxid is below it (missed epochs only make the check weaker, never wrong).
"""
from __future__ import annotations

from bisect import bisect_left

from kafkatier.scenario.checkers.anomaly import Anomaly, observations, witness

NAME = "controller"


def check(entries: list[dict]) -> list[Anomaly]:
    out: list[Anomaly] = []
    obs = observations(entries, "controller")
    by_epoch: dict[int, dict[int, dict]] = {}
    prev = None
    decreased, not_increased = [], []
    for e in obs:
        v = e["value"]
        if prev is not None and v["epoch"] < prev["value"]["epoch"]:
            decreased.append((prev, e))
        if v["broker"] is not None:
            by_epoch.setdefault(v["epoch"], {}).setdefault(v["czxid"], e)
            if prev is not None and prev["value"]["broker"] is not None and v["czxid"] != prev["value"]["czxid"] \
                    and v["epoch"] <= prev["value"]["epoch"]:
                not_increased.append((prev, e))
        prev = e
    if decreased:
        a, b = decreased[0]
        out.append(Anomaly(NAME, "controller-epoch-decreased",
                           f"/controller_epoch went from {a['value']['epoch']} to {b['value']['epoch']}",
                           (witness(a), witness(b))))
    two = {ep: regs for ep, regs in by_epoch.items() if len(regs) > 1}
    if two:
        ep, regs = sorted(two.items())[0]
        out.append(Anomaly(NAME, "two-controllers-one-epoch",
                           f"epoch {ep} held by {len(regs)} /controller registrations "
                           f"(brokers {sorted({r['value']['broker'] for r in regs.values()})})",
                           tuple(witness(r) for r in regs.values())))
    if not_increased:
        a, b = not_increased[0]
        out.append(Anomaly(NAME, "epoch-not-increased",
                           f"controller {b['value']['broker']} registered without a larger epoch "
                           f"({a['value']['epoch']} -> {b['value']['epoch']})", (witness(a), witness(b))))
    out.extend(_fenced_writes(entries, obs))
    return out


def _fenced_writes(entries: list[dict], ctrl: list[dict]) -> list[Anomaly]:
    epochs = sorted({(e["value"]["epoch_mzxid"], e["value"]["epoch"]) for e in ctrl})
    zxids = [z for z, _ in epochs]
    last_epoch: dict[tuple, int] = {}
    bad = []
    for e in observations(entries, "partition"):
        v = e["value"]
        key = (v["topic"], v["partition"])
        before = last_epoch.get(key)
        last_epoch[key] = v["leader_epoch"]
        if before is None or v["leader_epoch"] <= before:
            continue
        i = bisect_left(zxids, v["mzxid"]) - 1
        if i < 0:
            continue
        in_force = max(ep for _, ep in epochs[: i + 1])
        if v["controller_epoch"] < in_force:
            bad.append((e, in_force))
    if not bad:
        return []
    e, in_force = bad[0]
    v = e["value"]
    return [Anomaly(NAME, "write-from-fenced-epoch",
                    f"{len(bad)} leader elections written by a fenced controller, e.g. {v['topic']}/{v['partition']} "
                    f"leader epoch {v['leader_epoch']} stamped controller epoch {v['controller_epoch']} while "
                    f"epoch {in_force} was in force", (witness(e),))]
