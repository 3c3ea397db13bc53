"""The dependency rule of ARCHITECTURE.md ("Dependency rule"), enforced: every import under wt_otel/ is read
with `ast` and checked against the table below, and the package has no import cycle.

Why a test: `components.py` promises that the core never imports a plug-in and that lower layers never reach
up; nothing else keeps that promise as code moves. A failure names file:line and the forbidden import.
Every import counts, also the ones inside functions or under `if TYPE_CHECKING:`: a lazy import is still
a dependency, and a cycle hidden behind one is still a cycle for the reader.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.paths import ROOT

ANY = "*"
# package -> what it may import besides itself, the stdlib and third parties (ARCHITECTURE.md's table)
MAY_IMPORT: dict[str, set[str] | str] = {
    "_util": set(),
    "model": {"_util"},
    "contracts": {"model", "_util"},
    "components": {"model", "contracts"},
    "ingest": {"contracts", "model", "_util"},
    "scoring": {"ingest", "contracts", "model", "_util"},
    "reporting": {"contracts", "components", "_util"},
    "replay": {"scoring", "reporting", "contracts", "model", "components", "_util"},
    "serve": {"ingest", "model", "components", "_util"},
    "cli": ANY,
    "processors": ANY,
    "exporters": ANY,
}
# Top-level modules that belong to a package's row.
MODULE_PACKAGE = {"scorers": "scoring", "pytest_plugin": "cli", "components": "components"}
PLUGINS = {"processors", "exporters"}  # nothing under wt_otel/ imports these (only components, by entry point)

# Known violations that other work in flight removes: (importing file, imported module). Remove an entry as
# soon as its fix is merged; the test fails on an entry that no longer matches, so the list cannot go stale.
KNOWN: set[tuple[str, str]] = {
}

# Known cycles, likewise (none left).
KNOWN_CYCLES: set[frozenset[str]] = set()

SOURCES = {"wt_otel": ROOT / "wt_otel", "wt_otel.processors": ROOT / "processors",
           "wt_otel.exporters": ROOT / "exporters"}


@dataclass(frozen=True)
class Import:
    file: str  # relative to the repository root
    line: int
    module: str  # the imported module, absolute (`wt_otel.x.y`), or the `from` module
    names: tuple[str, ...]  # for `from M import a, b`: a, b (maybe submodules)
    import_time: bool  # module level and not under `if TYPE_CHECKING:`


def module_name(prefix: str, base: Path, path: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([prefix, *parts])


def package_of(module: str) -> str | None:
    """The table row of a `wt_otel...` module; None for the root package itself (`wt_otel.__version__`)."""
    parts = module.split(".")
    if parts[0] != "wt_otel":
        return None
    if len(parts) == 1:
        return None
    return MODULE_PACKAGE.get(parts[1], parts[1])


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(path: Path, module: str, rel: str | None = None) -> list[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    rel = rel or str(path.relative_to(ROOT))
    is_pkg = path.name == "__init__.py"
    found: list[Import] = []

    def visit(node: ast.AST, import_time: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    found.append(Import(rel, child.lineno, alias.name, (), import_time))
            elif isinstance(child, ast.ImportFrom):
                if child.level:  # relative: resolve against this module's package
                    package = module if is_pkg else module.rpartition(".")[0]
                    for _ in range(child.level - 1):
                        package = package.rpartition(".")[0]
                    target = f"{package}.{child.module}" if child.module else package
                else:
                    target = child.module or ""
                found.append(Import(rel, child.lineno, target, tuple(a.name for a in child.names), import_time))
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    visit(ast.Module(body=[stmt], type_ignores=[]), False)
                for stmt in child.orelse:
                    visit(ast.Module(body=[stmt], type_ignores=[]), import_time)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                visit(child, False)
            else:
                visit(child, import_time)

    visit(tree, True)
    return found


def all_modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for prefix, base in SOURCES.items():
        for path in sorted(base.rglob("*.py")):
            name = module_name(prefix, base, path)
            if prefix == "wt_otel" and package_of(name) in PLUGINS:
                continue
            out[name] = path
    return out


MODULES = all_modules()
IMPORTS = {name: imports_of(path, name) for name, path in MODULES.items()}


def targets(imp: Import, modules: Iterable[str] = MODULES) -> list[str]:
    """The wt_otel modules an import loads: `from wt_otel.x import y` is `wt_otel.x.y` when y is a module."""
    if not imp.module.startswith("wt_otel"):
        return []
    subs = [f"{imp.module}.{n}" for n in imp.names if f"{imp.module}.{n}" in modules]
    return subs or [imp.module]


def violations(imports_by_module: dict[str, list[Import]] = IMPORTS) -> list[tuple[str, str, str]]:
    """(file:line, imported module, why) for every import the table forbids."""
    out = []
    for name, imports in imports_by_module.items():
        importer = package_of(name)
        if importer is None:  # wt_otel/__init__.py
            allowed: set[str] | str = set()
        else:
            allowed = MAY_IMPORT.get(importer, set())
        for imp in imports:
            for target in targets(imp, set(MODULES) | set(imports_by_module)):
                pkg = package_of(target)
                if pkg is None or pkg == importer or allowed == ANY:
                    continue
                if pkg in PLUGINS:
                    why = f"{importer} imports the plug-in package {pkg} (only components may, by entry point)"
                elif isinstance(allowed, set) and pkg not in allowed:
                    why = f"{importer} may import only {sorted(allowed) or 'nothing of ours'}, not {pkg}"
                else:
                    continue
                out.append((f"{imp.file}:{imp.line}", target, why))
    return out


def test_the_walk_sees_the_whole_package() -> None:
    """Guard the guard: a walk that found nothing would pass vacuously."""
    packages = {package_of(m) for m in MODULES}
    assert set(MAY_IMPORT) <= packages | {"components"}, set(MAY_IMPORT) - packages
    assert "wt_otel.replay.runner" in MODULES and "wt_otel.processors.sdk" in MODULES
    assert any(t.startswith("wt_otel.contracts") for imp in IMPORTS["wt_otel.replay.runner"] for t in targets(imp))


def test_every_import_follows_the_dependency_rule() -> None:
    found = violations()
    new = [v for v in found if (v[0].rsplit(":", 1)[0], v[1]) not in KNOWN]
    assert not new, "imports that break ARCHITECTURE.md's dependency rule:\n" + "\n".join(
        f"  {where}: import {target}  ({why})" for where, target, why in new)


@pytest.mark.parametrize("known", sorted(KNOWN))
def test_known_violations_are_still_real(known: tuple[str, str]) -> None:
    """An allow-list entry whose import is gone must be deleted (so the list only ever shrinks)."""
    assert any((v[0].rsplit(":", 1)[0], v[1]) == known for v in violations()), (
        f"{known[0]} no longer imports {known[1]}: remove it from KNOWN in tests/test_layering.py")


def import_cycles(imports_by_module: dict[str, list[Import]] = IMPORTS) -> list[frozenset[str]]:
    """The strongly connected groups of modules (each member reaches every other): Tarjan's algorithm."""
    graph = {name: sorted({t for imp in imports for t in targets(imp, imports_by_module)
                           if t in imports_by_module and t != name})
             for name, imports in imports_by_module.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(frozenset(group))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return groups


def test_no_import_cycle() -> None:
    new = [sorted(c) for c in import_cycles() if c not in KNOWN_CYCLES]
    assert not new, "import cycles (every import counts, lazy and TYPE_CHECKING ones too):\n" + "\n".join(
        "  " + " <-> ".join(c) for c in new)


@pytest.mark.parametrize("known", sorted(sorted(c) for c in KNOWN_CYCLES))
def test_known_cycles_are_still_real(known: list[str]) -> None:
    assert frozenset(known) in import_cycles(), f"{known} is no longer a cycle: remove it from KNOWN_CYCLES"


def test_the_checker_catches_forbidden_imports(tmp_path: Path) -> None:
    """A planted module in `model` importing upward (also lazily) and a plug-in: each named with file:line."""
    bad = tmp_path / "bad.py"
    bad.write_text("from wt_otel.replay import runner\nimport wt_otel.exporters.datadir\nimport json\n"
                   "from . import parts\n"
                   "def f():\n    from ..scoring import verdict\n")
    imports = imports_of(bad, "wt_otel.model.bad", rel="bad.py")
    assert [(i.line, i.module, i.import_time) for i in imports] == [
        (1, "wt_otel.replay", True), (2, "wt_otel.exporters.datadir", True), (3, "json", True),
        (4, "wt_otel.model", True), (6, "wt_otel.scoring", False)]
    found = violations({"wt_otel.model.bad": imports})
    assert [(where, target) for where, target, _ in found] == [
        ("bad.py:1", "wt_otel.replay.runner"), ("bad.py:2", "wt_otel.exporters.datadir"),
        ("bad.py:6", "wt_otel.scoring.verdict")]
    assert "plug-in" in found[1][2] and "may import only ['_util']" in found[0][2]


def test_the_cycle_check_finds_a_lazy_cycle(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from wt_otel.x import b\n")
    (tmp_path / "b.py").write_text("def f():\n    import wt_otel.x.c\n")
    (tmp_path / "c.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    from wt_otel.x.a import A\n")
    (tmp_path / "d.py").write_text("import wt_otel.x.a\n")
    mods = {f"wt_otel.x.{n}": imports_of(tmp_path / f"{n}.py", f"wt_otel.x.{n}", rel=f"{n}.py") for n in "abcd"}
    assert [imp.module for imp in mods["wt_otel.x.a"]] == ["wt_otel.x"]  # resolved to wt_otel.x.b below
    assert import_cycles(mods) == [frozenset({"wt_otel.x.a", "wt_otel.x.b", "wt_otel.x.c"})]
