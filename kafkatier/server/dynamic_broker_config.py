"""DynamicBrokerConfig: the broker's dynamic configs from ``/config/brokers/<id>`` and ``/config/brokers/<default>``
(Kafka's ``DynamicBrokerConfig`` + ``BrokerConfigHandler``), for the keys this project supports: the KIP-113
move throttle (see :mod:`kafkatier.admin.broker_config` for the keys, their validation and precedence).

``KafkaServer`` builds it with the throttle it controls, calls :meth:`startup` once ZooKeeper is up (after the
``DynamicConfigManager`` started, so no change is missed), and registers :meth:`on_change` as the
``DynamicConfigManager`` handler for ``brokers``; ``KafkaApis`` reads :meth:`describe_entries` for
DescribeConfigs.  A change applies at once: the shared throttle's rate is set and waiting move threads wake.
"""
from __future__ import annotations

import threading
from typing import Mapping

from kafkatier.admin import broker_config
from kafkatier.logsetup import get_logger, kv
from kafkatier.server.replication_quota_manager import ReplicationQuotaManager

log = get_logger("server.dynamic-broker-config")

DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 2, 3  # DescribeConfigs' ConfigSource values


class DynamicBrokerConfig:
    def __init__(self, broker_id: int, static_overrides: Mapping[str, object], zk,
                 alter_log_dirs_quota: ReplicationQuotaManager):
        self.broker_id = broker_id
        self._static = {k: str(v) for k, v in static_overrides.items()}
        self._zk = zk
        self.alter_log_dirs_quota = alter_log_dirs_quota
        self._lock = threading.Lock()
        self._entities: dict[str, dict[str, str]] = {}

    def startup(self) -> None:
        for entity in (broker_config.DEFAULT_ENTITY, str(self.broker_id)):
            self._entities[entity] = broker_config.read(self._zk, entity) if self._zk is not None else {}
        self._apply()

    @property
    def intra_broker_throttle(self) -> int:
        with self._lock:
            return broker_config.intra_broker_throttle(
                self._static, self._entities.get(broker_config.DEFAULT_ENTITY, {}),
                self._entities.get(str(self.broker_id), {}))

    def on_change(self, entity: str, config: Mapping[str, str]) -> None:
        """DynamicConfigManager handler for ``brokers/<id>`` and ``brokers/<default>``."""
        if entity not in (broker_config.DEFAULT_ENTITY, str(self.broker_id)):
            return
        with self._lock:
            self._entities[entity] = dict(config)
        self._apply()
        log.info("broker config changed %s", kv(entity=entity, config=dict(config) or "{}",
                                                intra_broker_throttled_rate=self.intra_broker_throttle))

    def _apply(self) -> None:
        self.alter_log_dirs_quota.set_rate(self.intra_broker_throttle)

    def describe_entries(self, name: str) -> list[tuple[str, str, int]]:
        """(key, value, source) of the dynamic configs DescribeConfigs shows for broker resource ``name``
        ("" = the cluster default): the default's, then (for a broker id) the broker's own."""
        levels = [(broker_config.DEFAULT_ENTITY, DYNAMIC_DEFAULT_BROKER_CONFIG)]
        if name != "":
            levels.append((str(self.broker_id), DYNAMIC_BROKER_CONFIG))
        with self._lock:
            return [(k, v, source) for entity, source in levels for k, v in sorted(self._entities.get(entity, {}).items())]
