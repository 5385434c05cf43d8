"""Exactly-once of a consume-transform-produce job (``ctp`` workloads, ``scenario/ctp_workload.py``): what
read_committed readers of its output saw, against its input and its group's committed offsets.

Every output record is the transform of one input record, tagged with that record's partition and offset
(``ctp_worker.transform``), so each is traced back to exactly one input position.  Reads are the final
(read_committed) read after heal and the polls of read_committed consumers of the output topic.

- **duplicate-output**: one input record's transform at two output positions (exactly-once broken);
- **lost-input**: an input record below an offset the group was seen to commit (an OffsetFetch sample, the
  offsets of a committed transaction, or the drained end) whose transform is nowhere in the output: the committed
  offsets ran ahead of the committed output;
- **phantom-output**: an output record that is the transform of no input record (a wrong value, or a position
  the final read of the input holds something else at);
- **aborted-output-read**: a read of an output record written by a transaction that was aborted (an abortable
  error, or the instance died before it asked to commit);
- **precommitted-output-read**: a poll returned an output record before its transaction was asked to commit;
- **offset-regressed**: the group's committed offset of a partition went back (OffsetFetch with
  ``require_stable`` samples, in time order);
- **not-drained**: after heal the job did not get its committed offsets to the end of its input within the heal
  bound (it stopped making progress).

Kafka writes a transaction's markers to the output partitions and to ``__consumer_offsets`` independently, so a
committed offset may become visible a moment before the output it covers: the check is on what was committed,
not on the order in which it became visible.
"""
from __future__ import annotations

from collections import defaultdict

from kafkatier.scenario.checkers.anomaly import Anomaly, final, witness
from kafkatier.scenario.checkers.kafka_clients import read_to
from kafkatier.scenario.ctp_worker import source_of, transform

NAME = "ctp"


def _jobs(entries: list[dict]) -> dict[str, dict]:
    """``ctp-N`` -> its workload spec (the ``start`` entry)."""
    return {e["process"]: e["value"] for e in entries
            if e["f"] == "start" and e["process"].startswith("ctp-") and (e.get("value") or {}).get("type") == "ctp"}


def check(entries: list[dict]) -> list[Anomaly]:
    jobs = _jobs(entries)
    out: list[Anomaly] = []
    for name, spec in jobs.items():
        out += _check_job(entries, name, spec)
    return out


def _instance_of(process: str, job: str) -> bool:
    return process == job or process.startswith(job + "-")


def _check_job(entries: list[dict], job: str, spec: dict) -> list[Anomaly]:
    source, sink = spec["topic"], spec["output_topic"]
    read = final(entries, "final-read")
    txns = [e for e in entries if e["f"] == "ctp-txn" and e["type"] != "invoke" and _instance_of(e["process"], job)]
    written: dict[tuple[int, int], dict] = {}        # output position -> the ctp-txn completion that wrote it
    for t in txns:
        for q, oo, _ in t.get("writes") or ():
            if oo is not None and oo >= 0:
                written[(q, oo)] = t
    readers = {e["process"] for e in entries if e["f"] == "start" and e["process"].startswith("consumer")
               and (e.get("value") or {}).get("topic") == sink
               and (e.get("value") or {}).get("isolation_level", "read_committed") == "read_committed"}
    # Every read of the output: (partition, offset, value, entry)
    reads: list[tuple[int, int, str, dict]] = []
    final_entry = {"process": "final", "f": "final-read"}
    for tp, part in read.items():
        topic, _, p = tp.rpartition("/")
        if topic == sink:
            reads += [(int(p), o, v, final_entry) for o, v in part["records"]]
    for e in entries:
        if e["f"] == "poll" and e["type"] == "ok" and e["process"] in readers and e.get("topic") == sink:
            for p, recs in e["value"].items():
                reads += [(int(p), o, v, e) for o, v in recs]
    inputs: dict[tuple[int, int], str] = {}
    input_span: dict[int, tuple[int, int]] = {}
    for tp, part in read.items():
        topic, _, p = tp.rpartition("/")
        if topic == source:
            inputs.update({(int(p), o): v for o, v in part["records"]})
            input_span[int(p)] = (part["log_start"], read_to(part))
    out: list[Anomaly] = []
    out += _duplicates(reads, job)
    out += _lost(entries, job, txns, reads, inputs, input_span)
    out += _phantoms(reads, inputs, input_span, job)
    out += _aborted_and_precommitted(reads, written, job)
    out += _regressions(entries, job)
    for d in (e["value"] for e in entries if e["process"] == "final" and e["f"] == "ctp-drain"):
        if d.get("process") == job and not d.get("drained"):
            out.append(Anomaly(NAME, "not-drained", f"{job}: committed offsets {d.get('committed')} did not reach "
                               f"the input's end {d.get('ends')} after heal ({d.get('reason') or 'timed out'})",
                               (d,)))
    return out


def _duplicates(reads, job: str) -> list[Anomaly]:
    where: dict[tuple[int, int], set[tuple[int, int]]] = defaultdict(set)
    for q, oo, v, _ in reads:
        src = source_of(v)
        if src is not None:
            where[src].add((q, oo))
    dups = sorted((src, sorted(ws)) for src, ws in where.items() if len(ws) > 1)
    if not dups:
        return []
    (p, o), ws = dups[0]
    return [Anomaly(NAME, "duplicate-output", f"{job}: {len(dups)} input records transformed into the output more "
                    f"than once (exactly-once broken), e.g. input {p}/{o} at output positions {ws[:4]}",
                    ({"input": [p, o], "output": ws[:10]},))]


def _committed_marks(entries: list[dict], job: str, txns: list[dict]) -> dict[int, tuple[int, dict]]:
    """Per input partition the highest offset the group was seen to commit, and the entry that shows it."""
    best: dict[int, tuple[int, dict]] = {}

    def mark(p, o, e) -> None:
        p, o = int(p), int(o)
        if o >= 0 and (p not in best or o > best[p][0]):
            best[p] = (o, e)
    for e in entries:
        if e["f"] == "ctp-offsets" and e["type"] == "ok" and e["process"] == job:
            for p, o in e["value"].items():
                mark(p, o, e)
        elif e["process"] == "final" and e["f"] == "ctp-drain" and (e.get("value") or {}).get("process") == job:
            for p, o in (e["value"].get("committed") or {}).items():
                mark(p, o, e)
    for t in txns:
        if t["type"] == "ok":
            for p, o in (t.get("offsets") or {}).items():
                mark(p, o, t)
    return best


def _lost(entries, job, txns, reads, inputs, input_span) -> list[Anomaly]:
    transformed = {source_of(v) for _, _, v, _ in reads}
    bad = []
    for p, (mark, e) in sorted(_committed_marks(entries, job, txns).items()):
        lo, hi = input_span.get(p, (0, 0))
        for o in range(lo, min(mark, hi)):
            if (p, o) in inputs and (p, o) not in transformed:
                bad.append((p, o, mark, e))
    if not bad:
        return []
    p, o, mark, e = bad[0]
    return [Anomaly(NAME, "lost-input", f"{job}: {len(bad)} input records below committed offsets have no output, "
                    f"e.g. input {p}/{o} {inputs[(p, o)]!r} (offset {mark} committed): the offsets ran ahead of the "
                    f"committed output", (witness(e),))]


def _phantoms(reads, inputs, input_span, job: str) -> list[Anomaly]:
    bad = []
    for q, oo, v, e in reads:
        src = source_of(v)
        if src is None:
            bad.append((q, oo, v, e, "not a transform"))
            continue
        p, o = src
        lo, hi = input_span.get(p, (0, 0))
        if lo <= o < hi and (src not in inputs or transform(inputs[src], p, o) != v):
            bad.append((q, oo, v, e, f"input {p}/{o} is {inputs.get(src)!r}"))
    if not bad:
        return []
    q, oo, v, e, why = bad[0]
    return [Anomaly(NAME, "phantom-output", f"{job}: {len(bad)} output records are the transform of no input record, "
                    f"e.g. {v!r} at output {q}/{oo} ({why})", (witness(e),))]


def _aborted_and_precommitted(reads, written, job: str) -> list[Anomaly]:
    aborted, early = [], []
    for q, oo, v, e in reads:
        t = written.get((q, oo))
        if t is None:
            continue
        if t["type"] == "fail":
            aborted.append((q, oo, v, e, t))
        elif e["process"] != "final" and (t.get("end_invoked") is None or e["time"] < t["end_invoked"]):
            early.append((q, oo, v, e, t))
    out = []
    if aborted:
        q, oo, v, e, t = aborted[0]
        out.append(Anomaly(NAME, "aborted-output-read", f"{job}: {len(aborted)} reads of output records of aborted "
                           f"transactions, e.g. {v!r} at output {q}/{oo}", (witness(e), witness(t))))
    if early:
        q, oo, v, e, t = early[0]
        out.append(Anomaly(NAME, "precommitted-output-read", f"{job}: {len(early)} reads of output records before "
                           f"their transaction was asked to commit, e.g. {v!r} at output {q}/{oo}",
                           (witness(e), witness(t))))
    return out


def _regressions(entries: list[dict], job: str) -> list[Anomaly]:
    last: dict[str, tuple[int, dict]] = {}
    bad = []
    for e in entries:
        if e["f"] != "ctp-offsets" or e["type"] != "ok" or e["process"] != job:
            continue
        for p, o in e["value"].items():
            if p in last and o < last[p][0]:
                bad.append((p, last[p], o, e))
            last[p] = (o, e)
    if not bad:
        return []
    p, (before, e0), after, e = bad[0]
    return [Anomaly(NAME, "offset-regressed", f"{job}: the group's committed offset went back {len(bad)} times, e.g. "
                    f"input partition {p} from {before} to {after}", (witness(e0), witness(e)))]
