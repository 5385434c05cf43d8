"""``kafkatier broker-api-versions``: kafka-broker-api-versions.

For every live broker, Kafka's ``NodeApiVersions`` rendering::

    127.0.0.1:9092 (id: 1 rack: null) -> (
    	Produce(0): 0 to 9 [usable: 9],
    	...
    	DescribeTopicPartitions(75): UNSUPPORTED
    )

``usable`` is the highest version both the broker and a Kafka 3.9 client speak (``NONE`` when the ranges do not
meet); APIs a Kafka 3.9 ZooKeeper-mode broker serves and this broker does not are listed as ``UNSUPPORTED``, and
APIs the client does not know as ``UNKNOWN(key)``.
"""
from __future__ import annotations

from kafkatier.admin.bootstrap import NoReachableBrokerError
from kafkatier.admin.client import AdminError
from kafkatier.cli import common
from kafkatier.protocol import codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.build import build

# (name, highest version a Kafka 3.9 client speaks) of the APIs a Kafka 3.9 ZooKeeper-mode broker serves.
KAFKA_39_CLIENT: dict[int, tuple[str, int]] = {
    0: ("Produce", 11), 1: ("Fetch", 17), 2: ("ListOffsets", 9), 3: ("Metadata", 12), 4: ("LeaderAndIsr", 7),
    5: ("StopReplica", 4), 6: ("UpdateMetadata", 8), 7: ("ControlledShutdown", 3), 8: ("OffsetCommit", 9),
    9: ("OffsetFetch", 9), 10: ("FindCoordinator", 6), 11: ("JoinGroup", 9), 12: ("Heartbeat", 4),
    13: ("LeaveGroup", 5), 14: ("SyncGroup", 5), 15: ("DescribeGroups", 5), 16: ("ListGroups", 5),
    17: ("SaslHandshake", 1), 18: ("ApiVersions", 4), 19: ("CreateTopics", 7), 20: ("DeleteTopics", 6),
    21: ("DeleteRecords", 2), 22: ("InitProducerId", 5), 23: ("OffsetForLeaderEpoch", 4),
    24: ("AddPartitionsToTxn", 5), 25: ("AddOffsetsToTxn", 4), 26: ("EndTxn", 4), 27: ("WriteTxnMarkers", 1),
    28: ("TxnOffsetCommit", 4), 29: ("DescribeAcls", 3), 30: ("CreateAcls", 3), 31: ("DeleteAcls", 3),
    32: ("DescribeConfigs", 4), 33: ("AlterConfigs", 2), 34: ("AlterReplicaLogDirs", 2),
    35: ("DescribeLogDirs", 4), 36: ("SaslAuthenticate", 2), 37: ("CreatePartitions", 3),
    38: ("CreateDelegationToken", 3), 39: ("RenewDelegationToken", 2), 40: ("ExpireDelegationToken", 2),
    41: ("DescribeDelegationToken", 3), 42: ("DeleteGroups", 2), 43: ("ElectLeaders", 2),
    44: ("IncrementalAlterConfigs", 1), 45: ("AlterPartitionReassignments", 0),
    46: ("ListPartitionReassignments", 0), 47: ("OffsetDelete", 0), 48: ("DescribeClientQuotas", 1),
    49: ("AlterClientQuotas", 1), 50: ("DescribeUserScramCredentials", 0), 51: ("AlterUserScramCredentials", 0),
    56: ("AlterPartition", 3), 57: ("UpdateFeatures", 1), 58: ("Envelope", 0), 60: ("DescribeCluster", 1),
    61: ("DescribeProducers", 0), 65: ("DescribeTransactions", 0), 66: ("ListTransactions", 1),
    67: ("AllocateProducerIds", 0), 68: ("ConsumerGroupHeartbeat", 0), 69: ("ConsumerGroupDescribe", 0),
    71: ("GetTelemetrySubscriptions", 0), 72: ("PushTelemetry", 0), 74: ("ListClientMetricsResources", 0),
    75: ("DescribeTopicPartitions", 0),
}


def register(subparsers) -> None:
    common.add_client_command(subparsers, "broker-api-versions", run,
                              help="print the API versions each broker serves (kafka-broker-api-versions)",
                              description="Ask every live broker for its ApiVersions and print them as "
                                          "kafka-broker-api-versions does.")


def render(host: str, port: int, node_id: int, rack: str | None, served: dict[int, tuple[int, int]]) -> str:
    """One broker's block, Kafka's ``Node.toString() -> NodeApiVersions.toString(true)``."""
    entries = []
    for key in sorted(set(served) | set(KAFKA_39_CLIENT)):
        name, client_max = KAFKA_39_CLIENT.get(key, (f"UNKNOWN({key})", None))
        label = name if name.startswith("UNKNOWN") else f"{name}({key})"
        if key not in served:
            entries.append(f"{label}: UNSUPPORTED")
            continue
        lo, hi = served[key]
        text = str(lo) if lo == hi else f"{lo} to {hi}"
        if client_max is None:
            entries.append(f"{label}: {text}")
            continue
        usable = min(hi, client_max)
        entries.append(f"{label}: {text} [usable: {usable if usable >= lo else 'NONE'}]")
    return f"{host}:{port} (id: {node_id} rack: {rack or 'null'}) -> (\n\t" + ",\n\t".join(entries) + "\n)"


def run(args) -> int:
    try:
        conn = common.connection_from_args(args)
        with common.open_admin(conn) as admin:
            cluster = admin.kafka_admin.describe_cluster()
            for b in sorted(cluster.get("brokers") or (), key=lambda b: int(b["broker_id"])):
                node = int(b["broker_id"])
                r = admin.send_request(build(codec.request_class(ApiKeys.API_VERSIONS), 0, {}), node)
                served = {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in r.api_keys}
                print(render(b["host"], int(b["port"]), node, b.get("rack"), served))
    except (NoReachableBrokerError, AdminError) as e:
        return common.print_error("broker-api-versions", e)
    return 0
