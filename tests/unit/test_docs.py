"""The documentation lives in the repository and stays whole.

- ``mkdocs build --strict`` succeeds: every page in the nav exists, every link and anchor between pages resolves
  (``mkdocs.yml``: ``strict: true`` and ``validation`` at ``warn``).  Without mkdocs installed the build is
  skipped with the reason -- except under ``$CI``, where it fails, so CI never passes by skipping it (as the
  container tests do, see ``kafkatier/testing/plugin.py``).
- Every ``docs/<page>.md`` (and ``#anchor``) that code, tests, scenarios, benchmarks or the README cite exists.
- Every other file of the repository that code, tests, the docs or the README cite exists: a path from the
  repository's root (``kafkatier/log/log.py``, ``scripts/bootstrap.sh``) or from the package or the tests
  (``server/kafka_apis.py``, ``unit/test_docs.py``).
- Nothing cites a design note that is not in the repository: no ``shared/spec`` path, no bare name of one of the
  outside notes (``jbod.md``, ``tiered_storage.md``, ...) unless ``docs/`` has a page of that name, and in code no
  such name at all without its ``docs/`` prefix, nor a ``§`` section number of some outside document, nor a
  README section (the README is the front door; reference material is in ``docs/``).
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
THIS = Path(__file__).resolve()

#: Where code lives: its citations must be ``docs/...`` paths.
CODE_DIRS = ("kafkatier", "tests", "scenarios", "benchmarks")

#: Names of design notes kept outside the repository, which code once cited.
OUTSIDE_NOTES = ("jbod", "tiered_storage", "controller", "zookeeper", "delete_records", "tools_and_formats",
                 "faults", "transactions", "errors", "acceptance_scenarios")
BARE_NOTE = re.compile(r"(?<![\w/.-])(" + "|".join(OUTSIDE_NOTES) + r")\.md\b")
SPEC_PATH = re.compile("shared" + r"/spec\b")
README_SECTION = re.compile(r"\bREADME\s*(\"|section|'s\s+\")")
DOCS_CITATION = re.compile(r"(?<![\w/.-])docs/([\w./-]+?\.md)(#[\w-]+)?(?![\w/-])")
SKIP_DIRS = {".git", ".venv", "site", "node_modules", ".node", "runs", "__pycache__", ".pytest_cache", ".tox",
             "build", "dist"}


def repo_files() -> list[Path]:
    """Files of the repository: tracked and untracked-but-not-ignored (git), else a walk without build dirs."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, timeout=60, check=True).stdout
        files = [ROOT / p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.SubprocessError):
        files = []
        for dirpath, dirnames, filenames in os.walk(ROOT):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info")]
            files.extend(Path(dirpath) / f for f in filenames)
    return [f for f in files if f.is_file() and not any(part in SKIP_DIRS for part in f.relative_to(ROOT).parts)]


def text_of(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None  # binary files cite nothing


def is_code(path: Path) -> bool:
    return path.relative_to(ROOT).parts[0] in CODE_DIRS


def slugify(title: str) -> str:
    """Python-Markdown's ``toc`` slug (what mkdocs uses for anchors), after dropping inline markup."""
    title = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", title)
    value = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(r"[-\s]+", "-", value)


def anchors_of(page: Path) -> set[str]:
    anchors, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            anchors.add(slugify(m.group(1)))
    return anchors


def citations() -> list[tuple[str, str, str | None]]:
    """``(where, page, anchor)`` for every ``docs/...md[#anchor]`` cited by code or the README."""
    found = []
    for f in repo_files():
        if f == THIS or not (is_code(f) or f == ROOT / "README.md"):
            continue
        text = text_of(f)
        for lineno, line in enumerate((text or "").splitlines(), 1):
            for m in DOCS_CITATION.finditer(line):
                found.append((f"{f.relative_to(ROOT)}:{lineno}", m.group(1), m.group(2)))
    return found


#: A repository path cited in text: from the root, or below ``kafkatier/`` or ``tests/`` (``server/network.py``).
#: ``NAME``-style placeholders (``benchmarks/NAME.py``) are not citations.
REPO_PATH = re.compile(r"(?<![\w/.-])((?:kafkatier|tests|benchmarks|scripts|scenarios|docs)/[\w./-]*\w\.(?:py|md|c|json|ya?ml|sh|toml|cfg))(?![\w/])")
PACKAGE_PATH = re.compile(r"(?<![\w/.-])((?:" + "|".join(
    sorted(p.name for p in (ROOT / "kafkatier").iterdir() if p.is_dir() and not p.name.startswith("_"))
    + ["unit", "e2e", "integration"]) + r")/[\w./-]*\w\.(?:py|c))(?![\w/])")
PLACEHOLDER = re.compile(r"/[A-Z]+\.")


def cited_paths() -> list[tuple[str, str]]:
    """``(where, path)`` for every repository file that code, docs or the README cite (docs pages aside: the
    tests above check those with their anchors)."""
    found = []
    for f in repo_files():
        if f == THIS or f.suffix not in (".py", ".md", ".c", ".sh", ".yml", ".yaml", ".toml", ".cfg") \
                and f.name != "Makefile":
            continue
        text = text_of(f) or ""
        for lineno, line in enumerate(text.splitlines(), 1):
            for m in (*REPO_PATH.finditer(line), *PACKAGE_PATH.finditer(line)):
                path = m.group(1)
                if not PLACEHOLDER.search(path) and not path.startswith("docs/"):
                    found.append((f"{f.relative_to(ROOT)}:{lineno}", path))
    return found


def test_every_repository_path_cited_exists():
    cited = cited_paths()
    assert len(cited) > 100, "too few path citations found: the scan is broken"
    missing = [f"{where}: {path}" for where, path in cited
               if not any((base / path).exists() for base in (ROOT, ROOT / "kafkatier", ROOT / "tests"))]
    assert not missing, "cited files that do not exist in the repository:\n" + "\n".join(missing)


def test_the_path_scan_catches_a_missing_file():
    assert REPO_PATH.search("see kafkatier/log/jbod.py.").group(1) == "kafkatier/log/jbod.py"
    assert PACKAGE_PATH.search("(server/kafka_apis.py)").group(1) == "server/kafka_apis.py"
    assert not PACKAGE_PATH.search("mykafkatier/server/x.py")
    assert PLACEHOLDER.search("benchmarks/NAME.py")


def test_mkdocs_builds_strictly(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        reason = "mkdocs / mkdocs-material are not installed (pip install -e '.[test]', or make bootstrap)"
        if os.environ.get("CI"):
            pytest.fail(f"CI needs the documentation build: {reason}", pytrace=False)
        pytest.skip(reason)
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    assert (tmp_path / "site" / "index.html").is_file()


def test_every_docs_page_cited_by_code_exists():
    cited = citations()
    assert cited, "no docs/ citation found: the scan is broken"
    missing = [f"{where}: docs/{page}" for where, page, _ in cited if not (DOCS / page).is_file()]
    assert not missing, "cited docs pages that do not exist:\n" + "\n".join(missing)


def test_every_docs_anchor_cited_by_code_exists():
    anchors: dict[str, set[str]] = {}
    missing = []
    for where, page, anchor in citations():
        if anchor is None or not (DOCS / page).is_file():
            continue
        have = anchors.setdefault(page, anchors_of(DOCS / page))
        if anchor[1:] not in have:
            missing.append(f"{where}: docs/{page}{anchor} (headings: {', '.join(sorted(have))})")
    assert not missing, "cited anchors that no heading of the page produces:\n" + "\n".join(missing)


def test_nothing_cites_design_notes_outside_the_repository():
    bad = []
    for f in repo_files():
        if f == THIS:
            continue
        text = text_of(f)
        if not text:
            continue
        rel = f.relative_to(ROOT)
        for lineno, line in enumerate(text.splitlines(), 1):
            if SPEC_PATH.search(line):
                bad.append(f"{rel}:{lineno}: cites a path outside the repository: {line.strip()}")
            for m in BARE_NOTE.finditer(line):
                if is_code(f) or not (DOCS / m.group(0)).is_file():
                    bad.append(f"{rel}:{lineno}: cites {m.group(0)}, not a docs/ page: {line.strip()}")
            if is_code(f) and README_SECTION.search(line):
                bad.append(f"{rel}:{lineno}: cites a README section (the README is a front door); cite a docs/ page: "
                           f"{line.strip()}")
            if is_code(f) and "\u00a7" in line:
                bad.append(f"{rel}:{lineno}: cites a section number (\u00a7) of a document; cite a docs/ anchor: "
                           f"{line.strip()}")
    assert not bad, "\n".join(bad)


def test_slugify_matches_the_anchors_mkdocs_builds():
    assert slugify("At scale: 20,000 partitions") == "at-scale-20000-partitions"
    assert slugify("Broker work for StopReplica v5") == "broker-work-for-stopreplica-v5"
    assert slugify("`kafka-reassign-partitions` and throttles") == "kafka-reassign-partitions-and-throttles"
    assert slugify("Authorization (ACLs)") == "authorization-acls"


def test_the_scan_catches_what_it_should(tmp_path):
    """The patterns themselves: a bare outside name and a spec path are caught; docs/ paths and look-alikes not."""
    assert BARE_NOTE.search("see jbod.md for the rules")
    assert BARE_NOTE.search("(tiered_storage.md, 4.3)")
    assert not BARE_NOTE.search("docs/controller.md#state-machines")
    assert not BARE_NOTE.search("self.md.segment_id")
    assert not BARE_NOTE.search("my_jbod.md")
    assert SPEC_PATH.search("/work/" + "shared/spec/jbod.md")
    assert README_SECTION.search('see README "Control channel"') and README_SECTION.search("the README section")
    assert not README_SECTION.search("benchmarks/README.md describes them")
    m = DOCS_CITATION.search("(docs/kip-113-jbod.md#start-up-recovery).")
    assert m and m.group(1) == "kip-113-jbod.md" and m.group(2) == "#start-up-recovery"
    assert DOCS_CITATION.search("see docs/zookeeper.md;").group(2) is None
    assert not DOCS_CITATION.search("mydocs/x.md")


def _hooks():
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_scenario_reference_is_generated_from_the_schema():
    """docs/scenario-reference.md holds only the marker; the hook renders every key and every action of the schema
    the loader validates against, so the reference cannot miss one."""
    import json
    hooks = _hooks()
    page = (DOCS / "scenario-reference.md").read_text(encoding="utf-8")
    assert hooks.SCENARIO_MARKER in page
    schema = json.loads(hooks.SCENARIO_SCHEMA.read_text(encoding="utf-8"))
    rendered = hooks.on_page_markdown(page, None, None, None)
    assert hooks.SCENARIO_MARKER not in rendered
    for key in schema["properties"]:
        assert f"| `{key}`" in rendered, key
    for action in schema["$defs"]["action"]["properties"]["action"]["enum"]:
        assert f'`"{action}"`' in rendered, action
    for key in schema["$defs"]["action"]["properties"]:
        assert f"| `{key}`" in rendered, key
    assert "### [cluster]" in rendered and "### [[schedule]]" in rendered and "### [schedule.when]" in rendered
    assert "`^(controller|random" in rendered  # pipes inside code spans stay literal
