"""Structured, per-component logging.

Every component logs through ``get_logger("controller")`` etc.  Lines look like::

    2026-11-21T12:00:00.123Z INFO  [broker-1] [controller] elected epoch=3 epoch_zk_version=3

Key/value pairs passed as ``extra={"kv": {...}}`` or through :func:`kv` are rendered ``k=v``.
"""
from __future__ import annotations

import logging
import os
import sys
import time

_PROCESS_TAG = os.environ.get("KAFKATIER_PROCESS", "")


def kv(**pairs) -> str:
    """Render key/value pairs the way every log line does: ``a=1 b=x``."""
    return " ".join(f"{k}={v}" for k, v in pairs.items())


class _Formatter(logging.Formatter):
    def formatTime(self, record, datefmt=None):  # noqa: N802 (logging API)
        t = time.gmtime(record.created)
        return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int(record.msecs):03d}Z"

    def format(self, record):
        base = f"{self.formatTime(record)} {record.levelname:<5} "
        if _PROCESS_TAG:
            base += f"[{_PROCESS_TAG}] "
        base += f"[{record.name.removeprefix('kafkatier.')}] {record.getMessage()}"
        if record.exc_info:
            base += "\n" + self.formatException(record.exc_info)
        return base


def set_process_tag(tag: str) -> None:
    global _PROCESS_TAG
    _PROCESS_TAG = tag
    os.environ["KAFKATIER_PROCESS"] = tag


def configure(level: str | int = None, stream=None) -> None:
    """Configure the root kafkatier logger once per process."""
    level = level or os.environ.get("KAFKATIER_LOG_LEVEL", "INFO")
    root = logging.getLogger("kafkatier")
    if getattr(root, "_kafkatier_configured", False):
        root.setLevel(level)
        return
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_Formatter())
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
    root._kafkatier_configured = True  # type: ignore[attr-defined]
    # kazoo is chatty at INFO about connection states; keep its warnings.
    logging.getLogger("kazoo").setLevel(logging.WARNING)


def get_logger(component: str) -> logging.Logger:
    return logging.getLogger(f"kafkatier.{component}")
