"""The compaction checker (kafkatier/scenario/checkers/compaction.py) fed crafted histories: each anomaly is
reported, and a correctly compacted history passes every checker (the generic lost-write, poll-skip and
replica-divergence checks leave compacted topics to it)."""
from __future__ import annotations

from kafkatier.scenario.checkers import check_all, compaction, kafka_clients, log_dirs, partitions, split

from tests.unit.test_scenario_checkers import H

COMPACT = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "segment.bytes": "4096"}


def keyed(h: H, t: float, seq: int, key: str, offset: int | None, partition: int = 0) -> str:
    v = f"producer-0:{seq}"
    h.add(t, "invoke", "producer-0", "send", [key, v], topic="t")
    if offset is not None:
        h.add(t + 0.01, "ok", "producer-0", "send", [key, v], topic="t", partition=partition, offset=offset,
              acks="all")
    return v


def history(config=COMPACT) -> tuple[H, list[str]]:
    """Keys a, b written at offsets 0..7 (a at even offsets, b at odd)."""
    h = H()
    h.producer()
    h.observe(0, kind="topic_config", topic="t", config=dict(config), version=0)
    vals = [keyed(h, 1 + i * 0.1, i, "ab"[i % 2], i) for i in range(8)]
    return h, vals


def test_a_correctly_compacted_log_passes_every_checker():
    h, v = history()
    # offsets 0..5 cleaned away (superseded by 6 and 7); a consumer saw the log before and after the cleaning
    h.poll(2, {0: [(0, v[0]), (1, v[1]), (2, v[2])]})
    h.poll(3, {0: [(6, v[6]), (7, v[7])]})
    h.final_read({0: (0, 8, [(6, v[6]), (7, v[7])])})
    assert h.types(compaction) == set()
    bad, _ = split(check_all(h.entries))
    assert bad == [], [a.to_json() for a in bad]


def test_without_compaction_the_same_history_is_lost_writes():
    h, v = history({"cleanup.policy": "delete"})
    h.final_read({0: (0, 8, [(6, v[6]), (7, v[7])])})
    assert "lost-write" in h.types(kafka_clients) and "acked-all-lost" in h.types(partitions)
    assert h.types(compaction) == set()


def test_shadowed_a_newer_value_removed_an_older_one_kept():
    h, v = history()
    h.final_read({0: (0, 8, [(4, v[4]), (7, v[7])])})   # a's value at 6 gone, its older value at 4 readable
    anomalies = [a for a in compaction.check(h.entries)]
    assert [a.type for a in anomalies] == ["shadowed"]
    w = anomalies[0].witnesses[0]
    assert w["key"] == "a" and w["offset"] == 6 and w["latest_readable"] == [4, v[4]]


def test_latest_value_lost_no_value_of_the_key_left():
    h, v = history()
    h.final_read({0: (0, 8, [(7, v[7])])})   # nothing of key a
    assert h.types(compaction) == {"latest-value-lost"}


def test_below_the_log_start_is_left_to_delete_records():
    h, v = history(dict(COMPACT, **{"cleanup.policy": "compact,delete"}))
    h.final_read({0: (7, 8, [(7, v[7])])})   # DeleteRecords / retention moved the log start to 7
    assert h.types(compaction) == set()


def test_not_compacted_when_an_eager_topic_was_never_cleaned():
    h, v = history()
    h.final_read({0: (0, 8, [(i, v[i]) for i in range(8)])})
    assert h.types(compaction) == {"not-compacted"}
    for lazy_config in (dict(COMPACT, **{"min.cleanable.dirty.ratio": "0.9"}),   # not eager
                        {"cleanup.policy": "compact"},                            # Kafka's defaults
                        dict(COMPACT, **{"min.compaction.lag.ms": "60000"})):
        lazy, v = history(lazy_config)
        lazy.final_read({0: (0, 8, [(i, v[i]) for i in range(8)])})
        assert lazy.types(compaction) == set(), lazy_config
    assert compaction.removed_records(h.entries) == {"t/0": 0}


def test_a_poll_going_backwards_during_cleaning_is_still_reported():
    h, v = history()
    h.poll(2, {0: [(6, v[6]), (7, v[7])]})
    h.poll(3, {0: [(2, v[2])]})   # same session: an offset went backwards
    h.final_read({0: (0, 8, [(6, v[6]), (7, v[7])])})
    assert "nonmonotonic-poll" in h.types(kafka_clients)


def test_replicas_cleaned_differently_are_not_a_divergence():
    h, v = history()
    h.final_read({0: (0, 8, [(6, v[6]), (7, v[7])])})
    h.add(99, "info", "final", "final-log-dirs", {
        "replicas": {"t/0": [1, 2]},
        "dirs": [{"broker": 1, "dir": "/d1", "partitions": {"t-0": {"tp": "t/0", "kind": "current",
                                                                    "batches": [[0, 3, 11], [4, 7, 12]]}}},
                 {"broker": 2, "dir": "/d2", "partitions": {"t-0": {"tp": "t/0", "kind": "current",
                                                                    "batches": [[0, 7, 13]]}}}]})
    assert h.types(log_dirs) == set()
    plain = H()
    plain.entries = [e for e in h.entries if e["f"] != "observe"]
    assert "replica-diverged" in plain.types(log_dirs)


def test_the_run_summary_shows_what_the_cleaner_removed():
    from kafkatier.scenario import report
    h, v = history()
    h.final_read({0: (0, 8, [(6, v[6]), (7, v[7])])})
    removed = report._compaction_removed(h.entries)
    assert removed == {"t/0": 6}
    res = {"scenario": "s", "seed": 1, "quick": True, "valid": True, "elapsed_s": 1.0, "counts": {},
           "latencies": {}, "anomalies": [], "unmet_expectations": [], "compaction_removed": removed,
           "run_dir": "runs/s-1", "replay": ""}
    assert "compaction: offsets removed by the cleaner t/0 6" in report.summary(res)
