"""Imports point down (STYLE.md): cli / scenario / spark / testing -> cluster -> server -> coordinator -> controller -> admin ->
log (with log/remote) -> zk -> protocol -> common (with the top-level helpers ``logsetup``, ``waiting``), and no
module imports itself back through others (no cycles).

Every ``import`` / ``from ... import`` in every module counts, also those inside functions: a lazy import hides a
dependency from a reader, it does not remove it.
"""
from __future__ import annotations

import ast
import pathlib

import kafkatier

ROOT = pathlib.Path(kafkatier.__file__).parent

# Top to bottom; a module may import its own layer and the layers below it.
LAYERS: list[set[str]] = [
    {"__main__", "cli", "scenario", "spark", "testing"},
    {"cluster"},
    {"server"},
    {"coordinator"},
    {"controller"},
    {"admin"},
    {"log"},
    {"zk"},
    {"protocol"},
    {"common", "logsetup", "waiting", ""},
]
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: pathlib.Path, name: str) -> set[str]:
    """The kafkatier modules ``path`` imports (``from pkg import mod`` counts as ``pkg.mod`` when that is a
    module)."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "kafkatier")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] != "kafkatier":
                continue
            subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in MODULES]
            out.update(subs or [mod])
    return out


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}
GRAPH = {m: {d for d in imports_of(p, m) if d != m} for m, p in MODULES.items()}


def test_every_package_has_a_layer():
    assert {layer(m) for m in MODULES} <= set(RANK), "add the new package to LAYERS"


def test_imports_point_down():
    upward = sorted(f"{m} -> {d}" for m, deps in GRAPH.items() for d in deps
                    if d in MODULES and RANK[layer(d)] < RANK[layer(m)])
    assert upward == []


def test_no_import_cycles():
    """Tarjan's strongly connected components over the module graph: every component is a single module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        work = [(v, iter(sorted(GRAPH.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, children = work[-1]
            for w in children:
                if w not in MODULES:
                    continue
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(GRAPH.get(w, ())))))
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        cycles.append(sorted(comp))
    for m in sorted(MODULES):
        if m not in index:
            visit(m)
    assert cycles == []
