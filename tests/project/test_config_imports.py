"""The apps share `settings`, not each other's code. Imports are read with `ast` (every
``import`` and ``from ... import`` anywhere in a module, relative ones resolved, plus module names
given as strings, e.g. to `importlib`), so the check needs no import of the apps themselves."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPS = ("client_app", "server_app")
FORBIDDEN = {"client_app": {"server_app"}, "server_app": {"client_app"},
             "settings": {"client_app", "server_app"}}


def imported_packages(path: Path, root: Path = ROOT) -> set[str]:
    """Top-level packages a module imports (relative imports resolved against its package)."""
    package = path.relative_to(root).parent.parts
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                parts = [*base, *(node.module.split(".") if node.module else [])]
                if not parts:  # "from .. import x" at the top: x is the package
                    parts = [node.names[0].name]
                found.add(parts[0])
            elif node.module:
                found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = re.fullmatch(r"([a-z_]+)(?:[.:][\w.:]*)?", node.value)
            if match and match.group(1) in APPS:
                found.add(match.group(1))
    return found


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_neither_forbidden_app(package):
    assert modules(package), f"no modules found in {package}/"
    offending = {str(p.relative_to(ROOT)): sorted(imported_packages(p) & FORBIDDEN[package])
                 for p in modules(package)}
    assert not {k: v for k, v in offending.items() if v}


def test_the_check_sees_every_kind_of_import(tmp_path):
    module = tmp_path / "client_app" / "sub" / "m.py"
    module.parent.mkdir(parents=True)
    cases = {"import server_app.app": "server_app", "from server_app import config": "server_app",
             "def f():\n    from server_app.results import x": "server_app",
             "from ...server_app import app": "server_app",
             "importlib.import_module('server_app.app')": "server_app",
             "load_app('server_app.app:app')": "server_app", "from . import node": "client_app",
             "import settings": "settings"}
    for source, package in cases.items():
        module.write_text(source + "\n")
        assert package in imported_packages(module, tmp_path), source
