"""App and lab apart: the rooms import one way. The lab (`experiments`) sits beside the apps
and only `run_simulation.py` and the tests import it; `tasks` and `metaheuristics` know nothing of
Flower; `metaheuristics` needs numpy, scipy and pymoo only; command-line measurement tools live in
`experiments/` under one naming pattern, none in the apps or their floors. Imports are read with
`ast` (`tests.project.test_config_imports.imported_packages`), so nothing here is imported."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from tests.project.test_config_imports import imported_packages

ROOT = Path(__file__).resolve().parents[2]
LAB = "experiments"
# the apps and the floors under them (every top-level folder of modules but the lab and the tests)
BELOW_THE_LAB = sorted({p.parent.name for p in ROOT.glob("*/*.py")} - {LAB, "tests"})
FLOWER = {"flwr", "server_app", "client_app", "flower_compat"}
OPTIMISER_NEEDS = {"metaheuristics", "numpy", "scipy", "pymoo", "lazy_loader"}  # lazy_loader: SPEC 1 names


def imports_of(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """Module path -> the top-level packages it imports, for every module of `package`."""
    paths = sorted((root / package).rglob("*.py"))
    assert paths, f"no modules found in {package}/"
    return {str(p.relative_to(root)): imported_packages(p, root) for p in paths}


def offenders(package: str, allowed: set[str] | None = None, forbidden: set[str] = frozenset(),
              root: Path = ROOT) -> dict[str, list[str]]:
    """Modules of `package` importing a `forbidden` package, or (with `allowed`) any package that is
    neither in `allowed` nor in the standard library."""
    found = {}
    for path, names in imports_of(package, root).items():
        bad = names & forbidden if allowed is None else names - allowed - sys.stdlib_module_names
        if bad:
            found[path] = sorted(bad)
    return found


@pytest.mark.parametrize("package", BELOW_THE_LAB)
def test_no_app_or_floor_imports_the_lab(package):
    assert offenders(package, forbidden={LAB}) == {}


def test_only_run_simulation_imports_the_lab_among_top_level_scripts():
    scripts = {p.name for p in ROOT.glob("*.py") if LAB in imported_packages(p)}
    assert scripts == {"run_simulation.py"}


@pytest.mark.parametrize("package", ["tasks", "metaheuristics"])
def test_the_floors_know_nothing_of_flower(package):
    assert offenders(package, forbidden=FLOWER) == {}


def test_metaheuristics_needs_numpy_scipy_pymoo_only():
    assert offenders("metaheuristics", allowed=OPTIMISER_NEEDS) == {}


def test_benchmarks_live_in_the_lab_under_one_name():
    """Every benchmark module is ``experiments/bench_<what it measures>.py``; none sits elsewhere."""
    outside = sorted(str(p.relative_to(ROOT)) for package in BELOW_THE_LAB
                     for p in (ROOT / package).rglob("*bench*.py"))
    assert outside == []
    inside = sorted(p.name for p in (ROOT / LAB).glob("*bench*.py"))
    assert inside and all(name.startswith("bench_") for name in inside), inside


@pytest.mark.parametrize("package", ["server_app", "strategies", "tasks", "metaheuristics", "settings"])
def test_the_apps_and_floors_hold_no_command_line_tool(package):
    """A ``python -m`` tool is the lab's (client_app.worker, the site's warm worker, is the app's own)."""
    tools = sorted(str(p.relative_to(ROOT)) for p in (ROOT / package).rglob("*.py")
                   if '__name__ == "__main__"' in p.read_text())
    assert tools == []


def test_the_checks_see_a_planted_offender(tmp_path):
    """Each check fails on a planted case: a floor importing the lab, Flower in tasks/, torch in
    metaheuristics/ (and stdlib imports pass)."""
    for package, source in {"strategies": "from experiments.report import load_runs\n",
                            "tasks": "def f():\n    import flwr.app\n",
                            "metaheuristics": "import json\nimport numpy\nimport torch\n"}.items():
        (tmp_path / package).mkdir()
        (tmp_path / package / "m.py").write_text(source)
    assert offenders("strategies", forbidden={LAB}, root=tmp_path) == {"strategies/m.py": [LAB]}
    assert offenders("tasks", forbidden=FLOWER, root=tmp_path) == {"tasks/m.py": ["flwr"]}
    assert offenders("metaheuristics", allowed=OPTIMISER_NEEDS, root=tmp_path) == {
        "metaheuristics/m.py": ["torch"]}


def shipped_closure(root: Path = ROOT) -> set[str]:
    """The project's top-level packages the two apps import, directly or through each other."""
    packages = {p.parent.name for p in root.glob("*/__init__.py")}
    todo, seen = ["server_app", "client_app"], set()
    while todo:
        package = todo.pop()
        if package not in seen:
            seen.add(package)
            todo += [name for names in imports_of(package, root).values() for name in names & packages]
    return seen


def test_the_wheel_and_the_app_bundle_hold_the_apps_and_what_they_import():
    """A package the apps need but the bundle lacks fails on a remote site only, so the lists are checked."""
    with open(ROOT / "pyproject.toml", "rb") as fh:
        project = tomllib.load(fh)
    needed = shipped_closure()
    assert {"server_app", "client_app", "tasks", "settings"} <= needed and LAB not in needed
    wheel = set(project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"])
    assert wheel == needed, f"hatch packages: missing {needed - wheel}, not needed {wheel - needed}"
    bundle = set(project["tool"]["flwr"]["app"]["fab-include"])
    globs = {f"{p}/**/*.py" for p in needed}
    assert bundle == globs, f"fab-include: missing {globs - bundle}, not needed {bundle - globs}"


def test_the_closure_follows_imports_through_floors(tmp_path):
    for package, source in {"server_app": "import mid\n", "client_app": "", "mid": "from low import x\n",
                            "low": "", "lab": "import server_app\n"}.items():
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text(source)
    assert shipped_closure(tmp_path) == {"server_app", "client_app", "mid", "low"}
