"""mkdocs hooks (``hooks:`` in ``mkdocs.yml``): pages generated from the repository's own definitions at build time,
so the reference cannot drift from what the code accepts.

``<!-- scenario-schema -->`` in a page is replaced by the reference of the scenario file format, rendered from
``kafkatier/scenario/scenario.schema.json`` (the schema the loader validates every scenario file against): one
table per TOML table or array of tables, one row per key with its type, its constraints and its description, and
one row per value of an enum that describes its values (``enumDescriptions``: the schedule's actions).
Only the JSON file is read (no kafkatier import), so the site builds without the package's dependencies.
"""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO_SCHEMA = ROOT / "kafkatier" / "scenario" / "scenario.schema.json"
SCENARIO_MARKER = "<!-- scenario-schema -->"


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (mkdocs hook signature)
    if SCENARIO_MARKER in markdown:
        schema = json.loads(SCENARIO_SCHEMA.read_text(encoding="utf-8"))
        markdown = markdown.replace(SCENARIO_MARKER, render_scenario_schema(schema))
    return markdown


def render_scenario_schema(schema: dict) -> str:
    """Markdown for the whole schema: the top-level keys, then each table and array of tables, then the shared
    value types (``$defs`` that are not objects)."""
    defs = schema.get("$defs", {})
    out = [_table("Top level", "", schema, defs, path="")]
    for name, prop in schema.get("properties", {}).items():
        out.extend(_sections(name, prop, defs, path=name))
    shared = [(n, d) for n, d in defs.items() if "properties" not in _resolve(d, defs)]
    if shared:
        out.append("\n".join(["### Value types", "", "| name | accepts | meaning |", "|---|---|---|"]
                             + [f"| `{n}` | {_cell(_type(d, defs, expand=True))} | {_cell(d.get('description', ''))} |"
                                for n, d in shared]))
    return "\n\n".join(out) + "\n"


def _sections(name: str, prop: dict, defs: dict, path: str) -> list[str]:
    """Tables for ``prop`` if it is an object (``[name]``) or an array of objects (``[[name]]``), recursively."""
    prop = _resolve(prop, defs)
    if prop.get("type") == "object" and "properties" in prop:
        out = [_table(f"[{path}]", name, prop, defs, path)]
    elif prop.get("type") == "array" and _resolve(prop.get("items", {}), defs).get("type") == "object":
        item = _resolve(prop["items"], defs)
        out = [_table(f"[[{path}]]", name, item, defs, path)]
        prop = item
    else:
        return []
    for child, sub in prop.get("properties", {}).items():
        out.extend(_sections(child, sub, defs, path=f"{path}.{child}"))
    return out


def _table(title: str, name: str, obj: dict, defs: dict, path: str) -> str:
    required = set(obj.get("required", ()))
    rows = [f"### {title}", ""]
    if obj.get("description"):
        text = _cell(obj["description"]).rstrip(".")
        rows += [text[:1].upper() + text[1:] + ".", ""]
    rows += ["| key | type | meaning |", "|---|---|---|"]
    for key, prop in obj.get("properties", {}).items():
        key_cell = f"`{key}`" + (" (required)" if key in required else "")
        meaning = prop.get("description", "")
        sub = f"{path}.{key}" if path else key
        if _sections(key, prop, defs, sub):
            meaning = (meaning + "; " if meaning else "") + f"see `[{sub}]` below"
        rows.append(f"| {key_cell} | {_cell(_type(prop, defs))} | {_cell(meaning)} |")
    for key, prop in obj.get("properties", {}).items():
        # An enum whose values each have a meaning (``enumDescriptions``, as editors read it): one row per value.
        if prop.get("enumDescriptions"):
            rows += ["", f"Values of `{key}`:", "", "| value | what it does |", "|---|---|"]
            rows += [f"| `{json.dumps(v)}` | {_cell(d)} |" for v, d in zip(prop["enum"], prop["enumDescriptions"])]
    return "\n".join(rows)


def _resolve(prop: dict, defs: dict) -> dict:
    ref = prop.get("$ref", "")
    if ref.startswith("#/$defs/"):
        return {**defs[ref.split("/")[-1]], **{k: v for k, v in prop.items() if k != "$ref"}}
    return prop


def _type(prop: dict, defs: dict, expand: bool = False) -> str:
    """A short, human type: ``integer 1-9``, ``one of `a`, `b```, ``list of string``, a shared type's name."""
    ref = prop.get("$ref", "")
    if ref.startswith("#/$defs/") and not expand:
        return f"`{ref.split('/')[-1]}`"
    prop = _resolve(prop, defs) if ref else prop
    if prop.get("enumDescriptions"):
        return "one of the values below"
    if "enum" in prop:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in prop["enum"])
    if "oneOf" in prop:
        return " or ".join(_type(p, defs) for p in prop["oneOf"])
    kind = prop.get("type", "any")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array":
        items = prop.get("items", {})
        n = ""
        if prop.get("minItems") and prop.get("minItems") == prop.get("maxItems"):
            n = f" {prop['minItems']}"
        return f"list of{n} {_type(items, defs)}" + (", unique" if prop.get("uniqueItems") else "")
    if kind == "object" and "properties" not in prop:
        values = prop.get("additionalProperties")
        return "table" + (f" of {_type(values, defs)}" if isinstance(values, dict) else "")
    bounds = []
    if "minimum" in prop and "maximum" in prop:
        bounds.append(f"{prop['minimum']}-{prop['maximum']}")
    else:
        if "minimum" in prop:
            bounds.append(f"≥ {prop['minimum']}")
        if "exclusiveMinimum" in prop:
            bounds.append(f"> {prop['exclusiveMinimum']}")
        if "maximum" in prop:
            bounds.append(f"≤ {prop['maximum']}")
    if "pattern" in prop:
        bounds.append(f"matching `{prop['pattern']}`")
    if prop.get("minLength"):
        bounds.append("not empty")
    return " ".join([kind, *bounds])


def _cell(text: str) -> str:
    """Text for a table cell: ``|`` escaped outside code spans (inside them the table keeps it literal)."""
    parts = text.replace("\n", " ").split("`")
    return "`".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))
