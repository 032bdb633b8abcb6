"""Flower's moving parts: the supported range, the one compatibility module, and version refusals."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib

import pytest
from packaging.specifiers import SpecifierSet

import flower_compat
from deploy import launch
from flower_compat import FlowerVersionError, check_version, release_mismatch, supported
from settings import PROJECT_ROOT

PRIVATE = ("flwr.supercore", "flwr.proto", "flwr.server", "flwr.common", "flwr.simulation.run_simulation",
           "flwr.cli", "flwr.supernode", "flwr.superlink")


def is_private(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in PRIVATE)


def project_files() -> list[str]:
    """Tracked and untracked-not-ignored Python files, tests and the compatibility module aside."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
                            cwd=PROJECT_ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [f for f in listed if not f.startswith(("tests/", "flower_compat/"))]


def private_uses(path: str) -> list[str]:
    """Imports of private Flower modules or ``_`` names from flwr, and such module names in strings."""
    tree = ast.parse((PROJECT_ROOT / path).read_text(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules = [(node.module, [alias.name for alias in node.names])]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            modules = [(node.value, [])] if is_private(node.value) else []
        else:
            continue
        for module, names in modules:
            if not (module == "flwr" or module.startswith("flwr.")):
                continue
            if is_private(module) or any(part.startswith("_") for part in module.split(".")):
                found.append(f"{path}:{node.lineno} {module}")
            found += [f"{path}:{node.lineno} {module}.{n}" for n in names if n.startswith("_")]
    return found


def test_no_project_file_outside_the_compatibility_module_uses_a_private_flower_module():
    files = project_files()
    assert "run_simulation.py" in files and "deploy/launch.py" in files and "client_app/worker.py" in files
    assert [use for f in files for use in private_uses(f)] == []


def test_the_scan_finds_private_imports(tmp_path, monkeypatch):
    """The check above can fail: a planted file with each kind of private use is caught."""
    planted = tmp_path / "planted.py"
    planted.write_text("from flwr.supercore import log\nimport flwr.proto.control_pb2\n"
                       "from flwr.simulation.run_simulation import _run_simulation\n"
                       "from flwr.app import _private\nname = 'flwr.server.superlink.linkstate'\n"
                       "from flwr.app import Message\n")
    monkeypatch.setattr(sys.modules[__name__], "PROJECT_ROOT", tmp_path)
    assert len(private_uses("planted.py")) == 6  # the last import is public


def test_the_supported_range_is_pyprojects_bounded_flwr_requirement_and_holds_the_installed_flower():
    with open(PROJECT_ROOT / "pyproject.toml", "rb") as fh:
        flwr = [d for d in tomllib.load(fh)["project"]["dependencies"] if d.startswith("flwr[")]
    assert len(flwr) == 1 and SpecifierSet(flwr[0].removeprefix("flwr[simulation]")) == supported()
    assert any(s.operator == "<" for s in supported()), "the range needs an upper bound"
    assert check_version() == flower_compat.flower_version()
    assert all(v in supported() for v in flower_compat.CHECKED_ON)


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
