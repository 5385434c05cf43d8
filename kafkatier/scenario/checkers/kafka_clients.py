"""Jepsen's Kafka anomalies (jepsen.tests.kafka), over what our clients saw and the final read after heal.

Per partition ``t/p``:
- **lost-write**: an acknowledged send at offset *o* with ``log_start <= o < high_watermark`` after heal whose
  value is not at *o* in the final read (records below the final log start offset were deleted on purpose --
  DeleteRecords, retention, KIP-950 delete -- and are judged by the KIP-107 and KIP-950 checkers; on a compacted
  topic the cleaner removes records on purpose: the ``compaction`` checker judges those);
- **unseen**: an acknowledged send at an offset at or above the final high watermark (never readable again);
- **inconsistent-offsets**: one offset seen with two values (acks, polls, final read);
- **duplicate**: one value of an idempotent producer at two offsets.  Only while the idempotence guarantee
  holds: a non-idempotent producer may duplicate on retry, and so may an idempotent one once a send of it
  timed out in flight (librdkafka then bumps the producer epoch and re-sequences what is still in flight, so
  the broker can no longer recognise a retry -- documented client behaviour, Kafka's too);
- **nonmonotonic-poll**: within one consumer read session, a partition's offsets not strictly increasing;
- **poll-skip**: within a session, consecutive polled offsets *a* < *b* with a record between them that is
  still in the final read (not on a compacted topic: replicas clean independently, so a leader may have
  removed a record the final leader still holds);
- **unreadable-after-heal**: the final read could not get from the log start offset to the high watermark
  (within its bound) -- records the broker counts as present cannot be consumed.
"""
from __future__ import annotations

from collections import defaultdict

from kafkatier.scenario.checkers import compaction, unclean
from kafkatier.scenario.checkers.anomaly import Anomaly, final, witness

NAME = "kafka_clients"


def acknowledged(entries: list[dict]) -> dict[str, list[dict]]:
    """``"t/p" -> [ok send entries]``."""
    out: dict[str, list[dict]] = defaultdict(list)
    for e in entries:
        if e["f"] == "send" and e["type"] == "ok":
            out[f"{e['topic']}/{e['partition']}"].append(e)
    return out


def lost(entries: list[dict], acks: str | None = None) -> tuple[list[dict], list[dict]]:
    """``(lost, unseen)`` acknowledged sends (optionally only those sent with ``acks``)."""
    read = final(entries, "final-read")
    compacted = compaction.compacted_topics(entries)
    lost_, unseen = [], []
    for tp, oks in acknowledged(entries).items():
        part = read.get(tp)
        if part is None:
            continue
        records = {o: v for o, v in part["records"]}
        # A final read that stopped early is reported by the runner (final-read-incomplete); judge only what it
        # covered, so one unreadable offset is not counted as every later record lost.
        read_end = read_to(part)
        for e in oks:
            if acks is not None and e.get("acks") != acks:
                continue
            o, v = e["offset"], e["value"][1]
            if o is None or o < 0:
                continue   # acknowledged without an offset (a duplicate the broker recognised): nothing to place
            if o >= part["high_watermark"]:
                unseen.append(e)
            elif part["log_start"] <= o < read_end and records.get(o) != v and \
                    (e["topic"] not in compacted or o in records):
                lost_.append(e)
    return lost_, unseen


def read_to(part: dict) -> int:
    """Where a partition's final read got to: its consumer's position (past the control batches and aborted
    records a read_committed read skips), or -- histories without it -- after the last record read."""
    last = part["records"][-1][0] + 1 if part["records"] else part["log_start"]
    return max(last, part.get("read_to", last))


def _idempotent_processes(entries: list[dict]) -> set[str]:
    """Producers with idempotence on and no send that timed out in flight (see the module docstring)."""
    timed_out = {e["process"] for e in entries if e["f"] == "send" and e["type"] == "info"}
    return {e["process"] for e in entries if e["f"] == "start" and e["process"].startswith("producer")
            and e["value"].get("idempotence") and e["process"] not in timed_out}


def send_tp_time(e: dict) -> tuple[str, int]:
    return f"{e['topic']}/{e['partition']}", e["time"]


def _add(out: list[Anomaly], acc: unclean.Acceptance, type_: str, items: list, accepted: list, message,
         witnesses, tps) -> None:
    """One anomaly for ``items`` and one, marked accepted (see ``unclean``), for ``accepted``."""
    if items:
        out.append(Anomaly(NAME, type_, message(items), witnesses(items)))
    if accepted:
        out.append(Anomaly(NAME, type_, message(accepted), witnesses(accepted), accepted=acc.reason(tps(accepted))))


def check(entries: list[dict]) -> list[Anomaly]:
    out: list[Anomaly] = []
    acc = unclean.Acceptance(entries)
    lost_, unseen = lost(entries)
    _add(out, acc, "lost-write", *acc.split(lost_, send_tp_time),
         lambda xs: f"{len(xs)} acknowledged records missing from the log after heal",
         lambda xs: tuple(witness(e) for e in xs[:10]), lambda xs: [send_tp_time(e)[0] for e in xs])
    _add(out, acc, "unseen", *acc.split(unseen, send_tp_time),
         lambda xs: f"{len(xs)} acknowledged records at or above the final high watermark",
         lambda xs: tuple(witness(e) for e in xs[:10]), lambda xs: [send_tp_time(e)[0] for e in xs])
    # offset -> value, value -> offsets, from every source
    seen: dict[tuple[str, int], dict[str, dict]] = defaultdict(dict)
    where: dict[tuple[str, str], set[int]] = defaultdict(set)

    def saw(tp: str, o: int, v: str, e: dict) -> None:
        seen[(tp, o)].setdefault(v, e)
        where[(tp.split("/")[0], v)].add((tp, o))
    for tp, oks in acknowledged(entries).items():
        for e in oks:
            if e["offset"] is not None and e["offset"] >= 0:
                saw(tp, e["offset"], e["value"][1], e)
    for e in entries:
        if e["f"] == "poll" and e["type"] == "ok":
            for p, recs in e["value"].items():
                for o, v in recs:
                    saw(f"{e['topic']}/{p}", o, v, e)
    final_entry = {"process": "final", "f": "final-read", "index": -1}
    for tp, part in final(entries, "final-read").items():
        for o, v in part["records"]:
            saw(tp, o, v, final_entry)
    inconsistent = [(k, vs) for k, vs in seen.items() if len(vs) > 1]
    # Accepted: one of the values was seen before the partition's last unclean election.
    _add(out, acc, "inconsistent-offsets", *acc.split(
        inconsistent, lambda x: (x[0][0], min(e.get("time", 1 << 62) for e in x[1].values()))),
        lambda xs: f"{len(xs)} offsets seen with different values, e.g. {xs[0][0][0]} offset {xs[0][0][1]}: "
                   f"{sorted(xs[0][1])[:3]}",
        lambda xs: tuple(witness(e) for e in list(xs[0][1].values())[:4]), lambda xs: [x[0][0] for x in xs])
    idempotent = _idempotent_processes(entries)
    dups = [(v, sorted(offs)) for (t, v), offs in where.items() if len(offs) > 1 and v.split(":")[0] in idempotent]
    _add(out, acc, "duplicate", [d for d in dups if not any(tp in acc.elections for tp, _ in d[1])],
         [d for d in dups if any(tp in acc.elections for tp, _ in d[1])],
         lambda xs: f"{len(xs)} values of idempotent producers at several offsets, e.g. {xs[0][0]!r} at "
                    f"{xs[0][1][:4]}",
         lambda xs: ({"value": xs[0][0], "offsets": xs[0][1][:10]},), lambda xs: [tp for x in xs for tp, _ in x[1]])
    for tp, part in sorted(final(entries, "final-read").items()):
        read_end = read_to(part)
        if read_end < part["high_watermark"]:
            out.append(Anomaly(NAME, "unreadable-after-heal", f"{tp}: the final read got no further than offset "
                               f"{read_end} of [{part['log_start']}, {part['high_watermark']})",
                               ({"partition": tp, "log_start": part["log_start"],
                                 "high_watermark": part["high_watermark"], "read_up_to": read_end},)))
    out.extend(_polls(entries, acc))
    out.extend(spark_rows(entries)[0])
    return out


def spark_rows(entries: list[dict]) -> tuple[list[Anomaly], dict]:
    """Rows of a Spark producer job that succeeded are acknowledged (``spark-produce`` ok: values
    ``str(i).zfill(record_size)`` for ``i < rows``).  **spark-row-lost**: such a row is not in the final read
    of its topic and no poll saw it below the final log start offset (deleted on purpose).  Duplicates are
    allowed (Spark retries tasks; counted in the returned ``{"rows", "lost", "duplicates"}``), except for an
    exactly-once job (``exactly_once`` in its value): **spark-row-duplicated** for a row a read_committed final
    read sees twice, **spark-failed-job-visible** for any record of its topic when such a job failed."""
    jobs = [e for e in entries if e["f"] == "spark-produce" and e["type"] == "ok"]
    failed_eos = [e for e in entries if e["f"] == "spark-produce" and e["type"] == "fail" and
                  e["value"].get("exactly_once")]
    if not jobs and not failed_eos:
        return [], {}
    read = final(entries, "final-read")
    out, counts = [], {"rows": 0, "lost": 0, "duplicates": 0}
    for job in failed_eos:
        topic = job["value"]["topic"]
        visible = sum(len(part["records"]) for tp, part in read.items() if tp.rsplit("/", 1)[0] == topic)
        if visible:
            out.append(Anomaly(NAME, "spark-failed-job-visible", f"an exactly-once Spark job failed, yet a "
                               f"read_committed reader sees {visible} records in {topic}", (witness(job),)))
    for job in jobs:
        topic, rows, size = job["value"]["topic"], job["value"]["rows"], job["value"]["record_size"]
        parts = {tp: part for tp, part in read.items() if tp.rsplit("/", 1)[0] == topic}
        times: dict[str, int] = defaultdict(int)
        for part in parts.values():
            for _, v in part["records"]:
                times[v] += 1
        deleted = set()   # seen by a poll below its partition's final log start offset
        for e in entries:
            if e["f"] == "poll" and e["type"] == "ok" and e.get("topic") == topic:
                for p, recs in e["value"].items():
                    start = parts.get(f"{topic}/{p}", {}).get("log_start", 0)
                    deleted.update(v for o, v in recs if o < start)
        missing = [v for v in (str(i).zfill(size) for i in range(rows)) if v not in times and v not in deleted]
        counts["rows"] += rows
        counts["lost"] += len(missing)
        counts["duplicates"] += sum(n - 1 for v, n in times.items() if n > 1 and len(v) == size and v.isdigit())
        duplicated = sorted(v for v, k in times.items() if k > 1 and len(v) == size and v.isdigit())
        if job["value"].get("exactly_once") and duplicated:
            out.append(Anomaly(NAME, "spark-row-duplicated", f"{len(duplicated)} rows of an exactly-once Spark job "
                               f"are in {topic} more than once for a read_committed reader, e.g. {duplicated[0]!r}",
                               (witness(job), {"duplicated": duplicated[:10]})))
        if missing:
            out.append(Anomaly(NAME, "spark-row-lost", f"{len(missing)} of {rows} rows of a Spark job that "
                               f"succeeded are missing from {topic} after heal, e.g. {missing[0]!r}",
                               (witness(job), {"missing": missing[:10]})))
    return out, counts


def _polls(entries: list[dict], acc: unclean.Acceptance) -> list[Anomaly]:
    """nonmonotonic-poll and poll-skip, per consumer read session (accepted in a poll after the partition's
    first unclean election)."""
    compacted = compaction.compacted_topics(entries)
    present: dict[str, set[int]] = {tp: {o for o, _ in part["records"]}
                                    for tp, part in final(entries, "final-read").items()
                                    if tp.rsplit("/", 1)[0] not in compacted}
    last: dict[tuple[str, str], tuple[int, dict]] = {}
    nonmono, skips = [], []
    for e in entries:
        if e["process"].startswith("consumer") and e["f"] == "seek":
            for k in [k for k in last if k[0] == e["process"]]:
                del last[k]
            continue
        if e["f"] != "poll" or e["type"] != "ok":
            continue
        for p, recs in e["value"].items():
            tp = f"{e['topic']}/{p}"
            for o, _ in recs:
                prev = last.get((e["process"], tp))
                if prev is not None:
                    po, pe = prev
                    if o <= po:
                        nonmono.append((tp, po, o, pe, e))
                    elif o > po + 1:
                        between = [c for c in present.get(tp, ()) if po < c < o]
                        if between:
                            skips.append((tp, po, o, len(between), pe, e))
                last[(e["process"], tp)] = (o, e)
    out: list[Anomaly] = []

    def parts(xs: list) -> tuple[list, list]:
        return ([x for x in xs if not acc.after_first(x[0], x[-1]["time"])],
                [x for x in xs if acc.after_first(x[0], x[-1]["time"])])
    _add(out, acc, "nonmonotonic-poll", *parts(nonmono),
         lambda xs: f"{len(xs)} polls went backwards, e.g. {xs[0][0]} offset {xs[0][1]} then {xs[0][2]}",
         lambda xs: (witness(xs[0][3]), witness(xs[0][4])), lambda xs: [x[0] for x in xs])
    _add(out, acc, "poll-skip", *parts(skips),
         lambda xs: f"{len(xs)} polls skipped records, e.g. {xs[0][0]} offset {xs[0][1]} then {xs[0][2]} "
                    f"({xs[0][3]} records in between)",
         lambda xs: (witness(xs[0][4]), witness(xs[0][5])), lambda xs: [x[0] for x in xs])
    return out
