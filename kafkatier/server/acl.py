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
allowed).  As Kafka's ``AclAuthorizer``, a started authorizer answers from an in-memory cache: loaded from
ZooKeeper at :meth:`AclAuthorizer.start`, and refreshed per resource by the change notifications under
``/kafka-acl-changes`` and ``/kafka-acl-extended-changes`` (one ``zk/node_change_notification_listener.py`` per
path, as Kafka: processed in sequence order, all reloaded after a reconnect).  ACLs written through this broker (CreateAcls /
DeleteAcls) are in its cache at once; other brokers see them when the notification arrives (milliseconds).
An authorizer that is not started (tools, unit tests) reads ZooKeeper on every check.  Writers purge
notifications older than 15 minutes, as Kafka.  Malformed ACL znodes and entries are logged and skipped.

Besides ``authorize`` (one literal resource) the authorizer answers Kafka's ``authorizeByResourceType`` (KIP-679:
"may the principal do OP on some resource of this type?", used by InitProducerId) and lists, creates and deletes
ACL bindings for the ACL APIs (``server/acl_apis.py``) with Kafka's filter semantics.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable, Iterable, Mapping

import attrs
from kafkatier.zk.errors import NoNodeError, NodeExistsError

from kafkatier.logsetup import get_logger, kv
from kafkatier.server.config import broker_setting
from kafkatier.zk.node_change_notification_listener import NotificationError, ZkNodeChangeNotificationListener

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
PATTERN_TYPES = ("LITERAL", "PREFIXED")
ANONYMOUS = "User:ANONYMOUS"

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


def parse_operation(text: str) -> str:
    """Kafka's name of an operation given in any case, with or without underscores (``describe_configs``)."""
    return _canonical(text, OPERATIONS, "operation")


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


@attrs.frozen(order=True)
class ResourcePattern:
    """Kafka's ``ResourcePattern``: a resource type, a name (``*`` is the literal wildcard) and LITERAL or
    PREFIXED."""

    resource_type: str
    name: str
    pattern_type: str = "LITERAL"

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "resource_type", _canonical(self.resource_type, RESOURCE_TYPES, "resource type"))
        object.__setattr__(self, "pattern_type", _canonical(self.pattern_type, PATTERN_TYPES, "pattern type"))

    @property
    def path(self) -> str:
        if self.pattern_type == "PREFIXED":
            return prefixed_path(self.resource_type, self.name)
        return literal_path(self.resource_type, self.name)


@attrs.frozen
class AclBinding:
    """One ACL: a pattern and an entry (Kafka's ``AclBinding``)."""

    pattern: ResourcePattern
    entry: AclEntry


@attrs.frozen
class AclBindingFilter:
    """Kafka's ``AclBindingFilter``: ``None`` fields and ``Any`` match everything; pattern type ``MATCH`` matches
    the patterns that would apply to the named resource (the literal name, ``*``, and prefixes of it)."""

    resource_type: str = "Any"
    name: str | None = None
    pattern_type: str = "ANY"
    principal: str | None = None
    host: str | None = None
    operation: str = "Any"
    permission_type: str = "Any"

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "resource_type", _canonical(self.resource_type, ("Any",) + RESOURCE_TYPES,
                                                             "resource type"))
        object.__setattr__(self, "pattern_type", _canonical(self.pattern_type, ("ANY", "MATCH") + PATTERN_TYPES,
                                                            "pattern type"))
        object.__setattr__(self, "operation", _canonical(self.operation, ("Any",) + OPERATIONS, "operation"))
        object.__setattr__(self, "permission_type", _canonical(self.permission_type, ("Any",) + PERMISSION_TYPES,
                                                               "permission type"))

    def matches_pattern(self, p: ResourcePattern) -> bool:
        if self.resource_type != "Any" and self.resource_type != p.resource_type:
            return False
        if self.pattern_type not in ("ANY", "MATCH") and self.pattern_type != p.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in ("ANY", p.pattern_type):
            return self.name == p.name
        if p.pattern_type == "LITERAL":   # MATCH
            return self.name == p.name or p.name == WILDCARD
        return self.name.startswith(p.name)

    def matches_entry(self, e: AclEntry) -> bool:
        return ((self.principal is None or self.principal == e.principal)
                and (self.host is None or self.host == e.host)
                and self.operation in ("Any", e.operation)
                and self.permission_type in ("Any", e.permission_type))

    def matches(self, b: AclBinding) -> bool:
        return self.matches_pattern(b.pattern) and self.matches_entry(b.entry)


class AclAuthorizer:
    """Answers "may ``principal`` from ``host`` do ``operation`` on ``resource_type`` ``name``?" -- from its cache
    once started (see the module docstring), else from ZooKeeper."""

    def __init__(self, zk, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False):
        self.zk = zk
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._cache: dict[tuple[str, str, str], tuple[AclEntry, ...]] | None = None
        self._lock = threading.RLock()
        self._listeners: list[ZkNodeChangeNotificationListener] = []

    # --- lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Load every ACL into the cache and follow the change notifications (Kafka's ``configure``)."""
        with self._lock:
            # One listener per change path, as Kafka; each reloads everything at start and after a reconnection
            # (so the cache is loaded before start() returns), then refreshes the resource a notification names.
            self._listeners = [ZkNodeChangeNotificationListener(self.zk, root, CHANGE_PREFIX, self,
                                                                resync=self.reload_all, name=f"acl-changes{root}")
                               for root in (ACL_CHANGES, EXTENDED_CHANGES)]
            for listener in self._listeners:
                listener.start()

    def close(self) -> None:
        for listener in self._listeners:
            listener.stop()
        self._listeners = []

    def reload_all(self) -> None:
        cache: dict[tuple[str, str, str], tuple[AclEntry, ...]] = {}
        for pattern in _all_patterns(self.zk):
            entries = tuple(self._read(pattern.path))
            if entries:
                cache[_key(pattern)] = entries
        with self._lock:
            self._cache = cache
        log.info("ACL cache loaded %s", kv(resources=len(cache), acls=sum(len(v) for v in cache.values())))

    def process_notification(self, path: str, data: bytes) -> None:
        """NotificationHandler: reload the resource a change notification names."""
        try:
            pattern = parse_change_notification(path.rpartition("/")[0], data)
        except AclFormatError as e:
            raise NotificationError(str(e)) from None
        self._refresh(pattern)

    def _refresh(self, pattern: ResourcePattern) -> None:
        entries = tuple(self._read(pattern.path))
        with self._lock:
            if self._cache is None:
                return
            if entries:
                self._cache[_key(pattern)] = entries
            else:
                self._cache.pop(_key(pattern), None)
        log.debug("ACL cache refreshed %s", kv(resource=pattern.path, acls=len(entries)))

    # --- reading --------------------------------------------------------------------------------------------------
    def _snapshot(self) -> dict[tuple[str, str, str], tuple[AclEntry, ...]] | None:
        with self._lock:
            return self._cache

    def matching_acls(self, resource_type: str, name: str) -> list[AclEntry]:
        """Literal ACLs on ``name`` and on ``*`` plus prefixed ACLs whose prefix starts ``name``."""
        rtype = _canonical(resource_type, RESOURCE_TYPES, "resource type")
        cache = self._snapshot()
        out: list[AclEntry] = []
        if cache is not None:  # keys are (type, pattern type, name): one lookup per candidate, no scan
            for n in dict.fromkeys((name, WILDCARD)):
                out += cache.get((rtype, "LITERAL", n), ())
            for i in range(1, len(name) + 1):
                out += cache.get((rtype, "PREFIXED", name[:i]), ())
            return out
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

    def bindings(self) -> list[AclBinding]:
        """Every ACL (from the cache when started)."""
        cache = self._snapshot()
        if cache is None:
            patterns = {p: tuple(self._read(p.path)) for p in _all_patterns(self.zk)}
        else:
            patterns = {ResourcePattern(t, n, pt): entries for (t, pt, n), entries in cache.items()}
        return [AclBinding(p, e) for p, entries in sorted(patterns.items()) for e in entries]

    def acls(self, flt: AclBindingFilter) -> list[AclBinding]:
        """The bindings ``flt`` matches (Kafka's ``Authorizer.acls``)."""
        return [b for b in self.bindings() if flt.matches(b)]

    # --- decisions ------------------------------------------------------------------------------------------------
    def is_super_user(self, principal: str | None) -> bool:
        return (principal or ANONYMOUS) in self.super_users

    def authorize(self, principal: str | None, host: str, operation: str, resource_type: str, name: str) -> bool:
        principal = principal or ANONYMOUS
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
        if log.isEnabledFor(logging.DEBUG):
            log.debug("authorization %s", kv(principal=principal, host=host, operation=op,
                                             resource_type=resource_type, name=name, allowed=allowed))
        return allowed

    def authorize_by_resource_type(self, principal: str | None, host: str, operation: str,
                                   resource_type: str) -> bool:
        """Kafka's ``AclAuthorizer.authorizeByResourceType``: allowed if some Allow ACL for the operation (itself
        or All; no implied operations) on this resource type is not dominated by a Deny, a Deny on the literal
        wildcard denies everything, and ``allow.everyone.if.no.acl.found`` allows when nothing denies."""
        principal = principal or ANONYMOUS
        op = _canonical(operation, OPERATIONS, "operation")
        rtype = _canonical(resource_type, RESOURCE_TYPES, "resource type")
        if principal in self.super_users:
            return True
        names: dict[tuple[str, str], set[str]] = {(perm, pt): set() for perm in PERMISSION_TYPES
                                                  for pt in PATTERN_TYPES}
        for b in self.bindings():
            e = b.entry
            if (b.pattern.resource_type == rtype and e.matches(principal, host) and e.operation in (op, "All")):
                names[(e.permission_type, b.pattern.pattern_type)].add(b.pattern.name)
        deny_lit, deny_pre = names[("Deny", "LITERAL")], names[("Deny", "PREFIXED")]
        if WILDCARD in deny_lit:
            return False
        if self.allow_everyone_if_no_acl_found:
            return True

        def dominated(name: str) -> bool:
            return any(name[:i] in deny_pre for i in range(1, len(name) + 1))
        if any(not dominated(p) for p in names[("Allow", "PREFIXED")]):
            return True
        return any(n == WILDCARD or (n not in deny_lit and not dominated(n)) for n in names[("Allow", "LITERAL")])

    # --- writing (CreateAcls / DeleteAcls) ----------------------------------------------------------------------
    def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Add the bindings (per resource, one versioned write and one notification); this broker's cache
        sees them at once."""
        self._write_per_pattern(bindings, add_acls)

    def delete_acls(self, flt: AclBindingFilter) -> list[AclBinding]:
        """Delete and return the bindings ``flt`` matches."""
        matched = self.acls(flt)
        self._write_per_pattern(matched, remove_acls)
        return matched

    def _write_per_pattern(self, bindings: Iterable[AclBinding], write: Callable[..., Any]) -> None:
        """Group ``bindings`` by resource pattern and apply ``write`` (``add_acls`` / ``remove_acls``) once per
        pattern, refreshing this broker's cache after each."""
        by_pattern: dict[ResourcePattern, list[AclEntry]] = {}
        for b in bindings:
            by_pattern.setdefault(b.pattern, []).append(b.entry)
        for pattern, entries in by_pattern.items():
            write(self.zk, pattern.resource_type, pattern.name, entries, pattern.pattern_type)
            self._refresh(pattern)


def _key(p: ResourcePattern) -> tuple[str, str, str]:
    return (p.resource_type, p.pattern_type, p.name)


def _all_patterns(zk) -> list[ResourcePattern]:
    """Every resource pattern that has an ACL znode (unknown resource types are logged and skipped)."""
    out = []
    for root, pattern_type in ((ACL_ROOT, "LITERAL"), (EXTENDED_ROOT, "PREFIXED")):
        try:
            types = zk.get_children(root)
        except NoNodeError:
            continue
        for rtype in types:
            if rtype not in RESOURCE_TYPES:
                log.warning("unknown ACL resource type skipped %s", kv(path=f"{root}/{rtype}"))
                continue
            try:
                names = zk.get_children(f"{root}/{rtype}")
            except NoNodeError:
                continue
            out += [ResourcePattern(rtype, n, pattern_type) for n in names]
    return out


def parse_change_notification(root: str, data: bytes | None) -> ResourcePattern:
    """The resource a ``/kafka-acl-changes`` (``TOPIC:name``) or ``/kafka-acl-extended-changes`` (JSON) node
    names; :class:`AclFormatError` if it names none."""
    text = bytes(data or b"").decode("utf-8", "replace")
    if root == ACL_CHANGES:
        rtype, sep, name = text.partition(":")
        if not sep:
            raise AclFormatError(f"ACL change notification {text!r} is not <RESOURCE_TYPE>:<name>")
        return ResourcePattern(rtype, name, "LITERAL")
    try:
        body = json.loads(text)
        return ResourcePattern(str(body["resourceType"]), str(body["name"]), str(body["patternType"]))
    except (ValueError, KeyError, TypeError) as e:
        raise AclFormatError(f"ACL change notification {text[:100]!r}: {e}") from None


def authorizer_from_config(zk, overrides: Mapping[str, Any]) -> AclAuthorizer | None:
    """The broker's authorizer per ``authorizer.class.name`` (empty or absent: None, i.e. allow everything),
    ``super.users`` (``User:a;User:b``) and ``allow.everyone.if.no.acl.found``."""
    name = (broker_setting(overrides, "authorizer.class.name") or "").strip()
    if not name:
        return None
    if name not in KNOWN_AUTHORIZERS:
        log.warning("unknown authorizer.class.name; using the ZooKeeper ACL authorizer %s", kv(value=name))
    supers = [s.strip() for s in (broker_setting(overrides, "super.users") or "").split(";") if s.strip()]
    allow = broker_setting(overrides, "allow.everyone.if.no.acl.found")
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
    from kafkatier.zk.errors import BadVersionError
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
