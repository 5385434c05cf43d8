"""The transactional checkers (checkers/transactions.py): each anomaly fed in a crafted history is reported, with
witnesses; the clean history passes every checker (kafka_clients' too: a read_committed read skips aborted
records and control batches, which is neither a skip nor unreadable)."""
from __future__ import annotations

from kafkatier.scenario.checkers import check_all, kafka_clients, transactions

S = 1_000_000_000


class H:
    def __init__(self):
        self.entries: list[dict] = []

    def add(self, t: float, type_: str, process: str, f: str, value=None, **extra) -> dict:
        e = {"index": len(self.entries), "time": int(t * S), "type": type_, "process": process, "f": f,
             "value": value, **extra}
        self.entries.append(e)
        return e

    def txn(self, t: float, name: str, writes: list[tuple[int, int]], outcome: str = "ok", end: float | None = None,
            decision: str = "commit", **extra) -> list[str]:
        """A transaction of ``writes`` ``(partition, offset)``, asked to end at ``end`` (default t + 0.1)."""
        values = [f"txn_producer-0:{name}:{i}" for i in range(len(writes))]
        value = {"txn": f"txn_producer-0:{name}", "sends": [[p, v] for (p, _), v in zip(writes, values)],
                 "decision": decision}
        self.add(t, "invoke", "txn_producer-0", "txn", value, topic="t")
        end_t = t + 0.1 if end is None else end
        self.add(end_t + 0.01, outcome, "txn_producer-0", "txn", value, topic="t",
                 writes=[[p, o, v] for (p, o), v in zip(writes, values)], end_invoked=int(end_t * S), **extra)
        return values

    def seek(self, t: float, name: str = "consumer-0") -> None:
        self.add(t, "info", name, "seek", "beginning", topic="t")

    def poll(self, t: float, records: dict[int, list[tuple[int, str]]], name: str = "consumer-0") -> None:
        value = {str(p): [list(r) for r in rs] for p, rs in records.items()}
        self.add(t, "invoke", name, "poll", None, topic="t", invoked=int(t * S))
        self.add(t + 0.01, "ok", name, "poll", value, topic="t", invoked=int(t * S))

    def final_read(self, parts: dict[int, tuple[int, list[tuple[int, str]]]]) -> None:
        """``partition -> (high watermark = read_to, records)``: a read_committed read to the end."""
        self.add(99, "info", "final", "final-read", {f"t/{p}": {"log_start": 0, "high_watermark": hw, "read_to": hw,
                                                               "records": [list(r) for r in recs]}
                                                     for p, (hw, recs) in parts.items()})

    def types(self) -> set[str]:
        return {a.type for a in transactions.check(self.entries)}


def base() -> tuple[H, list[str], list[str], list[str]]:
    """T1 committed (t/0 offsets 0, 1; t/1 offset 0), T2 aborted (t/0 offset 2; its abort marker at 3), T3
    committed (t/0 offset 4; marker 5); t/1's commit marker of T1 at 1.  Returns the history and the values."""
    h = H()
    h.seek(0.0)
    t1 = h.txn(1.0, "1", [(0, 0), (0, 1), (1, 0)])
    t2 = h.txn(2.0, "2", [(0, 2)], outcome="fail", decision="abort")
    t3 = h.txn(3.0, "3", [(0, 4)])
    return h, t1, t2, t3


def clean() -> H:
    h, t1, t2, t3 = base()
    h.poll(4.0, {0: [(0, t1[0]), (1, t1[1]), (4, t3[0])], 1: [(0, t1[2])]})
    h.final_read({0: (6, [(0, t1[0]), (1, t1[1]), (4, t3[0])]), 1: (2, [(0, t1[2])])})
    return h


def test_clean_transactional_history_passes_every_checker():
    assert check_all(clean().entries) == []


def test_aborted_read_g1a():
    h, t1, t2, t3 = base()
    h.poll(4.0, {0: [(0, t1[0]), (1, t1[1]), (2, t2[0]), (4, t3[0])], 1: [(0, t1[2])]})
    h.final_read({0: (6, [(0, t1[0]), (1, t1[1]), (4, t3[0])]), 1: (2, [(0, t1[2])])})
    found = transactions.check(h.entries)
    assert [a.type for a in found] == ["aborted-read"]
    assert found[0].witnesses[1]["type"] == "fail"     # the aborted transaction is a witness


def test_aborted_value_in_the_final_read_is_an_aborted_read():
    h, t1, t2, t3 = base()
    h.final_read({0: (6, [(0, t1[0]), (1, t1[1]), (2, t2[0]), (4, t3[0])]), 1: (2, [(0, t1[2])])})
    assert h.types() == {"aborted-read"}


def test_precommitted_read():
    h, t1, t2, t3 = base()
    h.poll(1.05, {1: [(0, t1[2])]})                     # before T1 was asked to commit (1.1)
    h.final_read({0: (6, [(0, t1[0]), (1, t1[1]), (4, t3[0])]), 1: (2, [(0, t1[2])])})
    assert "precommitted-read" in h.types()


def test_read_past_the_last_stable_offset():
    h = H()
    h.seek(0.0)
    open_ = h.txn(1.0, "open", [(0, 0)], end=5.0)       # asked to commit only at 5 s
    later = h.txn(1.1, "later", [(0, 1)], end=1.2)
    h.poll(2.0, {0: [(1, later[0])]})                   # offset 1 returned while offset 0's transaction was open
    h.final_read({0: (4, [(0, open_[0]), (1, later[0])])})
    found = {a.type: a for a in transactions.check(h.entries)}
    assert "read-past-lso" in found
    assert "txn_producer-0:open" in found["read-past-lso"].message


def test_a_write_missing_inside_a_range_the_session_read_is_a_torn_transaction():
    h, t1, t2, t3 = base()
    h.poll(4.0, {0: [(0, t1[0]), (4, t3[0])], 1: [(0, t1[2])]})   # read across t/0 offset 1 without T1's write
    h.final_read({0: (6, [(0, t1[0]), (1, t1[1]), (4, t3[0])]), 1: (2, [(0, t1[2])])})
    assert h.types() == {"torn-transaction"}


def test_torn_across_partitions():
    h, t1, t2, t3 = base()
    t4 = h.txn(3.5, "4", [(1, 2)])
    # saw T1 in t/0, read t/1 past offset 0 (T4 at 2) without T1's t/1 write
    h.poll(4.0, {0: [(0, t1[0]), (1, t1[1]), (4, t3[0])], 1: [(2, t4[0])]})
    h.final_read({0: (6, [(0, t1[0]), (1, t1[1]), (4, t3[0])]), 1: (4, [(0, t1[2]), (2, t4[0])])})
    assert "torn-transaction" in h.types()


def test_an_unknown_transaction_is_all_or_nothing():
    h = H()
    h.seek(0.0)
    u = h.txn(1.0, "u", [(0, 0), (0, 1)], outcome="info", error="unknown:_TIMED_OUT")
    h.final_read({0: (3, [])})                          # aborted after all: fine
    assert h.types() == set()
    h.entries.pop()
    h.final_read({0: (3, [(0, u[0]), (1, u[1])])})      # committed after all: fine
    assert h.types() == set()
    h.entries.pop()
    h.final_read({0: (3, [(0, u[0])])})                 # half of it: torn
    assert h.types() == {"torn-transaction"}


def test_lost_committed_write():
    h, t1, t2, t3 = base()
    h.final_read({0: (6, [(0, t1[0]), (1, t1[1])]), 1: (2, [(0, t1[2])])})
    found = {a.type: a for a in transactions.check(h.entries)}
    assert set(found) == {"lost-write"}
    assert t3[0] in found["lost-write"].message


def test_duplicate_under_exactly_once():
    h, t1, t2, t3 = base()
    h.final_read({0: (7, [(0, t1[0]), (1, t1[1]), (4, t3[0]), (6, t3[0])]), 1: (2, [(0, t1[2])])})
    assert h.types() == {"duplicate"}


def test_a_fenced_zombie_that_commits():
    h = H()
    z = h.txn(1.0, "z", [(0, 0)], outcome="ok", zombie=True)
    h.final_read({0: (2, [(0, z[0])])})
    assert "zombie-committed" in h.types()


def test_a_fenced_zombie_whose_values_are_read_is_an_aborted_read():
    h = H()
    z = h.txn(1.0, "z", [(0, 0)], outcome="info", zombie=True, error="fatal:PRODUCER_FENCED")
    h.final_read({0: (2, [(0, z[0])])})
    assert h.types() == {"aborted-read"}


def test_without_transactions_nothing_is_checked():
    h = H()
    h.final_read({0: (2, [(0, "producer-0:0")])})
    assert transactions.check(h.entries) == []


def test_final_read_past_skipped_control_batches_is_not_unreadable():
    """kafka_clients judges where the final read got to by the consumer's position (``read_to``)."""
    h = clean()
    assert {a.type for a in kafka_clients.check(h.entries)} == set()
    part = h.entries[-1]["value"]["t/0"]
    part["read_to"] = 5                                  # stopped before the last marker
    assert "unreadable-after-heal" in {a.type for a in kafka_clients.check(h.entries)}
