"""Broker properties nobody reads: Kafka's ``AbstractConfig.logUnused`` ("The configuration '...' was supplied but
isn't a known config."), run once at start-up over the ``--override`` properties.

Known: every name some part of the broker reads -- the dynamic broker configs (``BROKER_CONFIGS``), the topic
configs' broker synonyms (``LogConfig``), the remote log manager's names and prefixes, the group coordinator's,
and the network, SASL and authorizer settings listed here -- plus Kafka's listener-prefixed names
(``listener.name.<listener>.<mechanism>.sasl.jaas.config``) and test-only ``kafkatier.test.*`` names.  Anything
else is logged as ignored, by name only: a value is never printed (it may be a password).  A JAAS-style
``user_<name>`` property gets a hint: static users belong in the PLAIN JAAS config.
"""
from __future__ import annotations

from typing import Iterable, Mapping

import attrs

from kafkatier.logsetup import get_logger, kv

log = get_logger("server.config")

#: Read by the network layer, SASL, the authorizer and the broker itself (not dynamic, so not in BROKER_CONFIGS).
SERVER_NAMES = frozenset({
    "listener.security.protocol", "advertised.listeners", "listener.security.protocol.map",
    "sasl.enabled.mechanisms", "sasl.mechanism.inter.broker.protocol",
    "sasl.jaas.config", "sasl.server.max.receive.size", "connection.failed.authentication.delay.ms",
    "socket.request.max.bytes", "max.connections", "max.connections.per.ip",
    "authorizer.class.name", "super.users", "allow.everyone.if.no.acl.found",
    "auto.create.topics.enable", "log.initial.task.delay.ms", "num.replica.alter.log.dirs.threads",
    "zookeeper.connection.timeout.ms", "controlled.shutdown.enable",
    "max.incremental.fetch.session.cache.slots", "min.incremental.fetch.session.eviction.ms",
    "zookeeper.set.acl", "java.security.auth.login.config", "queued.max.request.bytes",
    # TLS to ZooKeeper (zk/security.py)
    "zookeeper.ssl.client.enable", "zookeeper.clientCnxnSocket", "zookeeper.ssl.keystore.location",
    "zookeeper.ssl.keystore.password", "zookeeper.ssl.keystore.type", "zookeeper.ssl.truststore.location",
    "zookeeper.ssl.truststore.password", "zookeeper.ssl.truststore.type",
    "zookeeper.ssl.endpoint.identification.algorithm",
    "listeners", "inter.broker.listener.name", "security.inter.broker.protocol",
    # TLS listeners (server/ssl_transport.py)
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password", "ssl.keystore.key",
    "ssl.keystore.certificate.chain", "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.truststore.certificates", "ssl.client.auth", "ssl.principal.mapping.rules",
    "ssl.endpoint.identification.algorithm", "ssl.enabled.protocols", "ssl.cipher.suites", "ssl.protocol",
    "kafkatier.log.cleaner.duty.cycle",
})
PREFIXES = ("listener.name.", "kafkatier.test.", "kafkatier.links.", "remote.log.", "rsm.config.", "rlmm.config.",
            "log.", "group.",
            "offsets.")


@attrs.frozen
class UnknownConfig:
    name: str
    hint: str | None = None


def known_names() -> frozenset[str]:
    from kafkatier.coordinator.group.group_coordinator import GroupConfig
    from kafkatier.coordinator.transaction.transaction_state_manager import TransactionConfig
    from kafkatier.log.log_config import _KEYS
    from kafkatier.server.dynamic_broker_config import BROKER_CONFIGS

    synonyms = {s.name for k in _KEYS for s in k.synonyms}
    group = {f.name.replace("_", ".") for f in attrs.fields(GroupConfig)}
    txn = {f.name.replace("_", ".") for f in attrs.fields(TransactionConfig)}
    return frozenset(BROKER_CONFIGS) | synonyms | group | txn | SERVER_NAMES


def unknown_configs(names: Iterable[str], known: frozenset[str] | None = None) -> list[UnknownConfig]:
    known = known_names() if known is None else known
    out = []
    for name in sorted(names):
        if name in known:
            continue
        if name.startswith("user_"):
            out.append(UnknownConfig(name, "static SASL/PLAIN users belong in listener.name.sasl_plaintext.plain."
                                           "sasl.jaas.config as user_<name>=\"<password>\" options"))
        elif not name.startswith(PREFIXES):
            out.append(UnknownConfig(name))
    return out


def log_unknown_overrides(overrides: Mapping[str, object]) -> list[UnknownConfig]:
    """Log every property no part of the broker reads (name only); returns them."""
    unknown = unknown_configs(overrides)
    for u in unknown:
        log.warning("The configuration was supplied but isn't a known config; it is ignored %s",
                    kv(name=u.name, hint=u.hint.replace(" ", "_") if u.hint else None))
    return unknown
