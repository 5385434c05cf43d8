"""Each scenario checker is fed a crafted history holding its anomaly and must report it (a checker that
cannot fail is a defect); the same histories without the anomaly must pass."""
from __future__ import annotations

import pytest

from kafkatier.scenario.checkers import (check_all, controller, delete_records, kafka_clients, log_dirs, partitions,
                                         split, tiered, unclean)


class H:
    """A tiny history builder: entries in Jepsen's shape, times in seconds."""

    def __init__(self):
        self.entries: list[dict] = []

    def add(self, t: float, type_: str, process: str, f: str, value=None, **extra) -> dict:
        e = {"index": len(self.entries), "time": int(t * 1e9), "type": type_, "process": process, "f": f,
             "value": value, **extra}
        self.entries.append(e)
        return e

    def producer(self, idempotence: bool = True, name: str = "producer-0") -> None:
        self.add(0, "info", name, "start", {"idempotence": idempotence, "acks": "all"})

    def send(self, t: float, seq: int, offset: int | None, partition: int = 0, acks: str = "all",
             name: str = "producer-0") -> str:
        v = f"{name}:{seq}"
        self.add(t, "invoke", name, "send", [None, v], topic="t")
        if offset is not None:
            self.add(t + 0.01, "ok", name, "send", [None, v], topic="t", partition=partition, offset=offset, acks=acks)
        return v

    def poll(self, t: float, records: dict[int, list[tuple[int, str]]], name: str = "consumer-0") -> None:
        value = {str(p): [list(r) for r in rs] for p, rs in records.items()}
        self.add(t, "invoke", name, "poll", None, topic="t", invoked=int(t * 1e9))
        self.add(t + 0.01, "ok", name, "poll", value, topic="t", invoked=int(t * 1e9))

    def final_read(self, parts: dict[int, tuple[int, int, list[tuple[int, str]]]]) -> None:
        self.add(99, "info", "final", "final-read", {f"t/{p}": {"log_start": lo, "high_watermark": hi,
                                                               "records": [list(r) for r in recs]}
                                                     for p, (lo, hi, recs) in parts.items()})

    def observe(self, t: float, **value) -> None:
        self.add(t, "info", "observer", "observe", value)

    def types(self, checker) -> set[str]:
        return {a.type for a in checker.check(self.entries)}


def clean_log(n: int = 3) -> H:
    h = H()
    h.producer()
    vals = [h.send(0.1 * i, i, i) for i in range(n)]
    h.poll(1.0, {0: [(i, v) for i, v in enumerate(vals)]})
    h.final_read({0: (0, n, [(i, v) for i, v in enumerate(vals)])})
    return h


# ------------------------------------------------------------------------------------------- Jepsen's anomalies

def test_clean_history_has_no_anomalies():
    assert check_all(clean_log().entries) == []


def test_lost_write_is_reported():
    h = H()
    h.producer()
    a, b, c = (h.send(0.1 * i, i, i) for i in range(3))
    h.final_read({0: (0, 3, [(0, a), (2, c)])})   # offset 1 acknowledged, gone while 2 is there
    assert "lost-write" in h.types(kafka_clients)


def test_records_below_the_final_log_start_are_not_lost_writes():
    h = H()
    h.producer()
    a, b, c = (h.send(0.1 * i, i, i) for i in range(3))
    h.final_read({0: (2, 3, [(2, c)])})
    assert h.types(kafka_clients) == set()


def test_unseen_is_reported():
    h = H()
    h.producer()
    a = h.send(0, 0, 0)
    h.send(0.1, 1, 1)
    h.final_read({0: (0, 1, [(0, a)])})           # acknowledged offset 1 above the final high watermark
    assert "unseen" in h.types(kafka_clients)


def test_inconsistent_offsets_are_reported():
    h = clean_log()
    h.poll(2.0, {0: [(1, "producer-9:1")]})
    assert "inconsistent-offsets" in h.types(kafka_clients)


def test_duplicate_of_an_idempotent_producer_is_reported_and_not_of_others():
    for idempotent, expected in ((True, {"duplicate"}), (False, set())):
        h = H()
        h.producer(idempotence=idempotent)
        a = h.send(0, 0, 0)
        h.final_read({0: (0, 2, [(0, a), (1, a)])})
        assert h.types(kafka_clients) & {"duplicate"} == expected


def test_duplicates_after_an_in_flight_timeout_are_not_reported():
    h = H()
    h.producer(idempotence=True)
    a = h.send(0, 0, 0)
    h.add(0.5, "invoke", "producer-0", "send", [None, "producer-0:1"], topic="t")
    h.add(4.5, "info", "producer-0", "send", [None, "producer-0:1"], topic="t", error="_MSG_TIMED_OUT")
    h.final_read({0: (0, 2, [(0, a), (1, a)])})
    assert "duplicate" not in h.types(kafka_clients)


def test_nonmonotonic_poll_is_reported_but_a_seek_starts_a_new_session():
    h = clean_log()
    h.poll(2.0, {0: [(1, "producer-0:1")]})
    assert "nonmonotonic-poll" in h.types(kafka_clients)
    h2 = clean_log()
    h2.add(1.5, "info", "consumer-0", "seek", "beginning")
    h2.poll(2.0, {0: [(0, "producer-0:0")]})
    assert "nonmonotonic-poll" not in h2.types(kafka_clients)


def test_poll_skip_is_reported():
    h = H()
    h.producer()
    vals = [h.send(0.1 * i, i, i) for i in range(4)]
    h.poll(1.0, {0: [(0, vals[0])]})
    h.poll(1.1, {0: [(3, vals[3])]})             # 1 and 2 are in the log
    h.final_read({0: (0, 4, list(enumerate(vals)))})
    assert "poll-skip" in h.types(kafka_clients)


# ------------------------------------------------------------------------------------------- controller

def ctrl(h: H, t: float, broker, epoch: int, czxid: int, mzxid: int) -> None:
    h.observe(t, kind="controller", broker=broker, czxid=czxid, epoch=epoch, epoch_mzxid=mzxid)


def test_controller_epoch_decrease_and_two_controllers_per_epoch_are_reported():
    h = H()
    ctrl(h, 0, 1, 1, 10, 10)
    ctrl(h, 1, 2, 2, 20, 20)
    ctrl(h, 2, 3, 1, 30, 30)
    assert {"controller-epoch-decreased", "two-controllers-one-epoch", "epoch-not-increased"} <= h.types(controller)
    ok = H()
    ctrl(ok, 0, 1, 1, 10, 10)
    ctrl(ok, 1, None, 1, None, 10)
    ctrl(ok, 2, 2, 2, 20, 20)
    assert ok.types(controller) == set()


def part(h: H, t: float, leader: int, leader_epoch: int, isr, ce: int = 1, mzxid: int = 0, replicas=(1, 2, 3),
         version: int = 0) -> None:
    h.observe(t, kind="partition", topic="t", partition=0, leader=leader, leader_epoch=leader_epoch, isr=list(isr),
              replicas=list(replicas), controller_epoch=ce, version=version, mzxid=mzxid)


def test_write_from_a_fenced_controller_epoch_is_reported():
    h = H()
    ctrl(h, 0, 1, 1, 10, 10)
    part(h, 0.1, 1, 0, [1, 2, 3], ce=1, mzxid=11)
    ctrl(h, 1, 2, 2, 20, 20)
    part(h, 2, 3, 1, [3], ce=1, mzxid=25)        # leader election stamped with epoch 1 after epoch 2 won
    assert "write-from-fenced-epoch" in h.types(controller)


# ------------------------------------------------------------------------------------------- partitions

def test_partition_state_invariants_are_reported():
    h = H()
    part(h, 0, 1, 3, [2, 3])                      # leader not in ISR
    part(h, 1, 2, 2, [2, 4])                      # epoch went down; 4 not a replica
    assert {"leader-not-in-isr", "leader-epoch-decreased", "isr-not-in-replicas"} <= h.types(partitions)


def test_acked_all_lost_is_reported_only_for_acks_all():
    h = H()
    h.producer()
    h.send(0, 0, 0, acks="all")
    h.send(0.1, 1, 1, acks="1")
    h.final_read({0: (0, 3, [(2, "producer-0:2")])})
    found = [x for x in partitions.check(h.entries) if x.type == "acked-all-lost"]
    assert len(found) == 1 and len(found[0].witnesses) == 1


# ------------------------------------------------------------------------------------------- KIP-950

def tier(h: H, t: float, state: str, epoch: int, version: int) -> None:
    h.observe(t, kind="tiered", topic="t", state=state, epoch=epoch, version=version, epoch_version=epoch, mzxid=0)


def test_tiered_transitions_and_epochs():
    ok = H()
    for i, (s, e) in enumerate([("ENABLED", 0), ("DISABLING", 1), ("DISABLED", 1), ("ENABLED", 1),
                                ("DISABLING", 2), ("DISABLED", 2), ("DISABLING", 3), ("DISABLED", 3)]):
        tier(ok, i, s, e, i)
    assert ok.types(tiered) == set()
    bad = H()
    tier(bad, 0, "ENABLED", 1, 0)
    tier(bad, 1, "DISABLED", 0, 1)                # skipped DISABLING in consecutive versions; epoch went down
    assert {"invalid-tiered-transition", "tiered-epoch-decreased"} <= bad.types(tiered)
    missed = H()
    tier(missed, 0, "ENABLED", 0, 0)
    tier(missed, 1, "DISABLED", 1, 2)             # version jumped: DISABLING was missed, not skipped
    assert missed.types(tiered) == set()


def test_disabling_left_after_heal_and_remote_leftovers_are_reported():
    h = H()
    h.add(99, "info", "final", "final-tiered", {"t": {"state": "DISABLING", "epoch": 1,
                                                     "config": {"remote.storage.enable": "false"}}})
    h.add(99, "info", "final", "final-remote", {"t/0": {"files": ["00000000000000000000-abc"], "segments": []}})
    assert {"disabling-not-completed", "remote-data-left"} <= h.types(tiered)
    old = H()
    old.add(99, "info", "final", "final-tiered", {"t": {"state": "ENABLED", "epoch": 2,
                                                       "config": {"remote.storage.enable": "true"}}})
    old.final_read({0: (50, 60, [])})
    old.add(99, "info", "final", "final-remote", {"t/0": {"files": ["x"], "segments": [
        {"start": 0, "end": 9, "state": "COPY_SEGMENT_FINISHED", "tiered_epoch": 1, "has_files": True}]}})
    assert "remote-data-left" in old.types(tiered)


def test_tiered_log_start_going_backwards_is_reported():
    h = H()
    tier(h, 0, "ENABLED", 0, 0)
    h.add(1, "ok", "offsets", "list-offsets", [10, 20], topic="t", partition=0)
    h.add(2, "ok", "offsets", "list-offsets", [5, 21], topic="t", partition=0)
    assert "log-start-decreased" in h.types(tiered)


# ------------------------------------------------------------------------------------------- KIP-107

@pytest.mark.parametrize("after", ["poll", "list-offsets", "final"])
def test_nothing_below_an_acknowledged_low_watermark(after):
    h = H()
    h.add(1, "invoke", "admin", "delete-records", {"topic": "t", "partition": 0, "offset": 5})
    h.add(1.1, "ok", "admin", "delete-records", {"topic": "t", "partition": 0, "offset": 5}, low_watermark=5)
    if after == "poll":
        h.add(1.5, "info", "consumer-0", "seek", "beginning")
        h.poll(2, {0: [(3, "producer-0:3")]})
        want = "served-below-low-watermark"
    elif after == "list-offsets":
        h.add(2, "ok", "offsets", "list-offsets", [3, 10], topic="t", partition=0, invoked=int(2e9))
        want = "log-start-below-low-watermark"
    else:
        h.final_read({0: (0, 10, [])})
        want = "log-start-below-low-watermark"
    assert want in h.types(delete_records)
    # a read session started before the acknowledgement may still return records its client prefetched
    early = H()
    early.add(0.5, "info", "consumer-0", "seek", "beginning")
    early.add(1, "ok", "admin", "delete-records", {"topic": "t", "partition": 0, "offset": 5}, low_watermark=5)
    early.add(2, "ok", "consumer-0", "poll", {"0": [[3, "v"]]}, topic="t", invoked=int(2e9))
    assert early.types(delete_records) == set()


def test_a_crashing_checker_is_reported_not_hidden():
    broken = [{"index": 0, "time": 0, "type": "ok", "process": "producer-0", "f": "send", "value": None}]
    assert any(a.type == "checker-crashed" for a in check_all(broken))


def test_old_epoch_served_after_a_delete_disablement_is_reported():
    h = H()
    h.observe(0, kind="topic_config", topic="t", config={"remote.storage.enable": "false"}, version=1)
    tier(h, 1, "DISABLED", 1, 2)
    h.add(2, "ok", "offsets", "list-offsets", [40, 50], topic="t", partition=0, invoked=int(1.9e9))
    h.poll(2.5, {0: [(3, "producer-0:3")]})          # a session started before: may return prefetched data
    assert "old-epoch-served" not in h.types(tiered)
    h.add(2.8, "info", "consumer-0", "seek", "beginning")
    h.poll(3, {0: [(3, "producer-0:3")]})
    assert "old-epoch-served" in h.types(tiered)


def test_acks_without_offsets_and_incomplete_final_reads_are_judged_only_where_known():
    h = H()
    h.producer()
    a, b, c = (h.send(0.1 * i, i, i) for i in range(3))
    h.add(0.5, "ok", "producer-0", "send", [None, "producer-0:9"], topic="t", partition=0, offset=None, acks="all")
    h.final_read({0: (0, 3, [(0, a)])})           # the read stopped after offset 0
    assert h.types(kafka_clients) == {"unreadable-after-heal"} and h.types(partitions) == set()


def test_unreadable_after_heal_is_reported():
    h = H()
    h.final_read({0: (0, 3, [(0, "producer-0:0")])})
    assert "unreadable-after-heal" in h.types(kafka_clients)


# -- KIP-113: log dirs ------------------------------------------------------------------------------------------

def _log_dirs(h: H, dirs: list[dict], moved_broker: int | None = 2) -> None:
    if moved_broker is not None:
        v = {"topic": "t", "partition": 0, "broker": moved_broker, "dir": "/b2/d1"}
        h.add(1, "invoke", "admin", "move-replica", v)
        h.add(1.1, "ok", "admin", "move-replica", v)
    h.add(99, "info", "final", "final-log-dirs", {"replicas": {"t/0": [1, 2]}, "dirs": dirs})


def _dir(broker: int, path: str, parts: dict) -> dict:
    return {"broker": broker, "dir": path, "partitions": parts}


BATCHES = [[0, 9, 111], [10, 19, 222], [20, 29, 333]]


def _healthy_dirs() -> list[dict]:
    return [_dir(1, "/b1/d0", {"t-0": {"tp": "t/0", "kind": "current", "batches": BATCHES}}),
            _dir(1, "/b1/d1", {}),
            _dir(2, "/b2/d0", {}),
            _dir(2, "/b2/d1", {"t-0": {"tp": "t/0", "kind": "current", "batches": BATCHES[1:]}})]


def test_log_dirs_healthy_moved_replica_passes():
    h = H()
    _log_dirs(h, _healthy_dirs())
    assert log_dirs.check(h.entries) == []


def test_log_dirs_without_final_entry_checks_nothing():
    assert log_dirs.check(H().entries) == []


@pytest.mark.parametrize("anomaly", ["replica-in-several-dirs", "replica-missing", "move-left-behind",
                                     "replica-diverged", "replica-gap"])
def test_log_dirs_reports_its_anomalies(anomaly):
    dirs = _healthy_dirs()
    if anomaly == "replica-in-several-dirs":
        dirs[2]["partitions"]["t-0"] = {"tp": "t/0", "kind": "current", "batches": BATCHES}
    elif anomaly == "replica-missing":
        dirs[3]["partitions"] = {}
    elif anomaly == "move-left-behind":
        dirs[2]["partitions"]["t-0.move"] = {"tp": "t/0", "kind": "future", "batches": []}
    elif anomaly == "replica-diverged":
        dirs[3]["partitions"]["t-0"]["batches"] = [[10, 19, 222], [20, 29, 999]]
    else:   # the moved copy lost a batch in the middle
        dirs[3]["partitions"]["t-0"]["batches"] = [[10, 19, 222], [30, 39, 444]]
        dirs[0]["partitions"]["t-0"]["batches"] = BATCHES + [[30, 39, 444]]
    h = H()
    _log_dirs(h, dirs)
    found = [a.type for a in log_dirs.check(h.entries)]
    want = "replica-diverged" if anomaly == "replica-gap" else anomaly
    assert want in found, found
    assert want in [a.type for a in check_all(h.entries)]


# -- Spark producer rows -----------------------------------------------------------------------------------------

def _spark(h: H, rows: int, final_values: list[str], type_: str = "ok") -> None:
    v = {"topic": "t", "rows": rows, "record_size": 4}
    h.add(1, "invoke", "spark_producer-0", "spark-produce", v)
    h.add(9, type_, "spark_producer-0", "spark-produce", v)
    h.add(99, "info", "final", "final-read", {"t/0": {"log_start": 0, "high_watermark": len(final_values),
                                                      "records": [[o, x] for o, x in enumerate(final_values)]}})


def test_spark_rows_all_there_with_duplicates_pass_and_are_counted():
    h = H()
    _spark(h, 3, ["0000", "0001", "0001", "0002"])
    anomalies, counts = kafka_clients.spark_rows(h.entries)
    assert anomalies == [] and counts == {"rows": 3, "lost": 0, "duplicates": 1}
    assert [a for a in check_all(h.entries) if a.checker == "kafka_clients"] == []


def test_spark_row_missing_after_a_successful_job_is_lost():
    h = H()
    _spark(h, 3, ["0000", "0002"])
    assert [a.type for a in kafka_clients.check(h.entries)] == ["spark-row-lost"]


def test_spark_rows_of_a_failed_job_are_not_acknowledged():
    h = H()
    _spark(h, 3, ["0000"], type_="fail")
    assert kafka_clients.check(h.entries) == []


# ------------------------------------------------------------------------------------------- unclean elections

def _unclean_history(allowed: bool, late_loss: bool = False) -> H:
    """t/0: broker 1 leads alone (ISR [1]) and acknowledges offsets 0-3; broker 1 dies (leader -1), broker 2 is
    elected from outside the ISR at t=5 with only offsets 0-1; offset 2 then holds a new record."""
    h = H()
    h.add(0, "info", "nemesis", "cluster_up", {"brokers": 3, "zookeeper": None, "accept_unclean_loss": allowed})
    h.producer()
    part = dict(kind="partition", topic="t", partition=0, replicas=[1, 2, 3], controller_epoch=1)
    h.observe(0.5, **part, leader=1, leader_epoch=1, isr=[1], version=3, mzxid=10)
    vals = [h.send(1 + 0.1 * i, i, i) for i in range(4)]
    h.poll(2.0, {0: [(i, v) for i, v in enumerate(vals)]})
    h.observe(4.0, **part, leader=-1, leader_epoch=2, isr=[1], version=4, mzxid=11)
    h.observe(5.0, **part, leader=2, leader_epoch=3, isr=[2], version=5, mzxid=12)
    new = h.send(6.0, 10, 2)
    later = h.send(6.5, 11, 3)
    h.poll(7.0, {0: [(2, new)]})
    records = [(0, vals[0]), (1, vals[1]), (2, new), (3, "producer-9:0" if late_loss else later)]
    h.final_read({0: (0, 4, records)})
    return h


def test_an_unclean_election_the_scenario_does_not_accept_is_an_anomaly():
    h = _unclean_history(allowed=False)
    assert unclean.elections(h.entries)["t/0"][0][0] == int(5.0 * 1e9)
    assert "unclean-election-not-allowed" in h.types(unclean)
    found = check_all(h.entries)
    assert {"lost-write", "acked-all-lost"} <= {a.type for a in found} and not any(a.accepted for a in found)


def test_an_accepted_unclean_election_excuses_only_the_loss_kafka_accepts():
    anomalies, accepted = split(check_all(_unclean_history(allowed=True).entries))
    assert anomalies == [], [a.to_json() for a in anomalies]
    assert {(a.checker, a.type) for a in accepted} >= {("kafka_clients", "lost-write"),
                                                       ("partitions", "acked-all-lost"),
                                                       ("kafka_clients", "inconsistent-offsets")}
    assert all("unclean leader election of t/0 at 5.00s" in a.accepted for a in accepted)
    # A record acknowledged by the new leader after the election is judged as always.
    anomalies, _ = split(check_all(_unclean_history(allowed=True, late_loss=True).entries))
    assert {a.type for a in anomalies} == {"lost-write", "acked-all-lost"}
    assert all(w["value"][1] == "producer-0:11" for a in anomalies for w in a.witnesses if w["process"] != "final")


def test_a_clean_election_is_not_unclean():
    h = H()
    part = dict(kind="partition", topic="t", partition=0, replicas=[1, 2, 3], controller_epoch=1)
    h.observe(0.5, **part, leader=1, leader_epoch=1, isr=[1, 2], version=3, mzxid=10)
    h.observe(1.0, **part, leader=2, leader_epoch=2, isr=[2], version=4, mzxid=11)
    h.observe(2.0, **part, leader=3, leader_epoch=4, isr=[3], version=6, mzxid=13)   # a missed write: no verdict
    assert unclean.elections(h.entries) == {} and unclean.check(h.entries) == []
