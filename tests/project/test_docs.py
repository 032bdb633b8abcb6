"""The pages written for readers still point at what exists: README.md, CONTRIBUTING.md,
deploy/README.md and docs/*.md (not docs/results, whose pages are records of runs).

- Every relative markdown link points at a file or folder of the checkout (``#anchors`` stripped;
  http(s) and mailto links, and links inside code, are not checked).
- Every command line quoted in a ```bash block that runs a project entry point,
  ``python -m <module of this repo> ...`` or ``python run_simulation.py ...``, still parses: each
  ``--flag`` it uses (``\\``-continued lines joined first, ``# comments`` dropped) appears in that
  entry point's ``--help``. The help is read in-process: the module is imported and its
  ``main(["--help"])`` called with stdout captured, once per module; a ``main`` that takes no
  arguments is run once as a subprocess instead. No line is skipped: shell placeholders in these
  pages (``<worktree of 7cce9a6>``, ``"$HOME/..."``) sit in flag values or positional arguments,
  never in a flag's name, so every flag is checked. Commands of other tools (``flwr``, ``pytest``,
  ``ray``) are not checked.
- README.md has at most 300 lines, so a newcomer reads it in ten minutes.

Each check is a function of a page's text, shown to fail on a planted broken link, an unknown flag
and a README that is too long.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "deploy" / "README.md",
         *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 300

FENCE = re.compile(r"^(`{3,}|~{3,})(.*)$")
LINK = re.compile(r"(?<!\\)\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
SHELL_STOP = {"&&", "||", "|", ";", ">", ">>", "2>", "2>&1", "&"}


def blocks(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The page's prose with every fenced block left out, and its fenced blocks as (info, body)."""
    prose, found, fence, info, body = [], [], None, "", []
    for line in text.splitlines():
        match = FENCE.match(line.strip())
        if fence is None and match:
            fence, info, body = match[1], match[2].strip(), []
        elif fence is not None and line.strip().startswith(fence) and not line.strip().strip(fence[0]):
            found.append((info, "\n".join(body)))
            fence = None
        elif fence is not None:
            body.append(line)
        else:
            prose.append(line)
    return "\n".join(prose), found


def broken_links(text: str, page: Path) -> list[str]:
    """Relative link targets of `text` (a page at `page`) that name no file or folder."""
    prose = INLINE_CODE.sub("", blocks(text)[0])
    bad = []
    for target in LINK.findall(prose):
        if re.match(r"(?i)(https?|mailto|ftp):", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0].split("?", 1)[0]
        if not (page.parent / path).exists():
            bad.append(target)
    return bad


def command_lines(text: str) -> list[str]:
    """Every line of the page's ```bash blocks, with backslash-continued lines joined."""
    out = []
    for info, body in blocks(text)[1]:
        if info.split()[:1] != ["bash"]:
            continue
        pending = ""
        for line in body.splitlines():
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            out.append(pending + line)
            pending = ""
        if pending:
            out.append(pending)
    return out


def project_module(name: str) -> bool:
    """Whether `name` is a module of this checkout (a package, a namespace folder such as `deploy`, or
    a top-level file), not an installed tool such as pytest."""
    *folders, last = name.split(".")
    base = ROOT.joinpath(*folders)
    return (base / f"{last}.py").is_file() or (base / last / "__init__.py").is_file()


def entry_points(line: str) -> list[tuple[str, list[str]]]:
    """(entry point, its --flags) for each project entry point the command line runs; the entry point
    is a module name, or ``run_simulation`` for ``python run_simulation.py``."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote in prose-like text: not a command
        return []
    found = []
    for i, word in enumerate(words):
        if not re.fullmatch(r"python3?", word) or i + 1 >= len(words):
            continue
        if words[i + 1] == "-m" and i + 2 < len(words) and project_module(words[i + 2]):
            module, rest = words[i + 2], words[i + 3:]
        elif words[i + 1] == "run_simulation.py":
            module, rest = "run_simulation", words[i + 2:]
        else:
            continue
        args = []
        for arg in rest:
            if arg in SHELL_STOP:
                break
            args.append(arg)
        flags = [arg.split("=", 1)[0] for arg in args if re.match(r"--[A-Za-z]", arg)]
        found.append((module, flags))
    return found


@cache
def help_text(module: str) -> str:
    """What ``python -m <module> --help`` prints: in-process where `main` takes argv."""
    main = importlib.import_module(module).main
    if not inspect.signature(main).parameters:
        return subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True,
                              text=True, timeout=120).stdout
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):
        main(["--help"])
    return out.getvalue() + err.getvalue()


def unknown_flags(text: str) -> list[str]:
    """'module --flag' for each flag a quoted project command uses that its --help does not name."""
    bad = []
    for line in command_lines(text):
        for module, flags in entry_points(line):
            shown = help_text(module)
            bad += [f"{module} {flag}" for flag in flags
                    if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", shown)]
    return bad


def too_long(text: str) -> bool:
    return len(text.splitlines()) > README_MAX_LINES


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_relative_link_points_at_a_file(page: Path) -> None:
    assert broken_links(page.read_text(encoding="utf-8"), page) == []


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_quoted_command_uses_only_flags_its_entry_point_takes(page: Path) -> None:
    assert unknown_flags(page.read_text(encoding="utf-8")) == []


def test_the_pages_quote_commands_of_several_entry_points() -> None:
    """The command check is not vacuous: the pages run these entry points with flags."""
    used = {module for page in PAGES for line in command_lines(page.read_text(encoding="utf-8"))
            for module, flags in entry_points(line) if flags}
    assert {"run_simulation", "deploy.launch", "deploy.make_certs", "deploy.register",
            "experiments.bench_optimizers", "experiments.bench_deploy"} <= used, used


def test_readme_fits_in_300_lines() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert not too_long(text), f"README.md has {len(text.splitlines())} lines, over {README_MAX_LINES}"


def test_a_planted_broken_link_is_caught() -> None:
    page = ROOT / "docs" / "site.md"
    text = "The [reference](reference.md#run-configuration) and [deploy](../deploy/README.md).\n"
    assert broken_links(text, page) == []
    assert broken_links(text + "See [the guide](guide-that-is-not-there.md#setup).\n", page) == [
        "guide-that-is-not-there.md#setup"]
    assert broken_links("[x](https://example.org/nowhere) [y](#anchor) `[z](nowhere.md)`", page) == []


def test_a_planted_unknown_flag_is_caught() -> None:
    text = ("```bash\npython run_simulation.py --num-clients 3 \\\n    --num-cleints 4 --run-config \"x=1\"\n"
            "python -m deploy.launch --budgets 2,4 --budget 3 && flwr run . --stream\n```\n")
    assert unknown_flags(text) == ["run_simulation --num-cleints", "deploy.launch --budget"]
    assert unknown_flags(text.replace("```bash", "```text")) == []  # only bash blocks are commands


def test_a_planted_long_readme_is_caught() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert too_long(text + "\n" * README_MAX_LINES)
