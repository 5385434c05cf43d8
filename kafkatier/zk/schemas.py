"""JSON Schemas for znode payloads (repo-root ``zk_schemas/``) and the path index that says which schema, if
any, applies to a znode.

Schema names may be given with or without the ``.json`` suffix.  Compiled validators are cached per process.
"""
from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import attrs
from jsonschema import Draft202012Validator

import kafkatier

SCHEMA_DIR = Path(kafkatier.__file__).resolve().parent.parent / "zk_schemas"
INDEX_FILE = "index.json"


def _file_name(name: str) -> str:
    return name if name.endswith(".json") else f"{name}.json"


@functools.cache
def load_schema(name: str) -> dict[str, Any]:
    """The parsed schema document ``zk_schemas/<name>.json``."""
    with open(SCHEMA_DIR / _file_name(name), encoding="utf-8") as f:
        return json.load(f)


@functools.cache
def _validator(file_name: str) -> Draft202012Validator:
    schema = load_schema(file_name)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def validator(name: str) -> Draft202012Validator:
    """A compiled (and cached) draft 2020-12 validator for the named schema."""
    return _validator(_file_name(name))


def schema_errors(name: str, instance: Any) -> list[str]:
    """Human-readable violations of ``instance`` against the named schema (empty when valid)."""
    errors = sorted(validator(name).iter_errors(instance), key=lambda e: list(e.absolute_path))
    out = []
    for e in errors:
        where = "/".join(str(p) for p in e.absolute_path)
        out.append(f"{where or '<root>'}: {e.message}")
    return out


def schema_names() -> list[str]:
    """File names of every schema in ``zk_schemas/`` (the index excluded)."""
    return sorted(p.name for p in SCHEMA_DIR.glob("*.json") if p.name != INDEX_FILE)


# ---------------------------------------------------------------------------------------------------- path index

@attrs.frozen
class PathRule:
    """One entry of ``index.json``: a path pattern and the schema file for its data (None = no data)."""

    pattern: str
    schema: str | None
    _segments: tuple[re.Pattern[str], ...] = attrs.field(repr=False, eq=False)
    _rank: tuple[int, ...] = attrs.field(repr=False, eq=False)

    @property
    def null_data(self) -> bool:
        return self.schema is None

    def matches(self, segments: list[str]) -> bool:
        return len(segments) == len(self._segments) and all(
            rx.fullmatch(seg) for rx, seg in zip(self._segments, segments))


def _segments(path: str) -> list[str]:
    return [s for s in path.split("/") if s]


def _compile_rule(pattern: str, schema: str | None) -> PathRule:
    regexes = []
    rank = []
    for seg in _segments(pattern):
        regexes.append(re.compile("[^/]*".join(re.escape(part) for part in seg.split("*"))))
        # literal segment > partial wildcard > bare '*'
        rank.append(2 if "*" not in seg else (0 if seg == "*" else 1))
    return PathRule(pattern, schema, tuple(regexes), tuple(rank))


@attrs.frozen
class PathIndex:
    rules: tuple[PathRule, ...]
    owned_roots: tuple[str, ...]

    def match(self, path: str) -> PathRule | None:
        """The most specific rule matching ``path``, or None when the index does not know the path."""
        segs = _segments(path)
        best: PathRule | None = None
        for rule in self.rules:
            if rule.matches(segs) and (best is None or rule._rank > best._rank):
                best = rule
        return best

    def is_owned(self, path: str) -> bool:
        """True when ``path`` lies in a subtree the project writes."""
        return any(path == root or path.startswith(root + "/") for root in self.owned_roots)


@functools.cache
def load_index() -> PathIndex:
    """The parsed ``zk_schemas/index.json``."""
    with open(SCHEMA_DIR / INDEX_FILE, encoding="utf-8") as f:
        doc = json.load(f)
    rules = tuple(_compile_rule(p, s) for p, s in doc["paths"].items())
    return PathIndex(rules=rules, owned_roots=tuple(doc.get("owned_roots", ())))


def match_path(path: str) -> PathRule | None:
    """The index rule for ``path`` (see :meth:`PathIndex.match`)."""
    return load_index().match(path)


def schema_for_path(path: str) -> str | None:
    """Schema file name for the znode at ``path``; None for null-data znodes and for paths the index does not
    know (use :func:`match_path` to tell those apart)."""
    rule = match_path(path)
    return rule.schema if rule else None


def is_owned(path: str) -> bool:
    return load_index().is_owned(path)
