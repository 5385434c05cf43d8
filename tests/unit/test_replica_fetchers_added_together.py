"""A LeaderAndIsr's followers get their fetchers together (Kafka's ``addFetcherForPartitions``): one hand-over
per leader's fetcher thread, not one lock round per partition (a restart at 20,000 partitions waited on the
fetcher threads' locks once per partition)."""
from __future__ import annotations

import threading

from kafkatier.server.replica_fetcher import ReplicaFetcherManager


def _manager() -> ReplicaFetcherManager:
    # No leader address: a started thread only backs off, it never connects.
    return ReplicaFetcherManager(3, lambda _id: None, lambda _t, _p: None)


def test_partitions_are_handed_to_one_thread_per_leader_truncating_first():
    m = _manager()
    try:
        m.add_fetchers({("t", p): (1 + p % 2, 10 * p, 5) for p in range(1000)})
        assert sorted(m.threads) == [1, 2]
        assert len(m.threads[1].partitions) == len(m.threads[2].partitions) == 500
        st = m.threads[2].partitions[("t", 7)]
        assert (st.fetch_offset, st.leader_epoch, st.truncating) == (70, 5, True)
        assert m.assignment[("t", 7)] == 2
        assert m.describe()[1]["partitions"] == 500
    finally:
        m.shutdown()


def test_a_partition_moving_to_another_leader_leaves_its_old_thread():
    m = _manager()
    try:
        m.add_fetchers({("t", 0): (1, 0, 1), ("t", 1): (1, 0, 1)})
        m.add_fetchers({("t", 0): (2, 3, 2)})
        assert set(m.threads[1].partitions) == {("t", 1)}
        assert m.threads[2].partitions[("t", 0)].leader_epoch == 2
        assert m.assignment == {("t", 0): 2, ("t", 1): 1}
    finally:
        m.shutdown()


def test_fetchers_are_removed_together_and_an_emptied_thread_waits():
    m = _manager()
    try:
        m.add_fetchers({("t", p): (1, 0, 1) for p in range(3)})
        m.remove_fetchers([("t", 0), ("t", 1), ("t", 9)])  # one never added: no error
        assert set(m.threads[1].partitions) == {("t", 2)}
        m.remove_fetchers([("t", 2)])
        assert m.threads[1].partitions == {}
        assert not m.threads[1].has_partitions.is_set()
        assert m.assignment == {}
        m.add_fetchers({})  # nothing to add: no thread started
        assert sorted(m.threads) == [1]
    finally:
        m.shutdown()


def test_adding_does_not_wait_on_a_thread_per_partition():
    """The thread's lock is taken once for all its partitions: adding 5,000 while a round holds it for a while
    waits for that round once."""
    m = _manager()
    try:
        m.add_fetchers({("t", 0): (1, 0, 1)})
        t = m.threads[1]
        taken = []
        real = t.lock

        class Counting:
            def __enter__(self):
                taken.append(threading.get_ident())
                return real.__enter__()

            def __exit__(self, *exc):
                return real.__exit__(*exc)
        t.lock = Counting()
        m.add_fetchers({("t", p): (1, 0, 1) for p in range(1, 5001)})
        assert taken.count(threading.get_ident()) == 1  # new partitions: nothing to remove, one hand-over
        assert len(t.partitions) == 5001
        taken.clear()
        m.add_fetchers({("t", p): (1, 1, 2) for p in range(0, 5001)})  # a new epoch for all of them
        assert taken.count(threading.get_ident()) == 2  # one removal, one hand-over
        assert t.partitions[("t", 4000)].leader_epoch == 2
    finally:
        m.shutdown()
