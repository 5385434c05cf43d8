"""Jepsen's transactional Kafka anomalies over the ``txn`` operations of ``txn_producer`` workloads, the polls of
read_committed consumers and the (read_committed) final read after heal.

A transaction is **committed** (``ok``: commit_transaction returned), **aborted** (``fail``: the decision was to
abort, or commit was never asked -- only an abort can end it -- or a zombie fenced before it asked) or
**unknown** (``info``: commit asked, outcome not confirmed; either outcome is allowed, but all or nothing).
Its writes are ``[partition, offset, value]`` from the delivery reports (offset -1 when not delivered).

- **aborted-read** (G1a): a read_committed poll or the final read returns a value of an aborted transaction;
- **precommitted-read**: a read_committed poll returned a value before its transaction was asked to commit
  (the poll completed before ``end_invoked``);
- **read-past-lso**: a read_committed poll returned offset *o* of a partition while a committed transaction with
  a write at an offset below *o* there had not yet been asked to commit (so it was open and the last stable
  offset was at or below that write): read_committed never reads past the LSO;
- **torn-transaction**: a read session (a consumer between two seeks, or the final read) saw some of a
  transaction's writes but missed others in a partition whose offsets it read across (from at or below the
  write's offset to at or past it);
- **lost-write**: a committed transaction's write missing from the final read (between the final log start
  offset and where the read got to), and seen by no poll;
- **duplicate**: one value at two offsets (polls and final read): exactly-once broken;
- **zombie-committed**: a producer instance fenced by a new one with its transactional id committed anyway.
"""
from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict

import attrs

from kafkatier.scenario.checkers.anomaly import Anomaly, final, witness
from kafkatier.scenario.checkers.kafka_clients import read_to

NAME = "transactions"
COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"
_STATUS = {"ok": COMMITTED, "fail": ABORTED, "info": UNKNOWN}


@attrs.frozen
class Txn:
    process: str
    txn: str
    status: str
    topic: str
    writes: tuple[tuple[int, int, str], ...]     # (partition, offset, value); offset -1: not delivered
    end_invoked: int | None                       # history time EndTxn was asked (None: never)
    entry: dict = attrs.field(eq=False, repr=False)

    def offsets(self, partition: int) -> list[int]:
        return [o for p, o, _ in self.writes if p == partition and o >= 0]


def transactions(entries: list[dict]) -> list[Txn]:
    out = []
    for e in entries:
        if e["f"] != "txn" or e["type"] == "invoke":
            continue
        status = _STATUS[e["type"]]
        if e.get("zombie") and e["type"] != "ok":
            status = ABORTED   # fenced before it asked to commit: the coordinator could only abort it
        writes = tuple((p, o, v) for p, o, v in e.get("writes", ()))
        out.append(Txn(e["process"], e["value"]["txn"], status, e.get("topic", ""), writes, e.get("end_invoked"),
                       e))
    return out


@attrs.frozen
class Read:
    """One record a reader returned."""
    tp: str
    offset: int
    value: str | None
    entry: dict = attrs.field(eq=False, repr=False)


def _sessions(entries: list[dict]) -> list[tuple[bool, list[Read]]]:
    """Read sessions: ``(from_beginning, reads)`` per consumer between seeks, and the final read (whose reads
    end with a valueless :class:`Read` at ``read_to - 1`` per partition: it read across everything below)."""
    out: list[tuple[bool, list[Read]]] = []
    current: dict[str, tuple[bool, list[Read]]] = {}
    for e in entries:
        if e["process"].startswith("consumer") and e["f"] == "seek":
            current[e["process"]] = (e.get("value") == "beginning", [])
            out.append(current[e["process"]])
        elif e["f"] == "poll" and e["type"] == "ok":
            session = current.get(e["process"])
            if session is None:
                session = current[e["process"]] = (False, [])
                out.append(session)
            for p, recs in e["value"].items():
                session[1].extend(Read(f"{e['topic']}/{p}", o, v, e) for o, v in recs)
    final_entry = {"process": "final", "f": "final-read", "index": -1}
    parts = final(entries, "final-read")
    reads = [Read(tp, o, v, final_entry) for tp, part in parts.items() for o, v in part["records"]]
    reads += [Read(tp, read_to(part) - 1, None, final_entry) for tp, part in parts.items()
              if read_to(part) > part["log_start"]]
    if reads:
        out.append((True, reads))
    return out


def check(entries: list[dict]) -> list[Anomaly]:
    txns = transactions(entries)
    if not txns:
        return []
    by_value: dict[str, Txn] = {}
    for t in txns:
        for _, _, v in t.writes:
            by_value[v] = t
    sessions = _sessions(entries)
    out: list[Anomaly] = []
    out += _aborted_reads(sessions, by_value)
    out += _precommitted(sessions, by_value)
    out += _past_lso(entries, txns)
    out += _torn(sessions, txns, by_value)
    out += _lost(entries, txns)
    out += _duplicates(sessions, by_value)
    zombies = [t for t in txns if t.entry.get("zombie") and t.status == COMMITTED]
    if zombies:
        out.append(Anomaly(NAME, "zombie-committed", f"{len(zombies)} transactions of fenced producer instances "
                           f"committed, e.g. {zombies[0].txn}", tuple(witness(t.entry) for t in zombies[:4])))
    return out


def _aborted_reads(sessions, by_value: dict[str, Txn]) -> list[Anomaly]:
    bad = [(r, by_value[r.value]) for _, reads in sessions for r in reads
           if r.value in by_value and by_value[r.value].status == ABORTED]
    if not bad:
        return []
    r, t = bad[0]
    return [Anomaly(NAME, "aborted-read", f"{len(bad)} reads of values of aborted transactions (G1a), e.g. "
                    f"{r.value!r} at {r.tp} offset {r.offset}",
                    (witness(r.entry), witness(t.entry)))]


def _precommitted(sessions, by_value: dict[str, Txn]) -> list[Anomaly]:
    bad = []
    for _, reads in sessions:
        for r in reads:
            t = by_value.get(r.value)
            if t is None or t.status == ABORTED or r.entry["process"] == "final":
                continue
            if t.end_invoked is None or r.entry["time"] < t.end_invoked:
                bad.append((r, t))
    if not bad:
        return []
    r, t = bad[0]
    return [Anomaly(NAME, "precommitted-read", f"{len(bad)} reads of values before their transaction was asked "
                    f"to commit, e.g. {r.value!r} at {r.tp} offset {r.offset}", (witness(r.entry), witness(t.entry)))]


def _past_lso(entries: list[dict], txns: list[Txn]) -> list[Anomaly]:
    """Per partition, the transactions' writes by offset with the running maximum of when their transaction was
    asked to end; a poll at time *t* that returned offset *o* is past the LSO if some write below *o* belongs to a
    transaction asked to end after *t*.  Only committed transactions count: they were certainly open until
    their commit was asked, while an aborted or unknown one may have been aborted earlier than the history shows
    (by a fence or its timeout)."""
    per_tp: dict[str, list[tuple[int, int, Txn]]] = defaultdict(list)
    for t in txns:
        if t.end_invoked is None or t.status != COMMITTED:
            continue
        for p, o, _ in t.writes:
            if o >= 0:
                per_tp[f"{t.topic}/{p}"].append((o, t.end_invoked, t))
    index = {}
    for tp, ws in per_tp.items():
        ws.sort(key=lambda x: x[0])
        running, best = [], None
        for o, end, t in ws:
            if best is None or end > best[0]:
                best = (end, t)
            running.append(best)
        index[tp] = ([o for o, _, _ in ws], running)
    bad = []
    for e in entries:
        if e["f"] != "poll" or e["type"] != "ok" or not e["process"].startswith("consumer"):
            continue
        for p, recs in e["value"].items():
            tp = f"{e['topic']}/{p}"
            if tp not in index or not recs:
                continue
            offsets, running = index[tp]
            top = max(o for o, _ in recs)
            i = bisect_left(offsets, top)   # writes strictly below the highest offset returned
            if i and running[i - 1][0] > e["time"]:
                bad.append((e, tp, top, running[i - 1][1]))
    if not bad:
        return []
    e, tp, top, t = bad[0]
    return [Anomaly(NAME, "read-past-lso", f"{len(bad)} read_committed polls returned records past an open "
                    f"transaction, e.g. {tp} offset {top} while {t.txn} was still open",
                    (witness(e), witness(t.entry)))]


def _torn(sessions, txns: list[Txn], by_value: dict[str, Txn]) -> list[Anomaly]:
    bad = []
    for from_beginning, reads in sessions:
        seen = {r.value for r in reads}
        span: dict[str, list[int]] = {}
        for r in reads:
            lo_hi = span.setdefault(r.tp, [r.offset, r.offset])
            lo_hi[0], lo_hi[1] = min(lo_hi[0], r.offset), max(lo_hi[1], r.offset)
        touched = {by_value[v].txn: by_value[v] for v in seen if v in by_value}
        for t in touched.values():
            if t.status == ABORTED:
                continue   # reported as aborted-read
            for p, o, v in t.writes:
                tp = f"{t.topic}/{p}"
                if o < 0 or v in seen or tp not in span:
                    continue
                lo, hi = span[tp]
                if (from_beginning or lo <= o) and hi >= o:
                    bad.append((t, v, tp, o, reads[0].entry))
                    break
    if not bad:
        return []
    t, v, tp, o, e = bad[0]
    return [Anomaly(NAME, "torn-transaction", f"{len(bad)} read sessions saw part of a transaction only, e.g. "
                    f"{t.txn} ({t.status}) without {v!r} at {tp} offset {o}, which the session read across",
                    (witness(t.entry), witness(e)))]


def _lost(entries: list[dict], txns: list[Txn]) -> list[Anomaly]:
    read = final(entries, "final-read")
    if not read:
        return []
    in_final = {v for part in read.values() for _, v in part["records"]}
    polled = {v for e in entries if e["f"] == "poll" and e["type"] == "ok"
              for recs in e["value"].values() for _, v in recs}
    bad = []
    for t in txns:
        if t.status != COMMITTED:
            continue
        for p, o, v in t.writes:
            part = read.get(f"{t.topic}/{p}")
            if part is None or v in in_final or v in polled:
                continue
            if o < 0 or part["log_start"] <= o < read_to(part):
                bad.append((t, p, o, v))
    if not bad:
        return []
    t, p, o, v = bad[0]
    return [Anomaly(NAME, "lost-write", f"{len(bad)} writes of committed transactions never read, e.g. {v!r} "
                    f"({t.topic}/{p} offset {o})", tuple(witness(x[0].entry) for x in bad[:4]))]


def _duplicates(sessions, by_value: dict[str, Txn]) -> list[Anomaly]:
    where: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for _, reads in sessions:
        for r in reads:
            if r.value in by_value:
                where[r.value].add((r.tp, r.offset))
    dups = sorted((v, sorted(ws)) for v, ws in where.items() if len(ws) > 1)
    if not dups:
        return []
    return [Anomaly(NAME, "duplicate", f"{len(dups)} values at several offsets (exactly-once broken), e.g. "
                    f"{dups[0][0]!r} at {dups[0][1][:4]}", ({"value": dups[0][0], "offsets": dups[0][1][:10]},))]
