"""A broker's properties file (Kafka's ``config/server.properties``, which ``kafka-server-start.sh`` reads):
``kafkatier broker start --config <file>``.

This is where a broker's secrets live -- the JAAS configs (``listener.name.*.sasl.jaas.config``), ``*.password``,
``password.encoder.secret`` -- so that they are never on a command line (anyone running ``ps`` sees those) nor in
``cluster.json``.  :func:`write_server_properties` writes the file with the repo's atomic-file helper, mode 0600
from its first byte; the format is ``java.util.Properties``'s (``Properties.store`` escapes, so Kafka itself could
read the file), read back with the same parser as the clients' property files (``admin/bootstrap.py``).

Precedence, as ``kafka-server-start.sh <file> --override k=v``: the file first, ``--override`` on top.
"""
from __future__ import annotations

import os
from typing import Mapping

from kafkatier.admin.bootstrap import load_properties
from kafkatier.common.atomic_file import atomic_write

SERVER_PROPERTIES = "server.properties"
FILE_MODE = 0o600  # owner only: the file may hold passwords

_ESCAPED = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f", "\\": "\\\\", "=": "\\=", ":": "\\:", "#": "\\#",
            "!": "\\!"}


def _escape(text: str, key: bool) -> str:
    """``Properties.store``'s escaping: separators, comment marks and backslashes; spaces in keys (a value's
    leading space only); control and non-ASCII characters as ``\\uXXXX``."""
    out = []
    for i, ch in enumerate(text):
        if ch in _ESCAPED:
            out.append(_ESCAPED[ch])
        elif ch == " " and (key or i == 0):
            out.append("\\ ")
        elif ord(ch) < 0x20 or 0x7e < ord(ch) <= 0xffff:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def format_properties(props: Mapping[str, object], comment: str | None = None) -> str:
    lines = [f"# {comment}"] if comment else []
    lines += [f"{_escape(str(k), True)}={_escape(str(v), False)}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


def write_server_properties(path: str, props: Mapping[str, object], comment: str | None = None) -> None:
    """Replace ``path`` with ``props`` in properties format, mode 0600 (atomically: write, fsync, rename)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, format_properties(props, comment).encode("utf-8"), mode=FILE_MODE)


def read_server_properties(path: str) -> dict[str, str]:
    """The file's properties; unreadable or malformed -> ``BootstrapConfigError`` naming the file and line, never
    a value."""
    return load_properties(path, "broker properties file")
