"""The package's imports go downwards through its layers and never form a cycle.

The import graph is read statically (``ast`` over ``src/vllm_frontend``: every import statement,
at module level, inside functions and under ``TYPE_CHECKING`` alike), so the check takes
milliseconds and imports nothing. The rules are data: a new package or subpackage is placed by
adding it to :data:`LAYERS`, :data:`SIDE_UNITS` or :data:`SEALED`; a module that is in none of them
fails the test until it is placed.
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterable, Mapping

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"
PACKAGE = "vllm_frontend"

LAYERS: list[set[str]] = [
    {"", "lazy", "private_dirs", "metrics"},
    {"engine"},
    {"llm"},
    {"text"},
    {"multimodal"},
    {"chat"},
    {"server"},
    {"cmd"},
    {"cli", "__main__"},
]
"""Units bottom-up, as module or package names relative to the package ("" is its ``__init__``).
A module may import modules of its own unit, of the units in its own set and of lower sets."""

SIDE_UNITS: dict[str, tuple[int, set[str]]] = {"mock": (1, {"cli"})}
"""Units outside the ladder: the highest :data:`LAYERS` index they may import from, and the only
units that may import them (the mock engine uses the engine layer alone; only the CLI starts it)."""

SEALED: set[str] = {"server.transport"}
"""Subpackages that form a unit of their own at their parent's layer: they may import themselves
and lower layers, but none of their parent package's other modules."""

KNOWN_CYCLES: list[set[str]] = []
"""Cycles being removed on other branches, tolerated exactly as listed until then. An entry that
no longer matches a cycle fails the test, so that it is deleted the moment its cycle is gone."""


def module_imports(src: pathlib.Path, package: str) -> dict[str, set[str]]:
    """Every module of ``package`` under ``src`` -> the package modules it imports anywhere."""
    files: dict[str, tuple[pathlib.Path, bool]] = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        files[".".join(parts)] = (path, is_package)
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in files.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = _from_base(name, is_package, node)
                for alias in node.names:
                    child = f"{base}.{alias.name}"
                    targets.add(child if child in files else base)
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def _from_base(name: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = name.split(".") if is_package else name.split(".")[:-1]
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, node.module] if node.module else parts)


def cycles(graph: Mapping[str, Iterable[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


class Layers:
    """The placement rules of :data:`LAYERS`, :data:`SIDE_UNITS` and :data:`SEALED`."""

    def __init__(
        self,
        package: str,
        layers: list[set[str]],
        side_units: Mapping[str, tuple[int, set[str]]],
        sealed: set[str],
    ) -> None:
        self.package = package
        self.layers = layers
        self.rank = {unit: i for i, units in enumerate(layers) for unit in units}
        self.side_units = side_units
        self.sealed = sealed
        self.units = sorted({*self.rank, *side_units, *sealed}, key=len, reverse=True)

    def unit_of(self, module: str) -> str | None:
        """The unit ``module`` belongs to (the longest that contains it), None if unplaced."""
        if module == self.package:
            return "" if "" in self.rank else None
        name = module.removeprefix(self.package + ".")
        for unit in self.units:
            if unit and (name == unit or name.startswith(unit + ".")):
                return unit
        return None

    def _parent(self, sealed: str) -> str | None:
        return self.unit_of(f"{self.package}.{sealed.rpartition('.')[0]}")

    def _rank(self, unit: str) -> int:
        while unit in self.sealed:
            unit = self._parent(unit) or ""
        return self.rank[unit]

    def violation(self, importer: str, imported: str) -> str | None:
        """Why ``importer`` may not import ``imported``, or None if it may."""
        source, target = self.unit_of(importer), self.unit_of(imported)
        if source is None or target is None:
            return None  # reported by the placement check
        if source == target:
            return None
        if source in self.sealed and target == self._parent(source):
            return f"the sealed {source!r} imports its parent package"
        if target in self.side_units:
            limit, importers = self.side_units[target]
            if source not in importers:
                return f"only {sorted(importers)} may import {target!r}"
            return None
        if source in self.side_units:
            limit, _ = self.side_units[source]
            if self._rank(target) > limit:
                return f"{source!r} may import only layers up to {sorted(self.layers[limit])}"
            return None
        if self._rank(target) > self._rank(source):
            return f"{source!r} imports upwards from {target!r}"
        return None


def layer_violations(graph: Mapping[str, Iterable[str]], layers: Layers) -> list[str]:
    """Unplaced modules and imports against the layer rules, one line each."""
    problems = [f"{m}: in no unit of LAYERS" for m in sorted(graph) if layers.unit_of(m) is None]
    for importer in sorted(graph):
        for imported in sorted(graph[importer]):
            why = layers.violation(importer, imported)
            if why is not None:
                problems.append(f"{importer} -> {imported}: {why}")
    return problems


PACKAGE_LAYERS = Layers(PACKAGE, LAYERS, SIDE_UNITS, SEALED)


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    """The package's import graph."""
    return module_imports(SRC, PACKAGE)


def test_the_graph_sees_module_and_function_level_imports(graph: dict[str, set[str]]) -> None:
    # cli imports the runner only inside functions; the runner imports assemble at module level.
    assert "vllm_frontend.cmd.runner" in graph["vllm_frontend.cli"]
    assert "vllm_frontend.cmd.assemble" in graph["vllm_frontend.cmd.runner"]
    assert "vllm_frontend.engine.protocol" in graph["vllm_frontend.engine.client"]


def test_the_package_has_no_import_cycles(graph: dict[str, set[str]]) -> None:
    found = cycles(graph)
    unknown = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    assert unknown == [], "import cycles"
    stale = [sorted(c) for c in KNOWN_CYCLES if c not in found]
    assert stale == [], "gone from the package: delete these KNOWN_CYCLES entries"


def test_imports_go_down_the_layers(graph: dict[str, set[str]]) -> None:
    assert layer_violations(graph, PACKAGE_LAYERS) == []


# -- the checks themselves, on a made-up package ------------------------------------------------


def _write(root: pathlib.Path, files: Mapping[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: pathlib.Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import x\n",
            "pkg/b.py": "def f():\n    from . import a\n",
            "pkg/c.py": "import pkg.a\n",
        },
    )
    graph = module_imports(tmp_path, "pkg")
    assert graph["pkg.b"] == {"pkg.a"}
    assert cycles(graph) == [{"pkg.a", "pkg.b"}]


def test_upward_side_and_sealed_imports_are_reported(tmp_path: pathlib.Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low.py": "",
            "pkg/engine/__init__.py": "",
            "pkg/engine/core.py": "if TYPE_CHECKING:\n    import pkg.server.app\n",
            "pkg/mock/__init__.py": "from pkg.engine import core\nfrom pkg import server\n",
            "pkg/server/__init__.py": "",
            "pkg/server/app.py": "from pkg.server.transport import wire\nfrom pkg import low\n",
            "pkg/server/errors.py": "",
            "pkg/server/transport/__init__.py": "",
            "pkg/server/transport/wire.py": "from pkg.server import errors\n",
            "pkg/cli.py": "import pkg.mock\n",
            "pkg/stray.py": "",
        },
    )
    layers = Layers(
        "pkg",
        [{"", "low"}, {"engine"}, {"server"}, {"cli"}],
        {"mock": (1, {"cli"})},
        {"server.transport"},
    )
    assert layer_violations(module_imports(tmp_path, "pkg"), layers) == [
        "pkg.stray: in no unit of LAYERS",
        "pkg.engine.core -> pkg.server.app: 'engine' imports upwards from 'server'",
        "pkg.mock -> pkg.server: 'mock' may import only layers up to ['engine']",
        "pkg.server.transport.wire -> pkg.server.errors: "
        "the sealed 'server.transport' imports its parent package",
    ]
