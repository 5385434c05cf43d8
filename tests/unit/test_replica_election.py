"""Leader elections and controlled shutdown, the parts that need no cluster: Kafka's imbalance check, the
shutting-down broker's bounded retries, and the leader-election command's input checks."""
from __future__ import annotations

import argparse

import pytest

from kafkatier.cli.leader_election import java_exception, parse_partitions_json, validate
from kafkatier.admin.client import AdminError
from kafkatier.common.errors import UsageError
from kafkatier.common.structs import BrokerInfo, LeaderAndIsr, TopicPartition
from kafkatier.controller.context import ControllerContext
from kafkatier.controller.replica_election_manager import AutoRebalanceConfig, imbalanced_partitions
from kafkatier.protocol.errors import Errors
from kafkatier.server.controlled_shutdown import ControlledShutdown, ControlledShutdownConfig
from kafkatier.zk.codecs import ReplicaAssignment


def context(leaders: dict[TopicPartition, tuple[int, tuple[int, ...]]], replicas: dict[TopicPartition, tuple],
            live=(1, 2, 3)) -> ControllerContext:
    ctx = ControllerContext()
    ctx.live_brokers = {b: BrokerInfo(b, "h", 1, 10 + b) for b in live}
    for tp, rs in replicas.items():
        ctx.all_topics.add(tp.topic)
        ctx.update_assignment(tp, ReplicaAssignment(tuple(rs)))
        leader, isr = leaders[tp]
        ctx.partition_leadership[tp] = LeaderAndIsr(leader, 1, isr, 1, 0)
    return ctx


def test_imbalance_check_triggers_above_the_percentage_only():
    tps = [TopicPartition("t", p) for p in range(10)]
    replicas = {tp: (1, 2, 3) for tp in tps}
    # One partition of ten led away from broker 1: 10 % is not above 10 %.
    leaders = {tp: (1, (1, 2, 3)) for tp in tps}
    leaders[tps[0]] = (2, (1, 2, 3))
    assert imbalanced_partitions(context(leaders, replicas), 10) == {}
    # Two of ten: above; both move back.
    leaders[tps[1]] = (3, (1, 2, 3))
    assert imbalanced_partitions(context(leaders, replicas), 10) == {1: [tps[0], tps[1]]}


def test_imbalance_check_skips_partitions_whose_preferred_replica_cannot_lead():
    tps = [TopicPartition("t", p) for p in range(4)]
    replicas = {tp: (1, 2) for tp in tps}
    leaders = {tps[0]: (2, (2,)), tps[1]: (2, (1, 2)), tps[2]: (2, (1, 2)), tps[3]: (1, (1, 2))}
    assert imbalanced_partitions(context(leaders, replicas), 10) == {1: [tps[1], tps[2]]}
    assert imbalanced_partitions(context(leaders, replicas, live=(2,)), 10) == {}
    ctx = context(leaders, replicas)
    ctx.topics_to_be_deleted.add("t")
    assert imbalanced_partitions(ctx, 10) == {}


def test_auto_rebalance_config_has_kafkas_defaults():
    assert AutoRebalanceConfig.from_props({}) == AutoRebalanceConfig(True, 300.0, 10)
    assert AutoRebalanceConfig.from_props({"auto.leader.rebalance.enable": "false",
                                           "leader.imbalance.check.interval.seconds": "2",
                                           "leader.imbalance.per.broker.percentage": "0"}) == \
        AutoRebalanceConfig(False, 2.0, 0)


def test_controlled_shutdown_retries_a_bounded_number_of_times_with_backoff():
    sleeps, asked = [], []

    def no_controller():
        asked.append(1)
        return None
    config = ControlledShutdownConfig.from_props({"controlled.shutdown.max.retries": "4",
                                                  "controlled.shutdown.retry.backoff.ms": "250"})
    assert ControlledShutdown(1, lambda: 7, no_controller, config, sleep=sleeps.append).run() is False
    assert len(asked) == 4 and sleeps == [0.25, 0.25, 0.25]


def test_controlled_shutdown_disabled_asks_nobody():
    asked = []
    config = ControlledShutdownConfig.from_props({"controlled.shutdown.enable": "false"})
    assert ControlledShutdown(1, lambda: 7, lambda: asked.append(1), config, sleep=lambda s: None).run() is False
    assert asked == []
    assert ControlledShutdownConfig.from_props({}) == ControlledShutdownConfig(True, 3, 5000, 30000)


def args(**kw) -> argparse.Namespace:
    base = {"election_type": "preferred", "topic": None, "partition": None, "all_topic_partitions": False,
            "path_to_json_file": None}
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize("kw, message", [
    ({"election_type": None, "all_topic_partitions": True}, "Missing required option(s): election-type"),
    ({"election_type": "dirty", "all_topic_partitions": True}, "Unknown election type"),
    ({}, "One and only one of the following options is required"),
    ({"topic": "t", "all_topic_partitions": True, "partition": 0}, "One and only one"),
    ({"topic": "t"}, "Missing required option(s): partition"),
    ({"partition": 1, "all_topic_partitions": True}, "Option partition is only allowed if topic is used"),
])
def test_leader_election_options_are_checked_as_kafka_does(kw, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate(args(**kw))


def test_leader_election_options():
    assert validate(args(election_type="UNCLEAN", topic="t", partition=2)) == (1, [("t", 2)])
    assert validate(args(all_topic_partitions=True)) == (0, None)


@pytest.mark.parametrize("text, message", [
    ("{", "not a valid JSON"),
    ('{"version": 1}', 'missing "partitions"'),
    ('{"partitions": [{"topic": "t"}]}', r"partitions\[0\]"),
    ('{"partitions": [{"topic": "t", "partition": "0"}]}', r"partitions\[0\]"),
    ('{"partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 0}]}',
     "contains duplicate partitions: t-0"),
])
def test_bad_partitions_json_is_one_usage_error(text, message):
    with pytest.raises(UsageError, match=message):
        parse_partitions_json(text)


def test_errors_print_as_kafkas_exceptions():
    assert java_exception(AdminError.from_code(Errors.PREFERRED_LEADER_NOT_AVAILABLE, "no")) == \
        "org.apache.kafka.common.errors.PreferredLeaderNotAvailableException: no"
    assert java_exception(AdminError.from_code(Errors.CLUSTER_AUTHORIZATION_FAILED, "x")).startswith(
        "org.apache.kafka.common.errors.ClusterAuthorizationException")
