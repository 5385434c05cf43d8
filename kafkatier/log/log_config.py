"""LogConfig: the one definition of every topic config (Kafka's ``LogConfig`` ConfigDef and ``TopicConfig``):
name, type, default, validator and broker synonyms, the rules spanning several configs, and the tiered storage
rules (docs/kip-950-tiered-storage.md#config-validation) -- used by the admin client to validate changes and by
brokers to build each log's :class:`LogConfig`.

Values in ZooKeeper and in requests are strings.  They are parsed the way Kafka's ``ConfigDef`` parses them
(trimmed; ``true``/``false`` case-insensitively; INT/LONG as 32/64-bit decimal; LIST split on commas) and then
checked against each config's validator.  Every failure is an :class:`InvalidConfigurationError` whose message
is Kafka's ``ConfigException`` text, ``Invalid value <v> for configuration <name>: <reason>``, or
``Unknown topic config name: <name>`` for a name that is not a topic config; an unsupported value of a KIP-950
disablement policy config is an :class:`InvalidRequestError` (KIP-950).

:func:`validate_topic_config` is Kafka's ``LogConfig.validate(existing, props, brokerProps,
isRemoteLogStorageSystemEnabled)``: nulls, unknown names, policy values, each value in definition order,
cross-config rules, then the tiered storage rules (which need the topic's existing overrides and the broker's
``remote.log.storage.system.enable``).

Broker defaults: a topic config without an override takes the value of its broker synonym
(``log.retention.hours`` for ``retention.ms``, ``message.max.bytes`` for ``max.message.bytes``, ...), else Kafka's
default (:func:`topic_defaults_from_broker`; :func:`broker_topic_defaults` gives only the synonyms that are set).
"""
from __future__ import annotations

import enum
import math
import re
from decimal import Decimal
from typing import Any, Callable, Mapping

import attrs

from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import InvalidConfigurationError, InvalidRequestError

log = get_logger("log.config")

LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
INT_MAX = 2**31 - 1
INT_MIN = -(2**31)

# ------------------------------------------------------------------------------------------------- ConfigException


def config_exception(name: str, value: Any, reason: str | None = None) -> InvalidConfigurationError:
    """Kafka's ``ConfigException(name, value, message)`` as an INVALID_CONFIG error."""
    text = f"Invalid value {_java_str(value)} for configuration {name}"
    return InvalidConfigurationError(text + (f": {reason}" if reason else ""))


def _java_str(value: Any) -> str:
    """How Java's string concatenation renders a parsed config value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double_str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_java_str(v) for v in value) + "]"
    return str(value)


def java_double_str(x: float) -> str:
    """``Double.toString``: ``0.5``, ``1.0``, ``1.0E-5``, ``1.0E7``, ``NaN``, ``Infinity``."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign, digit_tuple, exp = Decimal(repr(float(x))).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    e10 = len(digits) + int(exp) - 1          # x = d.ddd * 10^e10
    prefix = "-" if sign else ""
    if 1e-3 <= abs(x) < 1e7:
        if e10 >= 0:
            return f"{prefix}{digits[:e10 + 1].ljust(e10 + 1, '0')}.{digits[e10 + 1:] or '0'}"
        return f"{prefix}0.{'0' * (-e10 - 1)}{digits}"
    return f"{prefix}{digits[0]}.{digits[1:] or '0'}E{e10}"


# ----------------------------------------------------------------------------------------------------- ConfigDef

class ConfigType(enum.IntEnum):
    """DescribeConfigs ``ConfigType`` ids (v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


Validator = Callable[[str, Any], None]


@attrs.frozen
class BrokerSynonym:
    """A broker property that supplies a topic config's default; ``factor`` converts its unit (hours -> ms)."""

    name: str
    default: str | None = None       # the broker property's own default, if Kafka defines one
    factor: int = 1


@attrs.frozen
class TopicConfigKey:
    name: str
    type: ConfigType
    default: str                     # Kafka's default, as a string
    validator: Validator | None = None
    synonyms: tuple[BrokerSynonym, ...] = ()


def at_least(minimum: int | float) -> Validator:
    def check(name: str, value: Any) -> None:
        if value < minimum:
            raise config_exception(name, value, f"Value must be at least {minimum}")
    return check


def between(minimum: int | float, maximum: int | float) -> Validator:
    def check(name: str, value: Any) -> None:
        if isinstance(value, float) and math.isnan(value):
            raise config_exception(name, value, f"Value must be at least {minimum}")
        if value < minimum:
            raise config_exception(name, value, f"Value must be at least {minimum}")
        if value > maximum:
            raise config_exception(name, value, f"Value must be no more than {maximum}")
    return check


def one_of(*valid: str) -> Validator:
    def check(name: str, value: Any) -> None:
        if value not in valid:
            raise config_exception(name, value, "String must be one of: " + ", ".join(valid))
    return check


def list_of(*valid: str) -> Validator:
    item = one_of(*valid)

    def check(name: str, value: Any) -> None:
        for v in value:
            item(name, v)
    return check


def _gzip_level(name: str, value: Any) -> None:
    if value > 9 or (value < 1 and value != -1):
        raise config_exception(name, value, "Value must be between 1 and 9 or equal to -1")


_REPLICA_PAIR = re.compile(r"([0-9]+:[0-9]+)?")


def _throttled_replicas(name: str, value: Any) -> None:
    items = [v.strip() for v in value]
    if not (all(_REPLICA_PAIR.fullmatch(v) for v in items) or "".join(items) == "*"):
        raise config_exception(name, value, f"{name} must be the literal '*' or a list of replicas in the "
                                            "following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")


_MESSAGE_FORMAT_RE = re.compile(r"(0\.(8\.[0-2]|9\.0|10\.[0-2]|11\.0)|[12]\.[0-8]|3\.[0-9])(\.[0-9]+)?(-IV[0-9]+)?")


def _message_format_version(name: str, value: Any) -> None:
    # Approximates MetadataVersion.fromVersionString: Kafka versions 0.8.0 .. 3.9 with optional -IVn.
    if not _MESSAGE_FORMAT_RE.fullmatch(str(value)):
        raise config_exception(name, value, f"Version {value} is not a valid version")


_HOUR_MS = 3_600_000
_MINUTE_MS = 60_000
_LONG_MAX_S = str(LONG_MAX)
_S = BrokerSynonym


def _key(name: str, type_: ConfigType, default: str, validator: Validator | None = None,
         *synonyms: BrokerSynonym) -> TopicConfigKey:
    return TopicConfigKey(name, type_, default, validator, tuple(synonyms))


_T = ConfigType
# Definition order is Kafka's (it decides which invalid value is reported first).
_KEYS: tuple[TopicConfigKey, ...] = (
    _key("segment.bytes", _T.INT, "1073741824", at_least(14), _S("log.segment.bytes", "1073741824")),
    _key("segment.ms", _T.LONG, "604800000", at_least(1),
         _S("log.roll.ms"), _S("log.roll.hours", "168", _HOUR_MS)),
    _key("segment.jitter.ms", _T.LONG, "0", at_least(0),
         _S("log.roll.jitter.ms"), _S("log.roll.jitter.hours", "0", _HOUR_MS)),
    _key("segment.index.bytes", _T.INT, "10485760", at_least(4), _S("log.index.size.max.bytes", "10485760")),
    _key("flush.messages", _T.LONG, _LONG_MAX_S, at_least(1), _S("log.flush.interval.messages", _LONG_MAX_S)),
    _key("flush.ms", _T.LONG, _LONG_MAX_S, at_least(0),
         _S("log.flush.interval.ms"), _S("log.flush.scheduler.interval.ms", _LONG_MAX_S)),
    _key("retention.bytes", _T.LONG, "-1", None, _S("log.retention.bytes", "-1")),
    _key("retention.ms", _T.LONG, "604800000", at_least(-1),
         _S("log.retention.ms"), _S("log.retention.minutes", None, _MINUTE_MS),
         _S("log.retention.hours", "168", _HOUR_MS)),
    _key("max.message.bytes", _T.INT, "1048588", at_least(0), _S("message.max.bytes", "1048588")),
    _key("index.interval.bytes", _T.INT, "4096", at_least(0), _S("log.index.interval.bytes", "4096")),
    _key("delete.retention.ms", _T.LONG, "86400000", at_least(0), _S("log.cleaner.delete.retention.ms", "86400000")),
    _key("min.compaction.lag.ms", _T.LONG, "0", at_least(0), _S("log.cleaner.min.compaction.lag.ms", "0")),
    _key("max.compaction.lag.ms", _T.LONG, _LONG_MAX_S, at_least(1),
         _S("log.cleaner.max.compaction.lag.ms", _LONG_MAX_S)),
    _key("file.delete.delay.ms", _T.LONG, "60000", at_least(0), _S("log.segment.delete.delay.ms", "60000")),
    _key("min.cleanable.dirty.ratio", _T.DOUBLE, "0.5", between(0, 1), _S("log.cleaner.min.cleanable.ratio", "0.5")),
    _key("cleanup.policy", _T.LIST, "delete", list_of("compact", "delete"), _S("log.cleanup.policy", "delete")),
    _key("unclean.leader.election.enable", _T.BOOLEAN, "false", None, _S("unclean.leader.election.enable", "false")),
    _key("min.insync.replicas", _T.INT, "1", at_least(1), _S("min.insync.replicas", "1")),
    _key("compression.type", _T.STRING, "producer",
         one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), _S("compression.type", "producer")),
    _key("compression.gzip.level", _T.INT, "-1", _gzip_level, _S("compression.gzip.level", "-1")),
    _key("compression.lz4.level", _T.INT, "9", between(1, 17), _S("compression.lz4.level", "9")),
    _key("compression.zstd.level", _T.INT, "3", between(-131072, 22), _S("compression.zstd.level", "3")),
    _key("preallocate", _T.BOOLEAN, "false", None, _S("log.preallocate", "false")),
    _key("message.format.version", _T.STRING, "3.0-IV1", _message_format_version,
         _S("log.message.format.version", "3.0-IV1")),
    _key("message.timestamp.type", _T.STRING, "CreateTime", one_of("CreateTime", "LogAppendTime"),
         _S("log.message.timestamp.type", "CreateTime")),
    _key("message.timestamp.difference.max.ms", _T.LONG, _LONG_MAX_S, at_least(0),
         _S("log.message.timestamp.difference.max.ms", _LONG_MAX_S)),
    _key("message.timestamp.before.max.ms", _T.LONG, _LONG_MAX_S, at_least(0),
         _S("log.message.timestamp.before.max.ms", _LONG_MAX_S)),
    _key("message.timestamp.after.max.ms", _T.LONG, _LONG_MAX_S, at_least(0),
         _S("log.message.timestamp.after.max.ms", _LONG_MAX_S)),
    _key("leader.replication.throttled.replicas", _T.LIST, "", _throttled_replicas),
    _key("follower.replication.throttled.replicas", _T.LIST, "", _throttled_replicas),
    _key("message.downconversion.enable", _T.BOOLEAN, "true", None,
         _S("log.message.downconversion.enable", "true")),
    _key("remote.storage.enable", _T.BOOLEAN, "false"),
    _key("local.retention.ms", _T.LONG, "-2", at_least(-2), _S("log.local.retention.ms", "-2")),
    _key("local.retention.bytes", _T.LONG, "-2", at_least(-2), _S("log.local.retention.bytes", "-2")),
    _key("remote.log.copy.disable", _T.BOOLEAN, "false"),
    _key("remote.log.delete.on.disable", _T.BOOLEAN, "false"),
)

TOPIC_CONFIG_KEYS: dict[str, TopicConfigKey] = {k.name: k for k in _KEYS}
TOPIC_CONFIG_NAMES: tuple[str, ...] = tuple(sorted(TOPIC_CONFIG_KEYS))
# Kafka's defaults for every topic config, as the strings DescribeConfigs shows.
TOPIC_CONFIG_DEFAULTS: dict[str, str] = {k.name: k.default for k in _KEYS}


# --------------------------------------------------------------------------------------------------- parsing

_INT_RE = re.compile(r"[+-]?[0-9]+")
_DOUBLE_RE = re.compile(r"[+-]?(NaN|Infinity|(([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)[fFdD]?)")
_LIST_SPLIT = re.compile(r"\s*,\s*")


def parse_value(name: str, raw: Any) -> Any:
    """Parse and validate one topic config value (``raw`` a string, or an already typed value)."""
    key = TOPIC_CONFIG_KEYS.get(name)
    if key is None:
        raise InvalidConfigurationError(f"Unknown topic config name: {name}")
    value = _parse_type(key, raw)
    if key.validator is not None:
        key.validator(name, value)
    return value


def _parse_type(key: TopicConfigKey, raw: Any) -> Any:
    name, t = key.name, key.type
    if raw is None:
        raise config_exception(name, None, "Value must be non-null")
    if not isinstance(raw, str):
        raw = _format(key, raw)
    s = raw.strip()
    if t is ConfigType.BOOLEAN:
        if s.lower() in ("true", "false"):
            return s.lower() == "true"
        raise config_exception(name, raw, "Expected value to be either true or false")
    if t in (ConfigType.INT, ConfigType.LONG):
        lo, hi = (INT_MIN, INT_MAX) if t is ConfigType.INT else (LONG_MIN, LONG_MAX)
        if _INT_RE.fullmatch(s) and lo <= int(s) <= hi:
            return int(s)
        raise config_exception(name, raw, f"Not a number of type {t.name}")
    if t is ConfigType.DOUBLE:
        if _DOUBLE_RE.fullmatch(s):
            body = s[:-1] if s[-1] in "fFdD" and not s.endswith("Infinity") else s
            return float(body.replace("Infinity", "inf"))
        raise config_exception(name, raw, f"Not a number of type {t.name}")
    if t is ConfigType.LIST:
        if not s:
            return []
        parts = _LIST_SPLIT.split(s)
        while parts and parts[-1] == "":          # Java's String.split drops trailing empty strings
            parts.pop()
        return parts
    return s


def _format(key: TopicConfigKey, value: Any) -> str:
    """``ConfigDef.convertToString`` for a parsed value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double_str(value)
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def format_value(name: str, value: Any) -> str:
    """The canonical string of a parsed topic config value (what DescribeConfigs returns)."""
    return _format(TOPIC_CONFIG_KEYS[name], value)


def normalize_value(name: str, raw: str) -> str:
    """Parse, validate and re-render one value (``" 100 "`` -> ``"100"``)."""
    return format_value(name, parse_value(name, raw))


# ----------------------------------------------------------------------------------------- broker synonyms

def topic_defaults_from_broker(broker_defaults: Mapping[str, str] | None) -> dict[str, str]:
    """Each topic config's default on a broker with these properties (highest-priority synonym that is set,
    else Kafka's default), as strings."""
    out = dict(TOPIC_CONFIG_DEFAULTS)
    for key in _KEYS:
        value = _broker_value(key, broker_defaults or {})
        if value is not None:
            out[key.name] = value
    return out


def _broker_value(key: TopicConfigKey, broker: Mapping[str, str]) -> str | None:
    for syn in key.synonyms:
        if syn.name not in broker:
            continue
        raw = broker[syn.name]
        try:
            value = _parse_type(key if syn.factor == 1 else attrs.evolve(key, name=syn.name), raw)
            if syn.factor != 1:
                value = max(LONG_MIN, min(LONG_MAX, value * syn.factor))
            return _format(key, value)
        except InvalidConfigurationError as e:
            log.warning("ignoring unparsable broker config %s", kv(name=syn.name, value=raw, reason=e.message))
    return None


# -------------------------------------------------------------------------------------------------- validation

def validate_names(props: Mapping[str, Any]) -> None:
    for name in props:
        if name not in TOPIC_CONFIG_KEYS:
            raise InvalidConfigurationError(f"Unknown topic config name: {name}")


def parse_topic_config(props: Mapping[str, Any], broker_defaults: Mapping[str, str] | None = None
                       ) -> dict[str, Any]:
    """Every topic config parsed (overrides over broker defaults), in Kafka's definition order."""
    validate_names(props)
    defaults = topic_defaults_from_broker(broker_defaults)
    return {k.name: parse_value(k.name, props[k.name] if k.name in props else defaults[k.name]) for k in _KEYS}


def validate_values(values: Mapping[str, Any]) -> None:
    """Kafka's ``LogConfig.validateValues`` (rules spanning several configs)."""
    lo, hi = values["min.compaction.lag.ms"], values["max.compaction.lag.ms"]
    if lo > hi:
        raise InvalidConfigurationError(
            f"conflict topic config setting min.compaction.lag.ms ({lo}) > max.compaction.lag.ms ({hi})")


# --- tiered storage (docs/kip-950-tiered-storage.md#config-validation) -----------------------------------------------

SYSTEM_DISABLED = ("Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote "
                   "log storage.")
COMPACTED_UNSUPPORTED = "Remote log storage is unsupported for the compacted topics"
COPY_DISABLED_BYTES = ("When `remote.log.copy.disable` is set to true, the `local.retention.bytes` and "
                       "`retention.bytes` must be set to the identical value because there will be no more logs "
                       "copied to the remote storage.")
COPY_DISABLED_MS = ("When `remote.log.copy.disable` is set to true, the `local.retention.ms` and `retention.ms` "
                    "must be set to the identical value because there will be no more logs copied to the remote "
                    "storage.")
DISABLE_WITHOUT_DELETE = (
    "It is invalid to disable remote storage without deleting remote data. If you want to keep the remote data, "
    "but turn to read only, please set `remote.log.copy.disable=true`. If you want to disable remote storage and "
    "delete all remote data, please set `remote.storage.enable=false,remote.log.delete.on.disable=true`.")


POLICY_CONFIGS = ("remote.log.copy.disable", "remote.log.delete.on.disable")


def _flag(config: Mapping[str, Any], name: str) -> bool:
    v = config.get(name)
    return str(v).strip().lower() == "true" if v is not None else False


def validate_policy_values(props: Mapping[str, Any]) -> None:
    """KIP-950: an unsupported value of a disablement policy config is INVALID_REQUEST (42), not INVALID_CONFIG
    (KIP-950: "other invalid formatted requests, such as an unsupported disablement policy option")."""
    for name in POLICY_CONFIGS:
        v = props.get(name)
        if v is not None and str(v).strip().lower() not in ("true", "false"):
            raise InvalidRequestError(f"Invalid value {v} for configuration {name}: Expected value to be either "
                                      f"true or false")


def _check_local_retention(kind: str, total: int, local: int) -> None:
    """``validateRemoteStorageRetentionSize`` / ``...Time``: local -2 passes; -1 or more than the total fails."""
    if total == -1 or local == -2:
        return
    name, total_name = f"local.retention.{kind}", f"retention.{kind}"
    if local == -1:
        raise config_exception(name, local, f"Value must not be -1 as {total_name} value is set as {total}.")
    if local > total:
        raise config_exception(name, local, f"Value must not be more than {total_name} property value: {total}")


def validate_tiered_storage(values: Mapping[str, Any], existing: Mapping[str, str],
                            remote_log_storage_system_enable: bool) -> None:
    """Kafka's ``validateRemoteStorageOnlyIfSystemEnabled`` / ``validateNoRemoteStorageForCompactedTopic`` /
    ``validateRemoteStorageRetention*`` and KIP-950's rules: a tiered topic needs the broker flag, no compaction,
    local retention within the total (and equal to it when copying is off); switching tiering off needs
    ``remote.log.delete.on.disable=true``."""
    if values["remote.storage.enable"]:
        if not remote_log_storage_system_enable:
            raise InvalidConfigurationError(SYSTEM_DISABLED)
        if any("compact" in str(p).strip().lower() for p in values["cleanup.policy"]):
            raise InvalidConfigurationError(COMPACTED_UNSUPPORTED)
        _check_local_retention("bytes", values["retention.bytes"], values["local.retention.bytes"])
        _check_local_retention("ms", values["retention.ms"], values["local.retention.ms"])
        if values["remote.log.copy.disable"]:
            for kind, message in (("bytes", COPY_DISABLED_BYTES), ("ms", COPY_DISABLED_MS)):
                local = values[f"local.retention.{kind}"]
                if local != -2 and local != values[f"retention.{kind}"]:
                    raise InvalidConfigurationError(message)
    elif _flag(existing, "remote.storage.enable") and not values["remote.log.delete.on.disable"]:
        raise InvalidConfigurationError(DISABLE_WITHOUT_DELETE)


def validate_topic_config(props: Mapping[str, Any], *, existing: Mapping[str, str] | None = None,
                          broker_config: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Validate a topic's full set of overrides (``existing``: its overrides before the change, empty at
    creation; ``broker_config``: the validating broker's properties); returns the parsed effective config.

    Order (Kafka's ``LogConfig.validate``): null values, unknown names, policy values, each value in definition
    order, cross-config rules, then the tiered storage rules.
    """
    nulls = [n for n, v in props.items() if v is None]
    if nulls:
        raise InvalidConfigurationError("Null value not supported for topic configs: " + ",".join(nulls))
    validate_names(props)
    validate_policy_values(props)
    values = parse_topic_config(props, broker_config)
    validate_values(values)
    system = _flag(broker_config or {}, "remote.log.storage.system.enable")
    validate_tiered_storage(values, existing or {}, system)
    return values


# --------------------------------------------------------------------------------------------------- LogConfig

def _field(name: str) -> str:
    return name.replace(".", "_")


def _default(name: str) -> Any:
    """A :class:`LogConfig` field's default: the ConfigDef's, parsed (lists as tuples)."""
    value = parse_value(name, TOPIC_CONFIG_KEYS[name].default)
    return tuple(value) if isinstance(value, list) else value


_LOWERED: dict[tuple[str, ...], frozenset[str]] = {}


def _lowered(policy) -> frozenset[str]:
    """``cleanup.policy``'s values in lower case, once per distinct tuple (read on every leader append)."""
    try:
        return _LOWERED[policy]
    except KeyError:
        out = _LOWERED[policy] = frozenset(p.lower() for p in policy)
        return out
    except TypeError:   # a list: not cached
        return frozenset(p.lower() for p in policy)


@attrs.frozen
class LogConfig:
    """Effective topic configuration. Attribute names are Kafka's with dots as underscores."""

    segment_bytes: int = _default("segment.bytes")
    segment_ms: int = _default("segment.ms")
    segment_jitter_ms: int = _default("segment.jitter.ms")
    segment_index_bytes: int = _default("segment.index.bytes")
    flush_messages: int = _default("flush.messages")
    flush_ms: int = _default("flush.ms")
    retention_bytes: int = _default("retention.bytes")
    retention_ms: int = _default("retention.ms")
    max_message_bytes: int = _default("max.message.bytes")
    index_interval_bytes: int = _default("index.interval.bytes")
    delete_retention_ms: int = _default("delete.retention.ms")
    min_compaction_lag_ms: int = _default("min.compaction.lag.ms")
    max_compaction_lag_ms: int = _default("max.compaction.lag.ms")
    file_delete_delay_ms: int = _default("file.delete.delay.ms")
    min_cleanable_dirty_ratio: float = _default("min.cleanable.dirty.ratio")
    cleanup_policy: tuple[str, ...] = _default("cleanup.policy")
    unclean_leader_election_enable: bool = _default("unclean.leader.election.enable")
    min_insync_replicas: int = _default("min.insync.replicas")
    compression_type: str = _default("compression.type")
    compression_gzip_level: int = _default("compression.gzip.level")
    compression_lz4_level: int = _default("compression.lz4.level")
    compression_zstd_level: int = _default("compression.zstd.level")
    preallocate: bool = _default("preallocate")
    message_format_version: str = _default("message.format.version")
    message_timestamp_type: str = _default("message.timestamp.type")
    message_timestamp_difference_max_ms: int = _default("message.timestamp.difference.max.ms")
    message_timestamp_before_max_ms: int = _default("message.timestamp.before.max.ms")
    message_timestamp_after_max_ms: int = _default("message.timestamp.after.max.ms")
    leader_replication_throttled_replicas: tuple[str, ...] = _default("leader.replication.throttled.replicas")
    follower_replication_throttled_replicas: tuple[str, ...] = _default("follower.replication.throttled.replicas")
    message_downconversion_enable: bool = _default("message.downconversion.enable")
    remote_storage_enable: bool = _default("remote.storage.enable")
    local_retention_ms: int = _default("local.retention.ms")
    local_retention_bytes: int = _default("local.retention.bytes")
    remote_log_copy_disable: bool = _default("remote.log.copy.disable")
    remote_log_delete_on_disable: bool = _default("remote.log.delete.on.disable")
    # Names set explicitly (topic overrides), for DescribeConfigs sources.
    overridden: frozenset[str] = frozenset()

    @classmethod
    def from_props(cls, props: Mapping[str, Any] | None = None,
                   defaults: Mapping[str, Any] | LogConfig | None = None) -> LogConfig:
        """Parse Kafka topic config strings: ``props`` (by Kafka name) over ``defaults`` (Kafka names and
        strings, or an already parsed LogConfig)."""
        values: dict[str, Any] = {}
        if isinstance(defaults, LogConfig):
            values = {f: getattr(defaults, f) for f in _FIELDS}
            defaults = None
        for source in (defaults or {}, props or {}):
            for name, raw in source.items():
                value = parse_value(name, raw)
                values[_field(name)] = tuple(value) if isinstance(value, list) else value
        cfg = cls(**values, overridden=frozenset(props or {}))
        validate_values({"min.compaction.lag.ms": cfg.min_compaction_lag_ms,
                         "max.compaction.lag.ms": cfg.max_compaction_lag_ms})
        return cfg

    def to_props(self) -> dict[str, str]:
        """Every topic config as Kafka renders it in DescribeConfigs."""
        return {k.name: _format(k, getattr(self, _field(k.name))) for k in _KEYS}

    def with_overrides(self, props: Mapping[str, Any]) -> LogConfig:
        """This config with some topic configs replaced (parsed and validated)."""
        cfg = LogConfig.from_props(props, defaults=self)
        return attrs.evolve(cfg, overridden=self.overridden | frozenset(props))

    # --- derived values (Kafka's LogConfig accessors) --------------------------------------------------
    @property
    def delete(self) -> bool:
        return "delete" in _lowered(self.cleanup_policy)

    @property
    def compact(self) -> bool:
        return "compact" in _lowered(self.cleanup_policy)

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


def broker_topic_defaults(broker_props: Mapping[str, Any]) -> dict[str, str]:
    """The topic configs that these broker properties set through a synonym (``log.retention.hours=1`` ->
    ``retention.ms=3600000``); configs without a set synonym are left out."""
    out = {}
    for key in _KEYS:
        value = _broker_value(key, broker_props)
        if value is not None:
            out[key.name] = value
    return out


_FIELDS = tuple(_field(k.name) for k in _KEYS)
