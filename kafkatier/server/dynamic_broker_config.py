"""DynamicBrokerConfig: the broker configs, where each value comes from, and their changes at runtime (Kafka's
``kafka.server.DynamicBrokerConfig`` with ``DynamicConfig.Broker``, ZooKeeper mode).

One definition per broker config (:data:`BROKER_CONFIGS`): type, default and mode -- ``read-only`` (only in
the broker's static properties), ``per-broker`` or ``cluster-wide`` (also settable for all brokers at once).
A value comes from, highest precedence first: ``/config/brokers/<id>`` (DYNAMIC_BROKER_CONFIG),
``/config/brokers/<default>`` (DYNAMIC_DEFAULT_BROKER_CONFIG), the broker's properties (STATIC_BROKER_CONFIG),
the default (DEFAULT_CONFIG).  Configs that are aliases of one another (``log.retention.ms`` / ``.minutes`` /
``.hours``) are synonyms: DescribeConfigs lists, for each entry, every set synonym in that order.

Changes: AlterConfigs / IncrementalAlterConfigs on a BROKER resource validate the new layer (unknown or
read-only names, bad values -> INVALID_REQUEST with Kafka's "Invalid config value for resource ..." text) and
write it with a change notification (``brokers/<id>`` or ``brokers/<default>``).  Every broker's
DynamicConfigManager then calls :meth:`on_change`; the effective values are recomputed and each
*reconfigurable* whose names changed is called with the new effective config (Kafka's ``Reconfigurable``,
registered by the composition root).  Readers that sample a value at use (e.g. a throttle) call :meth:`value`.

Every Kafka 3.9 broker config name is known (:mod:`kafkatier.server.kafka_config_defs`); those kafkatier does
not act on are *inert*: accepted, stored and described as Kafka would.  Names Kafka does not define are custom
configs, stored as Kafka stores them.  Deliberate differences: some configs Kafka updates dynamically are
read-only here (their readers sample them once); a password type is never stored encrypted.
"""
from __future__ import annotations

import threading
from typing import Callable, Iterable, Mapping

import attrs

from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import Errors, InvalidRequestError, KafkaError
from kafkatier.server.kafka_config_defs import KAFKA_BROKER_CONFIGS

log = get_logger("server.dynamic-broker-config")

DEFAULT_ENTITY = "<default>"
LONG_MAX = 2**63 - 1

# DescribeConfigs config_source values.
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 2, 3, 4, 5
# DescribeConfigs config_type values.
_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7, "CLASS": 8,
          "PASSWORD": 9}
READ_ONLY, PER_BROKER, CLUSTER_WIDE = "read-only", "per-broker", "cluster-wide"


@attrs.frozen
class BrokerConfigDef:
    name: str
    type: str
    default: str | None
    mode: str
    #: Kafka's validator: ``atLeast(minimum)``, ``between(minimum, maximum)``, ``in(*one_of)`` (for a LIST,
    #: ``ValidList.in``: each element one of them); None where Kafka has none.
    minimum: int | None = None
    #: True for a Kafka broker config kafkatier accepts, stores and describes but does not act on
    #: (``docs/configuration.md`` lists them).
    inert: bool = False
    maximum: int | None = None
    one_of: tuple[str, ...] | None = None


def _d(name: str, type_: str, default, mode: str, minimum: int | None = None, *, maximum: int | None = None,
       one_of: tuple[str, ...] | None = None) -> BrokerConfigDef:
    return BrokerConfigDef(name, type_, None if default is None else str(default).lower()
                           if isinstance(default, bool) else str(default), mode, minimum,
                           maximum=maximum, one_of=one_of)


#: The range of each integer type (Java's short, int and long).
_INT_BITS = {"SHORT": 16, "INT": 32, "LONG": 64}
_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")  # BrokerCompressionType.names()


def parse_setting(d: BrokerConfigDef, raw):
    """``raw`` as the typed value of config ``d`` (int, float, bool; str otherwise), checked by its validator;
    a ``ValueError`` with Kafka's ``ConfigException`` text ("Invalid value V for configuration N: ...") when it
    does not fit -- what ``ConfigDef.parseType`` and the validators say."""
    def invalid(message: str, value=raw) -> ValueError:
        return ValueError(f"Invalid value {value} for configuration {d.name}: {message}")
    text = str(raw).strip()
    if d.type in _INT_BITS:
        bits = _INT_BITS[d.type]
        try:
            value = int(text)
        except ValueError:
            raise invalid(f"Not a number of type {d.type}") from None
        if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            raise invalid(f"Not a number of type {d.type}")
    elif d.type == "DOUBLE":
        try:
            value = float(text)
        except ValueError:
            raise invalid("Not a number of type DOUBLE") from None
    elif d.type == "BOOLEAN":
        if text.lower() not in ("true", "false"):
            raise invalid("Expected value to be either true or false")
        value = text.lower() == "true"
    else:
        value = raw
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if d.minimum is not None and value < d.minimum:
            raise invalid(f"Value must be at least {d.minimum}")
        if d.maximum is not None and value > d.maximum:
            raise invalid(f"Value must be no more than {d.maximum}")
    if d.one_of is not None:
        elements = [e.strip() for e in str(value).split(",") if e.strip()] if d.type == "LIST" else [text]
        for element in elements:
            if element not in d.one_of:
                raise invalid("String must be one of: " + ", ".join(d.one_of), element)
    return value


#: Every broker config this simulator knows, once.
BROKER_CONFIGS: dict[str, BrokerConfigDef] = {d.name: d for d in (
    _d("broker.id", "INT", -1, READ_ONLY),
    _d("zookeeper.connect", "STRING", None, READ_ONLY),
    _d("zookeeper.session.timeout.ms", "INT", 18000, READ_ONLY),
    _d("log.dirs", "STRING", None, READ_ONLY),
    _d("listeners", "STRING", "PLAINTEXT://:9092", READ_ONLY),
    _d("broker.rack", "STRING", None, READ_ONLY),
    _d("delete.topic.enable", "BOOLEAN", True, READ_ONLY),
    _d("auto.create.topics.enable", "BOOLEAN", True, READ_ONLY),
    _d("request.timeout.ms", "INT", 30000, READ_ONLY),
    _d("num.partitions", "INT", 1, READ_ONLY, 1),
    _d("default.replication.factor", "INT", 1, READ_ONLY),
    _d("replica.lag.time.max.ms", "LONG", 30000, READ_ONLY),
    _d("replica.fetch.wait.max.ms", "INT", 500, READ_ONLY),
    _d("replica.fetch.max.bytes", "INT", 1048576, READ_ONLY, 0),
    _d("replica.fetch.min.bytes", "INT", 1, READ_ONLY),
    _d("replica.high.watermark.checkpoint.interval.ms", "LONG", 5000, READ_ONLY),
    _d("log.initial.task.delay.ms", "LONG", 30000, READ_ONLY, 0),
    _d("num.recovery.threads.per.data.dir", "INT", 2, READ_ONLY, 1),
    _d("num.replica.alter.log.dirs.threads", "INT", None, READ_ONLY, 1),   # unset: one per log dir
    _d("log.retention.check.interval.ms", "LONG", 300000, READ_ONLY, 1),
    _d("remote.log.storage.system.enable", "BOOLEAN", False, READ_ONLY),
    _d("offsets.topic.num.partitions", "INT", 10, READ_ONLY, 1),
    _d("offsets.topic.replication.factor", "SHORT", 3, READ_ONLY, 1),
    _d("offsets.retention.minutes", "INT", 10080, READ_ONLY, 1),
    _d("offsets.retention.check.interval.ms", "LONG", 600000, READ_ONLY, 1),
    _d("offset.metadata.max.bytes", "INT", 4096, READ_ONLY),
    _d("group.min.session.timeout.ms", "INT", 6000, READ_ONLY),
    _d("group.max.session.timeout.ms", "INT", 1800000, READ_ONLY),
    _d("group.initial.rebalance.delay.ms", "INT", 3000, READ_ONLY),
    _d("group.max.size", "INT", 2147483647, READ_ONLY, 1),
    # transaction coordinator (coordinator/transaction)
    _d("transaction.state.log.num.partitions", "INT", 50, READ_ONLY, 1),
    _d("transaction.state.log.replication.factor", "SHORT", 3, READ_ONLY, 1),
    _d("transaction.state.log.min.isr", "INT", 2, READ_ONLY, 1),
    _d("transaction.state.log.segment.bytes", "INT", 104857600, READ_ONLY, 1),
    _d("transaction.state.log.load.buffer.size", "INT", 5242880, READ_ONLY, 1),
    _d("transaction.max.timeout.ms", "INT", 900000, READ_ONLY, 1),
    _d("transactional.id.expiration.ms", "INT", 604800000, READ_ONLY, 1),
    _d("transaction.abort.timed.out.transaction.cleanup.interval.ms", "INT", 10000, READ_ONLY, 1),
    _d("transaction.remove.expired.transaction.cleanup.interval.ms", "INT", 3600000, READ_ONLY, 1),
    _d("transaction.partition.verification.enable", "BOOLEAN", True, READ_ONLY),
    _d("kafkatier.transaction.add.partitions.hold.ms", "INT", 1000, READ_ONLY, 0),   # project addition
    # leader balance and controlled shutdown (controller/replica_election_manager.py, server/controlled_shutdown.py)
    _d("auto.leader.rebalance.enable", "BOOLEAN", True, READ_ONLY),
    _d("leader.imbalance.check.interval.seconds", "LONG", 300, READ_ONLY, 1),
    _d("leader.imbalance.per.broker.percentage", "INT", 10, READ_ONLY),
    _d("controlled.shutdown.enable", "BOOLEAN", True, READ_ONLY),
    _d("controlled.shutdown.max.retries", "INT", 3, READ_ONLY),
    _d("controlled.shutdown.retry.backoff.ms", "LONG", 5000, READ_ONLY),
    # client quotas (server/quota_factory.py) and fetch sessions (server/fetch_session.py)
    _d("quota.window.num", "INT", 11, READ_ONLY, 1),
    _d("quota.window.size.seconds", "INT", 1, READ_ONLY, 1),
    _d("max.incremental.fetch.session.cache.slots", "INT", 1000, READ_ONLY, 0),
    _d("min.incremental.fetch.session.eviction.ms", "LONG", 120000, READ_ONLY, 0),  # project addition: a constant in Kafka
    # the log cleaner (log/log_cleaner.py; dynamic in Kafka, read at start-up here)
    _d("log.cleaner.enable", "BOOLEAN", True, READ_ONLY),
    _d("log.cleaner.threads", "INT", 1, READ_ONLY, 0),
    _d("log.cleaner.dedupe.buffer.size", "LONG", 134217728, READ_ONLY),
    _d("log.cleaner.io.buffer.size", "INT", 524288, READ_ONLY, 0),
    _d("log.cleaner.io.buffer.load.factor", "DOUBLE", 0.9, READ_ONLY),
    _d("log.cleaner.io.max.bytes.per.second", "DOUBLE", 1.7976931348623157e308, READ_ONLY),
    _d("log.cleaner.backoff.ms", "LONG", 15000, READ_ONLY, 0),
    _d("kafkatier.log.cleaner.duty.cycle", "DOUBLE", 0.2, READ_ONLY),   # project addition (docs/log-compaction.md)
    # log configs: the defaults of every topic without an override (Kafka's DynamicLogConfig)
    _d("log.retention.ms", "LONG", None, CLUSTER_WIDE, -1),
    _d("log.retention.minutes", "INT", None, CLUSTER_WIDE, -1),
    _d("log.retention.hours", "INT", 168, CLUSTER_WIDE, -1),
    _d("log.retention.bytes", "LONG", -1, CLUSTER_WIDE, -1),
    _d("log.local.retention.ms", "LONG", -2, CLUSTER_WIDE, -2),
    _d("log.local.retention.bytes", "LONG", -2, CLUSTER_WIDE, -2),
    _d("log.segment.bytes", "INT", 1073741824, CLUSTER_WIDE, 14),
    _d("log.roll.ms", "LONG", None, CLUSTER_WIDE, 1),
    _d("log.roll.hours", "INT", 168, CLUSTER_WIDE, 1),
    _d("log.cleanup.policy", "LIST", "delete", CLUSTER_WIDE, one_of=("compact", "delete")),
    _d("log.cleaner.min.cleanable.ratio", "DOUBLE", 0.5, CLUSTER_WIDE, 0, maximum=1),
    _d("log.cleaner.delete.retention.ms", "LONG", 86400000, CLUSTER_WIDE, 0),
    _d("log.cleaner.min.compaction.lag.ms", "LONG", 0, CLUSTER_WIDE, 0),
    _d("log.cleaner.max.compaction.lag.ms", "LONG", LONG_MAX, CLUSTER_WIDE, 1),
    _d("message.max.bytes", "INT", 1048588, CLUSTER_WIDE, 0),
    _d("compression.type", "STRING", "producer", CLUSTER_WIDE, one_of=_COMPRESSION_TYPES),
    _d("min.insync.replicas", "INT", 1, CLUSTER_WIDE, 1),
    _d("unclean.leader.election.enable", "BOOLEAN", False, CLUSTER_WIDE),
    # replication throttles (Kafka's DynamicReplicationQuota)
    _d("leader.replication.throttled.rate", "LONG", LONG_MAX, PER_BROKER, 0),
    _d("follower.replication.throttled.rate", "LONG", LONG_MAX, PER_BROKER, 0),
    _d("replica.alter.log.dirs.io.max.bytes.per.second", "LONG", LONG_MAX, PER_BROKER, 0),
    # KIP-113's name for the intra-broker (log dir move) throttle; a synonym of Kafka's name above
    _d("intra.broker.throttled.rate", "LONG", None, PER_BROKER, 0),
    # remote log manager pools (KIP-950's split pools)
    _d("remote.log.manager.thread.pool.size", "INT", 10, PER_BROKER, 1),
    _d("remote.log.manager.copier.thread.pool.size", "INT", -1, PER_BROKER, -1),
    _d("remote.log.manager.expiration.thread.pool.size", "INT", -1, PER_BROKER, -1),
    _d("remote.log.reader.threads", "INT", 10, PER_BROKER, 1),
    # listeners and security (server/config.py's listener helpers, server/sasl.py, server/acl.py); kafkatier's
    # SASL defaults are PLAIN where Kafka's are GSSAPI, which it does not implement (docs/security.md)
    _d("advertised.listeners", "STRING", None, PER_BROKER),
    _d("listener.security.protocol.map", "STRING",
       "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT", PER_BROKER),
    _d("inter.broker.listener.name", "STRING", None, READ_ONLY),
    _d("security.inter.broker.protocol", "STRING", "PLAINTEXT", READ_ONLY,
       one_of=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    _d("listener.security.protocol", "STRING", "PLAINTEXT", READ_ONLY),   # project addition: SASL on the listener
    _d("sasl.enabled.mechanisms", "LIST", "PLAIN", PER_BROKER),
    _d("sasl.mechanism.inter.broker.protocol", "STRING", "PLAIN", PER_BROKER),
    _d("connection.failed.authentication.delay.ms", "INT", 100, READ_ONLY, 0),
    _d("authorizer.class.name", "STRING", "", READ_ONLY),
    _d("super.users", "STRING", None, READ_ONLY),                       # the ACL authorizer's
    _d("allow.everyone.if.no.acl.found", "BOOLEAN", False, READ_ONLY),  # the ACL authorizer's
    _d("replica.selector.class", "STRING", None, READ_ONLY),
    _d("socket.request.max.bytes", "INT", 104857600, READ_ONLY, 1),
    _d("queued.max.request.bytes", "LONG", -1, READ_ONLY),
    # project additions: the links of docs/network-faults.md, and a test hook delaying the control channel
    _d("kafkatier.links.broker.endpoints", "STRING", None, READ_ONLY),
    _d("kafkatier.test.control.channel.latency.ms", "DOUBLE", 0, READ_ONLY, 0),
    _d("kafkatier.test.memory.headroom.bytes", "LONG", None, READ_ONLY, 0),
    # project addition: the broker process's garbage collector (server/gc_tuning.py)
    _d("kafkatier.gc.freeze.enable", "BOOLEAN", True, READ_ONLY),
    # project addition: small Produce / Fetch requests handled on the network thread (server/network.py; off)
    _d("kafkatier.network.inline.max.bytes", "INT", 0, READ_ONLY, 0),
    # project addition: requests read ahead on one connection before its answers (server/network.py; Kafka: 1)
    _d("kafkatier.network.max.in.flight.requests.per.connection", "INT", 64, READ_ONLY, 1),
    # secrets: described as sensitive with a null value, never echoed (server/sasl.py reads them)
    _d("sasl.jaas.config", "PASSWORD", None, READ_ONLY),
    _d("listener.name.sasl_plaintext.plain.sasl.jaas.config", "PASSWORD", None, READ_ONLY),
    _d("listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config", "PASSWORD", None, READ_ONLY),
    _d("listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config", "PASSWORD", None, READ_ONLY),
    _d("listener.name.sasl_ssl.plain.sasl.jaas.config", "PASSWORD", None, READ_ONLY),
    _d("listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config", "PASSWORD", None, READ_ONLY),
    _d("listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config", "PASSWORD", None, READ_ONLY),
)}
# Every other Kafka 3.9 broker config: known with Kafka's type, default and update mode, inert here.
BROKER_CONFIGS.update({name: BrokerConfigDef(name, type_, default, mode, minimum, inert=True)
                       for name, type_, default, mode, minimum in KAFKA_BROKER_CONFIGS if name not in BROKER_CONFIGS})

#: Aliases, highest precedence first (Kafka's synonyms): a set member overrides those after it.
SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    ("log.roll.ms", "log.roll.hours"),
    ("intra.broker.throttled.rate", "replica.alter.log.dirs.io.max.bytes.per.second"),
)
_SYNONYMS_OF = {name: group for group in SYNONYMS for name in group}
#: KIP-113's intra-broker move throttle, under KIP-113's name and Kafka's, in precedence order.
ALTER_LOG_DIRS_THROTTLE_NAMES = ("intra.broker.throttled.rate", "replica.alter.log.dirs.io.max.bytes.per.second")

Reconfigurable = tuple[frozenset, Callable[[dict[str, str]], None]]


def _check_value(d: BrokerConfigDef, value: str) -> None:
    n = parse_setting(d, value)
    if d.name.endswith("copier.thread.pool.size") or d.name.endswith("expiration.thread.pool.size"):
        if n == 0 or n < -1:
            raise ValueError(f"Invalid value {value} for configuration {d.name}: Value must be -1 or at least 1")


class DynamicBrokerConfig:
    def __init__(self, broker_id: int, static: Mapping[str, str], kafka_zk,
                 reconfigurables: Iterable[Reconfigurable] = ()):
        self.broker_id = broker_id
        self.static = {k: str(v) for k, v in static.items() if v is not None}
        self.kafka_zk = kafka_zk
        self.reconfigurables = list(reconfigurables)
        self._lock = threading.Lock()
        self._default: dict[str, str] = {}
        self._per_broker: dict[str, str] = {}
        self._effective = self._compute()

    # --- reading ------------------------------------------------------------------------------------------
    def load(self) -> None:
        """Read both dynamic layers (after the change listener started, so no change is missed)."""
        self.on_change(DEFAULT_ENTITY, self.kafka_zk.get_entity_config_and_version("brokers", DEFAULT_ENTITY)[0])
        self.on_change(str(self.broker_id),
                       self.kafka_zk.get_entity_config_and_version("brokers", str(self.broker_id))[0])

    def value(self, name: str) -> str | None:
        return self._effective.get(name)

    def synonym_value(self, names: tuple[str, ...]) -> str | None:
        """The value of synonyms ``names`` (highest precedence first) from the highest layer that sets one of
        them -- this broker's dynamic config, the cluster default, the static properties -- or None (the
        default applies).  Within a layer the earlier name wins."""
        with self._lock:
            layers = (self._per_broker, self._default, self.static)
        for layer in layers:
            for name in names:
                if layer.get(name) is not None:
                    return layer[name]
        return None

    def effective(self) -> dict[str, str]:
        return dict(self._effective)

    def _compute(self) -> dict[str, str]:
        out = {n: d.default for n, d in BROKER_CONFIGS.items() if d.default is not None}
        for layer in (self.static, self._default, self._per_broker):
            out.update(layer)
        return out

    # --- DynamicConfigManager handler ---------------------------------------------------------------------
    def on_change(self, entity: str, config: Mapping[str, str]) -> None:
        if entity not in (DEFAULT_ENTITY, str(self.broker_id)):
            return
        accepted = {}
        for k, v in config.items():
            d = BROKER_CONFIGS.get(k)
            try:
                if d is not None and d.mode == READ_ONLY:
                    raise ValueError("not a dynamic broker config")
                if d is not None:  # a name Kafka does not define is a custom config: kept, acted on by nothing
                    _check_value(d, str(v))
                accepted[k] = str(v)
            except ValueError as e:
                log.error("ignoring dynamic broker config %s", kv(entity=entity, name=k, value=v, reason=e))
        with self._lock:
            if entity == DEFAULT_ENTITY:
                self._default = accepted
            else:
                self._per_broker = accepted
            old, self._effective = self._effective, self._compute()
        changed = {k for k in set(old) | set(self._effective) if old.get(k) != self._effective.get(k)}
        if changed:
            log.info("broker config changed %s", kv(entity=entity, changed=",".join(sorted(changed))))
        for names, reconfigure in self.reconfigurables:
            if changed & names:
                try:
                    reconfigure(self.effective())
                except Exception:  # noqa: BLE001 - a failed reconfiguration keeps the old behaviour
                    log.exception("reconfiguration failed %s", kv(names=",".join(sorted(changed & names))))

    # --- DescribeConfigs ----------------------------------------------------------------------------------
    def describe(self, resource_name: str) -> list[dict]:
        """DescribeConfigs entries: every config of this broker, or for ``""`` the dynamic defaults only."""
        if resource_name == "":
            return [self._entry(n, {DYNAMIC_DEFAULT_BROKER_CONFIG: self._default}) for n in sorted(self._default)]
        self._check_broker(resource_name)
        layers = {DYNAMIC_BROKER_CONFIG: self._per_broker, DYNAMIC_DEFAULT_BROKER_CONFIG: self._default,
                  STATIC_BROKER_CONFIG: self.static}
        return [self._entry(n, layers) for n in sorted(BROKER_CONFIGS)]

    def _entry(self, name: str, layers: dict[int, dict[str, str]]) -> dict:
        d = BROKER_CONFIGS.get(name)
        group = _SYNONYMS_OF.get(name, (name,))
        group = group[group.index(name):]       # a synonym only yields to those before it
        synonyms = [{"name": s, "value": layer[s], "source": src}
                    for src, layer in layers.items() for s in group if s in layer]
        for s in group:
            sd = BROKER_CONFIGS.get(s)
            if sd is not None and sd.default is not None:
                synonyms.append({"name": s, "value": sd.default, "source": DEFAULT_CONFIG})
                break
        if d is not None and d.type == "PASSWORD":  # Kafka: sensitive values are never returned
            synonyms = [{**x, "value": None} for x in synonyms]
        own = next((x for x in synonyms if x["name"] == name), None)
        top = synonyms[0] if synonyms else None
        value = own["value"] if own is not None else (d.default if d is not None else None)
        source = top["source"] if top is not None else DEFAULT_CONFIG
        return {"name": name, "value": value, "source": source, "read_only": d is None or d.mode == READ_ONLY,
                "sensitive": d is not None and d.type == "PASSWORD", "synonyms": synonyms,
                "type": _TYPES.get(d.type, 0) if d is not None else 0}

    def _check_broker(self, resource_name: str) -> None:
        try:
            bid = int(resource_name)
        except ValueError:
            raise InvalidRequestError(f"Broker id must be an integer, but it is: {resource_name}") from None
        if bid != self.broker_id:
            raise InvalidRequestError(f"Unexpected broker id, expected {self.broker_id} or empty string, but "
                                      f"received {resource_name}")

    # --- Alter / IncrementalAlterConfigs --------------------------------------------------------------------
    def alter(self, resource_name: str, sets: Mapping[str, str | None], deletes: Iterable[str], replace: bool,
              validate_only: bool = False) -> dict[str, str]:
        """Validate and write the new dynamic layer of broker ``resource_name`` (``""``: the cluster default);
        returns it.  ``replace``: AlterConfigs semantics (``sets`` is the whole layer)."""
        if resource_name != "":
            self._check_broker(resource_name)
        entity = DEFAULT_ENTITY if resource_name == "" else resource_name
        where = f"ConfigResource(type=BROKER, name='{resource_name}')"

        def invalid(text: str) -> KafkaError:
            return InvalidRequestError(f"Invalid config value for resource {where}: {text}")
        nulls = sorted(k for k, v in sets.items() if v is None)
        if nulls:
            raise invalid(f"Null value not supported for : {','.join(nulls)}")
        # Kafka (DynamicBrokerConfig.validateConfigs): names it defines as read-only are refused; names it does
        # not define at all are custom configs, accepted and stored.
        static_only = sorted(k for k in [*sets, *deletes] if k in BROKER_CONFIGS and BROKER_CONFIGS[k].mode == READ_ONLY)
        if static_only:
            raise invalid(f"Cannot update these configs dynamically: Set({', '.join(static_only)})")
        if resource_name == "":
            per_broker = sorted(k for k in sets if k in BROKER_CONFIGS and BROKER_CONFIGS[k].mode == PER_BROKER
                                and BROKER_CONFIGS[k].inert)
            if per_broker:
                raise invalid("Cannot update these configs at default cluster level, broker id must be specified: "
                              f"Set({', '.join(per_broker)})")
        for k, v in sets.items():
            if k not in BROKER_CONFIGS:
                continue
            try:
                _check_value(BROKER_CONFIGS[k], str(v))
            except ValueError as e:
                raise invalid(str(e)) from None
        current, version = self.kafka_zk.get_entity_config_and_version("brokers", entity)
        new = {k: str(v) for k, v in sets.items()} if replace else {**current, **{k: str(v) for k, v in sets.items()}}
        for k in deletes:
            new.pop(k, None)
        if validate_only:
            return new
        try:
            note = self.kafka_zk.change_entity_config_conditionally("brokers", entity, new, version)
        except Exception as e:  # noqa: BLE001 - BadVersion / NodeExists: a concurrent change; the client retries
            raise KafkaError(f"The config of broker '{entity}' changed concurrently; retry ({type(e).__name__})",
                             Errors.UNKNOWN_SERVER_ERROR) from None
        log.info("wrote dynamic broker config %s", kv(entity=entity, config=new, notification=note))
        return new
