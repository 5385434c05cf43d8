"""The base of a frozen attrs config of int broker settings: each field ``a_b_c`` is the setting ``a.b.c``, read
through its definition by :func:`kafkatier.server.config.settings_config`."""
from __future__ import annotations


class IntConfig:
    """Base of an ``@attrs.frozen`` config whose fields are all int settings."""

    __slots__ = ()
