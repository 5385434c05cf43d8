"""``kafkatier acls``: kafka-acls (``kafka.admin.AclCommand``, AdminClient mode) -- ``--add``, ``--remove`` and
``--list`` over the brokers' CreateAcls / DeleteAcls / DescribeAcls, with its options, defaults, checks and
output.

Resources: ``--topic`` / ``--group`` / ``--transactional-id`` (repeatable) and ``--cluster``, with
``--resource-pattern-type literal|prefixed|any|match`` (default literal; any / match only to list or remove).
Entries: ``--allow-principal`` / ``--deny-principal`` (``Type:name``), ``--allow-host`` / ``--deny-host``
(default ``*`` for the principals given), ``--operation`` (default All; checked against what the resource
type supports).  Conveniences: ``--producer`` (WRITE, DESCRIBE, CREATE on topics; IDEMPOTENT_WRITE on the
cluster with ``--idempotent``; WRITE, DESCRIBE on transactional ids) and ``--consumer`` (READ, DESCRIBE on
topics, READ on groups).  ``--remove`` asks for confirmation unless ``--force``; ``--list`` takes
``--principal`` filters.  Output is kafka-acls': ``Adding ACLs for resource `ResourcePattern(...)`:`` blocks,
then the current ACLs.  Bad options: one line on stderr, exit 2; a refused request: one line, exit 1.
"""
from __future__ import annotations

import argparse
import sys
from typing import Iterable

from kafkatier.admin.bootstrap import NoReachableBrokerError
from kafkatier.admin.client import AdminClient, AdminError
from kafkatier.cli import common
from kafkatier.cli.main import UsageError
from kafkatier.server.acl import OPERATIONS, AclEntry, AclFormatError, ResourcePattern, parse_operation
from kafkatier.server.acl_apis import PATTERN_TYPE_CODES, PERMISSION_CODES, RESOURCE_TYPE_CODES
from kafkatier.server.auth_helper import CLUSTER_NAME, OPERATION_CODES, SUPPORTED_OPERATIONS

PATTERN_CHOICES = ("literal", "prefixed", "any", "match")
_WIRE_NAMES = {"TransactionalId": "TRANSACTIONAL_ID", "DelegationToken": "DELEGATION_TOKEN",
               "ClusterAction": "CLUSTER_ACTION", "DescribeConfigs": "DESCRIBE_CONFIGS",
               "AlterConfigs": "ALTER_CONFIGS", "IdempotentWrite": "IDEMPOTENT_WRITE",
               "CreateTokens": "CREATE_TOKENS", "DescribeTokens": "DESCRIBE_TOKENS"}


def register(subparsers) -> None:
    p = common.add_client_command(subparsers, "acls", run, help="add, remove and list ACLs (kafka-acls)",
                                  description="Manage ACLs as kafka-acls does (through the brokers' ACL APIs).")
    actions = p.add_argument_group("actions (exactly one)")
    actions.add_argument("--add", action="store_true", help="add the ACLs")
    actions.add_argument("--remove", action="store_true", help="remove the ACLs (all of a resource without "
                                                                "principals)")
    actions.add_argument("--list", action="store_true", help="list the ACLs (of the given resources, or all)")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC")
    p.add_argument("--group", action="append", default=[], metavar="GROUP")
    p.add_argument("--transactional-id", action="append", default=[], metavar="ID")
    p.add_argument("--cluster", action="store_true", help="the cluster resource (kafka-cluster)")
    p.add_argument("--resource-pattern-type", default="literal", type=str.lower, metavar="TYPE",
                   help="literal (default), prefixed; any or match to list or remove")
    p.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME")
    p.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST")
    p.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME", help="--list: only these")
    p.add_argument("--operation", action="append", default=[], metavar="OP",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, AlterConfigs, "
                        "DescribeConfigs, IdempotentWrite, All (default All)")
    p.add_argument("--producer", action="store_true", help="the ACLs a producer needs")
    p.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs (with --group)")
    p.add_argument("--idempotent", action="store_true", help="--producer: IDEMPOTENT_WRITE on the cluster too")
    p.add_argument("--force", action="store_true", help="--remove without asking")


# ------------------------------------------------------------------------------------------------ formats

def pattern_text(p: ResourcePattern) -> str:
    """Kafka's ``ResourcePattern.toString``."""
    rtype = _WIRE_NAMES.get(p.resource_type, p.resource_type.upper())
    return f"ResourcePattern(resourceType={rtype}, name={p.name}, patternType={p.pattern_type})"


def entry_text(e: AclEntry) -> str:
    """Kafka's ``AccessControlEntry.toString``."""
    op = _WIRE_NAMES.get(e.operation, e.operation.upper())
    return f"(principal={e.principal}, host={e.host}, operation={op}, permissionType={e.permission_type.upper()})"


def block(title: str, pattern: ResourcePattern, entries: Iterable[AclEntry]) -> str:
    """kafka-acls' ``<title> `<pattern>`: \\n \\t<entry>\\n\\t<entry> \\n`` (println adds the last newline)."""
    body = "\n".join("\t" + entry_text(e) for e in entries)
    return f"{title} `{pattern_text(pattern)}`: \n {body} \n"


# ------------------------------------------------------------------------------------------------ options

def _principal(text: str) -> str:
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise UsageError(f"Invalid principal '{text}': expected <type>:<name> (for example User:alice)")
    return text


def resources(args: argparse.Namespace) -> list[ResourcePattern]:
    ptype = args.resource_pattern_type
    if ptype not in PATTERN_CHOICES:
        raise UsageError(f"Invalid --resource-pattern-type '{ptype}': expected one of {', '.join(PATTERN_CHOICES)}")
    wire = ptype.upper() if ptype in ("literal", "prefixed") else "LITERAL"
    out = [ResourcePattern("Topic", t, wire) for t in args.topic]
    out += [ResourcePattern("Group", g, wire) for g in args.group]
    out += [ResourcePattern("TransactionalId", t, wire) for t in args.transactional_id]
    if args.cluster:
        out.append(ResourcePattern("Cluster", CLUSTER_NAME, "LITERAL"))
    return out


def check_args(args: argparse.Namespace) -> None:
    if sum((args.add, args.remove, args.list)) != 1:
        raise UsageError("Command must include exactly one action: --list, --add, --remove.")
    if (args.producer or args.consumer) and not args.add and not args.remove:
        raise UsageError("--producer and --consumer are only valid with --add or --remove")
    if args.producer and args.consumer and not args.topic:
        raise UsageError("With --producer and --consumer you must specify a --topic")
    if args.producer and not args.topic:
        raise UsageError("With --producer you must specify a --topic")
    if args.consumer and (not args.topic or not args.group):
        raise UsageError("With --consumer you must specify a --topic and a --group")
    if args.idempotent and not args.producer:
        raise UsageError("--idempotent is only valid with --producer")
    if args.add and args.resource_pattern_type in ("any", "match"):
        raise UsageError("A '--resource-pattern-type' value of 'any' or 'match' is not valid when adding acls.")
    if args.principal and not args.list:
        raise UsageError("--principal is only valid with --list")
    if (args.add or args.remove) and not (args.topic or args.group or args.transactional_id or args.cluster):
        raise UsageError("You must provide at least one resource: --topic <topic> or --cluster or --group <group> "
                         "or --transactional-id <id>")
    if args.add and not (args.allow_principal or args.deny_principal):
        raise UsageError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")


def _operations(args: argparse.Namespace) -> list[str]:
    out = []
    for o in args.operation or ["All"]:
        try:
            out.append(parse_operation(o))
        except AclFormatError:
            raise UsageError(f"Invalid operation '{o}': expected one of {', '.join(OPERATIONS)}") from None
    return out


def _entries(args: argparse.Namespace, operations: list[str]) -> list[AclEntry]:
    out = []
    for perm, principals, hosts in (("Allow", args.allow_principal, args.allow_host),
                                    ("Deny", args.deny_principal, args.deny_host)):
        for principal in principals:
            for host in hosts or ["*"]:
                out += [AclEntry(_principal(principal), perm, op, host) for op in operations]
    return out


def bindings(args: argparse.Namespace) -> dict[ResourcePattern, list[AclEntry]]:
    """The ACLs ``--add`` / ``--remove`` name, per resource (Kafka's ``getResourceToAcls``)."""
    out: dict[ResourcePattern, list[AclEntry]] = {}
    if args.producer or args.consumer:
        for p in resources(args):
            ops: list[str] = []
            if p.resource_type == "Topic":
                ops = (["Write", "Describe", "Create"] if args.producer else []) + \
                      (["Read", "Describe"] if args.consumer else [])
            elif p.resource_type == "Group" and args.consumer:
                ops = ["Read"]
            elif p.resource_type == "TransactionalId" and args.producer:
                ops = ["Write", "Describe"]
            if ops:
                out.setdefault(p, []).extend(e for e in _entries(args, list(dict.fromkeys(ops)))
                                             if e not in out.get(p, []))
        if args.producer and args.idempotent:
            out[ResourcePattern("Cluster", CLUSTER_NAME)] = _entries(args, ["IdempotentWrite"])
        return out
    operations = _operations(args)
    for p in resources(args):
        supported = set(SUPPORTED_OPERATIONS[p.resource_type]) | {"All"}
        if any(o not in supported for o in operations):
            names = ", ".join(sorted(_WIRE_NAMES.get(o, o.upper()) for o in supported))
            raise UsageError(f"ResourceType {_WIRE_NAMES.get(p.resource_type, p.resource_type.upper())} only "
                             f"supports operations {names}")
        out[p] = _entries(args, operations)
    return out


# ------------------------------------------------------------------------------------------------ wire

def _creation(p: ResourcePattern, e: AclEntry) -> dict:
    return {"resource_type": RESOURCE_TYPE_CODES[p.resource_type], "resource_name": p.name,
            "resource_pattern_type": PATTERN_TYPE_CODES[p.pattern_type], "principal": e.principal, "host": e.host,
            "operation": OPERATION_CODES[e.operation], "permission_type": PERMISSION_CODES[e.permission_type]}


def _filter(p: ResourcePattern | None, pattern_type: str, e: AclEntry | None = None,
            principal: str | None = None) -> dict:
    return {"resource_type_filter": RESOURCE_TYPE_CODES[p.resource_type] if p else 1,
            "resource_name_filter": p.name if p else None,
            "pattern_type_filter": PATTERN_TYPE_CODES[pattern_type],
            "principal_filter": e.principal if e else principal, "host_filter": e.host if e else None,
            "operation": OPERATION_CODES[e.operation] if e else 1,
            "permission_type": PERMISSION_CODES[e.permission_type] if e else 1}


def _from_wire(rtype: int, name: str, ptype: int) -> ResourcePattern:
    names = {v: k for k, v in RESOURCE_TYPE_CODES.items()}
    pnames = {v: k for k, v in PATTERN_TYPE_CODES.items()}
    return ResourcePattern(names[rtype], name, pnames.get(ptype, "LITERAL"))


def _entry_from_wire(a) -> AclEntry:
    ops = {v: k for k, v in OPERATION_CODES.items()}
    perms = {v: k for k, v in PERMISSION_CODES.items()}
    return AclEntry(a.principal, perms[a.permission_type], ops[a.operation], a.host)


def list_acls(admin: AdminClient, args: argparse.Namespace) -> None:
    ptype = args.resource_pattern_type.upper()
    targets = resources(args)
    filters = [_filter(p, ptype if ptype in ("ANY", "MATCH") else p.pattern_type) for p in targets] or \
        [_filter(None, "ANY")]
    found: dict[ResourcePattern, list[AclEntry]] = {}
    for f in filters:
        for principal in args.principal or [None]:
            for r in admin.describe_acls({**f, "principal_filter": _principal(principal) if principal else None}):
                pattern = _from_wire(r.resource_type, r.resource_name, r.pattern_type)
                for a in r.acls:
                    e = _entry_from_wire(a)
                    if e not in found.setdefault(pattern, []):
                        found[pattern].append(e)
    for pattern, entries in found.items():
        print(block("Current ACLs for resource", pattern, entries))


def confirm(args: argparse.Namespace, question: str) -> bool:
    if args.force:
        return True
    print(question)
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def remove(admin: AdminClient, args: argparse.Namespace, pattern: ResourcePattern, entries: list[AclEntry]) -> None:
    """Kafka's removeAcls: the given entries, or every ACL of the resource filter without principals."""
    ptype = args.resource_pattern_type.upper()
    ptype = ptype if ptype in ("ANY", "MATCH") else pattern.pattern_type
    where = f"resource filter `{pattern_text(pattern)}`"
    if not entries:
        question = f"Are you sure you want to delete all ACLs for {where}? (y/n)"
        filters = [_filter(pattern, ptype)]
    else:
        listed = "\n".join("\t" + entry_text(e) for e in entries)
        question = f"Are you sure you want to remove ACLs: \n {listed} \n from {where}? (y/n)"
        filters = [_filter(pattern, ptype, e) for e in entries]
    if confirm(args, question):
        for err, _ in admin.delete_acls(filters):
            if err is not None:
                raise err


def run(args: argparse.Namespace) -> int:
    check_args(args)
    to_change = bindings(args) if (args.add or args.remove) else {}
    try:
        conn = common.connection_from_args(args)
        with common.open_admin(conn) as admin:
            if args.add:
                for pattern, entries in to_change.items():
                    print(block("Adding ACLs for resource", pattern, entries))
                    for err in admin.create_acls([_creation(pattern, e) for e in entries]):
                        if err is not None:
                            raise err
            elif args.remove:
                for pattern, entries in to_change.items():
                    remove(admin, args, pattern, entries)
            list_acls(admin, args)
    except (AdminError, NoReachableBrokerError) as e:
        return common.print_error("acls", e)
    return 0
