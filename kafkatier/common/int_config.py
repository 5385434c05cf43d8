"""A frozen attrs config of int settings built from a broker's ``overrides``: each field ``a_b_c`` is the setting
``a.b.c``; settings that name no field are someone else's and are passed over."""
from __future__ import annotations

from typing import TypeVar

import attrs

C = TypeVar("C", bound="IntConfig")


class IntConfig:
    """Base of an ``@attrs.frozen`` config whose fields are all int settings."""

    __slots__ = ()

    @classmethod
    def from_overrides(cls: type[C], overrides: dict) -> C:
        """The config with each field whose dotted name is in ``overrides`` set to ``int`` of its value."""
        names = {f.name.replace("_", "."): f.name for f in attrs.fields(cls)}
        return cls(**{names[k]: int(v) for k, v in overrides.items() if k in names})
