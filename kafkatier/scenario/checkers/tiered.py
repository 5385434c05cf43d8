"""KIP-950 invariants (tiered_storage.md §4) over the observed ``tieredstorage`` znodes, the offsets sampled by
clients and the remote tier after heal.

- **tiered-epoch-decreased**: ``tiered_epoch`` observed going down.
- **invalid-tiered-transition**: a ``state`` write (znode version + 1, so no write was missed) other than
  ENABLED->DISABLING, DISABLING->DISABLED, DISABLED->ENABLED, DISABLED->DISABLING (read-only then delete), or a
  rewrite of the same state.
- **disabling-not-completed**: a topic still DISABLING after heal.
- **remote-data-left**: remote segment files left for a topic disabled with delete (``remote.storage.enable``
  false after heal), or files of segments of an older tiered epoch wholly below the log start offset.
- **log-start-decreased**: the log start offset of a tiered topic's partition (ListOffsets earliest) going
  down between two samples.
"""
from __future__ import annotations

from kafkatier.scenario.checkers import Anomaly, final, observations, witness

NAME = "tiered"
ALLOWED = {("ENABLED", "DISABLING"), ("DISABLING", "DISABLED"), ("DISABLED", "ENABLED"), ("DISABLED", "DISABLING")}


def check(entries: list[dict]) -> list[Anomaly]:
    out: list[Anomaly] = []
    last: dict[str, dict] = {}
    epoch_down, invalid = [], []
    tiered_topics = set()
    for e in observations(entries, "tiered"):
        v = e["value"]
        tiered_topics.add(v["topic"])
        prev = last.get(v["topic"])
        if prev is not None:
            pv = prev["value"]
            if v["epoch"] < pv["epoch"]:
                epoch_down.append((prev, e))
            if v["version"] == pv["version"] + 1 and v["state"] != pv["state"] \
                    and (pv["state"], v["state"]) not in ALLOWED:
                invalid.append((prev, e))
        last[v["topic"]] = e
    if epoch_down:
        a, b = epoch_down[0]
        out.append(Anomaly(NAME, "tiered-epoch-decreased", f"{b['value']['topic']} tiered epoch "
                           f"{a['value']['epoch']} -> {b['value']['epoch']}", (witness(a), witness(b))))
    if invalid:
        a, b = invalid[0]
        out.append(Anomaly(NAME, "invalid-tiered-transition", f"{b['value']['topic']} state "
                           f"{a['value']['state']} -> {b['value']['state']}", (witness(a), witness(b))))
    for topic, st in final(entries, "final-tiered").items():
        if st.get("state") == "DISABLING":
            out.append(Anomaly(NAME, "disabling-not-completed", f"{topic} is still DISABLING after heal",
                               ({"topic": topic, **st},)))
    out.extend(_remote_left(entries))
    out.extend(_log_start(entries, tiered_topics))
    return out


def _remote_left(entries: list[dict]) -> list[Anomaly]:
    tiered = final(entries, "final-tiered")
    read = final(entries, "final-read")
    out = []
    for tp, remote in final(entries, "final-remote").items():
        topic = tp.rsplit("/", 1)[0]
        st = tiered.get(topic, {})
        config = st.get("config", {})
        if config.get("remote.storage.enable", "false") != "true" and remote["files"]:
            out.append(Anomaly(NAME, "remote-data-left", f"{tp}: {len(remote['files'])} remote segment files left "
                               f"after a disablement with delete", ({"partition": tp, "files": remote["files"][:5]},)))
            continue
        log_start = read.get(tp, {}).get("log_start", 0)
        stale = [s for s in remote.get("segments", ()) if s["tiered_epoch"] < st.get("epoch", 0)
                 and s["end"] < log_start and s.get("has_files")]
        if stale:
            out.append(Anomaly(NAME, "remote-data-left", f"{tp}: {len(stale)} segments of an older tiered epoch "
                               f"below the log start offset {log_start} still stored", tuple(stale[:5])))
    return out


def _log_start(entries: list[dict], topics: set[str]) -> list[Anomaly]:
    last: dict[str, dict] = {}
    bad = []
    for e in entries:
        if e["f"] != "list-offsets" or e["type"] != "ok" or e["topic"] not in topics:
            continue
        tp = f"{e['topic']}/{e['partition']}"
        prev = last.get(tp)
        if prev is not None and e["value"][0] < prev["value"][0]:
            bad.append((prev, e))
        last[tp] = e
    if not bad:
        return []
    a, b = bad[0]
    return [Anomaly(NAME, "log-start-decreased", f"{len(bad)} decreases of a tiered partition's log start offset, "
                    f"e.g. {b['topic']}/{b['partition']} {a['value'][0]} -> {b['value'][0]}", (witness(a), witness(b)))]
