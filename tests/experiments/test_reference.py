"""experiments.reference: pyproject.toml's run-config table and docs/reference.md's key tables are what
the settings' declarations write, and a stale default in either is found."""

import shutil

import pytest

from experiments import reference


def test_the_committed_files_are_what_the_declarations_write():
    assert reference.stale() == []


def test_a_planted_stale_default_and_a_missing_block_are_found(tmp_path):
    (tmp_path / "docs").mkdir()
    for name in ("pyproject.toml", "docs/reference.md"):
        shutil.copyfile(reference.PROJECT_ROOT / name, tmp_path / name)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("\nseed = 0 ", "\nseed = 1 "))
    assert reference.stale(tmp_path) == [str(pyproject)]
    docs = tmp_path / "docs" / "reference.md"
    docs.write_text(docs.read_text().replace(reference.BEGIN, ""))
    with pytest.raises(ValueError, match="no <!-- BEGIN GENERATED"):
        reference.stale(tmp_path)


def test_check_exits_1_naming_the_command(monkeypatch, capsys):
    monkeypatch.setattr(reference, "stale", lambda root=None: ["pyproject.toml"])
    assert reference.main(["--check"]) == 1
    assert "run `python -m experiments.reference`" in capsys.readouterr().err
