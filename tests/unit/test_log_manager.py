"""LogManager: start-up loading, placement, checkpoints, clean shutdown, deletion and background retention."""
from __future__ import annotations

import json
import os
import time

import pytest
from kafka.record.memory_records import MemoryRecordsBuilder

from kafkatier.log.errors import InconsistentBrokerIdError, InconsistentTopicIdError, LogDirectoryError
from kafkatier.log.log_config import LogConfig
from kafkatier.log.log_manager import LogManager
from kafkatier.waiting import wait_for


def blob(n: int = 5, value_size: int = 100) -> bytes:
    now = int(time.time() * 1000)
    b = MemoryRecordsBuilder(2, 0, 1 << 22)
    for i in range(n):
        b.append(now + i, None, b"x" * value_size)
    b.close()
    return bytes(b.buffer())


def wait_until(cond, timeout_s: float = 5.0, what: str = "condition"):
    wait_for(cond, timeout_s, interval=0.01, message=what)


@pytest.fixture
def dirs(tmp_path):
    return [str(tmp_path / "d1"), str(tmp_path / "d2")]


def test_new_logs_go_to_dir_with_fewest_partitions(dirs):
    m = LogManager(dirs, broker_id=1, cluster_id="abc")
    placed = [os.path.dirname(m.get_or_create_log("t", p, is_new=True).dir) for p in range(4)]
    assert placed == [dirs[0], dirs[1], dirs[0], dirs[1]]
    assert os.path.isdir(os.path.join(dirs[1], "t-1"))
    assert m.get_or_create_log("t", 1) is m.get_log("t", 1)
    assert len(m.all_logs()) == 4
    m.shutdown()


def test_meta_properties_and_partition_metadata(dirs):
    m = LogManager(dirs, broker_id=3, cluster_id="Zq1abc")
    lg = m.get_or_create_log("t", 0, topic_id="AAAAAAAAAAAAAAAAAAAAAQ")
    text = open(os.path.join(dirs[0], "meta.properties")).read().splitlines()
    assert text[0] == "#" and text[1].startswith("#")
    assert sorted(text[2:]) == ["broker.id=3", "cluster.id=Zq1abc", "version=0"]
    assert open(os.path.join(lg.dir, "partition.metadata")).read() == "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n"
    with pytest.raises(InconsistentTopicIdError):
        m.get_or_create_log("t", 0, topic_id="BBBBBBBBBBBBBBBBBBBBBQ")
    m.shutdown()
    with pytest.raises(InconsistentBrokerIdError, match="doesn't match stored broker.id"):
        LogManager(dirs, broker_id=4)


def test_dir_lock_prevents_second_manager(dirs):
    m = LogManager(dirs)
    with pytest.raises(LogDirectoryError, match="Failed to acquire lock"):
        LogManager(dirs)
    m.shutdown()
    LogManager(dirs).shutdown()


def test_clean_shutdown_writes_checkpoints_and_marker_then_reloads(dirs):
    m = LogManager(dirs)
    a = m.get_or_create_log("a", 0, LogConfig.from_props({"segment.bytes": "2000"}))
    b = m.get_or_create_log("b", 0)
    for _ in range(12):
        a.append_as_leader(blob(), 0)
    b.append_as_leader(blob(), 0)
    a.high_watermark = 60
    a.delete_old_segments()
    a.maybe_increment_log_start_offset(17)
    m.shutdown(high_watermarks={("a", 0): 60, ("b", 0): 3})
    d1, d2 = dirs
    assert open(os.path.join(d1, "recovery-point-offset-checkpoint")).read() == "0\n1\na 0 60\n"
    assert open(os.path.join(d2, "recovery-point-offset-checkpoint")).read() == "0\n1\nb 0 5\n"
    assert open(os.path.join(d1, "replication-offset-checkpoint")).read() == "0\n1\na 0 60\n"
    assert open(os.path.join(d2, "replication-offset-checkpoint")).read() == "0\n1\nb 0 3\n"
    # Only logs whose start offset is above their first segment's base are listed.
    assert open(os.path.join(d1, "log-start-offset-checkpoint")).read() == "0\n1\na 0 17\n"
    assert open(os.path.join(d2, "log-start-offset-checkpoint")).read() == "0\n0\n"
    marker = os.path.join(d1, ".kafka_cleanshutdown")
    assert json.loads(open(marker).read()) == {"version": "0", "broker_epoch": "-1"}

    m2 = LogManager(dirs)
    assert not os.path.exists(marker)  # removed once loaded, so a crash is noticed next time
    a2 = m2.get_log("a", 0)
    assert (a2.log_start_offset, a2.log_end_offset, a2.high_watermark, a2.recovery_point) == (17, 60, 60, 60)
    assert m2.get_log("b", 0).high_watermark == 3
    m2.shutdown()


def test_crash_recovery_from_recovery_point(dirs):
    m = LogManager(dirs[:1])
    lg = m.get_or_create_log("t", 0)
    for _ in range(4):
        lg.append_as_leader(blob(), 0)
    m.checkpoint_recovery_points()
    path = os.path.join(lg.dir, "00000000000000000000.log")
    lg.close()
    m._release_locks()  # simulate a crash: no flush, no checkpoint, no marker
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 7)
    m2 = LogManager(dirs[:1])
    assert m2.get_log("t", 0).log_end_offset == 15
    m2.shutdown()


def test_startup_skips_bad_names_removes_delete_dirs_and_promotes_lone_future_dirs(dirs, caplog):
    d1 = dirs[0]
    for name in ("not_a_partition", "t-x", "t-0.0123456789abcdef0123456789abcdef-delete", "u-1.delete",
                 "t-0.fedcba9876543210fedcba9876543210-future", "remote-log-index-cache"):
        os.makedirs(os.path.join(d1, name))
    m = LogManager(dirs, topic_configs=lambda t: {"file.delete.delay.ms": "0"})
    # A future dir with no current log anywhere and no bad dir becomes the current log
    # (docs/kip-113-jbod.md#start-up-recovery).
    assert [lg.dir for lg in m.all_logs()] == [os.path.join(os.path.abspath(d1), "t-0")]
    m.startup()  # marked dirs are removed asynchronously once the log manager runs
    wait_until(lambda: not os.path.exists(os.path.join(d1, "t-0.0123456789abcdef0123456789abcdef-delete")))
    wait_until(lambda: not os.path.exists(os.path.join(d1, "u-1.delete")))
    assert os.path.isdir(os.path.join(d1, "not_a_partition"))  # skipped, never deleted
    assert "is not in the form of topic-partition" in caplog.text
    m.shutdown()


def test_duplicate_partition_across_dirs_refuses_to_start(dirs):
    for d in dirs:
        os.makedirs(os.path.join(d, "t-0"))
    with pytest.raises(LogDirectoryError, match="Duplicate log directories for t-0"):
        LogManager(dirs)


def test_delete_log_renames_with_kafka_suffix(dirs):
    m = LogManager(dirs[:1])
    lg = m.get_or_create_log("topic.with-dash", 7, LogConfig.from_props({"file.delete.delay.ms": "0"}))
    lg.append_as_leader(blob(), 0)
    m.delete_log("topic.with-dash", 7)
    assert m.get_log("topic.with-dash", 7) is None
    assert os.listdir(dirs[0]) and not any(n.startswith("topic.with-dash") for n in os.listdir(dirs[0]))
    m.shutdown()


def test_background_retention_deletes_segments(dirs):
    m = LogManager(dirs[:1], retention_check_interval_ms=20, initial_task_delay_ms=0)
    cfg = LogConfig.from_props({"segment.bytes": "1000", "retention.bytes": "1000", "file.delete.delay.ms": "0"})
    lg = m.get_or_create_log("t", 0, cfg)
    for _ in range(10):
        lg.append_as_leader(blob(), 0)
    lg.high_watermark = lg.log_end_offset
    m.startup()
    wait_until(lambda: lg.log_start_offset > 0, what="retention to move the log start offset")
    names = [n for n in os.listdir(lg.dir) if n.endswith(".log")]
    assert "00000000000000000000.log" not in names
    assert lg.size <= 1000 + len(blob())
    m.shutdown()


def test_malformed_checkpoint_falls_back_safely(dirs):
    m = LogManager(dirs[:1])
    lg = m.get_or_create_log("t", 0)
    lg.append_as_leader(blob(), 0)
    m.shutdown()
    with open(os.path.join(dirs[0], "recovery-point-offset-checkpoint"), "w") as f:
        f.write("0\n1\ngarbage\n")
    os.unlink(os.path.join(dirs[0], ".kafka_cleanshutdown"))
    m2 = LogManager(dirs[:1])  # warns, recovers everything from offset 0, loses nothing
    assert m2.get_log("t", 0).log_end_offset == 5
    m2.shutdown()


def test_topic_config_dict_accepted(dirs):
    m = LogManager(dirs[:1], default_config=LogConfig.from_props({"retention.ms": "5000"}))
    lg = m.get_or_create_log("t", 0, {"segment.bytes": "2048"})
    assert lg.config.segment_bytes == 2048 and lg.config.retention_ms == 5000
    m.update_topic_config("t", {"segment.bytes": "4096"})
    assert lg.config.segment_bytes == 4096 and lg.config.retention_ms == 5000
    m.shutdown()
