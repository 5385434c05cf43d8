"""MetadataCache: the broker's view of live brokers and partition leadership, fed by UpdateMetadata."""
from __future__ import annotations

import threading

import attrs

from kafkatier.protocol.control_messages import UpdateMetadataEndpoint, UpdateMetadataRequestData
from kafkatier.zk.codecs import topic_id_from_wire


@attrs.frozen
class PartitionMetadata:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    zk_version: int


@attrs.frozen
class BrokerEndpoint:
    id: int
    host: str
    port: int
    rack: str | None = None


#: A kafkatier broker property (``cluster up --links``): ``<id>:<host>:<port>,...``, where this broker dials
#: each other broker instead of the address that broker registered (a link of ``cluster/links.py``).
LINK_ENDPOINTS_CONFIG = "kafkatier.links.broker.endpoints"


def parse_link_endpoints(value: str | None) -> dict[int, tuple[str, int]]:
    out: dict[int, tuple[str, int]] = {}
    for item in (value or "").split(","):
        if not item.strip():
            continue
        bid, host, port = item.strip().split(":")
        out[int(bid)] = (host, int(port))
    return out


class MetadataCache:
    def __init__(self, broker_id: int, link_endpoints: dict[int, tuple[str, int]] | None = None,
                 inter_broker_listener: str | None = None):
        self.broker_id = broker_id
        #: ``inter.broker.listener.name``: the listener other brokers are dialed on (None: the first endpoint).
        self.inter_broker_listener = inter_broker_listener
        self.link_endpoints = dict(link_endpoints or {})
        self._lock = threading.RLock()
        self.controller_id: int = -1
        self.brokers: dict[int, BrokerEndpoint] = {}
        self.listeners: dict[int, dict[str, BrokerEndpoint]] = {}  # broker -> listener name -> its endpoint
        self.partitions: dict[str, dict[int, PartitionMetadata]] = {}
        self.topic_ids: dict[str, str] = {}
        self._topic_names: dict[str, str] | None = None  # topic id -> name, built on first use after a change

    def advertised_controller_id(self) -> int:
        """The controller id a Metadata / DescribeCluster answer gives: -1 unless the controller is among the
        live brokers the same answer lists.  Kafka returns its cached id even after that broker died (until the
        next UpdateMetadata); clients then ask a broker they have no address for (kafka-python's admin raises
        UnknownBrokerIdError), while -1 makes them retry."""
        with self._lock:
            return self.controller_id if self.controller_id in self.brokers else -1

    def update(self, request: UpdateMetadataRequestData) -> list[str]:
        """Apply an UpdateMetadata request.  Returns topics that were deleted (leader -2)."""
        deleted = []
        with self._lock:
            self._topic_names = None
            self.controller_id = request.controller_id
            brokers, listeners = {}, {}
            for b in request.live_brokers:
                eps = b.endpoints or (UpdateMetadataEndpoint(port=-1),)
                ep = eps[0]
                brokers[b.id] = BrokerEndpoint(b.id, ep.host, ep.port, b.rack)
                listeners[b.id] = {e.listener or "PLAINTEXT": BrokerEndpoint(b.id, e.host, e.port, b.rack)
                                   for e in eps}
            self.brokers = brokers
            self.listeners = listeners
            for ts in request.topic_states:
                topic = ts.topic_name
                tid = topic_id_from_wire(ts.topic_id)
                if tid:
                    self.topic_ids[topic] = tid
                for ps in ts.partition_states:
                    if ps.leader == -2:
                        self.partitions.get(topic, {}).pop(ps.partition_index, None)
                        if not self.partitions.get(topic):
                            self.partitions.pop(topic, None)
                            self.topic_ids.pop(topic, None)
                            deleted.append(topic)
                        continue
                    self.partitions.setdefault(topic, {})[ps.partition_index] = PartitionMetadata(
                        topic, ps.partition_index, ps.leader, ps.leader_epoch, ps.isr, ps.replicas,
                        ps.offline_replicas, ps.zk_version)
        return deleted

    def get_partition(self, topic: str, partition: int) -> PartitionMetadata | None:
        with self._lock:
            return self.partitions.get(topic, {}).get(partition)

    def topics(self) -> list[str]:
        with self._lock:
            return sorted(self.partitions)

    def topic_partitions(self, topic: str) -> list[PartitionMetadata]:
        with self._lock:
            return [self.partitions[topic][p] for p in sorted(self.partitions.get(topic, {}))]

    def alive_brokers(self, listener: str = "PLAINTEXT") -> list[BrokerEndpoint]:
        """The live brokers' endpoints on ``listener`` (the one a client's request arrived on): brokers without
        that listener are left out, as Kafka's metadata cache does."""
        with self._lock:
            if listener == "PLAINTEXT":
                return sorted(self.brokers.values(), key=lambda b: b.id)
            return sorted((ls[listener] for ls in self.listeners.values() if listener in ls), key=lambda b: b.id)

    def has_alive_broker(self, broker_id: int) -> bool:
        """Kafka's ``hasAliveBroker``: whether the last UpdateMetadata listed ``broker_id`` as alive."""
        with self._lock:
            return broker_id in self.brokers

    def broker(self, broker_id: int, listener: str = "PLAINTEXT") -> BrokerEndpoint | None:
        with self._lock:
            if listener == "PLAINTEXT":
                return self.brokers.get(broker_id)
            return self.listeners.get(broker_id, {}).get(listener)

    def inter_broker_endpoint(self, broker_id: int) -> BrokerEndpoint | None:
        """Where this broker dials ``broker_id`` (every broker-to-broker request: fetchers, forwarding,
        controlled shutdown, tiered rebuild): its registered endpoint, or its link when the cluster runs links;
        None while it is not a live broker."""
        with self._lock:
            b = self.brokers.get(broker_id)
            if b is not None and self.inter_broker_listener is not None:
                b = self.listeners.get(broker_id, {}).get(self.inter_broker_listener, b)
        if b is None or broker_id not in self.link_endpoints:
            return b
        host, port = self.link_endpoints[broker_id]
        return attrs.evolve(b, host=host, port=port)

    def topic_name(self, topic_id: str) -> str | None:
        """The name of the topic whose id (22-char base64) is ``topic_id``, None when unknown (Kafka's
        ``topicIdsToNames``, which Fetch v13+ resolves its topics with)."""
        names = self._topic_names
        if names is None:
            with self._lock:
                names = self._topic_names = {tid: name for name, tid in self.topic_ids.items()}
        return names.get(topic_id)

    def contains_topic(self, topic: str) -> bool:
        with self._lock:
            return topic in self.partitions
