"""The project's modules import each other without a cycle (function-level imports included)."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def project_modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under `root`: top-level scripts and every top-level
    folder holding Python files (packages and namespace packages such as deploy/ and tests/)."""
    modules = {path.stem: path for path in root.glob("*.py")}
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for path in folder.rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """Candidate dotted names one import statement loads (``from a import b``: a.b, else a)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: strip one level per dot beyond the first, from the current package
        package = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = ".".join(p for p in (package, base) if p)
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> project modules it imports anywhere in its body (top level, functions, classes).

    ``from a import b`` is an edge to module a.b when that is a module, otherwise to a. Edges to
    a module's parent packages (which Python initialises first) are left out, as import linters do:
    a package's ``__init__`` importing its own submodules is not a cycle.
    """
    modules = project_modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            candidates = _imported(node, name, path.name == "__init__.py")
            if isinstance(node, ast.ImportFrom):
                hits = [c for c in candidates[:-1] if c in modules]
                edges.update(hits or [c for c in candidates[-1:] if c in modules])
            else:
                edges.update(c for c in candidates if c in modules)
        graph[name] = edges - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as e:
        return list(e.args[1])
    return None


def test_project_has_no_import_cycle():
    graph = import_graph(ROOT)
    assert {"tasks.data.load", "tasks.data.mixed", "settings.config"} <= graph.keys()
    assert "tasks.data.partition" in graph["tasks.data.load"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def package_graph(graph: dict[str, set[str]], root: str) -> dict[str, set[str]]:
    """The arrows between the parts of package ``root``: its modules and sub-packages, each
    sub-package one node (``tasks.models.hf`` counts as ``tasks.models``)."""
    depth = root.count(".") + 2

    def part(module: str) -> str | None:
        inside = module == root or module.startswith(root + ".")
        return ".".join(module.split(".")[:depth]) if inside else None

    parts: dict[str, set[str]] = {}
    for module, edges in graph.items():
        if (own := part(module)) is not None:
            parts.setdefault(own, set()).update(p for e in edges if (p := part(e)) not in (None, own))
    return parts


def test_tasks_parts_import_one_way():
    """No arrow back up inside tasks/: the model families, FedMosaic's modules and the
    adapters read `tasks.models.base`; only `tasks.build` puts a model and its adapters together,
    so no sub-package reaches back into one that reads it."""
    parts = package_graph(import_graph(ROOT), "tasks")
    assert {"tasks.models", "tasks.mosaic", "tasks.adapters", "tasks.build"} <= parts.keys()
    assert "tasks.adapters" in parts["tasks.build"] and "tasks.models" in parts["tasks.mosaic"]
    cycle = find_cycle(parts)
    assert cycle is None, "arrow back up inside tasks/: " + " -> ".join(cycle)


@pytest.mark.parametrize(
    ("a_text", "b_text"),
    [
        ("import pkg.b\n", "def f():\n    from pkg import a\n"),  # function-level import
        ("from .b import g\n", "from . import a\n"),  # relative imports
        ("from pkg.b import g\n", "class C:\n    import pkg.a as a\n"),
    ],
)
def test_cycle_finder_sees_the_cycle(tmp_path, a_text, b_text):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from pkg.a import *\n")  # package -> own child: no cycle
    (package / "a.py").write_text(a_text)
    (package / "b.py").write_text(b_text)
    (tmp_path / "main.py").write_text("import pkg.a\n")
    graph = import_graph(tmp_path)
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.a"}
    assert set(find_cycle(graph)) == {"pkg.a", "pkg.b"}
    (package / "b.py").write_text("import json\n")
    assert find_cycle(import_graph(tmp_path)) is None
