"""ACL authorizer in the style of Kafka's ZooKeeper ``AclAuthorizer`` (KIP-11), and helpers to write ACLs.

Storage is Kafka's ZooKeeper layout:

- literal patterns: ``/kafka-acl/<ResourceType>/<name>`` (``name`` may be ``*``, the wildcard), announced by a
  ``/kafka-acl-changes/acl_changes_<seq>`` node whose data is ``<RESOURCE_TYPE>:<name>``;
- prefixed patterns: ``/kafka-acl-extended/prefixed/<ResourceType>/<prefix>``, announced under
  ``/kafka-acl-extended-changes`` with ``{"version":1,"resourceType":...,"name":...,"patternType":"PREFIXED"}``.

Each ACL znode holds ``{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
"operation":"Delete","host":"*"}]}``.

Decision rules (Kafka's): super users are always allowed; a matching Deny wins; without any ACL on the
resource the answer is ``allow.everyone.if.no.acl.found`` (default false); otherwise a matching Allow is needed.
A principal matches itself or ``User:*``, a host itself or ``*``, an operation itself or ``All``; Describe is
implied by Read, Write, Delete and Alter, DescribeConfigs by AlterConfigs.

The broker enables the authorizer when ``authorizer.class.name`` is set (Kafka's default is empty: everything
allowed).  Project choice: the authorizer reads ZooKeeper on every check instead of keeping a cache refreshed
by the change notifications, so a change applies to the next request; the notifications are still written for
Kafka compatibility, and old ones (15 minutes, as Kafka) are purged by the writer.  Malformed ACL znodes and
entries are logged and skipped.
"""
from __future__ import annotations

import json
import time
from typing import Any, Iterable, Mapping

import attrs
from kazoo.exceptions import NoNodeError, NodeExistsError

from kafkatier.logsetup import get_logger, kv

log = get_logger("server.acl")

ACL_ROOT = "/kafka-acl"
ACL_CHANGES = "/kafka-acl-changes"
EXTENDED_ROOT = "/kafka-acl-extended/prefixed"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
CHANGE_RETENTION_MS = 15 * 60 * 1000

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"

#: Kafka's resource type names as they appear in ZooKeeper paths.
RESOURCE_TYPES = ("Topic", "Group", "Cluster", "TransactionalId", "DelegationToken", "User")
OPERATIONS = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction", "DescribeConfigs",
              "AlterConfigs", "IdempotentWrite", "CreateTokens", "DescribeTokens")
PERMISSION_TYPES = ("Allow", "Deny")

#: Operations an Allow of which also allows the key.
_IMPLIED_BY = {"Describe": {"Describe", "Read", "Write", "Delete", "Alter"},
               "DescribeConfigs": {"DescribeConfigs", "AlterConfigs"}}

#: Broker property values that name a ZooKeeper ACL authorizer.
KNOWN_AUTHORIZERS = ("kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer")


class AclFormatError(ValueError):
    """An ACL znode or entry that does not follow Kafka's format."""


def _canonical(value: str, allowed: Iterable[str], what: str) -> str:
    """Kafka's spelling of ``value`` (case-insensitive; ``DESCRIBE_CONFIGS`` is ``DescribeConfigs``)."""
    key = str(value).replace("_", "").lower()
    for a in allowed:
        if a.lower() == key:
            return a
    raise AclFormatError(f"unknown {what} {value!r}")


@attrs.frozen
class AclEntry:
    """One access control entry (Kafka's ``AccessControlEntry``)."""

    principal: str
    permission_type: str
    operation: str
    host: str = "*"

    def __attrs_post_init__(self) -> None:
        if ":" not in self.principal:
            raise AclFormatError(f"principal {self.principal!r} is not <type>:<name>")
        object.__setattr__(self, "permission_type", _canonical(self.permission_type, PERMISSION_TYPES,
                                                               "permission type"))
        object.__setattr__(self, "operation", _canonical(self.operation, OPERATIONS, "operation"))

    def to_json(self) -> dict[str, str]:
        return {"principal": self.principal, "permissionType": self.permission_type, "operation": self.operation,
                "host": self.host}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> AclEntry:
        try:
            return cls(principal=str(obj["principal"]), permission_type=str(obj["permissionType"]),
                       operation=str(obj["operation"]), host=str(obj.get("host", "*")))
        except (KeyError, TypeError) as e:
            raise AclFormatError(f"ACL entry {obj!r} lacks {e}") from None

    def matches(self, principal: str, host: str) -> bool:
        return self.principal in (principal, WILDCARD_PRINCIPAL) and self.host in (host, WILDCARD)


def encode_acls(entries: Iterable[AclEntry]) -> bytes:
    body = {"version": 1, "acls": [e.to_json() for e in entries]}
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def decode_acls(data: bytes | None, path: str = "?") -> list[AclEntry]:
    """The entries of an ACL znode; a malformed znode yields [] and malformed entries are skipped (logged)."""
    if not data:
        return []
    try:
        body = json.loads(data)
        if not isinstance(body, dict) or body.get("version") != 1 or not isinstance(body.get("acls"), list):
            raise AclFormatError("expected {\"version\":1,\"acls\":[...]}")
    except (ValueError, AclFormatError) as e:
        log.warning("malformed ACL znode skipped %s", kv(path=path, error=str(e).replace(" ", "_")))
        return []
    out = []
    for item in body["acls"]:
        try:
            out.append(AclEntry.from_json(item))
        except AclFormatError as e:
            log.warning("malformed ACL entry skipped %s", kv(path=path, error=str(e).replace(" ", "_")))
    return out


def literal_path(resource_type: str, name: str) -> str:
    return f"{ACL_ROOT}/{_canonical(resource_type, RESOURCE_TYPES, 'resource type')}/{name}"


def prefixed_path(resource_type: str, prefix: str) -> str:
    return f"{EXTENDED_ROOT}/{_canonical(resource_type, RESOURCE_TYPES, 'resource type')}/{prefix}"


class AclAuthorizer:
    """Answers "may ``principal`` from ``host`` do ``operation`` on ``resource_type`` ``name``?" from ZooKeeper."""

    def __init__(self, zk, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False):
        self.zk = zk
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found

    def matching_acls(self, resource_type: str, name: str) -> list[AclEntry]:
        """Literal ACLs on ``name`` and on ``*`` plus prefixed ACLs whose prefix starts ``name``."""
        rtype = _canonical(resource_type, RESOURCE_TYPES, "resource type")
        out: list[AclEntry] = []
        for n in dict.fromkeys((name, WILDCARD)):
            out += self._read(literal_path(rtype, n))
        try:
            prefixes = self.zk.get_children(f"{EXTENDED_ROOT}/{rtype}")
        except NoNodeError:
            prefixes = []
        for prefix in prefixes:
            if name.startswith(prefix):
                out += self._read(prefixed_path(rtype, prefix))
        return out

    def _read(self, path: str) -> list[AclEntry]:
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            return []
        return decode_acls(data, path)

    def authorize(self, principal: str | None, host: str, operation: str, resource_type: str, name: str) -> bool:
        principal = principal or "User:ANONYMOUS"
        op = _canonical(operation, OPERATIONS, "operation")
        if principal in self.super_users:
            return True
        resource_acls = self.matching_acls(resource_type, name)
        acls = [a for a in resource_acls if a.matches(principal, host)]
        if any(a.permission_type == "Deny" and a.operation in (op, "All") for a in acls):
            allowed = False
        elif not resource_acls:
            allowed = self.allow_everyone_if_no_acl_found
        else:
            ops = _IMPLIED_BY.get(op, {op}) | {"All"}
            allowed = any(a.permission_type == "Allow" and a.operation in ops for a in acls)
        log.debug("authorization %s", kv(principal=principal, host=host, operation=op, resource_type=resource_type,
                                         name=name, allowed=allowed))
        return allowed


def authorizer_from_config(zk, overrides: Mapping[str, Any]) -> AclAuthorizer | None:
    """The broker's authorizer per ``authorizer.class.name`` (empty or absent: None, i.e. allow everything),
    ``super.users`` (``User:a;User:b``) and ``allow.everyone.if.no.acl.found``."""
    name = str(overrides.get("authorizer.class.name", "") or "").strip()
    if not name:
        return None
    if name not in KNOWN_AUTHORIZERS:
        log.warning("unknown authorizer.class.name; using the ZooKeeper ACL authorizer %s", kv(value=name))
    supers = [s.strip() for s in str(overrides.get("super.users", "") or "").split(";") if s.strip()]
    allow = str(overrides.get("allow.everyone.if.no.acl.found", "false")).strip().lower() == "true"
    log.info("ACL authorizer enabled %s", kv(super_users=",".join(supers) or None, allow_if_no_acl=allow))
    return AclAuthorizer(zk, supers, allow)


# --------------------------------------------------------------------------------------------- writing ACLs

def add_acls(zk, resource_type: str, name: str, entries: Iterable[AclEntry], pattern_type: str = "LITERAL") -> None:
    """Add ``entries`` to the resource's ACL znode (a versioned read-modify-write) and announce the change."""
    _update_acls(zk, resource_type, name, pattern_type, lambda cur: cur + [e for e in entries if e not in cur])


def remove_acls(zk, resource_type: str, name: str, entries: Iterable[AclEntry] | None = None,
                pattern_type: str = "LITERAL") -> None:
    """Remove ``entries`` (all when None) from the resource's ACL znode; an emptied znode is deleted."""
    drop = None if entries is None else set(entries)
    _update_acls(zk, resource_type, name, pattern_type, lambda cur: [] if drop is None else
                 [e for e in cur if e not in drop])


def _update_acls(zk, resource_type: str, name: str, pattern_type: str, change) -> None:
    from kazoo.exceptions import BadVersionError
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

    prefixed = pattern_type.upper() == "PREFIXED"
    if not prefixed and pattern_type.upper() != "LITERAL":
        raise AclFormatError(f"unsupported pattern type {pattern_type!r} (LITERAL or PREFIXED)")
    path = prefixed_path(resource_type, name) if prefixed else literal_path(resource_type, name)
    for attempt in Retrying(retry=retry_if_exception_type((BadVersionError, NodeExistsError, NoNodeError)),
                            stop=stop_after_attempt(10), wait=wait_exponential(multiplier=0.01, max=0.5),
                            reraise=True):
        with attempt:
            try:
                data, stat = zk.get(path)
                current, version = decode_acls(data, path), stat.version
            except NoNodeError:
                current, version = [], None
            new = change(list(current))
            if new == current:
                return
            if version is None:
                zk.create(path, encode_acls(new), makepath=True)
            elif new:
                zk.set(path, encode_acls(new), version=version)
            else:
                zk.delete(path, version=version)
    rtype = _canonical(resource_type, RESOURCE_TYPES, "resource type")
    if prefixed:
        root, payload = EXTENDED_CHANGES, json.dumps({"version": 1, "resourceType": rtype, "name": name,
                                                      "patternType": "PREFIXED"}, separators=(",", ":")).encode()
    else:
        root, payload = ACL_CHANGES, f"{rtype.upper()}:{name}".encode("utf-8")
    zk.create(f"{root}/{CHANGE_PREFIX}", payload, sequence=True, makepath=True)
    _purge_old_changes(zk, root)
    log.info("ACLs updated %s", kv(path=path))


def _purge_old_changes(zk, root: str) -> None:
    now = int(time.time() * 1000)
    try:
        children = zk.get_children(root)
    except NoNodeError:
        return
    for c in children:
        try:
            stat = zk.exists(f"{root}/{c}")
            if stat is not None and now - stat.ctime > CHANGE_RETENTION_MS:
                zk.delete(f"{root}/{c}")
        except NoNodeError:
            pass
