"""Helpers shared by the Kafka-style client commands (topics, configs, produce, consume): the connection
options, ``--command-config``, opening clients, and one-line error reporting."""
from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

import attrs

from kafkatier.admin import bootstrap
from kafkatier.admin.bootstrap import BootstrapConfigError
from kafkatier.admin.client import AdminClient, format_error
from kafkatier.cli.main import UsageError


def add_client_command(subparsers, name: str, run, *, help: str, description: str | None = None
                       ) -> argparse.ArgumentParser:
    """The sub-command ``name`` of a client tool: its parser with the connection options, dispatching to
    ``run``.  The tool adds its own options to the parser returned."""
    parser = subparsers.add_parser(name, help=help, description=description)
    add_connection_options(parser)
    parser.set_defaults(func=run)
    return parser


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap-server`` | ``--zookeeper`` | ``--data-dir``, and ``--command-config``."""
    group = parser.add_argument_group("connection (one of --bootstrap-server, --zookeeper, --data-dir)")
    where = group.add_mutually_exclusive_group()
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT...]",
                       help="brokers to bootstrap from")
    where.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                       help="find the brokers through their registrations in ZooKeeper (/brokers/ids)")
    where.add_argument("--data-dir", metavar="DIR", help="a local cluster's data directory (DIR/cluster.json)")
    group.add_argument("--command-config", metavar="FILE",
                       help="Java properties for the client: security.protocol, sasl.mechanism, sasl.jaas.config, "
                            "client.id, request.timeout.ms, ... (unsupported keys are ignored with a warning)")


@attrs.frozen
class Connection:
    """Where the brokers are and the kafka-python keyword arguments to reach them."""

    bootstrap_servers: tuple[str, ...]
    client_kwargs: dict[str, Any] = attrs.field(factory=dict)


def quiet_client_logs(args: argparse.Namespace) -> None:
    """kafka-python logs connection trouble at WARNING/ERROR on its own; the commands report failures
    themselves, so its logs only show at ``--log-level DEBUG``."""
    level = str(getattr(args, "log_level", None) or "").upper()
    logging.getLogger("kafka").setLevel(logging.DEBUG if level == "DEBUG" else logging.CRITICAL)


def connection_from_args(args: argparse.Namespace, probe: bool = True) -> Connection:
    """Resolve the connection options.  Bad options or files raise :class:`UsageError`; brokers that cannot
    be reached raise :class:`NoReachableBrokerError`."""
    quiet_client_logs(args)
    try:
        kwargs = bootstrap.load_command_config(args.command_config) if args.command_config else {}
        servers = bootstrap.resolve_bootstrap_servers(
            args.bootstrap_server, args.zookeeper, args.data_dir,
            security_protocol=kwargs.get("security_protocol", "PLAINTEXT"), probe=probe)
    except BootstrapConfigError as e:
        raise UsageError(str(e)) from None
    return Connection(bootstrap_servers=tuple(servers), client_kwargs=kwargs)


def open_admin(conn: Connection) -> AdminClient:
    return AdminClient(list(conn.bootstrap_servers), client_kwargs=conn.client_kwargs)


def print_error(command: str, exc: BaseException | str) -> int:
    """``kafkatier <command>: NAME: message`` on stderr; returns exit status 1."""
    text = exc if isinstance(exc, str) else format_error(exc)
    print(f"kafkatier {command}: {text}", file=sys.stderr)
    return 1


def split_list(text: str | None) -> list[str]:
    """``a,b , c`` -> ``["a", "b", "c"]`` (empty items dropped)."""
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
