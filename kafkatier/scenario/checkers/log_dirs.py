"""KIP-113 (docs/kip-113-jbod.md): after heal, every replica lives in exactly one log dir of its broker, no move is
left half done, and a replica that moved between dirs holds the same batches as the other replicas.

It reads the ``final-log-dirs`` entry the runner records after heal (and after ``file.delete.delay.ms``) for a
cluster with several log dirs per broker: per broker and dir, the partition directories there (``current``,
``future`` = ``<tp>.move``, ``delete``) and, for current ones, the batches below the high watermark as
``[base offset, last offset, crc]``.

- **replica-in-several-dirs**: one broker has a current directory of the same partition in two dirs;
- **replica-missing**: a broker assigned a replica has no current directory of it;
- **move-left-behind**: a ``.move`` (future) or ``.delete`` directory is still there after heal;
- **replica-diverged**: two replicas of a partition hold different batches (offsets or CRCs) over the offsets
  both hold, below the high watermark -- the witness names the replicas, with the moved one first.  Not on a
  compacted topic: each replica's cleaner rewrites its own batches (as in Kafka).
"""
from __future__ import annotations

from kafkatier.scenario.checkers.anomaly import Anomaly, final
from kafkatier.scenario.checkers.compaction import compacted_topics

NAME = "log_dirs"


def check(entries: list[dict]) -> list[Anomaly]:
    state = final(entries, "final-log-dirs")
    if not state:
        return []
    moved = {(f"{m['value']['topic']}/{m['value']['partition']}", m["value"]["broker"])
             for m in entries if m["f"] == "move-replica" and m["type"] in ("ok", "info")}
    several, left, current = [], [], {}   # current: (tp, broker) -> (dir, batches)
    for d in state["dirs"]:
        for name, part in d["partitions"].items():
            where = {"broker": d["broker"], "dir": d["dir"], "name": name}
            if part["kind"] != "current":
                left.append(where)
                continue
            key = (part["tp"], d["broker"])
            if key in current:
                several.append({**where, "also_in": current[key][0]})
            else:
                current[key] = (d["dir"], part["batches"])
    missing = [{"partition": tp, "broker": b} for tp, replicas in state["replicas"].items() for b in replicas
               if (tp, b) not in current]
    diverged = []
    compacted = compacted_topics(entries)
    for tp, replicas in state["replicas"].items():
        if tp.rsplit("/", 1)[0] in compacted:
            continue
        logs = sorted(((b, {x[0]: tuple(x) for x in current[(tp, b)][1]}) for b in replicas if (tp, b) in current),
                      key=lambda bl: (tp, bl[0]) not in moved)     # a moved replica first: it is compared to each
        for (b1, l1), (b2, l2) in ((logs[0], other) for other in logs[1:]):
            both = sorted(set(l1) & set(l2))
            bad = [o for o in both if l1[o] != l2[o]]
            lo1, lo2 = min(l1, default=None), min(l2, default=None)
            # Batches one replica lacks inside the range both hold are a divergence too.
            lo, hi = max(lo1 or 0, lo2 or 0), min(max(l1, default=-1), max(l2, default=-1))
            gaps = sorted({o for o in set(l1) ^ set(l2) if lo <= o <= hi})
            if bad or gaps:
                diverged.append({"partition": tp, "replicas": [b1, b2], "first_offset": (bad + gaps)[0],
                                 "batches": [l1.get((bad + gaps)[0]), l2.get((bad + gaps)[0])]})
    out = []
    if several:
        out.append(Anomaly(NAME, "replica-in-several-dirs", f"{len(several)} replicas have a current directory in "
                           f"more than one log dir, e.g. {several[0]['name']} on broker {several[0]['broker']}",
                           tuple(several)))
    if missing:
        out.append(Anomaly(NAME, "replica-missing", f"{len(missing)} assigned replicas have no current directory, "
                           f"e.g. {missing[0]['partition']} on broker {missing[0]['broker']}", tuple(missing)))
    if left:
        out.append(Anomaly(NAME, "move-left-behind", f"{len(left)} .move/.delete directories left after heal, e.g. "
                           f"{left[0]['name']} in {left[0]['dir']}", tuple(left)))
    if diverged:
        out.append(Anomaly(NAME, "replica-diverged", f"{len(diverged)} replica pairs hold different batches, e.g. "
                           f"{diverged[0]['partition']} on brokers {diverged[0]['replicas']} from offset "
                           f"{diverged[0]['first_offset']}", tuple(diverged)))
    return out
