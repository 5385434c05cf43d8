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
from kafkatier.scenario.checkers import Anomaly, final, split
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


def warnings(entries: list[dict]) -> list[str]:
    """What a person should know that is not an anomaly: duplicates Kafka allows (a non-idempotent producer's
    retries, or an idempotent one's after a send timed out in flight), counted from the final reads."""
    idempotent = {e["process"]: bool(e["value"].get("idempotence")) for e in entries
                  if e["f"] == "start" and e["process"].startswith("producer")}
    timed_out = {e["process"] for e in entries if e["f"] == "send" and e["type"] == "info"}
    where: dict[tuple[str, str], int] = Counter()
    for tp, part in (final(entries, "final-read") or {}).items():
        for _, v in part.get("records", ()):
            where[(tp.split("/")[0], v)] += 1
    dups: Counter = Counter()
    for (_, v), n in where.items():
        if n > 1:
            dups[v.split(":")[0]] += n - 1
    out = []
    for process, n in sorted(dups.items()):
        if process not in idempotent:
            continue
        if not idempotent[process]:
            out.append(f"{n} duplicate records from {process}, a non-idempotent producer (its retries append again; "
                       f"Kafka allows this: set idempotence = true to rule it out)")
        elif process in timed_out:
            out.append(f"{n} duplicate records from {process}, an idempotent producer after a send timed out in "
                       f"flight (its sequence numbers were reset; Kafka allows this)")
    return out


def results(*, spec, seed: int, quick: bool, schedule, entries: list[dict], anomalies: list[Anomaly],
            unmet: list[str], replay: str, elapsed_s: float, run_dir: str, steps: dict | None = None) -> dict:
    """``steps``: step number -> ``{"happened_at": s, "status": ...}`` as the runner applied it."""
    anomalies, accepted = split(anomalies)
    valid = not anomalies and not unmet
    faults = Counter(e["f"] for e in entries if e["process"] == "nemesis")
    return {
        "scenario": spec.name, "file": spec.path, "seed": seed, "quick": quick, "valid": valid,
        "exit_code": 0 if valid else 1, "elapsed_s": round(elapsed_s, 1), "run_dir": run_dir,
        "replay": replay, "swarm_weights": schedule.swarm_weights,
        "schedule": [dict(s, **(steps or {}).get(s["number"], {})) for s in schedule.to_json()],
        "anomalies": [a.to_json() for a in anomalies], "accepted": [a.to_json() for a in accepted],
        "unmet_expectations": unmet,
        "counts": counts(entries), "faults": dict(sorted(faults.items())), "latencies": latencies(entries),
        "unfinished": sum(e["value"]["unfinished"] for e in entries if e["f"] == "stop"),
        "spark_rows": _spark_rows(entries), "warnings": warnings(entries), "admin": admin_outcomes(entries),
        "compaction_removed": _compaction_removed(entries), "copies": copies(entries),
    }


def copies(entries: list[dict]) -> list[dict]:
    """Each KIP-113 move and reassignment copy the run sampled: first and last sample (seconds after the start),
    the last fraction copied, whether it ended during the run."""
    return [{"kind": kind, "tp": tp, "broker": broker, "from_s": round(samples[0][0], 2),
             "to_s": round(samples[-1][0], 2), "copied_pct": round(100 * samples[-1][1]), "done": samples[-1][2]}
            for (kind, tp, broker), samples in sorted(copy_series(entries).items())]


def admin_outcomes(entries: list[dict]) -> list[dict]:
    """Every admin operation with its outcome: ``ok``, ``fail`` (a definite error) or ``info`` (unknown: the
    answer was lost or timed out), the error's name, seconds after the start."""
    return [{"f": e["f"], "outcome": e["type"], "error": e.get("error"), "at_s": round(e["time"] / 1e9, 3),
             "value": e.get("value")} for e in entries if e["process"] == "admin" and e["type"] != "invoke"]


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


ZK_STATES = {"zk_pause": "paused", "zk_resume": "up", "zk_stop": "down", "zk_start": "up",
             "zk_kill_leader": "degraded", "zk_server_start": "up", "zk_pause_server": "degraded",
             "zk_resume_server": "up"}


def _admin_outcome(e: dict) -> str:
    """``alter-config ok``, ``reassign fail: NO_REASSIGNMENT_IN_PROGRESS``..."""
    error = e.get("error")
    return f"{e['f']} {e['type']}" + (f": {error}" if error and e["type"] != "ok" else "")


def _zookeeper_lane(ax, entries: list[dict], row: int, end: float, colours: dict) -> None:
    """ZooKeeper: up / paused / down (the embedded server; an ensemble server down or paused: degraded, grey),
    and a black cross where a broker's registration (its ZooKeeper session) ended."""
    evs = [(0.0, "up")] + [(e["time"] / 1e9, ZK_STATES[e["f"]]) for e in entries
                           if e["process"] == "nemesis" and e["f"] in ZK_STATES]
    fill = dict(colours, degraded="#9e9e9e")
    for t0, t1, st in _spans(evs, end):
        ax.barh(row, t1 - t0, left=t0, height=0.6, color=fill[st], edgecolor="none")
    registered: set[str] | None = None
    for e in entries:
        if e["process"] == "observer" and (e.get("value") or {}).get("kind") == "brokers":
            ids = set(e["value"]["ids"])
            for b in sorted((registered or set()) - ids):
                t = e["time"] / 1e9
                ax.plot([t], [row], marker="x", color="black", ms=6)
                ax.text(t, row + 0.32, f"b{b} session", fontsize=6, ha="center")
            registered = ids


COPY_COLOURS = {"move": "#00695c", "reassign": "#6d4c41"}


def copy_series(entries: list[dict]) -> dict[tuple[str, str, int], list[tuple[float, float, bool]]]:
    """The copy progress the run sampled (:mod:`copy_progress`): ``(kind, "t/p", broker)`` -> ``[(seconds,
    fraction copied, done)]``, a KIP-113 move or a reassignment's new replica."""
    out: dict[tuple[str, str, int], list[tuple[float, float, bool]]] = defaultdict(list)
    for e in entries:
        v = e.get("value") or {}
        if e["process"] == "observer" and isinstance(v, dict) and v.get("kind") in COPY_COLOURS:
            total, done = v.get("total") or 0, bool(v.get("done"))
            frac = 1.0 if done else (min(1.0, v.get("copied", 0) / total) if total else 0.0)
            out[(v["kind"], v["tp"], v["broker"])].append((e["time"] / 1e9, frac, done))
    return dict(out)


def _copy_bars(ax, entries: list[dict], y: dict, end: float) -> None:
    """A move or a reassignment as a box in its broker's lane from its first sample to its last, filled to the
    fraction of bytes copied over time (a copy still running at the end reaches the right edge unfinished)."""
    for (kind, tp, broker), samples in copy_series(entries).items():
        lane = f"broker {broker}"
        if lane not in y:
            continue
        row, colour = y[lane] + 0.02, COPY_COLOURS[kind]
        t_end = samples[-1][0] if samples[-1][2] else end
        t_first = samples[0][0]
        ax.barh(row, max(t_end - t_first, 0.05), left=t_first, height=0.26, align="edge", fill=False,
                edgecolor=colour, lw=0.8)
        for (t0, frac, _), (t1, _, _) in zip(samples, samples[1:] + [(t_end, 0.0, False)]):
            if frac > 0 and t1 > t0:
                ax.barh(row, t1 - t0, left=t0, height=0.26 * frac, align="edge", color=colour, alpha=0.6,
                        edgecolor="none")
        pct = round(100 * samples[-1][1])
        ax.text(t_end, row + 0.13, f" {'move' if kind == 'move' else 'reassign'} {tp} {pct}%", fontsize=6,
                va="center", color=colour)


def timeline(entries: list[dict], brokers: list[int], path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end = max((e["time"] for e in entries), default=1) / 1e9
    tiered_topics = sorted({e["value"]["topic"] for e in entries if e["process"] == "observer"
                            and (e.get("value") or {}).get("kind") == "tiered"})
    lanes = [f"broker {b}" for b in brokers] + ["zookeeper"] + [f"tiered {t}" for t in tiered_topics]
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
    _zookeeper_lane(ax, entries, y["zookeeper"], end, colours)
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
    _copy_bars(ax, entries, y, end)
    for e in entries:
        if e["process"] == "nemesis" and e["f"] in PROCESS_MARKERS + ADMIN_MARKERS + REQUEST_FAULT_MARKERS:
            t = e["time"] / 1e9
            colour = "#b71c1c" if e["f"] in PROCESS_MARKERS else "#00838f" if e["f"] in REQUEST_FAULT_MARKERS \
                else "#6a1b9a"
            ax.axvline(t, color=colour, alpha=0.35, lw=1)
            ax.text(t, len(lanes) - 0.4, _marker_label(e), rotation=90, fontsize=7, va="top", color=colour)
        if e["process"] == "admin" and e["type"] == "invoke":
            ax.axvline(e["time"] / 1e9, color="#1565c0", alpha=0.35, lw=1, ls="--")
        elif e["process"] == "admin":   # the outcome of an admin operation, where it completed
            ax.text(e["time"] / 1e9, -0.5, _admin_outcome(e), rotation=90, fontsize=7, va="bottom",
                    color="#2e7d32" if e["type"] == "ok" else "#c62828")
    draw_link_faults(ax, entries, y, end)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_ylim(-0.6, len(lanes) + 0.2)
    ax.set_title(title + "  (red: down, yellow: paused, grey: ZooKeeper ensemble degraded, x: a broker's "
                 "ZooKeeper session ended, navy: controller, orange bar: throttled;\ntiered "
                 "green/orange/grey = ENABLED/DISABLING/DISABLED; red line: process fault, purple: Kafka admin "
                 "fault, teal: request fault / clock skew, dashed: admin operation;\ntop bar: link fault, brown cut /"
                 " black blackhole / blue latency / teal bandwidth; teal / brown box: a KIP-113 move / a "
                 "reassignment's new replica, filled as its bytes are copied)", fontsize=9)
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

ADMIN_OUTCOMES = {"ok": "ok", "fail": "failed", "info": "unknown (answer lost or timed out)"}


def _secs(t: float | None) -> str:
    return "" if t is None else f"{t:.2f}"


def schedule_in_time_order(schedule: list[dict]) -> list[dict]:
    """Steps by the time they happened (else were planned); steps that never ran last."""
    def key(s: dict):
        t = s.get("happened_at", s.get("at"))
        return (t is None, t or 0.0, s["number"])
    return sorted(schedule, key=key)


def write_html(path: str, res: dict) -> None:
    e = html.escape
    status = "VALID" if res["valid"] else "ANOMALIES FOUND"
    rows = "".join(f"<tr><td>{e(a['checker'])}</td><td><b>{e(a['type'])}</b></td><td>{e(a['message'])}</td>"
                   f"<td><pre>{e(json.dumps(a['witnesses'][:3], indent=1)[:2000])}</pre></td></tr>"
                   for a in res["anomalies"])
    unmet = "".join(f"<li>{e(u)}</li>" for u in res["unmet_expectations"])
    accepted = "".join(f"<li><b>{e(a['checker'])}/{e(a['type'])}</b>: {e(a['message'])} &mdash; {e(a['accepted'])}"
                       f"</li>" for a in res.get("accepted", ()))
    sched = "".join(f"<tr><td>{s['number']}</td><td>{_secs(s.get('at'))}</td><td>{_secs(s.get('happened_at'))}</td>"
                    f"<td>{e(s.get('status', ''))}</td><td><code>{e(s['describe'])}</code></td></tr>"
                    for s in schedule_in_time_order(res["schedule"]))
    warns = "".join(f"<li>{e(w)}</li>" for w in res.get("warnings", ()))
    admin = "".join(f"<tr><td>{a['at_s']:.2f}</td><td>{e(a['f'])}</td><td class=\"{'ok' if a['outcome'] == 'ok' else 'bad'}\">"
                    f"{e(ADMIN_OUTCOMES.get(a['outcome'], a['outcome']))}</td><td>{e(a.get('error') or '')}</td>"
                    f"<td><code>{e(json.dumps(a.get('value'))[:200])}</code></td></tr>" for a in res.get("admin", ()))
    counts_rows = "".join(f"<tr><td>{e(f)}</td><td>{e(json.dumps(c))}</td></tr>" for f, c in res["counts"].items())
    copy_rows = "".join(f"<tr><td>{e(c['kind'])}</td><td>{e(c['tp'])}</td><td>{c['broker']}</td><td>{c['from_s']:.2f}"
                        f"</td><td>{c['to_s']:.2f}</td><td>{c['copied_pct']}%{'' if c['done'] else ' (not done)'}"
                        f"</td></tr>" for c in res.get("copies", ()))
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
{'<h2>Warnings</h2><ul>' + warns + '</ul>' if warns else ''}
<h2>Schedule (time order)</h2><table><tr><th>#</th><th>planned s</th><th>happened s</th><th>status</th>
<th>step</th></tr>{sched}</table><p>Schedule times: seconds after the workload started.</p>
{'<h2>Admin operations</h2><table><tr><th>s since the run started (history time)</th><th>operation</th><th>outcome</th><th>error</th><th>request</th></tr>' + admin + '</table>' if admin else ''}
{'<h2>Replica copies</h2><table><tr><th>copy</th><th>partition</th><th>to broker</th><th>first seen s</th><th>last seen s</th><th>copied</th></tr>' + copy_rows + '</table>' if copy_rows else ''}
<h2>Operations</h2><table>{counts_rows}</table>
<h2>Latencies</h2><pre>{e(json.dumps(res['latencies'], indent=1))}</pre>
</body></html>"""
    with open(path, "w") as f:
        f.write(page)


# Nemesis entries that are not faults a run drew (set-up, heal, the end of a timed fault).
NOT_FAULTS = ("cluster_up", "heal", "started", "stopped", "resume", "zk_resume", "unthrottle", "link-heal")


def drawn_faults(res: dict) -> dict[str, int]:
    return {f: n for f, n in res.get("faults", {}).items() if f not in NOT_FAULTS}


def step_counts(schedule: list[dict]) -> dict[str, tuple[int, list[int]]]:
    """How the steps ended (``done``, ``skipped``, ``not reached``, ``unfinished``): status -> (count, step
    numbers), done first."""
    out: dict[str, list[int]] = {}
    for s in sorted(schedule, key=lambda s: s["number"]):
        out.setdefault(s.get("status", "not reached").split(":")[0], []).append(s["number"])
    return {k: (len(v), v) for k, v in sorted(out.items(), key=lambda kv: (kv[0] != "done", kv[0]))}


def summary(res: dict) -> str:
    lines = [f"== {res['scenario']} seed {res['seed']}{' (quick)' if res['quick'] else ''}: "
             f"{'VALID' if res['valid'] else 'INVALID'} in {res['elapsed_s']} s"]
    sends = res["counts"].get("send", {})
    spark = res.get("spark_rows") or {}
    if spark:   # a Spark producer's rows are acknowledged by its job, not send by send
        lines.append(f"   spark rows: {spark['rows']} written by jobs that succeeded, {spark['lost']} lost, "
                     f"{spark['duplicates']} duplicates (task retries, allowed)")
    lines.append(f"   sends: {sends.get('ok', 0)} ok, {sends.get('fail', 0)} failed, {sends.get('info', 0)} unknown"
                 f", {res.get('unfinished', 0)} unfinished; polls: {res['counts'].get('poll', {}).get('ok', 0)}; faults: "
                 + ", ".join(f"{f}={n}" for f, n in drawn_faults(res).items()))
    steps = step_counts(res.get("schedule", ()))
    if steps:
        lines.append("   steps: " + ", ".join(f"{n} {status}" + (f" (#{', #'.join(map(str, which))})"
                                                           if status != "done" else "")
                                               for status, (n, which) in steps.items()))
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
    for w in res.get("warnings", ()):
        lines.append(f"   WARNING {w}")
    page = os.path.join(res['run_dir'], 'index.html')
    if os.path.exists(page):
        lines.append(f"   report: {page}")
    else:   # scenario run --reports failing: a valid run keeps its results only
        lines.append(f"   results: {os.path.join(res['run_dir'], 'results.json')}")
    if not res["valid"]:
        lines.append(f"   replay: {res['replay']}")
    return "\n".join(lines)


def write_sweep_html(path: str, name: str, where: str, rows: list[dict], elapsed_s: float) -> None:
    """A sweep's page: the outcome, faults drawn and duration of every seed, and a histogram of durations."""
    e = html.escape
    outcomes = Counter(r["outcome"] for r in rows)
    seed_rows = "".join(
        f"<tr><td>{r['seed']}</td><td class=\"{'ok' if r['outcome'] == 'valid' else 'bad'}\">{e(r['outcome'])}"
        f"</td><td>{r['duration_s']:.1f}</td><td>{e(', '.join(f'{k}={v}' for k, v in sorted(r['faults'].items())))}"
        f"</td><td><code>{e(r['schedule_digest'] or '')}</code></td><td>{e(r['executor'])}</td>"
        f"<td>{e('; '.join(r['anomalies']) or r['reason'] or '')}</td>"
        f"<td>{_run_link(path, r)}<code>{e(r['replay'])}</code></td></tr>" for r in rows)
    faults = Counter()
    for r in rows:
        faults.update(r["faults"])
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>sweep {e(name)}</title>
<style>body{{font-family:sans-serif;margin:2em}} td,th{{border:1px solid #ccc;padding:4px;vertical-align:top}}
table{{border-collapse:collapse}} .ok{{color:#2e7d32}} .bad{{color:#c62828}} pre{{font-size:12px}}</style>
</head><body>
<h1>sweep {e(name)} &middot; {len(rows)} seeds</h1>
<p>On {e(where)} in {elapsed_s:.0f} s: {e(', '.join(f'{k} {v}' for k, v in sorted(outcomes.items())))}.
Rows: <code>results.parquet</code>.</p>
<h2>Durations</h2><pre>{e(_histogram([r['duration_s'] for r in rows]))}</pre>
<h2>Faults drawn (all seeds)</h2><p>{e(', '.join(f'{k}={v}' for k, v in sorted(faults.items())) or 'none')}</p>
<h2>Seeds</h2><table><tr><th>seed</th><th>outcome</th><th>s</th><th>faults</th><th>schedule digest</th>
<th>executor</th><th>anomalies / reason</th><th>run / replay</th></tr>{seed_rows}</table>
</body></html>"""
    with open(path, "w") as f:
        f.write(page)


def _run_link(page: str, row: dict) -> str:
    if not row.get("run_dir"):
        return ""
    rel = os.path.relpath(os.path.join(row["run_dir"], "index.html"), os.path.dirname(page))
    return f'<a href="{html.escape(rel)}">run</a> '


def _histogram(values: list[float], bins: int = 8, width: int = 40) -> str:
    """A text histogram (one line per bin: its range, a bar, the count)."""
    if not values:
        return "(no seeds)"
    lo, hi = min(values), max(values)
    step = (hi - lo) / bins or 1.0
    counts = [0] * bins
    for v in values:
        counts[min(int((v - lo) / step), bins - 1)] += 1
    top = max(counts)
    return "\n".join(f"{lo + i * step:7.1f}-{lo + (i + 1) * step:7.1f} s |{'#' * round(width * c / top):<{width}}| {c}"
                     for i, c in enumerate(counts) if hi > lo or i == 0)
