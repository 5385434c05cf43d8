"""IncrementalAlterConfigs operations (KIP-339): SET (0), DELETE (1), APPEND (2) and SUBTRACT (3), resolved into
the sets and deletes the config writers take -- Kafka's ``ConfigAdminManager.prepareIncrementalConfigs``.

APPEND / SUBTRACT apply to LIST configs only (else INVALID_CONFIG, Kafka's "Config value append is not allowed for
config key: ..."); they start from the resource's current override, else the config's default, keep order and
never duplicate an element (APPEND adds missing ones, SUBTRACT removes present ones).  A config named twice in one
request is INVALID_REQUEST, as Kafka.
"""
from __future__ import annotations

from typing import Callable, Mapping

from kafkatier.protocol.errors import Errors, KafkaError

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def resolve(configs, current: Mapping[str, str], list_default: Callable[[str], str | None]
            ) -> tuple[dict[str, str | None], list[str]]:
    """``configs``: the request's AlterableConfig entries; ``list_default(name)``: the default of a LIST config,
    None when ``name`` is not a LIST config."""
    sets: dict[str, str | None] = {}
    deletes: list[str] = []
    seen: set[str] = set()
    for c in configs:
        if c.name in seen:
            raise KafkaError(f"Error due to duplicate config keys : {c.name}", Errors.INVALID_REQUEST)
        seen.add(c.name)
        op = c.config_operation
        if op == SET:
            sets[c.name] = c.value
        elif op == DELETE:
            deletes.append(c.name)
        elif op in (APPEND, SUBTRACT):
            default = list_default(c.name)
            if default is None:
                verb = "append" if op == APPEND else "subtract"
                raise KafkaError(f"Config value {verb} is not allowed for config key: {c.name}",
                                 Errors.INVALID_CONFIG)
            old = [v.strip() for v in str(current.get(c.name, default)).split(",") if v.strip()]
            given = [v.strip() for v in str(c.value or "").split(",") if v.strip()]
            if op == APPEND:
                new = old + [v for v in dict.fromkeys(given) if v not in old]
            else:
                new = [v for v in old if v not in given]
            sets[c.name] = ",".join(new)
        else:
            raise KafkaError(f"Unknown config operation {op} for {c.name}", Errors.INVALID_REQUEST)
    return sets, deletes


def current_and_list_defaults(zk, is_topic: bool, name: str) -> tuple[dict[str, str], Callable[[str], str | None]]:
    """A topic's or broker's (``""``: the cluster default) current overrides, and the defaults of its LIST
    configs -- where APPEND / SUBTRACT start."""
    from kafkatier.log.log_config import _KEYS, ConfigType
    from kafkatier.server.dynamic_broker_config import BROKER_CONFIGS, DEFAULT_ENTITY
    from kafkatier.zk.codecs import MalformedZNodeError
    from kafkatier.zk.kafka_zk_client import KafkaZkClient, read_topic_config

    if is_topic:
        try:
            current = read_topic_config(zk, name) or {}
        except MalformedZNodeError:
            current = {}  # logged by the reader; the change replaces it
        lists = {k.name: k.default for k in _KEYS if k.type == ConfigType.LIST}
    else:
        current = KafkaZkClient(zk).get_entity_config_and_version("brokers", name or DEFAULT_ENTITY)[0]
        lists = {n: d.default or "" for n, d in BROKER_CONFIGS.items() if d.type == "LIST"}
    return current, lists.get
