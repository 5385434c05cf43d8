"""Topic-level log configuration with Kafka 3.x names, defaults and validation messages.

``LogConfig.from_props({"segment.bytes": "1048576", ...})`` parses Kafka's string values (ints, bools and
lists as Kafka's ``ConfigDef`` parses them) over defaults, and raises ``InvalidConfigurationError`` with
Kafka's text for unknown names (``Unknown topic config name: x``) and bad values
(``Invalid value x for configuration segment.bytes: Not a number of type INT``).
``broker_topic_defaults(broker_props)`` maps broker settings (``log.segment.bytes``, ``log.retention.hours``,
``message.max.bytes``...) onto topic names, to be used as ``defaults``.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import attrs

from kafkatier.log.errors import InvalidConfigurationError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
_INT_MIN = -(2**31)
_LONG_MIN = -(2**63)

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("compact", "delete")


def _invalid(name: str, value: Any, message: str) -> InvalidConfigurationError:
    return InvalidConfigurationError(f"Invalid value {value} for configuration {name}: {message}")


def _parse_int(name: str, value: Any, lo: int, hi: int, type_name: str) -> int:
    if isinstance(value, bool):
        raise _invalid(name, value, f"Expected value to be a {'32' if type_name == 'INT' else '64'}-bit "
                                    f"integer, but it was a {type(value).__name__}")
    if isinstance(value, int):
        n = value
    else:
        s = str(value).strip()
        try:
            if not s or not (s.lstrip("+-").isdigit()):
                raise ValueError
            n = int(s)
        except ValueError:
            raise _invalid(name, value, f"Not a number of type {type_name}") from None
    if not lo <= n <= hi:
        raise _invalid(name, value, f"Not a number of type {type_name}")
    return n


def _int(name, value):
    return _parse_int(name, value, _INT_MIN, INT_MAX, "INT")


def _long(name, value):
    return _parse_int(name, value, _LONG_MIN, LONG_MAX, "LONG")


def _bool(name, value):
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s == "true":
        return True
    if s == "false":
        return False
    raise _invalid(name, value, "Expected value to be either true or false")


def _double(name, value):
    try:
        return float(str(value).strip()) if not isinstance(value, (int, float)) else float(value)
    except ValueError:
        raise _invalid(name, value, "Not a number of type DOUBLE") from None


def _string(name, value):
    return str(value).strip()


def _list(name, value):
    if isinstance(value, (list, tuple)):
        return tuple(str(v).strip() for v in value)
    s = str(value).strip()
    return tuple(p.strip() for p in s.split(",")) if s else ()


def _at_least(minimum):
    def check(name, value, raw):
        if value < minimum:
            raise _invalid(name, raw, f"Value must be at least {minimum}")
    return check


def _between(lo, hi):
    def check(name, value, raw):
        if value < lo:
            raise _invalid(name, raw, f"Value must be at least {lo}")
        if value > hi:
            raise _invalid(name, raw, f"Value must be no more than {hi}")
    return check


def _one_of(options, case_sensitive=True):
    def check(name, value, raw):
        v = value if case_sensitive else value.lower()
        if v not in options:
            raise _invalid(name, raw, f"String must be one of: {', '.join(options)}")
    return check


def _list_of(options):
    def check(name, value, raw):
        for item in value:
            if item not in options:
                raise _invalid(name, item, f"String must be one of: {', '.join(options)}")
    return check


def _throttled_replicas(name, value, raw):
    # "*" or a list of "partition:brokerId".
    if value == ("*",) or not value:
        return
    for item in value:
        parts = item.split(":")
        if len(parts) != 2 or not parts[0].strip().isdigit() or not parts[1].strip().isdigit():
            raise _invalid(name, ",".join(value), "must be the literal '*' or a list of replicas in the following "
                                                  "format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")


@attrs.frozen
class _Def:
    name: str
    parse: Callable[[str, Any], Any]
    default: Any
    check: Callable[[str, Any, Any], None] | None = None


# Kafka 3.x topic configs (TopicConfig / LogConfig), in Kafka's order.
_DEFS: tuple[_Def, ...] = (
    _Def("segment.bytes", _int, 1073741824, _at_least(14)),
    _Def("segment.ms", _long, 604800000, _at_least(1)),
    _Def("segment.jitter.ms", _long, 0, _at_least(0)),
    _Def("segment.index.bytes", _int, 10485760, _at_least(4)),
    _Def("flush.messages", _long, LONG_MAX, _at_least(1)),
    _Def("flush.ms", _long, LONG_MAX, _at_least(0)),
    _Def("retention.bytes", _long, -1),
    _Def("retention.ms", _long, 604800000, _at_least(-1)),
    _Def("max.message.bytes", _int, 1048588, _at_least(0)),
    _Def("index.interval.bytes", _int, 4096, _at_least(0)),
    _Def("delete.retention.ms", _long, 86400000, _at_least(0)),
    _Def("min.compaction.lag.ms", _long, 0, _at_least(0)),
    _Def("max.compaction.lag.ms", _long, LONG_MAX, _at_least(1)),
    _Def("file.delete.delay.ms", _long, 60000, _at_least(0)),
    _Def("min.cleanable.dirty.ratio", _double, 0.5, _between(0, 1)),
    _Def("cleanup.policy", _list, ("delete",), _list_of(CLEANUP_POLICIES)),
    _Def("unclean.leader.election.enable", _bool, False),
    _Def("min.insync.replicas", _int, 1, _at_least(1)),
    _Def("compression.type", _string, "producer", _one_of(COMPRESSION_TYPES)),
    _Def("compression.gzip.level", _int, -1, None),
    _Def("compression.lz4.level", _int, 9, _between(1, 17)),
    _Def("compression.zstd.level", _int, 3, _between(-131072, 22)),
    _Def("preallocate", _bool, False),
    _Def("message.format.version", _string, "3.0-IV1"),
    _Def("message.timestamp.type", _string, "CreateTime", _one_of(TIMESTAMP_TYPES)),
    _Def("message.timestamp.difference.max.ms", _long, LONG_MAX, _at_least(0)),
    _Def("message.timestamp.before.max.ms", _long, LONG_MAX, _at_least(0)),
    _Def("message.timestamp.after.max.ms", _long, LONG_MAX, _at_least(0)),
    _Def("leader.replication.throttled.replicas", _list, (), _throttled_replicas),
    _Def("follower.replication.throttled.replicas", _list, (), _throttled_replicas),
    _Def("message.downconversion.enable", _bool, True),
    _Def("remote.storage.enable", _bool, False),
    _Def("local.retention.ms", _long, -2, _at_least(-2)),
    _Def("local.retention.bytes", _long, -2, _at_least(-2)),
    _Def("remote.log.copy.disable", _bool, False),
    _Def("remote.log.delete.on.disable", _bool, False),
)
_BY_NAME = {d.name: d for d in _DEFS}
TOPIC_CONFIG_NAMES: tuple[str, ...] = tuple(d.name for d in _DEFS)


def _field(name: str) -> str:
    return name.replace(".", "_")


def _gzip_level(name, value, raw):
    if value != -1 and not 1 <= value <= 9:
        raise _invalid(name, raw, "Value must be between 1 and 9, or equal to -1")


_BY_NAME["compression.gzip.level"] = attrs.evolve(_BY_NAME["compression.gzip.level"], check=_gzip_level)
_DEFS = tuple(_BY_NAME[d.name] for d in _DEFS)


@attrs.frozen
class LogConfig:
    """Effective topic configuration. Attribute names are Kafka's with dots as underscores."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    retention_bytes: int = -1
    retention_ms: int = 604800000
    max_message_bytes: int = 1048588
    index_interval_bytes: int = 4096
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    min_cleanable_dirty_ratio: float = 0.5
    cleanup_policy: tuple[str, ...] = ("delete",)
    unclean_leader_election_enable: bool = False
    min_insync_replicas: int = 1
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    preallocate: bool = False
    message_format_version: str = "3.0-IV1"
    message_timestamp_type: str = "CreateTime"
    message_timestamp_difference_max_ms: int = LONG_MAX
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    leader_replication_throttled_replicas: tuple[str, ...] = ()
    follower_replication_throttled_replicas: tuple[str, ...] = ()
    message_downconversion_enable: bool = True
    remote_storage_enable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    # Names set explicitly (topic overrides), for DescribeConfigs sources.
    overridden: frozenset[str] = frozenset()

    @classmethod
    def from_props(cls, props: Mapping[str, Any] | None = None,
                   defaults: Mapping[str, Any] | None = None) -> LogConfig:
        """Parse Kafka topic config strings (``props`` override ``defaults``, both by Kafka name)."""
        values: dict[str, Any] = {}
        for source in (defaults or {}, props or {}):
            for name, raw in source.items():
                d = _BY_NAME.get(name)
                if d is None:
                    raise InvalidConfigurationError(f"Unknown topic config name: {name}")
                if raw is None:
                    raise _invalid(name, raw, "Value must not be null")
                value = d.parse(name, raw)
                if d.check is not None:
                    d.check(name, value, raw)
                values[_field(name)] = value
        cfg = cls(**values, overridden=frozenset(props or {}))
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Cross-field checks (Kafka's ``LogConfig.validateValues``)."""
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfigurationError(
                f"conflict topic config setting min.compaction.lag.ms ({self.min_compaction_lag_ms}) > "
                f"max.compaction.lag.ms ({self.max_compaction_lag_ms})")

    def to_props(self) -> dict[str, str]:
        """Every topic config as Kafka renders it in DescribeConfigs."""
        out = {}
        for d in _DEFS:
            v = getattr(self, _field(d.name))
            if isinstance(v, bool):
                s = "true" if v else "false"
            elif isinstance(v, tuple):
                s = ",".join(v)
            else:
                s = str(v)
            out[d.name] = s
        return out

    def with_overrides(self, props: Mapping[str, Any]) -> LogConfig:
        """This config with some topic configs replaced (parsed and validated)."""
        base = {k: v for k, v in self.to_props().items()}
        cfg = LogConfig.from_props(props, defaults=base)
        return attrs.evolve(cfg, overridden=self.overridden | frozenset(props))

    # --- derived values (Kafka's LogConfig accessors) --------------------------------------------------
    @property
    def delete(self) -> bool:
        return "delete" in (p.lower() for p in self.cleanup_policy)

    @property
    def compact(self) -> bool:
        return "compact" in (p.lower() for p in self.cleanup_policy)

    @property
    def max_segment_ms(self) -> int:
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    @property
    def effective_timestamp_before_max_ms(self) -> int:
        if self.message_timestamp_before_max_ms != LONG_MAX:
            return self.message_timestamp_before_max_ms
        return self.message_timestamp_difference_max_ms

    @property
    def effective_timestamp_after_max_ms(self) -> int:
        if self.message_timestamp_after_max_ms != LONG_MAX:
            return self.message_timestamp_after_max_ms
        return self.message_timestamp_difference_max_ms

    @property
    def local_retention_ms_effective(self) -> int:
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def local_retention_bytes_effective(self) -> int:
        return self.retention_bytes if self.local_retention_bytes == -2 else self.local_retention_bytes


# Broker config -> topic config (Kafka's ServerTopicConfigSynonyms), highest priority first per topic name.
_BROKER_SYNONYMS: dict[str, tuple[tuple[str, int], ...]] = {
    "segment.bytes": (("log.segment.bytes", 1),),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", 3600000)),
    "segment.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3600000)),
    "segment.index.bytes": (("log.index.size.max.bytes", 1),),
    "flush.messages": (("log.flush.interval.messages", 1),),
    "flush.ms": (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
    "retention.bytes": (("log.retention.bytes", 1),),
    "retention.ms": (("log.retention.ms", 1), ("log.retention.minutes", 60000), ("log.retention.hours", 3600000)),
    "max.message.bytes": (("message.max.bytes", 1),),
    "index.interval.bytes": (("log.index.interval.bytes", 1),),
    "delete.retention.ms": (("log.cleaner.delete.retention.ms", 1),),
    "min.compaction.lag.ms": (("log.cleaner.min.compaction.lag.ms", 1),),
    "max.compaction.lag.ms": (("log.cleaner.max.compaction.lag.ms", 1),),
    "file.delete.delay.ms": (("log.segment.delete.delay.ms", 1),),
    "min.cleanable.dirty.ratio": (("log.cleaner.min.cleanable.ratio", 1),),
    "cleanup.policy": (("log.cleanup.policy", 1),),
    "unclean.leader.election.enable": (("unclean.leader.election.enable", 1),),
    "min.insync.replicas": (("min.insync.replicas", 1),),
    "compression.type": (("compression.type", 1),),
    "preallocate": (("log.preallocate", 1),),
    "message.timestamp.type": (("log.message.timestamp.type", 1),),
    "message.timestamp.difference.max.ms": (("log.message.timestamp.difference.max.ms", 1),),
    "message.timestamp.before.max.ms": (("log.message.timestamp.before.max.ms", 1),),
    "message.timestamp.after.max.ms": (("log.message.timestamp.after.max.ms", 1),),
    "message.downconversion.enable": (("log.message.downconversion.enable", 1),),
    "local.retention.ms": (("log.local.retention.ms", 1),),
    "local.retention.bytes": (("log.local.retention.bytes", 1),),
}


def broker_topic_defaults(broker_props: Mapping[str, Any]) -> dict[str, str]:
    """Topic-config defaults from broker settings (``log.retention.hours=1`` -> ``retention.ms=3600000``)."""
    out: dict[str, str] = {}
    for topic_name, synonyms in _BROKER_SYNONYMS.items():
        for broker_name, factor in synonyms:
            raw = broker_props.get(broker_name)
            if raw is None:
                continue
            if factor == 1:
                out[topic_name] = str(raw)
            else:
                n = _long(broker_name, raw)
                out[topic_name] = str(-1 if n < 0 else n * factor)
            break
    return out
