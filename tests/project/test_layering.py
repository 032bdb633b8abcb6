"""Imports point one way: the project's packages in layers, each importing only layers below it, and
no import cycle between packages or between files.

Every ``import`` statement of a file counts, also one inside a function (a loader's import is a
dependency as soon as it runs); ``from X import Y`` depends on the module ``X.Y`` where that is one,
else on ``X``; `methods.discover` imports every method package. A planted import of a higher layer,
and a planted cycle between two files, each fail the check."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS: tuple[tuple[str, ...], ...] = (
    ("tasks", "metaheuristics", "flower_compat"),  # import nothing of the project
    ("strategies",),
    ("methods",),
    ("privacy",),
    ("settings",),
    ("deploy",),
    ("server_app", "client_app"),  # the apps: neither imports the other
    ("experiments",),
)
"""Bottom to top: a package imports only packages of lower layers."""
PACKAGES = [name for layer in LAYERS for name in layer]


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> file, of every package of `LAYERS`."""
    found = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imports(found: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (module doc)."""
    def known(name: str) -> str | None:
        parts = name.split(".")
        return next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in found),
                    None)

    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in found.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    kept = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*kept, *([base] if base else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in found else base for a in node.names]
            for target in targets:
                module = known(target)
                if module is not None and module != name:
                    edges[name].add(module)
    for name in found:
        if name.startswith("methods.") and name.count(".") == 1 and found[name].name == "__init__.py":
            edges["methods"].add(name)  # methods.discover imports every method package
    return edges


def upward(edges: dict[str, set[str]]) -> list[str]:
    """Every import of a package of the same or a higher layer (other than itself)."""
    layer = {package: i for i, names in enumerate(LAYERS) for package in names}
    bad = []
    for source, targets in edges.items():
        for target in targets:
            a, b = source.split(".")[0], target.split(".")[0]
            if a != b and layer[b] >= layer[a]:
                bad.append(f"{source} -> {target}")
    return sorted(bad)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    counter = 0
    for start in sorted(set(edges) | {t for ts in edges.values() for t in ts}):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_package_imports_only_layers_below_it():
    assert upward(imports(modules())) == []


def test_no_two_files_import_each_other_round_a_cycle():
    assert cycles(imports(modules())) == []


def test_a_planted_upward_import_and_a_planted_cycle_fail():
    edges = imports(modules())
    planted = {k: set(v) for k, v in edges.items()}
    planted["tasks.train"].add("settings.config")
    assert upward(planted) == ["tasks.train -> settings.config"]
    planted = {k: set(v) for k, v in edges.items()}
    planted["strategies.records"].add("strategies.round.train")
    assert any("strategies.records" in c and "strategies.round.train" in c for c in cycles(planted))
