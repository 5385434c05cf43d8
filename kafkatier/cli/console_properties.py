"""The console tools' ``--property KEY=VALUE`` syntax (kafka-console-producer / kafka-console-consumer), mapped
onto the tools' own options: ``parse.key`` and ``key.separator`` for the producer's line reader,
``print.key`` / ``print.offset`` / ``print.partition`` / ``print.timestamp`` / ``key.separator`` for the consumer's
formatter.  Booleans are true when the value is ``true`` (any case), as in Kafka; a property the tool does not
know is ignored with a one-line warning (Kafka ignores it silently)."""
from __future__ import annotations

import argparse
import sys

from kafkatier.cli.main import UsageError


def add_property_option(parser: argparse.ArgumentParser, names: tuple[str, ...]) -> None:
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="Kafka's console tool properties: " + ", ".join(names) + " (repeatable)")


def apply_properties(args: argparse.Namespace, command: str, options: dict[str, str]) -> None:
    """``options``: property name -> the args attribute it sets; ``key.separator`` takes its value as text,
    every other property is a boolean."""
    for item in args.property:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"Invalid property '{item}': expected KEY=VALUE")
        if key not in options:
            print(f"kafkatier {command}: warning: property {key} is ignored", file=sys.stderr)
            continue
        if key == "key.separator":
            if not value:
                raise UsageError("key.separator must not be empty")
            setattr(args, options[key], value)
        else:
            setattr(args, options[key], value.strip().lower() == "true")
