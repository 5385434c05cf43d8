"""The scenario checker of Spark producer jobs: rows lost, and for exactly-once jobs rows duplicated or a failed
job's records visible to the read_committed final read."""
from __future__ import annotations

from kafkatier.scenario.checkers.kafka_clients import spark_rows


def history(job_type: str, exactly_once: bool, values: list[str]) -> list[dict]:
    job = {"topic": "t", "rows": 3, "record_size": 2, "exactly_once": exactly_once}
    return [
        {"index": 0, "time": 0, "type": "invoke", "process": "spark_producer-0", "f": "spark-produce", "value": job},
        {"index": 1, "time": 1, "type": job_type, "process": "spark_producer-0", "f": "spark-produce", "value": job},
        {"index": 2, "time": 2, "type": "info", "process": "final", "f": "final-read",
         "value": {"t/0": {"log_start": 0, "high_watermark": len(values) + 1,
                           "records": [[o, v] for o, v in enumerate(values)]}}},
    ]


def kinds(entries: list[dict]) -> list[str]:
    return [a.type for a in spark_rows(entries)[0]]


def test_exactly_once_rows_each_once_are_valid():
    assert kinds(history("ok", True, ["00", "01", "02"])) == []


def test_a_duplicate_is_an_anomaly_only_for_an_exactly_once_job():
    assert kinds(history("ok", True, ["00", "01", "01", "02"])) == ["spark-row-duplicated"]
    assert kinds(history("ok", False, ["00", "01", "01", "02"])) == []       # at least once: counted only
    assert spark_rows(history("ok", False, ["00", "01", "01", "02"]))[1]["duplicates"] == 1


def test_a_lost_row_and_a_failed_exactly_once_job_left_visible():
    assert kinds(history("ok", True, ["00", "02"])) == ["spark-row-lost"]
    assert kinds(history("fail", True, ["00"])) == ["spark-failed-job-visible"]
    assert kinds(history("fail", True, [])) == []
    assert kinds(history("fail", False, ["00"])) == []
