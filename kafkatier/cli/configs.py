"""``kafkatier configs``: kafka-configs' ``--describe [--all]`` (topics and brokers) and ``--alter`` (topics),
with its options, parsing rules and output.

``--add-config 'k1=v1,k2=[a,b],k3=v3'`` groups a value containing commas in square brackets (the brackets are
removed); ``--add-config-file`` reads a Java properties file; ``--delete-config k1,k2``.  The change is sent as
one IncrementalAlterConfigs request (SET and DELETE operations), for a topic, a broker (``--entity-name ID``)
or every broker (``--entity-default``: the ``<default>`` dynamic broker config).

Users (``--entity-type users --entity-name U``): SCRAM credentials only, as Kafka's tool with --bootstrap-server:
``--add-config 'SCRAM-SHA-256=[iterations=8192,password=...],SCRAM-SHA-512=[password=...]'`` is salted on this
side and sent as AlterUserScramCredentials; ``--delete-config SCRAM-SHA-512`` removes one; ``--describe`` lists
the mechanisms and iteration counts.  Passwords are never printed, not even in an error's echo of the options.

Client quotas (KIP-546; ``--entity-type users|clients --entity-name X`` or ``--entity-default``):
``--add-config producer_byte_rate=1048576,consumer_byte_rate=...,request_percentage=...`` is sent as
AlterClientQuotas (``--delete-config`` removes keys); ``--describe`` prints Kafka's ``Quota configs for
user-principal 'X' are producer_byte_rate=1048576.0``.  An unknown quota key or a value that is not a number: one
line, exit 2.  A user's quota for one client id (KIP-55's user+client entity) is named as kafka-configs names it:
``--entity-type users --entity-name U --entity-type clients --entity-name C`` (``--entity-default`` in place of
a name for the default one), or ``--user U --client C`` (``--user-defaults`` / ``--client-defaults``).
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import Iterable, Sequence

from kafkatier.admin.bootstrap import BootstrapConfigError, NoReachableBrokerError, load_properties
from kafkatier.admin.client import AdminClient, AdminError, ConfigEntry
from kafkatier.cli import common
from kafkatier.cli.main import UsageError

ENTITY_TYPES = ("topics", "brokers", "broker-loggers", "clients", "users", "ips")
SUPPORTED_DESCRIBE = ("topics", "brokers", "broker-loggers", "users", "clients")
SUPPORTED_ALTER = ("topics", "brokers", "users", "clients")
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_SECRET = re.compile(r"(password\s*=\s*)[^,\]\n]*", re.IGNORECASE)
BROKER_DEFAULT = ""   # the cluster-wide default broker resource

# Kafka's split rules: commas and '=' outside square brackets.
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"
_ITEM_SPLIT = re.compile("," + _OUTSIDE_BRACKETS)
_KV_SPLIT = re.compile(r"\s*=\s*" + _OUTSIDE_BRACKETS)
_VALID_KEY = re.compile(r"^[a-zA-Z0-9._-]+$")
_DYNAMIC_SOURCE = {"topics": "DYNAMIC_TOPIC_CONFIG", "brokers": "DYNAMIC_BROKER_CONFIG"}


def register(subparsers) -> None:
    p = common.add_client_command(subparsers, "configs", run,
                                  help="describe and alter topic and broker configs (kafka-configs)",
                                  description="Describe and alter dynamic configs as kafka-configs does.")
    p.add_argument("--entity-type", choices=ENTITY_TYPES, metavar="TYPE", action=_EntityType,
                   help="topics, brokers, users or clients (broker-loggers: --describe only); users and clients "
                        "may both be given: a user's quota for one client id")
    p.add_argument("--entity-name", action=_EntityName, help="topic name, broker id, user or client id")
    p.add_argument("--entity-default", action=_EntityDefault, nargs=0, default=False,
                   help="the cluster-wide default (brokers, users, clients)")
    shorthand = p.add_argument_group("shorthands (kafka-configs' --topic T == --entity-type topics --entity-name T)")
    for flag, etype in SHORTHANDS.items():
        shorthand.add_argument(f"--{flag}", dest=f"short_{flag.replace('-', '_')}", metavar="NAME",
                               help=f"--entity-type {etype} --entity-name NAME")
    shorthand.add_argument("--broker-defaults", action="store_true", help="--entity-type brokers --entity-default")
    shorthand.add_argument("--user-defaults", action="store_true", help="--entity-type users --entity-default")
    shorthand.add_argument("--client-defaults", action="store_true", help="--entity-type clients --entity-default")
    actions = p.add_argument_group("actions (exactly one)").add_mutually_exclusive_group(required=True)
    actions.add_argument("--describe", action="store_true", help="list configs of the entity")
    actions.add_argument("--alter", action="store_true", help="add, change or delete configs of the entity")
    p.add_argument("--all", action="store_true", help="--describe: every config, not only the dynamic ones")
    p.add_argument("--add-config", metavar="'K1=V1,K2=[A,B],K3=V3'",
                   help="configs to set; square brackets group a value that contains commas")
    p.add_argument("--add-config-file", metavar="FILE", help="a properties file of configs to set")
    p.add_argument("--delete-config", metavar="K1,K2", help="configs to remove (back to their defaults)")


# ------------------------------------------------------------------------------------------------ parsing

def _java_split(pattern: re.Pattern, text: str) -> list[str]:
    """``String.split(regex)``: trailing empty strings dropped."""
    parts = pattern.split(text)
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    return parts


def parse_add_config(text: str) -> dict[str, str]:
    """kafka-configs' ``--add-config`` syntax: ``k1=v1,k2=[a,b,c],k3=v3`` -> ``{"k1": "v1", "k2": "a,b,c",
    "k3": "v3"}``.  Brackets are removed from values; a key may appear once per item.  Bad syntax raises
    :class:`UsageError` with Kafka's message."""
    out: dict[str, str] = {}
    for item in _java_split(_ITEM_SPLIT, text):
        pair = _KV_SPLIT.split(item)
        if len(pair) != 2:
            raise UsageError('Invalid entity config: all configs to be added must be in the format "key=val".')
        key, value = pair[0].strip(), re.sub(r"[\[\]]", "", pair[1]).strip()
        out[key] = value
    validate_keys(out)
    return out


def parse_delete_config(text: str) -> list[str]:
    keys = common.split_list(text)
    if not keys:
        raise UsageError("--delete-config needs at least one config name")
    return list(dict.fromkeys(keys))


def validate_keys(keys: Iterable[str]) -> None:
    for key in keys:
        if not _VALID_KEY.match(key):
            raise UsageError(f"Invalid character found for config key: {key}")


def load_add_config_file(path: str) -> dict[str, str]:
    """``--add-config-file``: a Java properties file; unreadable or malformed -> :class:`UsageError`."""
    try:
        props = load_properties(path, "--add-config-file")
    except BootstrapConfigError as e:
        raise UsageError(str(e)) from None
    if not props:
        raise UsageError(f"--add-config-file {path} has no configs")
    validate_keys(props)
    return props


SHORTHANDS = {"topic": "topics", "broker": "brokers", "broker-logger": "broker-loggers", "user": "users",
              "client": "clients"}
_DEFAULT_SHORTHANDS = {"broker_defaults": "brokers", "user_defaults": "users", "client_defaults": "clients"}
_NO_NAME = "<no name>"   # an --entity-type given without its --entity-name / --entity-default


class _EntityType(argparse.Action):
    """``--entity-type`` may be repeated (users and clients); the first one is ``entity_type``."""

    def __call__(self, parser, namespace, values, option_string=None):
        types = list(getattr(namespace, "entity_types", None) or []) + [values]
        namespace.entity_types = types
        namespace.entity_type = types[0]


class _EntityName(argparse.Action):
    """``--entity-name`` / ``--entity-default`` pair with the ``--entity-type`` options in the order given."""

    def __call__(self, parser, namespace, values, option_string=None):
        namespace.entity_names = list(getattr(namespace, "entity_names", None) or []) + [values]
        if getattr(namespace, "entity_name", None) is None:
            namespace.entity_name = values


class _EntityDefault(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        namespace.entity_names = list(getattr(namespace, "entity_names", None) or []) + [None]
        namespace.entity_default = True


def apply_shorthands(args: argparse.Namespace) -> None:
    """``--topic T`` etc. into ``--entity-type`` / ``--entity-name``.  One entity, as in kafka-configs, except a
    user with a client id (``--entity-type users ... --entity-type clients ...`` or ``--user U --client C``):
    then ``entity_type`` is users and ``client_entity`` holds the client id (None: the default client)."""
    types = getattr(args, "entity_types", None)
    if types is None:   # a Namespace built without the parser (tests)
        types = [args.entity_type] if args.entity_type else []
    names = getattr(args, "entity_names", None)
    if names is None:
        names = ([args.entity_name] if args.entity_name is not None else []) + ([None] if args.entity_default else [])
    if len(types) == 1 and len(names) > 1 and None in names:
        raise UsageError("--entity-name and --entity-default cannot be used together")
    if len(names) > len(types):
        raise UsageError("Only one entity can be given: --entity-type/--entity-name or one of "
                         "--topic, --broker, --broker-logger, --user, --client, --broker-defaults")
    entities = [(etype, names[i] if i < len(names) else _NO_NAME) for i, etype in enumerate(types)]
    entities += [(etype, getattr(args, f"short_{flag.replace('-', '_')}", None)) for flag, etype in SHORTHANDS.items()
                 if getattr(args, f"short_{flag.replace('-', '_')}", None) is not None]
    entities += [(etype, None) for flag, etype in _DEFAULT_SHORTHANDS.items() if getattr(args, flag, False)]
    if len(entities) > 1 and sorted(e[0] for e in entities) != ["clients", "users"]:
        raise UsageError("Only one entity can be given: --entity-type/--entity-name or one of "
                         "--topic, --broker, --broker-logger, --user, --client, --broker-defaults "
                         "(users and clients together name a user's quota for one client id)")
    if not entities:
        raise UsageError("--entity-type (or --topic, --broker, --broker-logger, --user, --client) must be specified")
    entities.sort(key=lambda e: e[0] != "users")
    (args.entity_type, name), client = entities[0], (entities[1][1] if len(entities) > 1 else None)
    args.entity_name = None if name in (None, _NO_NAME) else name
    args.entity_default = name is None
    args.with_client = len(entities) > 1
    args.client_entity = client
    if args.with_client and args.alter and _NO_NAME in (name, client):
        raise UsageError("--entity-name or --entity-default must be specified with each --entity-type for --alter")


def check_args(args: argparse.Namespace) -> None:
    """Option combinations kafka-configs refuses, and the entity types kafkatier does not serve."""
    apply_shorthands(args)
    supported = SUPPORTED_ALTER if args.alter else SUPPORTED_DESCRIBE
    if args.entity_type not in supported:
        action = "--alter" if args.alter else "--describe"
        raise UsageError(f"{action} supports --entity-type {' or '.join(supported)} only in kafkatier, "
                         f"not {args.entity_type}")
    if args.entity_name is not None and args.entity_default:
        raise UsageError("--entity-name and --entity-default cannot be used together")
    if args.entity_default and args.entity_type not in ("brokers", "users", "clients"):
        raise UsageError(f"--entity-default is not supported for --entity-type {args.entity_type}")
    if args.entity_type in ("brokers", "broker-loggers") and args.entity_name is not None:
        if not args.entity_name.strip().isdigit():
            raise UsageError(f"The entity name for {args.entity_type} must be a valid integer broker id, "
                             f"but it is: {args.entity_name}")
    if args.describe:
        for name in ("--add-config", "--add-config-file", "--delete-config"):
            if getattr(args, name[2:].replace("-", "_")) is not None:
                raise UsageError(f"{name} can only be used with --alter")
        return
    if args.all:
        raise UsageError("--all can only be used with --describe")
    if not args.entity_name and not (args.entity_default and args.entity_type in ("brokers", "users", "clients")):
        raise UsageError(f"--entity-name must be specified with --alter of {args.entity_type}")
    if args.add_config is not None and args.add_config_file is not None:
        raise UsageError("Only one of --add-config or --add-config-file must be specified")
    if args.add_config is None and args.add_config_file is None and args.delete_config is None:
        raise UsageError("At least one of --add-config, --add-config-file, or --delete-config must be specified "
                         "with --alter")


def command_args(args: argparse.Namespace) -> str:
    """The options as given, for kafka-configs' ``Error while executing config command with args '...'``."""
    out = []
    for flag in ("bootstrap_server", "zookeeper", "data_dir", "command_config", "entity_type", "entity_name"):
        value = getattr(args, flag, None)
        if value is not None:
            out += [f"--{flag.replace('_', '-')}", str(value)]
    for flag in ("entity_default", "describe", "alter", "all"):
        if getattr(args, flag, False):
            out.append(f"--{flag.replace('_', '-')}")
    for flag in ("add_config", "add_config_file", "delete_config"):
        value = getattr(args, flag, None)
        if value is not None:
            out += [f"--{flag.replace('_', '-')}", redact(str(value))]
    return " ".join(out)


def redact(text: str) -> str:
    """``password=...`` values hidden (kafka-configs' options are echoed in its error messages)."""
    return _SECRET.sub(r"\1[hidden]", text)


def parse_scram_configs(to_set: dict[str, str]) -> dict[str, tuple[str, int]]:
    """``{"SCRAM-SHA-256": "iterations=8192,password=x"}`` -> ``{"SCRAM-SHA-256": ("x", 8192)}``; anything else
    is a :class:`UsageError` (kafkatier keeps no other user configs)."""
    out = {}
    for mechanism, value in to_set.items():
        if mechanism not in SCRAM_MECHANISMS:
            raise UsageError(f"users support only SCRAM credentials in kafkatier ({', '.join(SCRAM_MECHANISMS)}), "
                             f"not {mechanism}")
        fields = {}
        for part in value.split(","):
            key, sep, v = part.partition("=")
            if not sep or key.strip() not in ("password", "iterations"):
                raise UsageError(f"Invalid {mechanism} credential: expected [iterations=N,]password=P")
            fields[key.strip()] = v
        if not fields.get("password"):
            raise UsageError(f"Invalid {mechanism} credential: password is required")
        try:
            iterations = int(fields.get("iterations", 4096))
        except ValueError:
            raise UsageError(f"Invalid {mechanism} credential: iterations must be a number") from None
        out[mechanism] = (fields["password"], iterations)
    return out


# ------------------------------------------------------------------------------------------------ output

def entity_label(entity_type: str, name: str) -> str:
    singular = {"topics": "topic", "brokers": "broker", "broker-loggers": "broker-logger", "users": "user"}[entity_type]
    return f"{singular} {name}"


def describe_header(entity_type: str, name: str, describe_all: bool) -> str:
    if entity_type == "brokers" and name == BROKER_DEFAULT:
        return "Default configs for brokers in the cluster are:"
    return f"{'All' if describe_all else 'Dynamic'} configs for {entity_label(entity_type, name)} are:"


def format_config_entry(entry: ConfigEntry) -> str:
    """``  k=v sensitive=false synonyms={SOURCE:k=v, ...}``."""
    value = "null" if entry.value is None else entry.value
    synonyms = ", ".join(f"{s.source}:{s.name}={'null' if s.value is None else s.value}" for s in entry.synonyms)
    return f"  {entry.name}={value} sensitive={'true' if entry.sensitive else 'false'} synonyms={{{synonyms}}}"


def shown_entries(entity_type: str, name: str, entries: Sequence[ConfigEntry], describe_all: bool
                  ) -> list[ConfigEntry]:
    """The entries kafka-configs prints: all with ``--all``, else those set dynamically on the entity itself
    (the default broker resource: the cluster-wide dynamic ones).  Sorted by name."""
    if describe_all or entity_type == "broker-loggers":
        keep = entries
    else:
        wanted = ("DYNAMIC_DEFAULT_BROKER_CONFIG" if entity_type == "brokers" and name == BROKER_DEFAULT
                  else _DYNAMIC_SOURCE[entity_type])
        keep = [e for e in entries if e.source == wanted]
    return sorted(keep, key=lambda e: e.name)


def describe_lines(entity_type: str, name: str, entries: Sequence[ConfigEntry], describe_all: bool) -> list[str]:
    return [describe_header(entity_type, name, describe_all)] + [
        format_config_entry(e) for e in shown_entries(entity_type, name, entries, describe_all)]


# ------------------------------------------------------------------------------------------------ actions

def run(args: argparse.Namespace) -> int:
    check_args(args)
    to_set: dict[str, str] = {}
    to_delete: list[str] = []
    if args.alter:
        if args.add_config is not None:
            to_set = parse_add_config(args.add_config)
        elif args.add_config_file is not None:
            to_set = load_add_config_file(args.add_config_file)
        if args.delete_config is not None:
            to_delete = parse_delete_config(args.delete_config)
            validate_keys(to_delete)
        both = sorted(set(to_set) & set(to_delete))
        if both:
            raise UsageError(f"config(s) both added and deleted: {','.join(both)}")
        if args.entity_type in ("users", "clients"):
            quotas, to_set = split_quota_configs(args.entity_type, to_set)   # bad input: exit 2 before connecting
            quota_deletes = [k for k in to_delete if k in QUOTA_KEYS]
            to_delete = [k for k in to_delete if k not in QUOTA_KEYS]
            if args.entity_type == "users":
                parse_scram_configs(to_set)
            if quotas or quota_deletes or args.entity_type == "clients" or args.entity_default or args.with_client:
                if to_set or to_delete:
                    raise UsageError("quota configs and SCRAM credentials cannot be altered together in kafkatier")
                return _run_quotas(args, quotas, quota_deletes)
    elif args.entity_type == "clients" or (args.entity_type == "users" and (args.entity_default or args.with_client)):
        return _run_quotas(args, {}, [])
    try:
        conn = common.connection_from_args(args)
        with common.open_admin(conn) as admin:
            if args.entity_type == "users" and args.describe:
                code = _describe_users(admin, args)
                _describe_quotas(admin, args)
                return code
            if args.entity_type == "users":
                return _describe_users(admin, args) if args.describe else _alter_users(admin, args, to_set,
                                                                                       to_delete)
            if args.describe:
                return _describe(admin, args)
            return _alter(admin, args, to_set, to_delete)
    except (AdminError, NoReachableBrokerError) as e:
        print(f"Error while executing config command with args '{command_args(args)}'", file=sys.stderr)
        print(str(e), file=sys.stderr)
        return 1


def split_quota_configs(entity_type: str, to_set: dict[str, str]) -> tuple[dict[str, float], dict[str, str]]:
    """Quota keys (as numbers) apart from the rest (users: SCRAM credentials); an unknown key of a client or a
    value that is not a number is a :class:`UsageError`."""
    quotas, rest = {}, {}
    for key, value in to_set.items():
        if key in QUOTA_KEYS:
            try:
                quotas[key] = float(value)
            except ValueError:
                raise UsageError(f"Invalid value {value} for configuration {key}: not a number") from None
            if quotas[key] <= 0:
                raise UsageError(f"Invalid value {value} for configuration {key}: Value must be positive")
        elif entity_type == "clients" or key not in SCRAM_MECHANISMS:
            raise UsageError(f"Invalid configuration key {key}")
        else:
            rest[key] = value
    return quotas, rest


def quota_entity(args: argparse.Namespace) -> dict[str, str | None]:
    component = "user" if args.entity_type == "users" else "client-id"
    entity = {component: None if args.entity_default else args.entity_name}
    if getattr(args, "with_client", False):
        entity["client-id"] = args.client_entity
    return entity


def quota_entity_label(entity: dict[str, str | None]) -> str:
    """kafka-configs' ``user-principal 'alice', client-id 'app'`` (the defaults: ``the default ...``)."""
    parts = []
    for key, label in (("user", "user-principal"), ("client-id", "client-id")):
        if key in entity:
            parts.append(f"{label} '{entity[key]}'" if entity[key] is not None else f"the default {label}")
    return ", ".join(parts)


def quota_lines(found: Sequence[tuple[dict[str, str | None], dict[str, float]]]) -> list[str]:
    return [f"Quota configs for {quota_entity_label(entity)} are "
            + ", ".join(f"{k}={float(v)}" for k, v in sorted(values.items())) for entity, values in found]


def _run_quotas(args: argparse.Namespace, quotas: dict[str, float], deletes: list[str]) -> int:
    try:
        conn = common.connection_from_args(args)
        with common.open_admin(conn) as admin:
            if args.describe:
                return _describe_quotas(admin, args)
            entity = quota_entity(args)
            admin.alter_client_quotas(entity, quotas, deletes)
            if args.entity_default:   # kafka-configs names the first entity only
                print(f"Completed updating default config for {args.entity_type} in the cluster.")
            else:
                print(f"Completed updating config for {args.entity_type[:-1]} {args.entity_name}.")
            return 0
    except (AdminError, NoReachableBrokerError) as e:
        print(f"Error while executing config command with args '{command_args(args)}'", file=sys.stderr)
        print(str(e), file=sys.stderr)
        return 1


def _describe_quotas(admin: AdminClient, args: argparse.Namespace) -> int:
    component = "user" if args.entity_type == "users" else "client-id"

    def match(component: str, default: bool, name: str | None) -> tuple[str, int, str | None]:
        # DescribeClientQuotas match types: 0 exact name, 1 the default entity, 2 any specified entity
        return (component, 1, None) if default else (component, 0, name) if name else (component, 2, None)
    matches = [match(component, args.entity_default, args.entity_name)]
    if getattr(args, "with_client", False):
        client = args.client_entity
        matches.append(match("client-id", client is None, None if client in (None, _NO_NAME) else client))
    for line in quota_lines(admin.describe_client_quotas(matches, strict=True)):
        print(line)
    return 0


def _describe_users(admin: AdminClient, args: argparse.Namespace) -> int:
    found = admin.describe_user_scram_credentials([args.entity_name] if args.entity_name else None)
    for user in sorted(found):
        listed = ", ".join(f"{m}=iterations={it}" for m, it in sorted(found[user].items()))
        print(f"SCRAM credential configs for user-principal '{user}' are {listed}")
    return 0


def _alter_users(admin: AdminClient, args: argparse.Namespace, to_set: dict[str, str], to_delete: list[str]) -> int:
    bad = [m for m in to_delete if m not in SCRAM_MECHANISMS]
    if bad:
        raise UsageError(f"users support only SCRAM credentials in kafkatier ({', '.join(SCRAM_MECHANISMS)}), "
                         f"not {', '.join(bad)}")
    admin.alter_user_scram_credentials(args.entity_name, parse_scram_configs(to_set), to_delete)
    print(f"Completed updating config for {entity_label('users', args.entity_name)}.")
    return 0


def _names(admin: AdminClient, args: argparse.Namespace) -> list[str]:
    if args.entity_name is not None:
        return [args.entity_name.strip() if args.entity_type != "topics" else args.entity_name]
    if args.entity_default:
        return [BROKER_DEFAULT]
    if args.entity_type == "topics":
        return admin.list_topics()
    ids = [str(b) for b in admin.broker_ids()]
    return ids + [BROKER_DEFAULT] if args.entity_type == "brokers" else ids


def _describe(admin: AdminClient, args: argparse.Namespace) -> int:
    names = _names(admin, args)
    if not names:
        return 0
    configs = admin.describe_configs(args.entity_type, names, include_synonyms=True)
    for name in names:
        for line in describe_lines(args.entity_type, name, configs.get(name, []), args.all):
            print(line)
    return 0


def _alter(admin: AdminClient, args: argparse.Namespace, to_set: dict[str, str], to_delete: list[str]) -> int:
    name = BROKER_DEFAULT if args.entity_default else args.entity_name.strip() if args.entity_type == "brokers" \
        else args.entity_name
    if to_delete:
        current = admin.describe_configs(args.entity_type, [name], include_synonyms=False)[name]
        dynamic = {e.name for e in shown_entries(args.entity_type, name, current, describe_all=False)}
        missing = [k for k in to_delete if k not in dynamic]
        if missing:
            print(f"Invalid config(s): {','.join(missing)}", file=sys.stderr)
            return 1
    admin.alter_configs(args.entity_type, name, set_configs=to_set, delete_configs=to_delete)
    if args.entity_type == "brokers" and name == BROKER_DEFAULT:
        print("Completed updating default config for brokers in the cluster.")
    else:
        print(f"Completed updating config for {entity_label(args.entity_type, name)}.")
    return 0
