"""ZooKeeper paths: Kafka 3.x ZooKeeper-mode layout (``ZkData.scala``) plus the KIP-950 znodes and the
project's controller-to-broker request queues."""
from __future__ import annotations

CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
BROKER_SEQID = "/brokers/seqid"
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
CONFIG = "/config"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
FEATURE = "/feature"
CLUSTER_ID = "/cluster/id"
CONSUMERS = "/consumers"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"

CONFIG_TYPES = ("topics", "clients", "users", "brokers", "ips")

# Persistent paths every broker creates at start-up if absent (ZkData.PersistentZkPaths).
PERSISTENT_PATHS = (
    CONSUMERS, BROKER_IDS, BROKER_TOPICS, CONFIG_CHANGES, DELETE_TOPICS, BROKER_SEQID,
    ISR_CHANGE_NOTIFICATION, LATEST_PRODUCER_ID_BLOCK, LOG_DIR_EVENT_NOTIFICATION,
) + tuple(f"{CONFIG}/{t}" for t in CONFIG_TYPES)

# Project: controller -> broker request queues (see docs/architecture.md#control-channel-over-zookeeper).
CONTROL_ROOT = "/kafkatier/control"
REQUEST_PREFIX = "request_"

TIERED_STATES = ("ENABLED", "DISABLING", "DISABLED")


def broker(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic(name: str) -> str:
    return f"{BROKER_TOPICS}/{name}"


def topic_partitions(name: str) -> str:
    return f"{BROKER_TOPICS}/{name}/partitions"


def partition(name: str, partition_id: int) -> str:
    return f"{BROKER_TOPICS}/{name}/partitions/{partition_id}"


def partition_state(name: str, partition_id: int) -> str:
    return f"{BROKER_TOPICS}/{name}/partitions/{partition_id}/state"


def tiered_storage(name: str) -> str:
    return f"{BROKER_TOPICS}/{name}/tieredstorage"


def tiered_epoch(name: str) -> str:
    return f"{BROKER_TOPICS}/{name}/tieredstorage/tiered_epoch"


def tiered_state(name: str) -> str:
    return f"{BROKER_TOPICS}/{name}/tieredstorage/state"


def delete_topic(name: str) -> str:
    return f"{DELETE_TOPICS}/{name}"


def entity_config(entity_type: str, name: str) -> str:
    return f"{CONFIG}/{entity_type}/{name}"


def topic_config(name: str) -> str:
    return entity_config("topics", name)


def broker_config(broker_id: int | str) -> str:
    return entity_config("brokers", str(broker_id))


def control_broker(broker_id: int) -> str:
    return f"{CONTROL_ROOT}/{broker_id}"


def control_requests(broker_id: int) -> str:
    return f"{CONTROL_ROOT}/{broker_id}/requests"


def control_responses(broker_id: int) -> str:
    return f"{CONTROL_ROOT}/{broker_id}/responses"


def control_parts(broker_id: int) -> str:
    """Slices of request and response bodies too large for one znode (kafkatier/zk/control_parts.py)."""
    return f"{CONTROL_ROOT}/{broker_id}/parts"


def sequence_number(node_name: str) -> int:
    """The integer suffix ZooKeeper appends to a sequential node (10 digits, ``%010d``)."""
    return int(node_name[-10:])


def sorted_sequential(children: list[str], prefix: str) -> list[str]:
    """Children with the given prefix, in sequence order (by parsed suffix, never by string)."""
    mine = [c for c in children if c.startswith(prefix) and c[len(prefix):].isdigit()]
    return sorted(mine, key=sequence_number)


FAULTS_ROOT = "/kafkatier/faults"
FAULT_STATE_ROOT = "/kafkatier/fault_state"


def request_faults(broker_id: int) -> str:
    """Project: the request faults and clock skew asked of a broker (server/fault_injection.py)."""
    return f"{FAULTS_ROOT}/{broker_id}"


def fault_state(broker_id: int) -> str:
    """Project: what a broker applied and consumed of its request faults."""
    return f"{FAULT_STATE_ROOT}/{broker_id}"
