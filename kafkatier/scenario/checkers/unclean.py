"""Unclean leader elections and the loss Kafka accepts with them.

An unclean election makes a replica outside the ISR leader: the records only the old ISR held are gone, and the
old leader truncates to the new leader's log when it returns.  Kafka accepts that loss when the operator allows
it (``unclean.leader.election.enable``, or ElectLeaders with election type UNCLEAN); a scenario says it allows it
with ``[expect] accept_unclean_loss = true`` (recorded in the history's ``cluster_up`` entry).

An unclean election of ``t/p`` is dated from whichever the history shows first: the observer seeing the
partition's leader become a broker outside the ISR of the state just before it (consecutive znode versions, so no
write was missed), or an ``unclean-election`` admin ``ok`` naming the partition as elected.

What the other checkers then accept -- reported with ``accepted`` set to the reason, never silently dropped:
- acknowledged sends on ``t/p`` (lost-write, unseen, acks=all lost) acknowledged before its last unclean
  election; sends acknowledged after it are judged as always;
- offsets of ``t/p`` seen with two values (inconsistent-offsets) when one was seen before that election;
- a consumer's offsets going back or skipping on ``t/p`` (nonmonotonic-poll, poll-skip) in a poll after its first
  unclean election (the client repositions after the log was truncated);
- values of ``t/p`` at two offsets (duplicate): a producer's retry after the truncation.

**unclean-election-not-allowed**: an unclean election in a scenario that does not accept its loss.  Replica
divergence (checker ``log_dirs``) is never accepted: Kafka's old leader truncates to the new leader's log.
"""
from __future__ import annotations

from kafkatier.scenario.checkers.anomaly import Anomaly, observations, witness

NAME = "unclean"


def allowed(entries: list[dict]) -> bool:
    for e in entries:
        if e["process"] == "nemesis" and e["f"] == "cluster_up":
            return bool((e.get("value") or {}).get("accept_unclean_loss"))
    return False


def elections(entries: list[dict]) -> dict[str, list[tuple[int, dict]]]:
    """``"t/p" -> [(time, witness entry)]`` of every unclean election, in time order."""
    out: dict[str, list[tuple[int, dict]]] = {}
    last: dict[tuple[str, int], dict] = {}
    for e in observations(entries, "partition"):
        v = e["value"]
        key = (v["topic"], v["partition"])
        prev = last.get(key)
        last[key] = e
        if prev is None:
            continue
        pv = prev["value"]
        if v["version"] == pv["version"] + 1 and v["leader"] >= 0 and v["leader"] != pv["leader"] \
                and v["leader"] not in pv["isr"]:
            out.setdefault(f"{v['topic']}/{v['partition']}", []).append((e["time"], e))
    for e in entries:
        if e["process"] == "admin" and e["f"] == "unclean-election" and e["type"] == "ok":
            for tp in e.get("elected") or ():
                seen = out.setdefault(tp, [])
                # The observer's entry is the better date; the admin answer only when the observer missed it.
                if not any(abs(t - e["time"]) < 30e9 and t <= e["time"] for t, _ in seen):
                    seen.append((e["time"], e))
    return {tp: sorted(v, key=lambda x: x[0]) for tp, v in out.items()}


class Acceptance:
    """What an accepted unclean election excuses (see the module docstring); empty when none happened or the
    scenario does not accept them."""

    def __init__(self, entries: list[dict]):
        self.elections = elections(entries) if allowed(entries) else {}

    def __bool__(self) -> bool:
        return bool(self.elections)

    def reason(self, tps) -> str:
        tps = sorted(set(tps) & set(self.elections))
        return ("Kafka accepts this loss: unclean leader election of " + ", ".join(
            f"{tp} at {self.elections[tp][-1][0] / 1e9:.2f}s" for tp in tps)
            + " ([expect] accept_unclean_loss = true)")

    def before_last(self, tp: str, time: int) -> bool:
        """An operation at ``time`` on ``tp`` happened before its last unclean election."""
        return tp in self.elections and time < self.elections[tp][-1][0]

    def after_first(self, tp: str, time: int) -> bool:
        return tp in self.elections and time > self.elections[tp][0][0]

    def split(self, items: list, tp_time) -> tuple[list, list]:
        """``(kept, accepted)``: ``tp_time(item) -> (tp, time)`` decides with :meth:`before_last`."""
        kept, accepted = [], []
        for item in items:
            (accepted if self.before_last(*tp_time(item)) else kept).append(item)
        return kept, accepted


def check(entries: list[dict]) -> list[Anomaly]:
    if allowed(entries):
        return []
    found = elections(entries)
    if not found:
        return []
    tp, [(t, e), *_] = next(iter(sorted(found.items())))
    return [Anomaly(NAME, "unclean-election-not-allowed",
                    f"{len(found)} partitions got a leader from outside their ISR, e.g. {tp} at {t / 1e9:.2f}s, in a "
                    f"scenario that does not accept unclean elections", (witness(e),))]
