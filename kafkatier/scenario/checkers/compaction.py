"""Log compaction (docs/log-compaction.md): on a compacted topic the latest acknowledged value of every key is
readable after heal, and no key's newer value is ever shadowed by an older one.

A topic is compacted when the observer saw ``cleanup.policy`` containing ``compact`` in its ZooKeeper config
(``observe`` entries of kind ``topic_config``).  On such a topic the cleaner removes records on purpose, and each
replica cleans on its own schedule: the generic checks that expect every acknowledged offset to be readable
(``kafka_clients`` lost-write and poll-skip, ``partitions`` acked-all-lost, ``log_dirs`` replica-diverged) leave
its partitions to this checker (:func:`compacted_topics`).  A consumer never seeing an offset go backwards, while
segments are swapped under it, stays ``kafka_clients``' nonmonotonic-poll.

Per partition, over the final read after heal (from its log start offset; keys are those of the sends, whose
values are unique), for every acknowledged send of key *k* at offset *o* that the final read does not hold:

- **shadowed**: no record of *k* after *o* is readable, but an older one is -- a reader rebuilding the table gets
  an older value of *k* than one the cluster acknowledged;
- **latest-value-lost**: no record of *k* at or after *o* is readable at all;
- **not-compacted**: the topic asks to be cleaned eagerly (``min.cleanable.dirty.ratio`` set to at most 0.5 and
  ``segment.bytes`` or ``segment.ms`` set, so segments roll; no ``min.compaction.lag.ms``) and holds at least
  four records per key, yet the final read has no gap at all -- the cleaner never ran on any replica that led
  it, so the run did not test compaction.

Sends acknowledged below the final log start offset (``compact,delete`` retention, DeleteRecords) are judged by
the ``delete_records`` checker; sends at or past the final read's end by ``kafka_clients`` (unseen,
unreadable-after-heal).
"""
from __future__ import annotations

from collections import defaultdict

from kafkatier.scenario.checkers.anomaly import Anomaly, final, observations, witness

NAME = "compaction"
#: not-compacted is judged only on topics this eager (see the module docstring).
EAGER_DIRTY_RATIO = 0.5
RECORDS_PER_KEY = 4


def topic_configs(entries: list[dict]) -> dict[str, dict]:
    """The last observed config of every topic."""
    out: dict[str, dict] = {}
    for e in observations(entries, "topic_config"):
        out[e["value"]["topic"]] = e["value"].get("config") or {}
    return out


def is_compacted(config: dict) -> bool:
    return "compact" in [p.strip() for p in str(config.get("cleanup.policy", "delete")).split(",")]


def compacted_topics(entries: list[dict]) -> set[str]:
    """Topics whose observed ``cleanup.policy`` contains ``compact`` at any time of the run."""
    return {e["value"]["topic"] for e in observations(entries, "topic_config")
            if is_compacted(e["value"].get("config") or {})}


def check(entries: list[dict]) -> list[Anomaly]:
    compacted = compacted_topics(entries)
    if not compacted:
        return []
    configs = topic_configs(entries)
    key_of: dict[tuple[str, str], str | None] = {}   # (topic, value) -> key, from every send attempt
    acked: dict[str, list[dict]] = defaultdict(list)
    for e in entries:
        if e["f"] != "send" or e.get("topic") not in compacted or not isinstance(e.get("value"), list):
            continue
        key_of[(e["topic"], e["value"][1])] = e["value"][0]
        if e["type"] == "ok" and isinstance(e.get("offset"), int) and e["offset"] >= 0:
            acked[f"{e['topic']}/{e['partition']}"].append(e)
    shadowed, lost, idle = [], [], []
    for tp, part in sorted(final(entries, "final-read").items()):
        topic = tp.rsplit("/", 1)[0]
        if topic not in compacted:
            continue
        records = part["records"]
        at = {o: v for o, v in records}
        offsets_of: dict[str | None, list[int]] = defaultdict(list)   # key -> offsets readable (ascending)
        for o, v in records:
            offsets_of[key_of.get((topic, v))].append(o)
        read_end = records[-1][0] + 1 if records else part["log_start"]
        for e in acked.get(tp, ()):
            o, k = e["offset"], e["value"][0]
            if not part["log_start"] <= o < read_end or o in at:
                continue
            offs = offsets_of.get(k, [])
            if offs and offs[-1] > o:
                continue   # superseded by a later record of its key: removed by the cleaner, as it should be
            item = {"partition": tp, "key": k, "offset": o, "value": e["value"][1],
                    "latest_readable": [offs[-1], at[offs[-1]]] if offs else None, "send": witness(e)}
            (shadowed if offs else lost).append(item)
        config = configs.get(topic, {})
        keys = {k for (t, _), k in key_of.items() if t == topic}
        eager = float(config.get("min.cleanable.dirty.ratio", 1.0)) <= EAGER_DIRTY_RATIO and \
            ("segment.bytes" in config or "segment.ms" in config) and int(config.get("min.compaction.lag.ms", 0)) == 0
        if eager and keys and len(records) >= RECORDS_PER_KEY * len(keys) and \
                len(records) == read_end - part["log_start"]:
            idle.append({"partition": tp, "records": len(records), "keys": len(keys),
                         "log_start": part["log_start"], "high_watermark": part["high_watermark"]})
    out: list[Anomaly] = []
    if shadowed:
        x = shadowed[0]
        out.append(Anomaly(NAME, "shadowed", f"{len(shadowed)} acknowledged values are shadowed by an older value "
                           f"of their key after heal, e.g. {x['partition']} key {x['key']!r}: acknowledged "
                           f"{x['value']!r} at offset {x['offset']}, latest readable {x['latest_readable']}",
                           tuple(shadowed[:10])))
    if lost:
        x = lost[0]
        out.append(Anomaly(NAME, "latest-value-lost", f"{len(lost)} keys' latest acknowledged values are not "
                           f"readable after heal, e.g. {x['partition']} key {x['key']!r}: {x['value']!r} at offset "
                           f"{x['offset']}", tuple(lost[:10])))
    if idle:
        x = idle[0]
        out.append(Anomaly(NAME, "not-compacted", f"{len(idle)} compacted partitions were never cleaned, e.g. "
                           f"{x['partition']}: {x['records']} records of {x['keys']} keys, no gap",
                           tuple(idle[:10])))
    return out


def removed_records(entries: list[dict]) -> dict[str, int]:
    """Per compacted partition, how many offsets of the final read's range the cleaner removed (the evidence that
    it ran)."""
    compacted = compacted_topics(entries)
    out = {}
    for tp, part in final(entries, "final-read").items():
        if tp.rsplit("/", 1)[0] in compacted:
            records = part["records"]
            read_end = records[-1][0] + 1 if records else part["log_start"]
            out[tp] = read_end - part["log_start"] - len(records)
    return out
