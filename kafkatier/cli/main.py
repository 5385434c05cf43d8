"""``kafkatier`` console script.

Each sub-command lives in its own module under ``kafkatier.cli`` and exposes ``register(subparsers)``, which
adds its parser and sets ``func(args) -> int`` (a client tool through ``common.add_client_command``, which also
adds the connection options).  Usage errors and bad input files exit with status 2 and a
one-line message on stderr.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from kafkatier import __version__, logsetup
from kafkatier.common.errors import UsageError  # noqa: F401 - the CLI's error type, used by every command

# (module, ...) in the order they appear in --help.
COMMAND_MODULES = (
    "demo", "zookeeper", "broker", "cluster", "topics", "configs", "produce", "consume",
    "tiered", "delete_records", "log_dirs", "reassign_partitions", "scenario", "spark", "consumer_groups",
    "leader_election", "acls", "transactions", "tls", "get_offsets", "broker_api_versions", "perf",
    "dump_log",
)


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse's errors as one line (``kafkatier topics: error: ...``) and exit 2, not the usage block; sub-command
    parsers inherit the class (``add_subparsers`` uses the parent's)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _new_parser() -> tuple[argparse.ArgumentParser, argparse.Action]:
    parser = OneLineArgumentParser(
        prog="kafkatier",
        description="A ZooKeeper-mode Kafka cluster simulator: real ZooKeeper, real broker processes speaking the "
                    "Kafka protocol, tiered storage disablement (KIP-950), DeleteRecords (KIP-107).")
    parser.add_argument("--version", action="version", version=f"kafkatier {__version__}")
    parser.add_argument("--log-level", default=None, help="DEBUG, INFO (default), WARNING, ERROR")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    return parser, sub


def _command_name(argv: list[str]) -> str | None:
    """The sub-command ``argv`` names (``broker`` in ``--log-level DEBUG broker start ...``), if any."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--log-level")
    _, rest = pre.parse_known_args(argv)
    return rest[0] if rest and not rest[0].startswith("-") else None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command.  With ``argv`` naming a command whose module has its name (``broker``,
    ``consumer-groups``), of that command alone: a broker process then imports what a broker needs, not the
    scenario engine, Spark and every tool (seconds of start-up on a busy machine)."""
    command = _command_name(argv) if argv else None
    module = command.replace("-", "_") if command else None
    if module in COMMAND_MODULES:
        parser, sub = _new_parser()
        importlib.import_module(f"kafkatier.cli.{module}").register(sub)
        if command in sub.choices:
            return parser
    parser, sub = _new_parser()
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(f"kafkatier.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"kafkatier.cli.{name}":
                continue  # command not built yet
            raise
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    logsetup.configure(args.log_level)
    try:
        rc = args.func(args)
    except UsageError as e:
        print(f"kafkatier {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - a failure no command reported: one line, never a traceback
        if args.command == "broker":
            raise  # a broker's stderr is its log: the traceback belongs there (ClusterManager reads its last line)
        logsetup.get_logger("cli").debug("command failed", exc_info=True)
        text = str(e)
        name = type(e).__name__
        print(f"kafkatier {args.command}: {text if text.startswith(name) else f'{name}: {text}'}", file=sys.stderr)
        return 1
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
