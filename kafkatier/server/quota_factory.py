"""The broker's client quota managers, built together: Kafka's ``QuotaFactory`` (produce and fetch byte rates,
KIP-55; request time, KIP-124), and their ZooKeeper config handlers for the ``users`` and ``clients`` entities."""
from __future__ import annotations

import time
from typing import Callable, Mapping

from kafkatier.logsetup import get_logger, kv
from kafkatier.server.client_quota_manager import (CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, QUOTA_KEYS,
                                                   QUOTA_WINDOW_NUM, QUOTA_WINDOW_SIZE_SECONDS, ClientQuotaManager)
from kafkatier.server.client_request_quota_manager import ClientRequestQuotaManager
from kafkatier.server.config import broker_setting

log = get_logger("server.client-quota")


class ClientQuotas:
    """The broker's client quota managers (Kafka's ``QuotaFactory``: produce and fetch) and their ZooKeeper
    config handlers for the ``users`` and ``clients`` entity types."""

    def __init__(self, samples: int = 11, window_s: float = 1.0, clock: Callable[[], float] = time.monotonic):
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, samples=samples, window_s=window_s, clock=clock)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, samples=samples, window_s=window_s, clock=clock)
        self.request = ClientRequestQuotaManager(samples=samples, window_s=window_s, clock=clock)

    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> "ClientQuotas":
        """From the broker's settings, typed and checked by their definitions (server/config.py)."""
        return cls(samples=broker_setting(props, QUOTA_WINDOW_NUM),
                   window_s=float(broker_setting(props, QUOTA_WINDOW_SIZE_SECONDS)))

    def apply(self, user: str | None, client_id: str | None, config: Mapping[str, str]) -> None:
        for manager in (self.produce, self.fetch, self.request):
            value = config.get(manager.quota_key)
            try:
                quota = float(value) if value is not None else None
            except ValueError:
                log.warning("ignoring a malformed quota %s", kv(user=user, client_id=client_id,
                                                                 key=manager.quota_key, value=value))
                quota = None
            manager.update_quota(user, client_id, quota)
        log.info("client quota changed %s", kv(user=user, client_id=client_id,
                                                config=",".join(f"{k}={v}" for k, v in sorted(config.items())
                                                                if k in QUOTA_KEYS)))

    # --- DynamicConfigManager handlers -----------------------------------------------------------------------
    def on_user_change(self, name: str, config: Mapping[str, str]) -> None:
        """``users/<u>`` or ``users/<u>/clients/<c>``."""
        user, sep, rest = name.partition("/clients/")
        self.apply(user, rest if sep else None, config)

    def on_client_change(self, name: str, config: Mapping[str, str]) -> None:
        self.apply(None, name, config)

    def load(self, zk) -> None:
        """Read every quota znode (start-up, after the change listener started)."""
        from kafkatier.zk.errors import NoNodeError
        from kafkatier.zk.kafka_zk_client import KafkaZkClient
        kzk = KafkaZkClient(zk)

        def children(path: str) -> list[str]:
            try:
                return zk.get_children(path)
            except NoNodeError:
                return []
        for user in children("/config/users"):
            config, _ = kzk.get_entity_config_and_version("users", user)
            if any(k in config for k in QUOTA_KEYS):
                self.apply(user, None, config)
            for client in children(f"/config/users/{user}/clients"):
                config, _ = kzk.get_entity_config_and_version("users", f"{user}/clients/{client}")
                self.apply(user, client, config)
        for client in children("/config/clients"):
            config, _ = kzk.get_entity_config_and_version("clients", client)
            self.apply(None, client, config)
