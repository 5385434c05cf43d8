"""What the log cleaner shows: Kafka's per-cleaning summary (``log-cleaner.log``), the delayed-partitions line,
and the cleaner settings in a broker's ``configs --describe``."""
from __future__ import annotations

import logging
import re

from kafkatier.log.cleaner import CleanerStats
from kafkatier.log.log_cleaner import CleanerConfig, LogCleaner, format_cleaning
from kafkatier.log.log_cleaner_manager import LogCleanerManager, PreCleanStats
from kafkatier.server.dynamic_broker_config import DEFAULT_CONFIG, STATIC_BROKER_CONFIG, DynamicBrokerConfig
from kafkatier.waiting import wait_for

from tests.unit.test_dynamic_broker_config import FakeEntityConfigs
from tests.unit.test_log_cleaner import COMPACT, make_log

MB = 1024 * 1024


def test_the_summary_is_kafkas_record_stats_line_for_line():
    s = CleanerStats(bytes_read=3 * MB // 2 * 1000, bytes_written=MB // 2, map_bytes_read=3 * MB // 2 * 1000,
                     messages_read=12345, messages_written=1000, buffer_utilization=0.25,
                     start_ms=100.0, map_complete_ms=101.0, end_ms=104.0)
    text = format_cleaning(0, "orders-0", 0, 12345, s)
    assert text.split("\n") == [
        "",
        "\tLog cleaner thread 0 cleaned log orders-0 (dirty section = [0, 12345])",
        "\t1,500.0 MB of log processed in 4.0 seconds (375.0 MB/sec).",
        "\tIndexed 1,500.0 MB in 1.0 seconds (1,500.0 Mb/sec, 25.0% of total time)",
        "\tBuffer utilization: 25.0%",
        "\tCleaned 1,500.0 MB in 3.0 seconds (500.0 Mb/sec, 75.0% of total time)",
        "\tStart size: 1,500.0 MB (12,345 messages)",
        "\tEnd size: 0.5 MB (1,000 messages)",
        "\t100.0% size reduction (91.9% fewer messages)",
        ""]


def test_a_cleaner_thread_logs_the_summary(tmp_path, caplog):
    lg = make_log(tmp_path / "d")
    cleaner = LogCleaner(CleanerConfig(backoff_ms=10, duty_cycle=1.0), [str(tmp_path / "d")], lambda: [lg],
                         clock=lambda: 10**13)
    with caplog.at_level(logging.INFO, logger="kafkatier.log.cleaner"):
        cleaner.startup()
        try:
            wait_for(lambda: cleaner.threads[0].logs_cleaned >= 1, 20, interval=0.05, message="a cleaning")
        finally:
            cleaner.shutdown()
    lines = [r.getMessage() for r in caplog.records if "Log cleaner thread" in r.getMessage()]
    assert lines and re.search(r"Log cleaner thread 0 cleaned log t-0 \(dirty section = \[0, \d+\]\)", lines[0])
    assert "size reduction" in lines[0]


def test_pre_clean_stats_count_the_logs_past_max_compaction_lag(tmp_path):
    lag = 1000
    late = make_log(tmp_path / "a", dict(COMPACT, **{"max.compaction.lag.ms": str(lag),
                                                      "min.cleanable.dirty.ratio": "0.99"}))
    now = 10**13
    mgr = LogCleanerManager([str(tmp_path / "a")], lambda: [late], clock=lambda: now)
    pre = PreCleanStats()
    todo = mgr.grab_filthiest_compacted_log(pre)
    assert todo is not None and todo.needs_compaction_now
    assert pre.cleanable_partitions == 1 and pre.delayed_partitions == 1
    assert pre.max_compaction_delay_ms == now - late.log_segments()[0].first_batch_timestamp() - lag


def test_configs_describe_shows_the_cleaner_settings():
    d = DynamicBrokerConfig(1, {"broker.id": "1", "log.cleaner.threads": "2",
                                "log.cleaner.min.cleanable.ratio": "0.1"}, FakeEntityConfigs())
    entries = {e["name"]: e for e in d.describe("1")}
    for name in ("log.cleaner.enable", "log.cleaner.threads", "log.cleaner.dedupe.buffer.size",
                 "log.cleaner.io.buffer.load.factor", "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms",
                 "log.cleaner.min.cleanable.ratio", "log.cleaner.delete.retention.ms",
                 "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", "log.cleanup.policy",
                 "kafkatier.log.cleaner.duty.cycle"):
        assert name in entries, name
    assert entries["log.cleaner.threads"]["value"] == "2" and entries["log.cleaner.threads"]["read_only"]
    assert entries["log.cleaner.threads"]["source"] == STATIC_BROKER_CONFIG
    ratio = entries["log.cleaner.min.cleanable.ratio"]
    assert ratio["value"] == "0.1" and not ratio["read_only"]   # cluster-wide dynamic, as in Kafka
    assert entries["log.cleaner.delete.retention.ms"]["value"] == "86400000"
    assert entries["log.cleaner.delete.retention.ms"]["source"] == DEFAULT_CONFIG


def test_the_duty_cycle_pauses_after_work_not_after_idle_time():
    import threading

    from kafkatier.log.cleaner_throttle import DutyCycle
    stop = threading.Event()
    d = DutyCycle(0.5, stop, slice_s=0.001)
    d._mark -= 60.0   # a minute of back-off since the last tick (test reaches in to fake the clock)
    d.begin()
    d.tick()
    assert d.slept_s < 1.0   # the idle minute earned no pause
    t = d._mark
    while d._mark == t:   # work past the slice: a pause as long as the work (fraction 0.5)
        d.tick()
    assert 0.001 <= d.slept_s < 1.0


def test_a_cluster_wide_cleaner_default_reaches_the_logs_without_an_override(tmp_path):
    from kafkatier.log.log_config import LogConfig, broker_topic_defaults
    from kafkatier.log.log_manager import LogManager
    m = LogManager([str(tmp_path / "d")])
    plain = m.get_or_create_log("a", 0, {"cleanup.policy": "compact"}, is_new=True)
    pinned = m.get_or_create_log("b", 0, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.9"},
                                 is_new=True)
    overrides = {"a": {"cleanup.policy": "compact"},
                 "b": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.9"}}
    defaults = broker_topic_defaults({"log.cleaner.min.cleanable.ratio": "0.1",
                                      "log.cleaner.delete.retention.ms": "5000"})
    m.update_broker_defaults(LogConfig.from_props(defaults), overrides.get)
    assert plain.config.min_cleanable_dirty_ratio == 0.1 and plain.config.delete_retention_ms == 5000
    assert pinned.config.min_cleanable_dirty_ratio == 0.9   # a topic override wins, as in Kafka
    m.shutdown()
