"""No issue numbers in the code or in the pages for readers: a docstring or comment says what and
why, and the history of a change is git's to keep.

Scanned: every ``*.py``, ``*.toml`` and ``*.sh`` file git tracks, outside docs/results (records of
runs, which may name what they measured for), plus README.md, CONTRIBUTING.md, deploy/README.md and
docs/*.md. A line fails if it matches ``ISSUE`` (an issue of this project by number); a reference to
another project's tracker is written ``owner/repo#NNN`` (``pytorch/opacus#820``) and passes. The
scan is a function of a root and its paths, shown to fail on planted lines.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+")
OTHER_TRACKER = re.compile(r"\b[\w.-]+/[\w.-]+#\d+")  # owner/repo#NNN: allowed
SUFFIXES = (".py", ".toml", ".sh")
PAGES = ("README.md", "CONTRIBUTING.md", "deploy/README.md")


def scanned_paths(root: Path) -> list[str]:
    """The paths (relative to `root`, a git checkout) that the rule covers."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True)
    paths = [p for p in listed.stdout.split("\0") if p]
    code = [p for p in paths if p.endswith(SUFFIXES) and not p.startswith("docs/results/")]
    pages = [p for p in paths if p in PAGES or re.fullmatch(r"docs/[^/]+\.md", p)]
    return sorted(set(code + pages))


def offenders(root: Path, paths: Iterable[str]) -> list[str]:
    """``path:line: text`` of every line of `paths` (relative to `root`) that names an issue by
    number; paths missing from the working tree (deleted, not yet committed) are skipped."""
    found = []
    for rel in paths:
        path = root / rel
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if ISSUE.search(OTHER_TRACKER.sub("", line)):
                found.append(f"{rel}:{number}: {line.strip()}")
    return found


@pytest.fixture(scope="module")
def repo_paths() -> list[str]:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    return scanned_paths(ROOT)


def test_no_file_names_an_issue_by_number(repo_paths):
    assert {"README.md", "docs/reference.md", "run_simulation.py", "pyproject.toml"} <= set(repo_paths)
    found = offenders(ROOT, repo_paths)
    assert not found, "issue numbers belong in git history, not in the files:\n" + "\n".join(found)


def test_the_scan_fails_on_planted_lines(tmp_path):
    number = "3" + "8"  # built, so that this file does not plant one itself
    (tmp_path / "module.py").write_text(
        f'"""Two exchanges a round (issue {number})."""\n'
        "# the opacus trap: pytorch/opacus#820, a reference to another tracker\n"
        f"# Issues #{number} and 39 asked for this\n"
        "# tissue 12 is a word, not an issue\n")
    (tmp_path / "clean.toml").write_text("# what and why only\n")
    assert offenders(tmp_path, ["module.py", "clean.toml", "deleted.sh"]) == [
        f'module.py:1: """Two exchanges a round (issue {number})."""',
        f"module.py:3: # Issues #{number} and 39 asked for this",
    ]


def test_the_scan_covers_code_and_pages_but_not_run_records(tmp_path):
    planted = "# see issue " + "12\n"
    for rel in ("app.py", "conf/a.toml", "run.sh", "README.md", "CONTRIBUTING.md", "deploy/README.md",
                "docs/page.md", "docs/results/record.py", "docs/results/page.md", "docs/sub/page.md",
                "notes.txt", "other/README.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(planted)
    (tmp_path / "untracked.py").write_text(planted)
    tracked = [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")
               if p.is_file() and p.name != "untracked.py"]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "--", *tracked], cwd=tmp_path, check=True)
    paths = scanned_paths(tmp_path)
    assert paths == ["CONTRIBUTING.md", "README.md", "app.py", "conf/a.toml", "deploy/README.md",
                     "docs/page.md", "run.sh"]
    assert [line.split(":")[0] for line in offenders(tmp_path, paths)] == paths
