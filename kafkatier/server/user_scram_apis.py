"""DescribeUserScramCredentials (apiKey 50, v0) and AlterUserScramCredentials (apiKey 51, v0): Kafka's
``KafkaApis.handleDescribeUserScramCredentialsRequest`` / ``handleAlterUserScramCredentialsRequest`` with
``ZkAdminManager``'s checks, ZooKeeper mode.

Alter: the client sends, per user and mechanism, the salt, iteration count and salted password (never the
password); the broker derives the stored and server keys (``server/scram.py``) and writes ``/config/users/<name>``
in Kafka's format with a change notification.  Kafka's errors: an unknown mechanism -> UNSUPPORTED_SASL_MECHANISM,
iterations outside [4096, 16384] -> UNACCEPTABLE_CREDENTIAL, a user/mechanism twice in one request ->
DUPLICATE_RESOURCE, deleting a credential that does not exist -> RESOURCE_NOT_FOUND, an empty user name ->
UNACCEPTABLE_CREDENTIAL.  Describe lists mechanisms and iterations only; nothing secret leaves the broker.

Authorization, when an authorizer is configured: ALTER on CLUSTER (Alter) and DESCRIBE on CLUSTER (Describe); a
refused request gets CLUSTER_AUTHORIZATION_FAILED for every user.  Logs never show salts, keys or passwords.
"""
from __future__ import annotations

from typing import Any

from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol import codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.build import build
from kafkatier.protocol.errors import Errors
from kafkatier.server.auth_helper import AuthHelper
from kafkatier.server import scram
from kafkatier.server.sasl import alter_user_config

log = get_logger("server.user-scram")

VERSIONS = (0, 0)
_MECHANISM_NAMES = {v: k for k, v in scram.MECHANISM_IDS.items()}


class UserScramApis:
    def __init__(self, zk, auth: AuthHelper | None = None):
        self.zk = zk
        self.auth = auth or AuthHelper()  # Kafka's ACL checks; allows all without an authorizer

    def handlers(self) -> dict[int, tuple[tuple[int, int], Any]]:
        return {ApiKeys.DESCRIBE_USER_SCRAM_CREDENTIALS: (VERSIONS, self.handle_describe),
                ApiKeys.ALTER_USER_SCRAM_CREDENTIALS: (VERSIONS, self.handle_alter)}


    # --- Describe -----------------------------------------------------------------------------------------
    def handle_describe(self, header, req, context):
        v = header.request_api_version
        resp = codec.response_class(ApiKeys.DESCRIBE_USER_SCRAM_CREDENTIALS)
        if not self.auth.authorize_cluster(context, "Describe"):
            return build(resp, v, {"throttle_time_ms": 0, "error_code": int(Errors.CLUSTER_AUTHORIZATION_FAILED),
                                   "error_message": None, "results": []})
        from kafkatier.zk.kafka_zk_client import KafkaZkClient
        kzk = KafkaZkClient(self.zk)
        named = [u.name for u in req.users] if req.users else None
        names = named if named is not None else sorted(self._all_users())
        results = []
        for name in names:
            config, _ = kzk.get_entity_config_and_version("users", name) if name and "/" not in name else ({}, None)
            infos = []
            for mechanism, mid in scram.MECHANISM_IDS.items():
                if mechanism in config:
                    try:
                        infos.append({"mechanism": mid,
                                      "iterations": scram.ScramCredential.from_config(config[mechanism]).iterations})
                    except ValueError:
                        log.warning("malformed SCRAM credential skipped %s", kv(user=name, mechanism=mechanism))
            if not infos and named is None:
                continue
            err = Errors.NONE if infos else Errors.RESOURCE_NOT_FOUND
            results.append({"user": name, "error_code": int(err),
                            "error_message": None if infos else f"Attempt to describe a user credential that "
                                                                f"does not exist: {name}",
                            "credential_infos": infos})
        return build(resp, v, {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": results})

    def _all_users(self) -> list[str]:
        try:
            return self.zk.get_children("/config/users")
        except Exception:  # noqa: BLE001 - NoNode: no users yet
            return []

    # --- Alter --------------------------------------------------------------------------------------------
    def handle_alter(self, header, req, context):
        v = header.request_api_version
        resp = codec.response_class(ApiKeys.ALTER_USER_SCRAM_CREDENTIALS)
        deletions = [(d.name, d.mechanism) for d in req.deletions or []]
        upsertions = list(req.upsertions or [])
        users = list(dict.fromkeys([n for n, _ in deletions] + [u.name for u in upsertions]))
        if not self.auth.authorize_cluster(context, "Alter"):
            return build(resp, v, {"throttle_time_ms": 0, "results": [
                {"user": u, "error_code": int(Errors.CLUSTER_AUTHORIZATION_FAILED), "error_message": None}
                for u in users]})
        errors: dict[str, tuple[Errors, str]] = {}
        seen: dict[tuple[str, int], int] = {}
        for key in deletions + [(u.name, u.mechanism) for u in upsertions]:
            seen[key] = seen.get(key, 0) + 1
        for (user, mid), n in seen.items():
            if n > 1:
                errors.setdefault(user, (Errors.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in "
                                                                    "the same request"))
            if not user:
                errors.setdefault(user, (Errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"))
            if mid not in _MECHANISM_NAMES:
                errors.setdefault(user, (Errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"))
        sets: dict[str, dict[str, str]] = {}
        for u in upsertions:
            if u.name in errors:
                continue
            mechanism = _MECHANISM_NAMES[u.mechanism]
            if not scram.MIN_ITERATIONS <= u.iterations <= scram.MAX_ITERATIONS:
                errors[u.name] = (Errors.UNACCEPTABLE_CREDENTIAL,
                                  f"Iterations {u.iterations} is {'less' if u.iterations < scram.MIN_ITERATIONS else 'more'}"
                                  f" than the {'minimum' if u.iterations < scram.MIN_ITERATIONS else 'maximum'} "
                                  f"{scram.MIN_ITERATIONS if u.iterations < scram.MIN_ITERATIONS else scram.MAX_ITERATIONS}"
                                  f" for {mechanism}")
                continue
            credential = scram.credential_from_salted_password(mechanism, bytes(u.salted_password), bytes(u.salt),
                                                               u.iterations)
            sets.setdefault(u.name, {})[mechanism] = credential.to_config()
        deletes: dict[str, list[str]] = {}
        from kafkatier.zk.kafka_zk_client import KafkaZkClient
        kzk = KafkaZkClient(self.zk)
        for user, mid in deletions:
            if user in errors:
                continue
            mechanism = _MECHANISM_NAMES[mid]
            current, _ = kzk.get_entity_config_and_version("users", user) if "/" not in user else ({}, None)
            if mechanism not in current and mechanism not in sets.get(user, {}):
                errors[user] = (Errors.RESOURCE_NOT_FOUND, f"Attempt to delete a user credential that does not "
                                                           f"exist: {user}")
                continue
            deletes.setdefault(user, []).append(mechanism)
        results = []
        for user in users:
            if user not in errors:
                try:
                    alter_user_config(self.zk, user, sets.get(user, {}), deletes.get(user, ()))
                    log.info("SCRAM credentials changed %s", kv(user=user, set=",".join(sets.get(user, {})),
                                                              deleted=",".join(deletes.get(user, ()))))
                except ValueError as e:
                    errors[user] = (Errors.UNACCEPTABLE_CREDENTIAL, str(e))
                except Exception as e:  # noqa: BLE001
                    log.exception("writing SCRAM credentials failed %s", kv(user=user))
                    errors[user] = (Errors.UNKNOWN_SERVER_ERROR, type(e).__name__)
            err, message = errors.get(user, (Errors.NONE, None))
            results.append({"user": user, "error_code": int(err), "error_message": message})
        return build(resp, v, {"throttle_time_ms": 0, "results": results})
