"""Replica placement (Kafka's AdminUtils.assignReplicasToBrokers) and manual assignment checks."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from kafkatier.admin.replica_assignment import (AdminOperationError, BrokerMetadata, InvalidReplicaAssignmentError,
                                                assign_replicas_to_brokers, rack_alternated_broker_list,
                                                validate_manual_assignment)
from kafkatier.protocol.errors import Errors, InvalidPartitionsError, InvalidReplicationFactorError


def test_fixed_start_matches_kafkas_placement():
    # Kafka's AdminUtilsTest example: 5 brokers, 10 partitions, RF 3, start index 0.
    assert assign_replicas_to_brokers(range(5), 10, 3, fixed_start_index=0) == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }


def test_broker_ids_are_used_in_the_given_order():
    assert assign_replicas_to_brokers([10, 20, 30], 3, 2, fixed_start_index=1) == {
        0: [20, 10], 1: [30, 20], 2: [10, 30]}


def test_new_partitions_continue_the_numbering():
    out = assign_replicas_to_brokers(range(3), 2, 1, fixed_start_index=0, start_partition_id=4)
    assert sorted(out) == [4, 5]


@pytest.mark.parametrize("n_brokers,n_partitions,rf", [(1, 1, 1), (3, 6, 3), (5, 20, 2), (4, 7, 3), (6, 12, 4)])
def test_random_placement_properties(n_brokers, n_partitions, rf):
    for seed in range(25):
        out = assign_replicas_to_brokers(range(n_brokers), n_partitions, rf, rng=random.Random(seed))
        assert sorted(out) == list(range(n_partitions))
        for replicas in out.values():
            assert len(replicas) == rf and len(set(replicas)) == rf
            assert set(replicas) <= set(range(n_brokers))
        leaders = Counter(r[0] for r in out.values())
        assert max(leaders.values()) - min(leaders.get(b, 0) for b in range(n_brokers)) <= 1
        if n_partitions % n_brokers == 0:
            load = Counter(b for r in out.values() for b in r)
            assert set(load.values()) == {n_partitions * rf // n_brokers}


def test_validation_messages():
    with pytest.raises(InvalidPartitionsError, match=r"^Number of partitions must be larger than 0\.$") as e:
        assign_replicas_to_brokers([1, 2], 0, 1)
    assert e.value.error is Errors.INVALID_PARTITIONS
    with pytest.raises(InvalidReplicationFactorError, match=r"^Replication factor must be larger than 0\.$"):
        assign_replicas_to_brokers([1, 2], 1, 0)
    with pytest.raises(InvalidReplicationFactorError) as e:
        assign_replicas_to_brokers([1, 2], 3, 3)
    assert e.value.message == "Replication factor: 3 larger than available brokers: 2."
    assert e.value.error is Errors.INVALID_REPLICATION_FACTOR
    with pytest.raises(InvalidReplicationFactorError, match="larger than available brokers: 0."):
        assign_replicas_to_brokers([], 1, 1)


def test_rack_alternated_list_matches_kafka():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_broker_list(racks) == [0, 3, 1, 5, 4, 2]


def test_rack_aware_placement_spreads_each_partition_over_racks():
    brokers = [BrokerMetadata(0, "a"), BrokerMetadata(1, "a"), BrokerMetadata(2, "b"), BrokerMetadata(3, "b"),
               BrokerMetadata(4, "c"), BrokerMetadata(5, "c")]
    rack = {b.id: b.rack for b in brokers}
    for seed in range(20):
        out = assign_replicas_to_brokers(brokers, 12, 3, rng=random.Random(seed))
        for replicas in out.values():
            assert len(set(replicas)) == 3
            assert len({rack[r] for r in replicas}) == 3
        assert set(Counter(r[0] for r in out.values()).values()) == {2}
    # RF larger than the number of racks: every rack is used, then brokers are reused across racks.
    two_racks = [BrokerMetadata(0, "a"), BrokerMetadata(1, "a"), BrokerMetadata(2, "b"), BrokerMetadata(3, "b")]
    for replicas in assign_replicas_to_brokers(two_racks, 8, 3, fixed_start_index=0).values():
        assert len(set(replicas)) == 3 and {r // 2 for r in replicas} == {0, 1}


def test_some_brokers_without_rack_is_an_admin_error():
    with pytest.raises(AdminOperationError, match="Not all brokers have rack information") as e:
        assign_replicas_to_brokers([BrokerMetadata(0, "a"), BrokerMetadata(1)], 1, 1)
    assert e.value.error is Errors.UNKNOWN_SERVER_ERROR


# ------------------------------------------------------------------------------------------- manual assignment

def test_valid_manual_assignment_is_normalised():
    assert validate_manual_assignment({"1": ["2", 3], 0: [3, 2]}, live_brokers=[2, 3]) == {0: (3, 2), 1: (2, 3)}


@pytest.mark.parametrize("assignment,message", [
    ({0: [1], 1: []}, "Cannot have replication factor of 0 for partition id 1."),
    ({0: [1, 2], 1: [1]}, "All partitions should have the same number of replicas"),
    ({}, "All partitions should have the same number of replicas"),
    ({0: [1, 1], 1: [1, 2]}, "Duplicate replica assignment found: Map(0 -> List(1, 1), 1 -> List(1, 2))"),
    ({0: [1], 2: [2]}, "partitions should be a consecutive 0-based integer sequence"),
    ({1: [1]}, "partitions should be a consecutive 0-based integer sequence"),
    ({0: [1, 9]}, "The manual partition assignment includes broker 9, but no such broker is registered."),
    ({0: ["x"]}, "Replica assignment must map partition ids to lists of broker ids"),
])
def test_manual_assignment_errors(assignment, message):
    with pytest.raises(InvalidReplicaAssignmentError) as e:
        validate_manual_assignment(assignment, live_brokers=[1, 2])
    assert e.value.message.startswith(message)
    assert e.value.error is Errors.INVALID_REPLICA_ASSIGNMENT
