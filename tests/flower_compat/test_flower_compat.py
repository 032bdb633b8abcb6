"""Flower's moving parts: the supported range, the one compatibility module, and version refusals."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import tomllib

import pytest
from packaging.specifiers import SpecifierSet

import flower_compat
from deploy import launch
from flower_compat import FlowerVersionError, check_version, release_mismatch, supported
from settings import PROJECT_ROOT

PUBLIC = ("flwr", "flwr.app", "flwr.clientapp", "flwr.serverapp", "flwr.serverapp.strategy")
"""Flower's public modules for this project (the Message API); a name is public when it is one of
these modules or in one of their ``__all__``."""
DOTTED = re.compile(r"flwr(\.\w+)+")


def is_public(path: str) -> bool:
    """Whether the dotted Flower name `path` is a public module or a name in a public module's
    ``__all__`` (what such a name holds is its own business)."""
    module, *parts = path.split(".")
    for part in parts:
        if f"{module}.{part}" not in PUBLIC:
            return part in importlib.import_module(module).__all__
        module = f"{module}.{part}"
    return True


def project_files() -> list[str]:
    """Tracked and untracked-not-ignored Python files, tests and the compatibility module aside."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
                            cwd=PROJECT_ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [f for f in listed if not f.startswith(("tests/", "flower_compat/"))]


def _constant(node: ast.AST, strings: dict[str, str]) -> str | None:
    """The string an expression always evaluates to (literals, names bound to them, ``+`` and
    f-strings of those), else None."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.Name):
        return strings.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _constant(node.left, strings), _constant(node.right, strings)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.JoinedStr):
        parts = [_constant(v.value if isinstance(v, ast.FormattedValue) else v, strings) for v in node.values]
        return None if None in parts else "".join(parts)
    return None


def _flower_path(node: ast.AST, bound: dict[str, str]) -> str | None:
    """``flwr.x.y`` for an attribute chain (or ``getattr(m, "y")``) on a name bound to Flower."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        root = _flower_path(node.value, bound)
        return None if root is None else f"{root}.{node.attr}"
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)):
        root = _flower_path(node.args[0], bound)
        return None if root is None else f"{root}.{node.args[1].value}"
    return None


def private_uses(path: str) -> list[str]:
    """Every use of a Flower name that is not public (`is_public`): imports (``import flwr.x``,
    ``from flwr import x``), attribute chains on an imported Flower name, ``getattr``, and
    constant strings naming one, also when built with ``+`` or f-strings from constants."""
    tree = ast.parse((PROJECT_ROOT / path).read_text(), path)
    strings = {t.id: v for node in ast.walk(tree) if isinstance(node, ast.Assign)
               for t in node.targets if isinstance(t, ast.Name)
               and (v := _constant(node.value, {})) is not None}
    bound: dict[str, str] = {}
    uses: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                uses.append((node.lineno, alias.name))
                root = alias.name.split(".")[0]  # `import flwr.app` binds flwr
                bound[alias.asname or root] = alias.name if alias.asname else root
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                uses.append((node.lineno, f"{node.module}.{alias.name}"))
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if (text := _flower_path(node, bound)) is None and (text := _constant(node, strings)) is None:
            continue
        if DOTTED.fullmatch(text):
            uses.append((getattr(node, "lineno", 0), text))
    return sorted({f"{path}:{line} {name}" for line, name in uses
                   if name.split(".")[0] == "flwr" and not is_public(name)})


def test_no_project_file_outside_the_compatibility_module_uses_a_private_flower_name():
    files = project_files()
    assert "run_simulation.py" in files and "deploy/launch.py" in files and "client_app/worker.py" in files
    assert [use for f in files for use in private_uses(f)] == []


@pytest.mark.parametrize("source, private", [
    ("from flwr.supercore import log\n", "flwr.supercore.log"),
    ("import flwr.proto.control_pb2\n", "flwr.proto.control_pb2"),
    ("from flwr.simulation.run_simulation import _run_simulation\n",
     "flwr.simulation.run_simulation._run_simulation"),
    ("from flwr.app import _private\n", "flwr.app._private"),
    ("from flwr import supercore\n", "flwr.supercore"),
    ("from flwr.clientapp.typing import ClientAppCallable\n", "flwr.clientapp.typing.ClientAppCallable"),
    ("import flwr\nx = flwr.supercore.x\n", "flwr.supercore"),
    ("import flwr.app as fa\nx = fa.internal_thing\n", "flwr.app.internal_thing"),
    ("import flwr\nx = getattr(flwr, 'supercore')\n", "flwr.supercore"),
    ("name = 'flwr.server.superlink.linkstate'\n", "flwr.server.superlink.linkstate"),
    ("import importlib\nm = importlib.import_module('flwr.' + 'supercore')\n", "flwr.supercore"),
    ("import importlib\npart = 'proto'\nm = importlib.import_module(f'flwr.{part}.x')\n", "flwr.proto.x"),
])
def test_the_scan_finds_each_kind_of_private_use(source, private, tmp_path, monkeypatch):
    """The check above can fail: a planted file with one kind of private use is caught, naming it."""
    (tmp_path / "planted.py").write_text(source)
    monkeypatch.setattr(sys.modules[__name__], "PROJECT_ROOT", tmp_path)
    uses = private_uses("planted.py")
    assert any(use.endswith(f" {private}") for use in uses), uses


def test_the_scan_passes_public_uses(tmp_path, monkeypatch):
    (tmp_path / "planted.py").write_text(
        "import flwr\nfrom flwr.app import Message, Context\nfrom flwr.serverapp.strategy import Result\n"
        "import flwr.serverapp as sa\nx = flwr.app.Message\ny = sa.strategy.FedAvg\nz = Message.reply_to\n"
        "cli = 'flwr run'\nconf = 'tool.flwr.app.config'\n")
    monkeypatch.setattr(sys.modules[__name__], "PROJECT_ROOT", tmp_path)
    assert private_uses("planted.py") == []


def test_the_supported_range_is_pyprojects_bounded_flwr_requirement_and_holds_the_installed_flower():
    with open(PROJECT_ROOT / "pyproject.toml", "rb") as fh:
        flwr = [d for d in tomllib.load(fh)["project"]["dependencies"] if d.startswith("flwr[")]
    assert len(flwr) == 1 and SpecifierSet(flwr[0].removeprefix("flwr[simulation]")) == supported()
    assert any(s.operator == "<" for s in supported()), "the range needs an upper bound"
    assert check_version() == flower_compat.flower_version()
    assert flower_compat.lowest_supported() in supported()
    assert flower_compat.lowest_supported() == "1.41.0"  # pyproject's >=1.41


def test_ci_installs_the_lowest_allowed_flower_and_runs_the_flower_tests_on_it():
    """`checked_on` is what .ci/run does: after the README's test command, the lowest release of
    the range (read from flower_compat, i.e. pyproject) and the tests that touch Flower."""
    ci = (PROJECT_ROOT / ".ci" / "run").read_text()
    readme = (PROJECT_ROOT / "README.md").read_text()
    test_command = next(line for line in ci.splitlines() if line.startswith("pip install torch"))
    assert f"\n{test_command}\n" in readme
    lower = ci[ci.index(test_command):]
    assert "flower_compat.lowest_supported()" in lower and 'flwr[simulation]==$lowest' in lower
    for module in ("tests/flower_compat/test_flower_compat.py", "tests/project/test_simulation.py",
                   "tests/deploy/test_deploy.py", "tests/client_app/test_site_worker.py"):
        assert module in lower


@pytest.mark.parametrize("installed", ["1.43.0", "1.40.2", "2.0.0", "not-a-version"])
def test_a_flower_outside_the_range_is_one_line_naming_it_and_the_range(installed):
    with pytest.raises(FlowerVersionError) as err:
        check_version(installed)
    message = str(err.value)
    assert "\n" not in message and f"Flower {installed} is installed" in message
    assert f"flwr{supported()}" in message


def test_releases_must_share_major_minor():
    assert release_mismatch("1.42.0", "1.42.3", "the ServerApp", "a ClientApp") is None
    message = release_mismatch("1.42.0", "1.41.1", "the ServerApp", "a ClientApp")
    assert message.startswith("a ClientApp runs Flower 1.41.1, the ServerApp runs Flower 1.42.0")
    assert release_mismatch("1.42.0", "junk", "x", "y") is not None


def test_a_private_name_flower_moved_is_one_line_naming_the_installed_version_and_the_range():
    with pytest.raises(FlowerVersionError) as err:
        flower_compat._private("flwr.supercore.task_identity", "NoSuchName")
    message = str(err.value)
    assert "\n" not in message and f"Flower {flower_compat.flower_version()} has no" in message
    assert f"flwr{supported()}" in message
    with pytest.raises(FlowerVersionError, match="has no flwr.no_such_module"):
        flower_compat._private("flwr.no_such_module", "x")


def test_the_compat_helpers_work_on_the_installed_flower():
    assert flower_compat.parse_config_args(["a=1 b='x'"]) == {"a": 1, "b": "x"}
    assert isinstance(flower_compat.client_app_error_code(), int)
    flower_compat.set_task_identity((7, 8, 9))
    assert flower_compat.task_identity() == (7, 8, 9)


def test_run_simulation_refuses_an_unsupported_flower_before_anything_runs(monkeypatch, capsys):
    import run_simulation

    monkeypatch.setattr(flower_compat, "flower_version", lambda: "1.43.0")
    assert run_simulation.main(["--num-clients", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: Flower 1.43.0 is installed") and "\n" not in err


def fake_flower(folder, name: str, version: str) -> None:
    exe = folder / name
    exe.write_text(f"#!/bin/sh\necho 'Flower version: {version}'\n")
    exe.chmod(0o755)


def test_the_launcher_refuses_a_superlink_of_another_release_naming_both_versions(tmp_path, monkeypatch,
                                                                                   capsys):
    """A ``flower-superlink`` of another environment first on PATH: exit 2, one line, nothing started."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_flower(bin_dir, "flower-superlink", "1.40.0")
    monkeypatch.setenv("PATH", f"{bin_dir}:{launch.os.environ['PATH']}")
    assert launch.main(["--workdir", str(tmp_path / "fed"), "--budgets", "1"]) == 2
    err = capsys.readouterr().err.strip()
    installed = flower_compat.flower_version()
    assert err == (f"error: flower-superlink runs Flower 1.40.0, the launcher runs Flower {installed}: "
                   f"both must be the same major.minor release, within flwr{supported()}")
    assert not (tmp_path / "fed" / "credentials").exists()


def test_the_launcher_accepts_executables_of_its_own_release(tmp_path, monkeypatch):
    installed = flower_compat.flower_version()
    for name in launch.COMPONENTS:
        fake_flower(tmp_path, name, installed)
    monkeypatch.setenv("PATH", f"{tmp_path}:{launch.os.environ['PATH']}")
    assert launch.check_components() == installed
