"""Dynamic broker configs in ZooKeeper (the part of Kafka's ``DynamicBrokerConfig`` / ``AdminZkClient
.changeBrokerConfig`` this project supports): ``/config/brokers/<id>`` and the cluster default
``/config/brokers/<default>``, each followed by a ``config_change_`` notification naming the entity.

Supported dynamic keys: the intra-broker move throttle (KIP-113) under the seed name
``intra.broker.throttled.rate`` and Kafka's name ``replica.alter.log.dirs.io.max.bytes.per.second`` (LONG >= 0,
default Long.MAX_VALUE = unthrottled).  Any other key is refused with INVALID_CONFIG (Kafka would accept its
other dynamic broker configs; they have no effect here).

Effective value (:func:`intra_broker_throttle`): per-broker dynamic, then cluster default, then the static
``--override``; within one level the seed name wins over Kafka's if both are set (a warning is logged).
"""
from __future__ import annotations

from typing import Iterable, Mapping

from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import Errors, KafkaError
from kafkatier.zk import codecs, paths
from kafkatier.zk.client import ensure_persistent_paths

log = get_logger("admin.broker-config")

LONG_MAX = (1 << 63) - 1
DEFAULT_ENTITY = "<default>"
INTRA_BROKER_THROTTLED_RATE = "intra.broker.throttled.rate"
ALTER_LOG_DIRS_IO_MAX_BYTES = "replica.alter.log.dirs.io.max.bytes.per.second"
DYNAMIC_BROKER_CONFIGS = (INTRA_BROKER_THROTTLED_RATE, ALTER_LOG_DIRS_IO_MAX_BYTES)


def entity_name(resource_name: str) -> str:
    """A BROKER config resource name ("" = the cluster default, else a broker id) as its znode name."""
    if resource_name in ("", DEFAULT_ENTITY):
        return DEFAULT_ENTITY
    if not resource_name.isdigit():
        raise KafkaError(f"Invalid broker id {resource_name!r}", Errors.INVALID_REQUEST)
    return str(int(resource_name))


def validate(config: Mapping[str, str | None]) -> None:
    for key, value in config.items():
        if key not in DYNAMIC_BROKER_CONFIGS:
            raise KafkaError(f"Cannot update these configs dynamically: Set({key})", Errors.INVALID_CONFIG)
        if value is None:
            continue
        try:
            n = int(str(value).strip())
        except ValueError:
            raise KafkaError(f"Invalid value {value} for configuration {key}: Not a number of type LONG",
                             Errors.INVALID_CONFIG) from None
        if n > LONG_MAX:
            raise KafkaError(f"Invalid value {value} for configuration {key}: Not a number of type LONG",
                             Errors.INVALID_CONFIG)
        if n < 0:
            raise KafkaError(f"Invalid value {value} for configuration {key}: Value must be at least 0",
                             Errors.INVALID_CONFIG)


def read(zk, entity: str) -> dict[str, str]:
    """The stored dynamic config of ``entity`` ({} when absent or malformed, with a warning)."""
    path = paths.broker_config(entity)
    try:
        data, _ = zk.get(path)
    except Exception:  # noqa: BLE001 - absent
        return {}
    try:
        return dict(codecs.EntityConfig.decode(data, path).config)
    except codecs.MalformedZNodeError as e:
        log.warning("malformed broker config skipped %s", kv(path=path, error=e))
        return {}


def alter(zk, resource_name: str, sets: Mapping[str, str], deletes: Iterable[str] = (),
          validate_only: bool = False) -> dict[str, str]:
    """IncrementalAlterConfigs for a BROKER resource: write the new config and a change notification in one
    multi (conditional on the config's version).  Returns the new config."""
    entity = entity_name(resource_name)
    deletes = list(deletes)
    validate({**dict(sets), **{k: None for k in deletes}})
    ensure_persistent_paths(zk, (f"{paths.CONFIG}/brokers", paths.CONFIG_CHANGES))
    path = paths.broker_config(entity)
    stat = zk.exists(path)
    old = read(zk, entity) if stat is not None else {}
    new = {k: v for k, v in old.items() if k not in deletes}
    new.update({k: str(int(str(v).strip())) for k, v in sets.items()})
    if validate_only:
        return new
    t = zk.transaction()
    data = codecs.EntityConfig(config=new).encode()
    if stat is None:
        t.create(path, data)
    else:
        t.set_data(path, data, version=stat.version)
    t.create(paths.CONFIG_CHANGES + "/" + paths.CONFIG_CHANGE_PREFIX,
             codecs.ConfigChangeNotification.of("brokers", entity).encode(), sequence=True)
    results = t.commit()
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:
        raise KafkaError(f"The config of broker {entity} changed concurrently; retry the request ({failed[0]!r})",
                         Errors.UNKNOWN_SERVER_ERROR)
    log.info("updated broker config %s", kv(entity=entity, config=new or "{}"))
    return new


def _pick(level: Mapping[str, str], where: str) -> int | None:
    seed, alias = level.get(INTRA_BROKER_THROTTLED_RATE), level.get(ALTER_LOG_DIRS_IO_MAX_BYTES)
    if seed is not None and alias is not None and seed != alias:
        log.warning("both throttle names are set; the seed name wins %s",
                    kv(level=where, **{INTRA_BROKER_THROTTLED_RATE: seed, ALTER_LOG_DIRS_IO_MAX_BYTES: alias}))
    value = seed if seed is not None else alias
    if value is None:
        return None
    try:
        n = int(str(value).strip())
    except ValueError:
        log.warning("bad throttle value ignored %s", kv(level=where, value=value))
        return None
    return n if n >= 0 else None


def intra_broker_throttle(static: Mapping[str, str], default: Mapping[str, str], broker: Mapping[str, str]) -> int:
    for level, where in ((broker, "broker"), (default, "default"), (static, "static")):
        n = _pick(level, where)
        if n is not None:
            return n
    return LONG_MAX
