"""DescribeClientQuotas (apiKey 48, v0-1) and AlterClientQuotas (apiKey 49, v0-1), KIP-546, ZooKeeper mode
(Kafka's ``ZkAdminManager.describeClientQuotas`` / ``alterClientQuotas``).

An entity is a set of components ``user`` and/or ``client-id`` (a null name: the default entity, ``<default>``
in ZooKeeper); its quotas are the quota keys of ``/config/users/<u>``, ``/config/clients/<c>`` or
``/config/users/<u>/clients/<c>``.  Alter writes the znode and a change notification
(``/config/changes/config_change_N``, ``{"version":2,"entity_path":"users/<u>/clients/<c>"}``), keeping the
entity's other keys (SCRAM credentials share ``/config/users/<u>``).

Kafka's errors: an unknown quota key -> INVALID_REQUEST ``Invalid configuration key <key>``, a bad value ->
INVALID_REQUEST, an entity type other than user/client-id (``ip`` is not served here) or twice in one entity ->
INVALID_REQUEST, a filter match type out of range -> INVALID_REQUEST.  Authorization: ALTER_CONFIGS on CLUSTER
(Alter) and DESCRIBE_CONFIGS on CLUSTER (Describe); refused -> CLUSTER_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from typing import Any

from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol import codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.build import build
from kafkatier.protocol.errors import Errors
from kafkatier.server.auth_helper import AuthHelper
from kafkatier.server.client_quota_manager import DEFAULT, QUOTA_KEYS, parse_quota_value
from kafkatier.zk.errors import BadVersionError, NodeExistsError, NoNodeError

log = get_logger("server.client-quota-apis")

VERSIONS = (0, 1)
USER, CLIENT_ID = "user", "client-id"
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


class QuotaEntityError(ValueError):
    pass


def entity_path(entity: dict[str, str | None]) -> tuple[str, str]:
    """``(entity_type, name)`` under ``/config`` for an entity ``{user: u, client-id: c}`` (None = default)."""
    for name in entity.values():
        if name is not None and (not name or "/" in name or not name.isprintable() or name == DEFAULT):
            raise QuotaEntityError(f"Invalid entity name {name!r}")
    u = entity.get(USER, "") if USER in entity else ""
    c = entity.get(CLIENT_ID, "") if CLIENT_ID in entity else ""
    if USER in entity and CLIENT_ID in entity:
        return "users", f"{u if u is not None else DEFAULT}/clients/{c if c is not None else DEFAULT}"
    if USER in entity:
        return "users", u if u is not None else DEFAULT
    if CLIENT_ID in entity:
        return "clients", c if c is not None else DEFAULT
    raise QuotaEntityError("Invalid empty client quota entity")


def _entity_of(entity_type: str, name: str) -> dict[str, str | None]:
    def n(x: str) -> str | None:
        return None if x == DEFAULT else x
    if entity_type == "clients":
        return {CLIENT_ID: n(name)}
    user, sep, client = name.partition("/clients/")
    return {USER: n(user), CLIENT_ID: n(client)} if sep else {USER: n(user)}


def write_entity_quotas(zk, entity_type: str, name: str, sets: dict[str, str], deletes) -> dict[str, str]:
    """Change the quota keys of ``/config/<type>/<name>`` (other keys kept) with a change notification."""
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

    from kafkatier.zk import paths
    from kafkatier.zk.kafka_zk_client import KafkaZkClient
    kzk = KafkaZkClient(zk)
    zk.ensure_path(paths.CONFIG_CHANGES)
    zk.ensure_path(paths.entity_config(entity_type, name).rsplit("/", 1)[0])
    config: dict[str, str] = {}
    for attempt in Retrying(retry=retry_if_exception_type((BadVersionError, NodeExistsError, NoNodeError)),
                            stop=stop_after_attempt(10), wait=wait_exponential(multiplier=0.01, max=0.5),
                            reraise=True):
        with attempt:
            current, version = kzk.get_entity_config_and_version(entity_type, name)
            config = dict(current)
            config.update(sets)
            for k in deletes:
                config.pop(k, None)
            kzk.change_entity_config_conditionally(entity_type, name, config, version)
    return config


def _format(key: str, value: float) -> str:
    return str(int(value)) if key in ("producer_byte_rate", "consumer_byte_rate") else repr(float(value))


class ClientQuotaApis:
    def __init__(self, zk, auth: AuthHelper | None = None):
        self.zk = zk
        self.auth = auth or AuthHelper()

    def handlers(self) -> dict[int, tuple[tuple[int, int], Any]]:
        return {ApiKeys.DESCRIBE_CLIENT_QUOTAS: (VERSIONS, self.handle_describe),
                ApiKeys.ALTER_CLIENT_QUOTAS: (VERSIONS, self.handle_alter)}

    # --- Describe -------------------------------------------------------------------------------------------
    def _all_entities(self) -> list[tuple[str, str]]:
        def children(path: str) -> list[str]:
            try:
                return self.zk.get_children(path)
            except NoNodeError:
                return []
        out = []
        for user in children("/config/users"):
            out.append(("users", user))
            out.extend(("users", f"{user}/clients/{c}") for c in children(f"/config/users/{user}/clients"))
        out.extend(("clients", c) for c in children("/config/clients"))
        return out

    def describe(self, components, strict: bool) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """Entities matching the filter (``[(entity_type, match_type, match)]``) with their quotas."""
        from kafkatier.zk.kafka_zk_client import KafkaZkClient
        kzk = KafkaZkClient(self.zk)
        types = [t for t, _, _ in components]
        if len(set(types)) != len(types):
            raise QuotaEntityError(f"Duplicate {types[0]} filter component entity type")
        for t, m, _ in components:
            if t not in (USER, CLIENT_ID):
                raise QuotaEntityError(f"Unexpected entity type: {t}" if t != "ip" else
                                       "IP filter component cannot be combined here")
            if m not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
                raise QuotaEntityError(f"Unexpected match type: {m}")
        out = []
        for etype, name in self._all_entities():
            entity = _entity_of(etype, name)
            if strict and set(entity) != set(types):
                continue
            ok = True
            for t, m, match in components:
                if t not in entity:
                    ok = False
                elif m == MATCH_EXACT and entity[t] != match:
                    ok = False
                elif m == MATCH_DEFAULT and entity[t] is not None:
                    ok = False
            if not ok:
                continue
            config, _ = kzk.get_entity_config_and_version(etype, name)
            values = {}
            for k, v in config.items():
                if k in QUOTA_KEYS:
                    try:
                        values[k] = float(v)
                    except ValueError:
                        log.warning("malformed quota skipped %s", kv(entity=f"{etype}/{name}", key=k))
            if values:
                out.append((entity, values))
        return out

    def handle_describe(self, header, req, context):
        v = header.request_api_version
        resp = codec.response_class(ApiKeys.DESCRIBE_CLIENT_QUOTAS)
        if not self.auth.authorize_cluster(context, "DescribeConfigs"):
            return build(resp, v, {"throttle_time_ms": 0, "error_code": int(Errors.CLUSTER_AUTHORIZATION_FAILED),
                                   "error_message": None, "entries": None})
        components = [(c.entity_type, c.match_type, c.match) for c in req.components]
        try:
            found = self.describe(components, bool(req.strict))
        except QuotaEntityError as e:
            return build(resp, v, {"throttle_time_ms": 0, "error_code": int(Errors.INVALID_REQUEST),
                                   "error_message": str(e), "entries": None})
        return build(resp, v, {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "entries": [
            {"entity": [{"entity_type": t, "entity_name": n} for t, n in sorted(entity.items())],
             "values": [{"key": k, "value": x} for k, x in sorted(values.items())]}
            for entity, values in found]})

    # --- Alter ----------------------------------------------------------------------------------------------
    def alter_entry(self, entity: dict[str, str | None], ops, validate_only: bool) -> tuple[Errors, str | None]:
        try:
            etype, name = entity_path(entity)
        except QuotaEntityError as e:
            return Errors.INVALID_REQUEST, str(e)
        sets, deletes = {}, []
        for key, value, remove in ops:
            if key not in QUOTA_KEYS:
                return Errors.INVALID_REQUEST, f"Invalid configuration key {key}"
            if remove:
                deletes.append(key)
                continue
            try:
                sets[key] = _format(key, parse_quota_value(key, value))
            except ValueError as e:
                return Errors.INVALID_REQUEST, str(e)
        if validate_only:
            return Errors.NONE, None
        try:
            write_entity_quotas(self.zk, etype, name, sets, deletes)
        except Exception as e:  # noqa: BLE001
            log.exception("writing client quotas failed %s", kv(entity=f"{etype}/{name}"))
            return Errors.UNKNOWN_SERVER_ERROR, type(e).__name__
        log.info("client quotas changed %s", kv(entity=f"{etype}/{name}",
                                                set=",".join(f"{k}={x}" for k, x in sets.items()),
                                                removed=",".join(deletes)))
        return Errors.NONE, None

    def handle_alter(self, header, req, context):
        v = header.request_api_version
        resp = codec.response_class(ApiKeys.ALTER_CLIENT_QUOTAS)
        allowed = self.auth.authorize_cluster(context, "AlterConfigs")
        entries = []
        for entry in req.entries:
            components = [(c.entity_type, c.entity_name) for c in entry.entity]
            entity: dict[str, str | None] = {}
            err, message = Errors.NONE, None
            for t, n in components:
                if t not in (USER, CLIENT_ID):
                    err, message = Errors.INVALID_REQUEST, f"Unhandled client quota entity type: {t}"
                elif t in entity:
                    err, message = Errors.INVALID_REQUEST, f"Duplicate {t} entity type"
                entity[t] = n
            if not allowed:
                err, message = Errors.CLUSTER_AUTHORIZATION_FAILED, None
            elif err == Errors.NONE:
                err, message = self.alter_entry(entity, [(o.key, o.value, bool(o.remove)) for o in entry.ops],
                                                bool(req.validate_only))
            entries.append({"error_code": int(err), "error_message": message,
                            "entity": [{"entity_type": t, "entity_name": n} for t, n in components]})
        return build(resp, v, {"throttle_time_ms": 0, "entries": entries})
