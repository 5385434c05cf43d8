"""What a run leaves in ``runs/<scenario>-<seed>/``: ``results.json``, ``timeline.png`` and ``index.html``
(next to ``history.jsonl``, ``history.jepsen.json``, ``scenario.toml`` and the cluster's logs), and the
one-screen summary printed at the end.

The timeline has one lane per broker (down and paused spans, the controller's tenure on its lane, replication
throttles, fault markers: process faults in red, Kafka admin faults -- reassignments, elections, throttles,
controlled shutdowns -- in purple), one lane per tiered topic (ENABLED / DISABLING / DISABLED), and below them
acknowledged sends per second and send latency.
"""
from __future__ import annotations

import html
import json
import os
from collections import Counter, defaultdict

from kafkatier.common.atomic_file import atomic_write
from kafkatier.scenario.checkers import Anomaly, split
from kafkatier.scenario.history import pairs
from kafkatier.scenario.network_faults import draw_timeline as draw_link_faults

TIERED_COLOURS = {"ENABLED": "#4caf50", "DISABLING": "#ff9800", "DISABLED": "#9e9e9e"}
PROCESS_MARKERS = ("kill", "terminate", "pause", "expire_session", "zk_pause", "zk_stop")
ADMIN_MARKERS = ("controlled-shutdown", "reassign", "cancel-reassignment", "preferred-election", "unclean-election",
                 "throttle")
REQUEST_FAULT_MARKERS = ("inject_errors", "clock_skew")   # scenario/request_faults.py


def _marker_label(e: dict) -> str:
    """``kill 2``, ``reassign t/1 -> [3, 2, 4]``, ``throttle 200000B/s``..."""
    if e["f"] == "reassign":
        return f"reassign {e.get('topic')}/{e.get('partition')} -> {e.get('value')}" + (
            " (znode)" if e.get("via") == "znode" else "")
    if e["f"] == "throttle":
        return f"throttle {e.get('rate')}B/s"
    if e["f"] == "inject_errors":
        return f"{e.get('summary')} @{''.join(map(str, e.get('value') or []))}"
    if e["f"] == "clock_skew":
        return f"clock {e.get('offset_ms', 0):+g}ms @{''.join(map(str, e.get('value') or []))}"
    if e["f"] in ("cancel-reassignment", "preferred-election", "unclean-election"):
        parts = e.get("partitions") or []
        return e["f"] + (f" {parts[0]}" if len(parts) == 1 else f" ({len(parts)} partitions)")
    return e["f"] + "".join(f" {b}" for b in e.get("value") or [])


def counts(entries: list[dict]) -> dict[str, dict[str, int]]:
    c: dict[str, Counter] = defaultdict(Counter)
    for e in entries:
        if e["process"] in ("observer", "final"):
            continue
        c[e["f"]][e["type"]] += 1
    return {f: dict(v) for f, v in sorted(c.items())}


def latencies(entries: list[dict]) -> dict[str, dict[str, float]]:
    by_f: dict[str, list[float]] = defaultdict(list)
    for inv, done in pairs(entries):
        if done is not None and done["type"] == "ok" and inv["f"] != "poll":
            by_f[inv["f"]].append((done["time"] - inv["time"]) / 1e6)
    out = {}
    for f, xs in by_f.items():
        xs.sort()
        out[f] = {"count": len(xs), "p50_ms": round(xs[len(xs) // 2], 2),
                  "p99_ms": round(xs[min(len(xs) - 1, int(len(xs) * 0.99))], 2), "max_ms": round(xs[-1], 2)}
    return out


def results(*, spec, seed: int, quick: bool, schedule, entries: list[dict], anomalies: list[Anomaly],
            unmet: list[str], replay: str, elapsed_s: float, run_dir: str) -> dict:
    anomalies, accepted = split(anomalies)
    valid = not anomalies and not unmet
    faults = Counter(e["f"] for e in entries if e["process"] == "nemesis")
    return {
        "scenario": spec.name, "file": spec.path, "seed": seed, "quick": quick, "valid": valid,
        "exit_code": 0 if valid else 1, "elapsed_s": round(elapsed_s, 1), "run_dir": run_dir,
        "replay": replay, "swarm_weights": schedule.swarm_weights, "schedule": schedule.to_json(),
        "anomalies": [a.to_json() for a in anomalies], "accepted": [a.to_json() for a in accepted],
        "unmet_expectations": unmet,
        "counts": counts(entries), "faults": dict(sorted(faults.items())), "latencies": latencies(entries),
        "unfinished": sum(e["value"]["unfinished"] for e in entries if e["f"] == "stop"),
        "spark_rows": _spark_rows(entries),
        "compaction_removed": _compaction_removed(entries),
    }


def _compaction_removed(entries: list[dict]) -> dict:
    """Per compacted partition, the offsets the log cleaner removed from the final read's range."""
    from kafkatier.scenario.checkers.compaction import removed_records
    return removed_records(entries)


def _spark_rows(entries: list[dict]) -> dict:
    """Rows of successful Spark producer jobs: written, lost, duplicated (allowed, counted)."""
    from kafkatier.scenario.checkers.kafka_clients import spark_rows
    return spark_rows(entries)[1]


def write_json(path: str, obj) -> None:
    atomic_write(path, (json.dumps(obj, indent=2, default=str) + "\n").encode())


# ------------------------------------------------------------------------------------------------ timeline

def _spans(events: list[tuple[float, object]], end: float) -> list[tuple[float, float, object]]:
    out = []
    for (t, v), nxt in zip(events, events[1:] + [(end, None)]):
        out.append((t, nxt[0], v))
    return out


def timeline(entries: list[dict], brokers: list[int], path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end = max((e["time"] for e in entries), default=1) / 1e9
    tiered_topics = sorted({e["value"]["topic"] for e in entries if e["process"] == "observer"
                            and (e.get("value") or {}).get("kind") == "tiered"})
    lanes = [f"broker {b}" for b in brokers] + [f"tiered {t}" for t in tiered_topics]
    fig, (ax, ax_tp, ax_lat) = plt.subplots(3, 1, figsize=(13, 2.2 + 0.45 * len(lanes) + 3.6), sharex=True,
                                            gridspec_kw={"height_ratios": [max(2, len(lanes)), 1.4, 1.4]})
    y = {lane: i for i, lane in enumerate(lanes)}
    # broker lanes: up (light), down (red), paused (yellow)
    state: dict[int, list[tuple[float, str]]] = {b: [(0.0, "up")] for b in brokers}
    for e in entries:
        if e["process"] != "nemesis":
            continue
        t = e["time"] / 1e9
        what = {"kill": "down", "terminate": "down", "stopped": "down", "start": "up", "pause": "paused",
                "expire_session": "paused", "resume": "up"}.get(e["f"])
        for b in e.get("value") or []:
            if what and b in state:
                state[b].append((t, what))
    colours = {"up": "#e3f2fd", "down": "#e53935", "paused": "#fdd835"}
    for b, evs in state.items():
        for t0, t1, s in _spans(evs, end):
            ax.barh(y[f"broker {b}"], t1 - t0, left=t0, height=0.6, color=colours[s], edgecolor="none")
    # controller tenure: a dark bar inside the lane
    ctrl = [(e["time"] / 1e9, e["value"]["broker"]) for e in entries if e["process"] == "observer"
            and (e.get("value") or {}).get("kind") == "controller"]
    for t0, t1, b in _spans(ctrl, end):
        if b is not None and f"broker {b}" in y:
            ax.barh(y[f"broker {b}"], t1 - t0, left=t0, height=0.2, color="#1a237e")
    for topic in tiered_topics:
        evs = [(e["time"] / 1e9, e["value"]["state"]) for e in entries if e["process"] == "observer"
               and (e.get("value") or {}).get("kind") == "tiered" and e["value"]["topic"] == topic]
        for t0, t1, s in _spans(evs, end):
            ax.barh(y[f"tiered {topic}"], t1 - t0, left=t0, height=0.6, color=TIERED_COLOURS[s])
    # replication throttles: a thin orange bar at the bottom of each throttled broker's lane
    throttled: dict[int, float] = {}
    for e in entries + [{"process": "nemesis", "f": "unthrottle", "time": end * 1e9, "value": list(state)}]:
        if e["process"] == "nemesis" and e["f"] in ("throttle", "unthrottle"):
            for b in e.get("value") or []:
                if e["f"] == "throttle":
                    throttled.setdefault(b, e["time"] / 1e9)
                elif b in throttled and f"broker {b}" in y:
                    t0 = throttled.pop(b)
                    ax.barh(y[f"broker {b}"] - 0.24, e["time"] / 1e9 - t0, left=t0, height=0.12, color="#ef6c00")
    for e in entries:
        if e["process"] == "nemesis" and e["f"] in PROCESS_MARKERS + ADMIN_MARKERS + REQUEST_FAULT_MARKERS:
            t = e["time"] / 1e9
            colour = "#b71c1c" if e["f"] in PROCESS_MARKERS else "#00838f" if e["f"] in REQUEST_FAULT_MARKERS \
                else "#6a1b9a"
            ax.axvline(t, color=colour, alpha=0.35, lw=1)
            ax.text(t, len(lanes) - 0.4, _marker_label(e), rotation=90, fontsize=7, va="top", color=colour)
        if e["process"] == "admin" and e["type"] == "invoke":
            ax.axvline(e["time"] / 1e9, color="#1565c0", alpha=0.35, lw=1, ls="--")
    draw_link_faults(ax, entries, y, end)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_ylim(-0.6, len(lanes) + 0.2)
    ax.set_title(title + "  (red: down, yellow: paused, navy: controller, orange bar: throttled; tiered "
                 "green/orange/grey = ENABLED/DISABLING/DISABLED;\nred line: process fault, purple: Kafka admin "
                 "fault, teal: request fault / clock skew, dashed: admin operation; top bar: link fault, brown cut /"
                 " black blackhole / blue latency / teal bandwidth)", fontsize=9)
    # throughput and latency
    bins: Counter = Counter()
    lat_t, lat_v = [], []
    for inv, done in pairs(entries, "send"):
        if done is not None and done["type"] == "ok":
            bins[int(done["time"] / 5e8)] += 2
            lat_t.append(done["time"] / 1e9)
            lat_v.append((done["time"] - inv["time"]) / 1e6)
    if bins:
        xs = list(range(0, int(end * 2) + 1))
        ax_tp.plot([x / 2 for x in xs], [bins[x] for x in xs], color="#2e7d32", lw=1)
    ax_tp.set_ylabel("acked/s")
    if lat_t:
        ax_lat.scatter(lat_t, lat_v, s=2, color="#6a1b9a")
        ax_lat.set_yscale("log")
    ax_lat.set_ylabel("send latency ms")
    ax_lat.set_xlabel("seconds since start")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------ html

def write_html(path: str, res: dict) -> None:
    e = html.escape
    status = "VALID" if res["valid"] else "ANOMALIES FOUND"
    rows = "".join(f"<tr><td>{e(a['checker'])}</td><td><b>{e(a['type'])}</b></td><td>{e(a['message'])}</td>"
                   f"<td><pre>{e(json.dumps(a['witnesses'][:3], indent=1)[:2000])}</pre></td></tr>"
                   for a in res["anomalies"])
    unmet = "".join(f"<li>{e(u)}</li>" for u in res["unmet_expectations"])
    accepted = "".join(f"<li><b>{e(a['checker'])}/{e(a['type'])}</b>: {e(a['message'])} &mdash; {e(a['accepted'])}"
                       f"</li>" for a in res.get("accepted", ()))
    sched = "".join(f"<li><code>{e(s['describe'])}</code></li>" for s in res["schedule"])
    counts_rows = "".join(f"<tr><td>{e(f)}</td><td>{e(json.dumps(c))}</td></tr>" for f, c in res["counts"].items())
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{e(res['scenario'])} seed {res['seed']}</title>
<style>body{{font-family:sans-serif;margin:2em}} td,th{{border:1px solid #ccc;padding:4px;vertical-align:top}}
table{{border-collapse:collapse}} .ok{{color:#2e7d32}} .bad{{color:#c62828}} pre{{margin:0;font-size:11px}}</style>
</head><body>
<h1>{e(res['scenario'])} &middot; seed {res['seed']}{' &middot; quick' if res['quick'] else ''}</h1>
<p class="{'ok' if res['valid'] else 'bad'}"><b>{status}</b> in {res['elapsed_s']} s.
Replay: <code>{e(res['replay'])}</code></p>
<p><a href="history.jsonl">history.jsonl</a> &middot; <a href="history.jepsen.json">Jepsen export</a> &middot;
<a href="results.json">results.json</a> &middot; <a href="scenario.toml">scenario</a></p>
<img src="timeline.png" style="max-width:100%">
<h2>Anomalies</h2>{'<table><tr><th>checker</th><th>type</th><th>what</th><th>witnesses</th></tr>' + rows + '</table>' if rows else '<p>none</p>'}
{'<h2>Accepted (Kafka allows this loss)</h2><ul>' + accepted + '</ul>' if accepted else ''}
{'<h2>Unmet expectations</h2><ul>' + unmet + '</ul>' if unmet else ''}
<h2>Schedule</h2><ul>{sched}</ul>
<h2>Operations</h2><table>{counts_rows}</table>
<h2>Latencies</h2><pre>{e(json.dumps(res['latencies'], indent=1))}</pre>
</body></html>"""
    with open(path, "w") as f:
        f.write(page)


def summary(res: dict) -> str:
    lines = [f"== {res['scenario']} seed {res['seed']}{' (quick)' if res['quick'] else ''}: "
             f"{'VALID' if res['valid'] else 'INVALID'} in {res['elapsed_s']} s"]
    sends = res["counts"].get("send", {})
    lines.append(f"   sends: {sends.get('ok', 0)} ok, {sends.get('fail', 0)} failed, {sends.get('info', 0)} unknown"
                 f", {res.get('unfinished', 0)} unfinished; polls: {res['counts'].get('poll', {}).get('ok', 0)}; faults: "
                 + ", ".join(f"{f}={n}" for f, n in res.get("faults", {}).items()
                             if f not in ("cluster_up", "heal", "started", "stopped", "resume", "zk_resume",
                                          "unthrottle", "link-heal")))
    if "send" in res["latencies"]:
        s = res["latencies"]["send"]
        lines.append(f"   send latency: p50 {s['p50_ms']} ms, p99 {s['p99_ms']} ms, max {s['max_ms']} ms")
    if res.get("compaction_removed"):
        lines.append("   compaction: offsets removed by the cleaner " + ", ".join(
            f"{tp} {n}" for tp, n in sorted(res["compaction_removed"].items())))
    for a in res["anomalies"]:
        lines.append(f"   ANOMALY {a['checker']}/{a['type']}: {a['message']}")
    for a in res.get("accepted", ()):
        lines.append(f"   ACCEPTED {a['checker']}/{a['type']}: {a['message']} -- {a['accepted']}")
    for u in res["unmet_expectations"]:
        lines.append(f"   UNMET   {u}")
    lines.append(f"   report: {os.path.join(res['run_dir'], 'index.html')}")
    if not res["valid"]:
        lines.append(f"   replay: {res['replay']}")
    return "\n".join(lines)
