"""The top versions Kafka 3.9 serves, spoken on the wire: ApiVersions v4 lists them, OffsetCommit / OffsetFetch v9,
ListGroups v5 (types filter, group type) and ListOffsets v9 (KIP-1005's latest tiered offset, -5)."""
from __future__ import annotations

import uuid

import pytest

from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.server.broker_client import BrokerClient
from kafkatier.waiting import wait_for

import partition_support
import wire_support

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

KAFKA_39_TOPS = {ApiKeys.LIST_OFFSETS: 9, ApiKeys.OFFSET_COMMIT: 9, ApiKeys.OFFSET_FETCH: 9,
                 ApiKeys.LIST_GROUPS: 5, ApiKeys.API_VERSIONS: 4,
                 ApiKeys.ADD_PARTITIONS_TO_TXN: 5, ApiKeys.ADD_OFFSETS_TO_TXN: 4, ApiKeys.END_TXN: 4,
                 ApiKeys.TXN_OFFSET_COMMIT: 4, ApiKeys.FIND_COORDINATOR: 6, ApiKeys.FETCH: 17}


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory(brokers=1, log_dirs=1, overrides={
        "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1"})


def _send(client: BrokerClient, api_key: int, version: int, **fields):
    return wire_support.send(client, api_key, version, fields)


def _topic_and_client(cluster, prefix: str, records: int) -> tuple[str, BrokerClient]:
    """A new one-partition topic holding ``records`` records, and a client of the first broker."""
    bs = cluster.bootstrap_servers
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    partition_support.topic_with_records(bs, topic, [str(i).encode() for i in range(records)])
    host, port = bs.split(",")[0].rsplit(":", 1)
    return topic, BrokerClient(host, int(port), client_id=f"{prefix}-versions", timeout_s=20)


def test_kafka_39_top_versions_on_the_wire(cluster):
    topic, client = _topic_and_client(cluster, "top", 10)
    group = f"g-{uuid.uuid4().hex[:6]}"
    try:
        served = {k.api_key: k.max_version for k in _send(client, ApiKeys.API_VERSIONS, 4, client_software_name="t",
                                                          client_software_version="1").api_keys}
        assert {k: served.get(k) for k in KAFKA_39_TOPS} == KAFKA_39_TOPS

        def coordinator_ready() -> bool:
            resp = _send(client, ApiKeys.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=[group])
            return resp.coordinators[0].error_code == 0
        wait_for(coordinator_ready, 60, interval=0.2, message="the group coordinator")
        for v in (5, 6):   # no new field: the group's coordinator as at v4
            assert _send(client, ApiKeys.FIND_COORDINATOR, v, key_type=0, coordinator_keys=[group]).coordinators[
                0].error_code == 0
        share = _send(client, ApiKeys.FIND_COORDINATOR, 6, key_type=2, coordinator_keys=[f"{group}:x:0"])
        assert share.coordinators[0].error_code == 42   # INVALID_REQUEST: no share coordinator, as Kafka 3.9
        commit = _send(client, ApiKeys.OFFSET_COMMIT, 9, group_id=group, generation_id_or_member_epoch=-1,
                       member_id="", group_instance_id=None, topics=[{"name": topic, "partitions": [
                           {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                            "committed_metadata": ""}]}])
        assert commit.topics[0].partitions[0].error_code == 0
        fetched = _send(client, ApiKeys.OFFSET_FETCH, 9, groups=[{"group_id": group, "member_id": None,
                                                                 "member_epoch": -1, "topics": [
                                                                     {"name": topic, "partition_indexes": [0]}]}],
                        require_stable=False)
        assert fetched.groups[0].topics[0].partitions[0].committed_offset == 5
        classic = _send(client, ApiKeys.LIST_GROUPS, 5, states_filter=[], types_filter=["classic"])
        assert [(g.group_id, g.group_type) for g in classic.groups if g.group_id == group] == [(group, "classic")]
        assert _send(client, ApiKeys.LIST_GROUPS, 5, states_filter=[], types_filter=["consumer"]).groups == []
        offsets = _send(client, ApiKeys.LIST_OFFSETS, 9, replica_id=-1, isolation_level=0, topics=[
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": t}
                                           for t in (-1, -5)]}])
        latest, tiered = offsets.topics[0].partitions
        assert (latest.error_code, latest.offset) == (0, 10)
        assert (tiered.error_code, tiered.offset) == (0, -1)   # not a tiered topic: nothing in remote storage
    finally:
        client.close()


def test_kafka_39_lowest_versions_served_where_kafka_40_removed_them(cluster):
    """OffsetForLeaderEpoch v0-1 and WriteTxnMarkers v0: Kafka 3.9 still serves them (4.0 removed them)."""
    topic, client = _topic_and_client(cluster, "low", 4)
    try:
        served = {k.api_key: (k.min_version, k.max_version) for k in _send(
            client, ApiKeys.API_VERSIONS, 3, client_software_name="t", client_software_version="1").api_keys}
        assert served[ApiKeys.OFFSET_FOR_LEADER_EPOCH] == (0, 4) and served[ApiKeys.WRITE_TXN_MARKERS] == (0, 1)
        for v in (0, 1):
            resp = _send(client, ApiKeys.OFFSET_FOR_LEADER_EPOCH, v, topics=[
                {"topic": topic, "partitions": [{"partition": 0, "leader_epoch": 0}]}])
            p = resp.topics[0].partitions[0]
            assert (p.error_code, p.end_offset) == (0, 4)
        assert _send(client, ApiKeys.WRITE_TXN_MARKERS, 0, markers=[]).markers == []
    finally:
        client.close()
