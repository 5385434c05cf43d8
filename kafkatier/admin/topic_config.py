"""The DescribeConfigs view of a topic's effective config (Kafka's ``ConfigSource`` / synonyms logic in
``ZkAdminManager.describeConfigs``).  Every topic config's definition, parsing and validation is in
``kafkatier/log/log_config.py``.

A topic override is ``DYNAMIC_TOPIC_CONFIG``; a value from the broker's properties ``STATIC_BROKER_CONFIG``;
otherwise ``DEFAULT_CONFIG``.
"""
from __future__ import annotations

import enum
from typing import Any, Mapping, Sequence

import attrs

from kafkatier.log.log_config import (TOPIC_CONFIG_KEYS, ConfigType, normalize_value,
                                      topic_defaults_from_broker)
from kafkatier.protocol.errors import InvalidConfigurationError


class ConfigSource(enum.IntEnum):
    """DescribeConfigs ``ConfigSource`` ids."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


# -------------------------------------------------------------------------------------------- DescribeConfigs

@attrs.frozen
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@attrs.frozen
class ConfigEntry:
    """One DescribeConfigs result entry for a topic."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool = False
    sensitive: bool = False
    synonyms: tuple[ConfigSynonym, ...] = ()
    config_type: ConfigType = ConfigType.UNKNOWN

    @property
    def is_default(self) -> bool:
        return self.source is ConfigSource.DEFAULT_CONFIG

    def to_dict(self) -> dict[str, Any]:
        """The entry with wire values: ``{"name", "value", "source", "read_only", "sensitive", "synonyms":
        [{"name", "value", "source"}], "type"}`` (source and type as Kafka's ids)."""
        return {"name": self.name, "value": self.value, "source": int(self.source), "read_only": self.read_only,
                "sensitive": self.sensitive, "is_default": self.is_default,
                "synonyms": [{"name": s.name, "value": s.value, "source": int(s.source)} for s in self.synonyms],
                "type": int(self.config_type)}


def describe_topic_config(overrides: Mapping[str, str], broker_defaults: Mapping[str, str] | None = None,
                          names: Sequence[str] | None = None) -> list[ConfigEntry]:
    """The topic's effective config as DescribeConfigs reports it, sorted by name.

    A topic override is ``DYNAMIC_TOPIC_CONFIG``; a value from the broker's properties ``STATIC_BROKER_CONFIG``;
    otherwise ``DEFAULT_CONFIG``.  Synonyms follow Kafka: the topic override, then the broker synonyms that are
    set, then the broker synonyms' own defaults, starting at the primary broker synonym.  ``names`` limits the
    result (unknown names are left out, as Kafka does).  An override that does not parse is shown as stored.
    """
    broker = dict(broker_defaults or {})
    effective = topic_defaults_from_broker(broker)
    wanted = sorted(TOPIC_CONFIG_KEYS) if names is None else sorted(n for n in set(names) if n in TOPIC_CONFIG_KEYS)
    out = []
    for name in wanted:
        key = TOPIC_CONFIG_KEYS[name]
        broker_syns = [ConfigSynonym(s.name, broker[s.name], ConfigSource.STATIC_BROKER_CONFIG)
                       for s in key.synonyms if s.name in broker]
        broker_syns += [ConfigSynonym(s.name, s.default, ConfigSource.DEFAULT_CONFIG)
                        for s in key.synonyms if s.default is not None]
        if key.synonyms:
            primary = key.synonyms[0].name
            while broker_syns and broker_syns[0].name != primary:
                broker_syns.pop(0)
        value = effective[name]
        if name in overrides:
            try:
                value = normalize_value(name, overrides[name])
            except InvalidConfigurationError:
                value = overrides[name]
            synonyms = [ConfigSynonym(name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG)] + broker_syns
        else:
            synonyms = broker_syns
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        out.append(ConfigEntry(name=name, value=value, source=source, read_only=False, sensitive=False,
                               synonyms=tuple(synonyms), config_type=key.type))
    return out


def effective_topic_config(overrides: Mapping[str, str], broker_defaults: Mapping[str, str] | None = None
                           ) -> dict[str, str]:
    """Every topic config as a string: overrides over broker-derived defaults."""
    out = topic_defaults_from_broker(broker_defaults)
    out.update({k: v for k, v in overrides.items() if k in TOPIC_CONFIG_KEYS})
    return out
