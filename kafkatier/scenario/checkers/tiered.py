"""KIP-950 invariants (docs/kip-950-tiered-storage.md#disablement-in-zookeeper-mode) over the observed
``tieredstorage`` znodes, the offsets sampled by clients and the remote tier after heal.

- **tiered-epoch-decreased**: ``tiered_epoch`` observed going down.
- **invalid-tiered-transition**: a ``state`` write (znode version + 1, so no write was missed) other than
  ENABLED->DISABLING, DISABLING->DISABLED, DISABLED->ENABLED, DISABLED->DISABLING (read-only then delete), or a
  rewrite of the same state.
- **disabling-not-completed**: a topic still DISABLING after heal.
- **remote-data-left**: remote segment files left for a topic disabled with delete (``remote.storage.enable``
  false after heal), or files of segments of an older tiered epoch wholly below the log start offset.
- **log-start-decreased**: the log start offset of a tiered topic's partition (ListOffsets earliest) going
  down between two samples.
- **old-epoch-served**: after a disablement with delete completed (DISABLED observed while the topic's config
  has ``remote.storage.enable=false``), the first log start offset sampled is the floor of the new epoch; a
  poll in a read session started (seek) after that sample returned a record below it (a deleted old-epoch
  segment was served, before or after a re-enable).
"""
from __future__ import annotations

from kafkatier.scenario.checkers.anomaly import Anomaly, final, observations, witness

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
    out.extend(_old_epoch_served(entries))
    return out


def _old_epoch_served(entries: list[dict]) -> list[Anomaly]:
    deleted_at: dict[str, int] = {}            # topic -> time a delete-disablement was seen complete
    config: dict[str, dict] = {}
    floor: dict[str, tuple[int, dict]] = {}     # "t/p" -> (log start sampled after it, the sample)
    bad = []
    session_start: dict[str, int] = {}
    for e in entries:
        v = e.get("value")
        if e["f"] == "seek":
            session_start[e["process"]] = e["time"]
        elif e["process"] == "observer" and isinstance(v, dict):
            if v.get("kind") == "topic_config":
                config[v["topic"]] = v["config"]
            elif v.get("kind") == "tiered" and v["state"] == "DISABLED" \
                    and config.get(v["topic"], {}).get("remote.storage.enable") == "false":
                deleted_at.setdefault(v["topic"], e["time"])
        elif e["f"] == "list-offsets" and e["type"] == "ok" and e["topic"] in deleted_at:
            tp = f"{e['topic']}/{e['partition']}"
            if tp not in floor and e.get("invoked", e["time"]) > deleted_at[e["topic"]]:
                floor[tp] = (v[0], e)
        elif e["f"] == "poll" and e["type"] == "ok":
            for p, recs in v.items():
                tp = f"{e['topic']}/{p}"
                if tp in floor and session_start.get(e["process"], -1) > floor[tp][1]["time"]:
                    below = [o for o, _ in recs if o < floor[tp][0]]
                    if below:
                        bad.append((floor[tp][1], e, below[0]))
    if not bad:
        return []
    sample, e, o = bad[0]
    return [Anomaly(NAME, "old-epoch-served", f"{len(bad)} polls after a disablement with delete returned records "
                    f"below the new log start offset, e.g. offset {o} < {sample['value'][0]}",
                    (witness(sample), witness(e)))]


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
