"""What a run's and a sweep's reports tell a person: warnings for duplicates Kafka allows, the schedule in the
order steps happened, a sweep's page."""
from __future__ import annotations

from kafkatier.scenario import report


def _start(process, idempotence):
    return {"process": process, "f": "start", "type": "info", "value": {"idempotence": idempotence}}


def _final(records):
    return {"process": "final", "f": "final-read", "type": "info",
            "value": {"t/0": {"log_start": 0, "high_watermark": len(records), "records": records}}}


def test_duplicates_of_a_non_idempotent_producer_are_a_warning():
    entries = [_start("producer-0", False), _start("producer-1", True),
               _final([[0, "producer-0:1"], [1, "producer-0:1"], [2, "producer-0:2"], [3, "producer-0:1"],
                       [4, "producer-1:1"]])]
    [w] = report.warnings(entries)
    assert w.startswith("2 duplicate records from producer-0, a non-idempotent producer")


def test_no_warning_without_duplicates():
    assert report.warnings([_start("producer-0", False), _final([[0, "producer-0:1"]])]) == []


def test_the_schedule_reads_in_the_order_steps_happened():
    steps = [{"number": 1, "at": None, "happened_at": 3.0}, {"number": 2, "at": 1.0, "happened_at": 1.2},
             {"number": 3, "at": 2.0}, {"number": 4, "at": None, "status": "skipped: condition not met"}]
    assert [s["number"] for s in report.schedule_in_time_order(steps)] == [2, 3, 1, 4]


def test_a_sweep_page_lists_every_seed_with_a_histogram(tmp_path):
    rows = [dict(seed=s, outcome="valid" if s % 2 else "anomalies", exit_code=0 if s % 2 else 1,
                 anomalies=[] if s % 2 else ["kafka_clients/lost-write"], reason="", duration_s=10.0 + s,
                 faults={"kill": s}, schedule_digest=f"d{s}", executor="host/1",
                 replay=f"kafkatier scenario run x --seed {s}",
                 run_dir=None if s % 2 else str(tmp_path / "runs" / f"x-{s}")) for s in range(1, 7)]
    page = tmp_path / "index.html"
    report.write_sweep_html(str(page), "x", "local[2]", rows, 60.0)
    text = page.read_text()
    assert text.count("<tr><td>") == 6 and "kafka_clients/lost-write" in text and 'href="runs/x-2/index.html"' in text
    assert "kill=21" in text and "|" in text   # faults over all seeds; the histogram's bars
