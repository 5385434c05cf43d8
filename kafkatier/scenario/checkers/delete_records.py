"""KIP-107 (docs/kip-107-delete-records.md): once DeleteRecords acknowledged low watermark *L* for a partition, nothing
below *L* is served again, across leader changes and restarts.

- **served-below-low-watermark**: a poll in a read session that started (seek) after the acknowledgement
  returned an offset below *L* (a session started earlier may return records its client prefetched before);
- **log-start-below-low-watermark**: ListOffsets earliest, sampled after the acknowledgement, or the final read
  after heal reported a log start offset below *L*.
"""
from __future__ import annotations

from kafkatier.scenario.checkers.anomaly import Anomaly, final, witness

NAME = "delete_records"


def check(entries: list[dict]) -> list[Anomaly]:
    acked: dict[str, tuple[int, dict]] = {}   # "t/p" -> (highest acknowledged low watermark, its entry)
    served, reported = [], []
    session_start: dict[str, int] = {}
    for e in entries:
        if e["f"] == "seek":
            session_start[e["process"]] = e["time"]
        elif e["f"] == "delete-records" and e["type"] == "ok":
            tp = f"{e['value']['topic']}/{e['value']['partition']}"
            if e["low_watermark"] > acked.get(tp, (-1, None))[0]:
                acked[tp] = (e["low_watermark"], e)
        elif e["f"] == "poll" and e["type"] == "ok":
            started = session_start.get(e["process"], -1)
            for p, recs in e["value"].items():
                tp = f"{e['topic']}/{p}"
                lw, ack = acked.get(tp, (-1, None))
                if ack is not None and started > ack["time"]:
                    below = [o for o, _ in recs if o < lw]
                    if below:
                        served.append((ack, e, below[0]))
        elif e["f"] == "list-offsets" and e["type"] == "ok":
            tp = f"{e['topic']}/{e['partition']}"
            lw, ack = acked.get(tp, (-1, None))
            if ack is not None and e.get("invoked", e["time"]) > ack["time"] and e["value"][0] < lw:
                reported.append((ack, witness(e)))
    for tp, part in final(entries, "final-read").items():
        lw, ack = acked.get(tp, (-1, None))
        if ack is not None and part["log_start"] < lw:
            reported.append((ack, {"process": "final", "partition": tp, "log_start": part["log_start"]}))
    out = []
    if served:
        ack, e, o = served[0]
        out.append(Anomaly(NAME, "served-below-low-watermark", f"{len(served)} polls returned records below an "
                           f"acknowledged low watermark, e.g. offset {o} < {ack['low_watermark']}",
                           (witness(ack), witness(e))))
    if reported:
        ack, w = reported[0]
        out.append(Anomaly(NAME, "log-start-below-low-watermark", f"{len(reported)} log start offsets below an "
                           f"acknowledged low watermark {ack['low_watermark']}", (witness(ack), w)))
    return out
