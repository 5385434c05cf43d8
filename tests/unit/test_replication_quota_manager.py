"""Replication throttles (issue 14 item 4): which replicas the topic configs
``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas`` name for a broker, and
the quota's exceeded / recorded accounting on a controlled clock.  The measured rates against broker processes
are in tests/integration/test_replication_throttle.py."""
from __future__ import annotations

import pytest

from kafkatier.server.replica_fetcher import FetchState, ReplicaFetcherThread
from kafkatier.server.replication_quota_manager import (
    ALL_REPLICAS, FOLLOWER_THROTTLED_RATE, LEADER_THROTTLED_RATE,
    LEADER_THROTTLED_REPLICAS, LONG_MAX, ReplicationQuotaManager, ReplicationQuotas, ThrottledReplicas,
    parse_throttled_partitions)

from tests.unit.fakes import ManualClock


def test_parse_keeps_the_entries_of_this_broker():
    assert parse_throttled_partitions("0:1,1:2, 2:1 ,3:10", 1) == {0, 2}
    assert parse_throttled_partitions("0:1,1:2", 3) == frozenset()
    assert parse_throttled_partitions(" * ", 3) == ALL_REPLICAS
    assert parse_throttled_partitions("", 3) == frozenset()
    for bad in ("0-1", "a:1", "0:", "*,0:1"):
        with pytest.raises(ValueError):
            parse_throttled_partitions(bad, 1)


def test_throttled_replicas_follow_the_topic_config_cache():
    configs = {"t": {LEADER_THROTTLED_REPLICAS: "0:1,1:2"}, "u": {LEADER_THROTTLED_REPLICAS: "*"}}
    throttled = ThrottledReplicas(1, LEADER_THROTTLED_REPLICAS, lambda topic: configs.get(topic, {}))
    assert throttled("t", 0) and not throttled("t", 1) and throttled("u", 7) and not throttled("v", 0)
    configs["t"] = {LEADER_THROTTLED_REPLICAS: "1:1"}        # a config change reaches the cache
    assert not throttled("t", 0) and throttled("t", 1)
    configs["t"] = {LEADER_THROTTLED_REPLICAS: "garbage"}    # written by hand: ignored, nothing throttled
    assert not throttled("t", 1)


def test_quota_is_exceeded_until_the_rate_pays_back_what_was_recorded():
    clock = ManualClock()
    q = ReplicationQuotaManager(1000, clock=clock, throttled=lambda t, p: t == "t")
    assert q.is_throttled("t", 0) and not q.is_throttled("other", 0)
    clock.now += 1.0                      # one second of burst
    assert not q.is_quota_exceeded()
    q.record(3000)                        # one fetch may overrun: 2000 bytes of debt
    assert q.is_quota_exceeded()
    clock.now += 1.9
    assert q.is_quota_exceeded()
    clock.now += 0.2
    assert not q.is_quota_exceeded()
    q.set_rate(LONG_MAX)
    q.record(10 ** 9)
    assert not q.is_quota_exceeded()      # unlimited is never exceeded


def test_reconfigure_applies_both_rates_and_unset_means_unlimited():
    quotas = ReplicationQuotas(1, lambda topic: {})
    quotas.reconfigure({LEADER_THROTTLED_RATE: "5000", FOLLOWER_THROTTLED_RATE: str(LONG_MAX)})
    assert quotas.leader.rate == 5000 and quotas.follower.unlimited
    quotas.reconfigure({FOLLOWER_THROTTLED_RATE: "7"})
    assert quotas.leader.unlimited and quotas.follower.rate == 7


def test_fetcher_leaves_out_throttled_out_of_sync_partitions_only_while_exceeded():
    clock = ManualClock()
    quota = ReplicationQuotaManager(1000, clock=clock, throttled=lambda t, p: t == "slow")
    t = ReplicaFetcherThread(2, 1, leader_address=lambda: None, partition_lookup=lambda topic, p: None,
                             quota=quota)
    behind, in_sync = FetchState(0, 1), FetchState(0, 1, lag=0)
    quota.record(5000)
    assert t._throttled(("slow", 0), behind)
    assert not t._throttled(("slow", 0), in_sync)        # in-sync replicas are never throttled (as Kafka)
    assert not t._throttled(("fast", 0), behind)         # nor partitions the topic config does not list
    clock.now += 6.0
    assert not t._throttled(("slow", 0), behind)
