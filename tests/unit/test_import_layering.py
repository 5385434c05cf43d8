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


# --- one home for the ZooKeeper client library -----------------------------------------------------------------

#: Where ``kazoo`` may be imported: the ZooKeeper package, and the test helper that cuts a kazoo client's
#: connection on purpose.  Everything else uses ``kafkatier.zk`` (``zk.errors``, ``zk.watchers``, the clients).
KAZOO_ALLOWED = ("kafkatier.zk", "kafkatier.testing.zookeeper_faults")


def _third_party_imports(path: pathlib.Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_kazoo_is_imported_only_in_zk():
    offenders = sorted(m for m, p in MODULES.items() if "kazoo" in _third_party_imports(p)
                       and not m.startswith(KAZOO_ALLOWED))
    assert offenders == []


# --- no reaching into another class's private members -----------------------------------------------------------

#: ``x._name`` where ``_name`` is not defined in the module doing it (as ``self._name = ...``, a method, a class or
#: a module-level name): that is another module's class's private member.  What remains, and why:
PRIVATE_ACCESS_ALLOWED = {
    # Third-party names that are private only by spelling, or have no public equivalent:
    "os._exit",                                          # the documented way to exit without clean-up
    "KafkaError._INVALID_ARG", "KafkaError._UNKNOWN_TOPIC", "KafkaError._QUEUE_FULL",   # confluent-kafka's
    "KafkaError._PARTITION_EOF", "KafkaError._AUTO_OFFSET_RESET", "KafkaError._FENCED",  # local error codes
    "ZnodeStat._make",                                   # namedtuple's public constructor
    "SparkSession._get_j_spark_session_class",           # pyspark: the JVM session class of a Spark Connect-less run
    "client._call",                                      # kazoo: the one way to send a raw MultiRead (zk/multi_read)
    "cls._struct",                                       # kafka-python: the decoder that says where a body ends
    "request._header", "response._header", "resp._header",   # kafka-python: no public header setter
    "self._admin._manager", "self._admin._send_request_to_controller",   # kafka-python's KafkaAdminClient
    "root._kafkatier_configured",                        # a marker logsetup leaves on the root logger
    "src._fd",                                           # LogSegment copying from another LogSegment (same class)
    "h._version",                                        # kafka-python: a RequestHeader built without its generic
                                                         # field loop (protocol/codec._fast_header, the hot path)
    "obj._version",                                      # kafka-python: Produce request objects built as its generated
                                                         # decoder builds them (protocol/produce_codec.request_decoder)
    "spark.sparkContext._jsc",                           # pyspark: executor memory status has no Python API
}


def _private_names_defined(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return {n for n in names if n.startswith("_")}


def _foreign_private_accesses(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    mine = _private_names_defined(tree)
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
            continue
        if isinstance(node.value, ast.Name) and node.value.id == "self" or node.attr in mine:
            continue
        if isinstance(node.value, ast.Call) and ast.unparse(node.value.func) == "super":
            continue
        out.append(ast.unparse(node))
    return out


def test_no_module_touches_another_class_private_members():
    found = sorted({f"{p.relative_to(ROOT.parent)}: {expr}" for p in MODULES.values()
                    for expr in _foreign_private_accesses(p) if expr not in PRIVATE_ACCESS_ALLOWED})
    assert found == []


def test_the_private_member_check_sees_an_access(tmp_path):
    bad = tmp_path / "m.py"
    bad.write_text("def f(log):\n    return log._segments\n")
    assert _foreign_private_accesses(bad) == ["log._segments"]
    ok = tmp_path / "n.py"
    ok.write_text("class A:\n    def __init__(self):\n        self._x = 1\n    def same(self, o):\n        return o._x\n")
    assert _foreign_private_accesses(ok) == []


# --- broker settings through their one definition ----------------------------------------------------------------

#: The one reader of the raw ``overrides`` mapping: ``broker_setting`` (typed and checked by ``BROKER_CONFIGS``).
#: ``SslConfig.from_props`` reads the ``ssl.*`` keys under their listener prefixes (``listener.name.<l>.ssl.*``),
#: names without one definition each.
RAW_OVERRIDES_READERS = {"kafkatier/server/config.py": {"broker_setting"},
                         "kafkatier/server/ssl_transport.py": {"from_props"}}
#: The names the broker's settings travel under: ``BrokerConfig.overrides`` and the ``props`` of ``from_props``.
RAW_SETTINGS_NAMES = frozenset({"overrides", "props"})


def _raw_overrides_reads(path: pathlib.Path, allowed: set[str] = frozenset()) -> list[str]:
    """``overrides.get(...)`` / ``overrides[...]`` / ``<x>.overrides.get(...)`` (and the same through ``props``)
    outside the ``allowed`` functions."""
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.name in allowed:
            continue
        for node in ast.walk(fn):
            target = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
                target = node.func.value
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                target = node.value
            if target is not None and ast.unparse(target).split(".")[-1] in RAW_SETTINGS_NAMES:
                out.append(f"{fn.name}: {ast.unparse(node)}")
    return out


def test_server_reads_broker_settings_through_their_definition():
    found = []
    for p in MODULES.values():
        rel = str(p.relative_to(ROOT.parent))
        if rel.startswith("kafkatier/server/"):
            found += [f"{rel}: {r}" for r in _raw_overrides_reads(p, RAW_OVERRIDES_READERS.get(rel, set()))]
    assert sorted(found) == []


def test_the_raw_overrides_check_sees_a_read(tmp_path):
    bad = tmp_path / "m.py"
    bad.write_text("def f(c, overrides):\n    return c.overrides.get('x'), overrides['y']\n")
    assert sorted(_raw_overrides_reads(bad)) == ["f: c.overrides.get('x')", "f: overrides['y']"]
    assert _raw_overrides_reads(bad, {"f"}) == []


def test_the_raw_overrides_check_sees_a_read_through_props(tmp_path):
    bad = tmp_path / "m.py"
    bad.write_text("class C:\n    @classmethod\n    def from_props(cls, props):\n"
                   "        return cls(int(props.get('quota.window.num', 11)), props['x'])\n")
    assert sorted(_raw_overrides_reads(bad)) == ["from_props: props.get('quota.window.num', 11)",
                                                 "from_props: props['x']"]
