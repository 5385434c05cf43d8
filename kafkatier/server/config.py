"""Broker configuration (a subset of Kafka's ``KafkaConfig`` with Kafka's names and defaults).

:class:`BrokerConfig` holds the settings every part needs; any other broker setting is read with
:func:`broker_setting`, typed and checked by its one definition in
:data:`~kafkatier.server.dynamic_broker_config.BROKER_CONFIGS` (name, type, default, validator, dynamic or not),
never parsed from the raw ``overrides`` dict by the reader.
"""
from __future__ import annotations

from typing import Any, Mapping, TypeVar

import attrs

from kafkatier.server.dynamic_broker_config import BROKER_CONFIGS, parse_setting

T = TypeVar("T")


def _split(v) -> tuple[str, ...]:
    if isinstance(v, str):
        return tuple(x for x in v.split(",") if x)
    return tuple(v)


class BrokerSettingError(ValueError):
    """A broker setting whose value does not fit its definition (Kafka's ConfigException text)."""


def broker_setting(overrides: Mapping[str, Any], name: str) -> Any:
    """The value of broker setting ``name``: its override if set, else its default (None when it has none),
    converted to its type (int, float, bool; str otherwise) and checked by its validator (at least, between,
    one of), a misfit raising ``BrokerSettingError`` with Kafka's text.  A name without a definition raises
    ``KeyError``: add it to ``BROKER_CONFIGS`` first."""
    definition = BROKER_CONFIGS[name]
    raw = overrides.get(name)
    if raw is None:
        raw = definition.default
    if raw is None:
        return None
    try:
        return parse_setting(definition, raw)
    except ValueError as e:
        raise BrokerSettingError(str(e)) from None


def settings_config(cls: type[T], overrides: Mapping[str, Any]) -> T:
    """The attrs config ``cls`` whose every field is a broker setting (field ``a_b_c`` is setting ``a.b.c``),
    each read through its definition like :class:`BrokerConfig`'s: the coordinators' ``GroupConfig`` and
    ``TransactionConfig``."""
    return cls(**{f.name: broker_setting(overrides, f.name.replace("_", ".")) for f in attrs.fields(cls)})


def _default(name: str):
    """Broker setting ``name``'s default, typed, from its one definition."""
    return broker_setting({}, name)


#: The BrokerConfig fields that are broker settings, by Kafka name: read from the broker's properties by
#: :meth:`BrokerConfig.from_props` and reported back by :meth:`BrokerConfig.static_props`.
SETTINGS: dict[str, str] = {
    "broker.rack": "rack",
    "zookeeper.session.timeout.ms": "zookeeper_session_timeout_ms",
    "delete.topic.enable": "delete_topic_enable",
    "request.timeout.ms": "request_timeout_ms",
    "num.partitions": "num_partitions",
    "default.replication.factor": "default_replication_factor",
    "min.insync.replicas": "min_insync_replicas",
    "unclean.leader.election.enable": "unclean_leader_election_enable",
    "replica.lag.time.max.ms": "replica_lag_time_max_ms",
    "replica.fetch.wait.max.ms": "replica_fetch_wait_max_ms",
    "replica.fetch.max.bytes": "replica_fetch_max_bytes",
    "replica.fetch.min.bytes": "replica_fetch_min_bytes",
    "log.retention.check.interval.ms": "log_retention_check_interval_ms",
    "remote.log.storage.system.enable": "remote_log_storage_system_enable",
}


@attrs.frozen
class BrokerConfig:
    broker_id: int
    zookeeper_connect: str
    log_dirs: tuple[str, ...] = attrs.field(converter=_split)
    port: int = 0
    any_port_if_taken: bool = False   # ``port`` is a preference: taken by another process, listen on any free one
    host: str = "127.0.0.1"
    remote_storage_dir: str | None = None
    rack: str | None = _default("broker.rack")
    # kafkatier's default (Kafka's is 18000): brokers of a local cluster that die are noticed in seconds.
    zookeeper_session_timeout_ms: int = 6000
    zookeeper_connection_timeout_ms: int = 30000
    delete_topic_enable: bool = _default("delete.topic.enable")
    request_timeout_ms: int = _default("request.timeout.ms")
    num_partitions: int = _default("num.partitions")
    default_replication_factor: int = _default("default.replication.factor")
    min_insync_replicas: int = _default("min.insync.replicas")
    unclean_leader_election_enable: bool = _default("unclean.leader.election.enable")
    replica_lag_time_max_ms: int = _default("replica.lag.time.max.ms")
    replica_fetch_wait_max_ms: int = _default("replica.fetch.wait.max.ms")
    replica_fetch_max_bytes: int = _default("replica.fetch.max.bytes")
    replica_fetch_min_bytes: int = _default("replica.fetch.min.bytes")
    log_retention_check_interval_ms: int = _default("log.retention.check.interval.ms")
    remote_log_storage_system_enable: bool = _default("remote.log.storage.system.enable")
    # Every property of the broker (``server.properties`` with ``--override k=v``), for :meth:`setting`.
    overrides: dict = attrs.field(factory=dict)

    @classmethod
    def from_props(cls, props: Mapping[str, Any], **fields: Any) -> "BrokerConfig":
        """The config of a broker with properties ``props``: each of :data:`SETTINGS` that ``props`` sets, typed
        and checked by its definition (``BrokerSettingError``); ``fields`` (where it listens, its id...) win.
        Every other defined setting ``props`` sets is checked too, as Kafka checks all at start-up."""
        for name in props:
            if name in BROKER_CONFIGS:
                broker_setting(props, name)
        values = {field: broker_setting(props, name) for name, field in SETTINGS.items() if name in props}
        return cls(**{**values, **fields}, overrides=dict(props))

    def static_props(self) -> dict[str, str]:
        """The broker's own settings by Kafka name, as its properties file would say them (DescribeConfigs'
        STATIC_BROKER_CONFIG); unset ones (None) are left out."""
        props = {"broker.id": self.broker_id, "zookeeper.connect": self.zookeeper_connect,
                 "log.dirs": ",".join(self.log_dirs), "listeners": self.listener,
                 **{name: getattr(self, field) for name, field in SETTINGS.items()}}
        return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in props.items() if v is not None}

    @property
    def listener(self) -> str:
        return f"PLAINTEXT://{self.host}:{self.port}"

    def setting(self, name: str) -> Any:
        """The typed value of broker setting ``name`` (:func:`broker_setting` over :attr:`overrides`)."""
        return broker_setting(self.overrides, name)


class ListenerConfigError(ValueError):
    """Listener settings (``listeners``, ``listener.security.protocol.map``, the inter-broker listener, ``ssl.*``)
    that cannot work: the broker stops before it starts anything, with this one line."""


# --- listeners beyond PLAINTEXT (Kafka's ``listeners`` / ``advertised.listeners``) ---------------------------------
@attrs.frozen
class ExtraListener:
    """A listener besides the broker's PLAINTEXT one (``--port``): where it binds and what it advertises."""
    name: str
    host: str
    port: int
    advertised_host: str
    advertised_port: int
    #: Its ``listener.security.protocol.map`` entry: PLAINTEXT (the default for a name the map lacks), SSL,
    #: SASL_PLAINTEXT or SASL_SSL.
    security_protocol: str = "PLAINTEXT"

    @property
    def advertised(self) -> str:
        return f"{self.name}://{self.advertised_host}:{self.advertised_port}"


def _listener_map(value: str | None) -> dict[str, tuple[str, int]]:
    out = {}
    for item in (value or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, rest = item.partition("://")
        host, _, port = rest.rpartition(":")
        if not sep or not name or not port.isdigit():
            raise ListenerConfigError(f"bad listener {item!r}: expected NAME://host:port")
        out[name.upper()] = (host or "127.0.0.1", int(port))
    return out


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def security_protocol_map(overrides: dict) -> dict[str, str]:
    """``listener.security.protocol.map`` (``NAME:PROTOCOL,...``) over Kafka's default, where each of the four
    protocol names maps to itself."""
    out = {p: p for p in SECURITY_PROTOCOLS}
    for item in (broker_setting(overrides, "listener.security.protocol.map") or "").split(","):
        name, sep, protocol = item.strip().partition(":")
        if not item.strip():
            continue
        if not sep or protocol.strip().upper() not in SECURITY_PROTOCOLS:
            raise ListenerConfigError(f"bad listener.security.protocol.map entry {item.strip()!r}: expected NAME:PROTOCOL "
                             f"with PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}")
        out[name.strip().upper()] = protocol.strip().upper()
    return out


def inter_broker_listener_name(overrides: dict) -> str | None:
    """``inter.broker.listener.name``, else the listener named after ``security.inter.broker.protocol`` (Kafka's
    rule); None when neither is set (brokers dial each other's first endpoint: PLAINTEXT)."""
    name = (broker_setting(overrides, "inter.broker.listener.name") or "").strip().upper()
    if not name:
        name = (broker_setting(overrides, "security.inter.broker.protocol") or "").strip().upper()
    if not name or name == "PLAINTEXT":
        return None
    if name not in {e.name for e in extra_listeners(overrides)}:
        raise ListenerConfigError(f"inter-broker listener {name} is not in listeners")
    return name


def extra_listeners(overrides: dict) -> list[ExtraListener]:
    """The listeners of ``listeners`` other than PLAINTEXT (which is the broker's ``--port``), each advertised as
    ``advertised.listeners`` says (default: as it binds), speaking the security protocol
    ``listener.security.protocol.map`` gives it (a name the map lacks speaks PLAINTEXT: client groups)."""
    bind = _listener_map(broker_setting(overrides, "listeners"))
    adv = _listener_map(broker_setting(overrides, "advertised.listeners"))
    spm = security_protocol_map(overrides)
    return [ExtraListener(name, host, port, *adv.get(name, (host, port)), security_protocol=spm.get(name, "PLAINTEXT"))
            for name, (host, port) in bind.items() if name != "PLAINTEXT"]


# --- password-type configs -------------------------------------------------------------------------------------
#: Kafka's broker configs of type PASSWORD (``KafkaConfig``'s ``ConfigDef``): never shown, logged or echoed.
PASSWORD_CONFIGS = frozenset({
    "sasl.jaas.config", "ssl.key.password", "ssl.keystore.password", "ssl.truststore.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.certificates",
    "password.encoder.secret", "password.encoder.old.secret",
    "delegation.token.master.key", "delegation.token.secret.key",
})
HIDDEN = "[hidden]"  # Kafka's ``Password.HIDDEN``


def is_password_config(name: str) -> bool:
    """Is ``name`` a PASSWORD-type broker config, listener-prefixed or not: ``listener.name.<l>.<config>`` and
    ``listener.name.<l>.<mechanism>.sasl.jaas.config`` as Kafka resolves them; any ``*.password`` too."""
    base = name
    if base.startswith("listener.name."):
        base = base[len("listener.name."):].partition(".")[2]
    return base in PASSWORD_CONFIGS or base.endswith(".sasl.jaas.config") or base.endswith(".password")


def loggable_value(name: str, value) -> str:
    """``value`` as logs and CLI output may show it: ``[hidden]`` for a PASSWORD-type config, and, as Kafka's
    ``KafkaConfig.loggableValue`` does, for a name of unknown type (it may be a secret typed in the wrong place,
    e.g. ``user_admin=...``)."""
    from kafkatier.server.config_audit import unknown_configs
    if is_password_config(name) or unknown_configs([name]):
        return HIDDEN
    return str(value)


def loggable_configs(props) -> dict[str, str]:
    """``props`` with every value :func:`loggable_value` would hide replaced by ``[hidden]``."""
    return {k: loggable_value(k, v) for k, v in props.items()}
