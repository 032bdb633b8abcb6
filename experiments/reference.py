"""Write every run-config key where people and Flower read it, from its one declaration:

    python -m experiments.reference            # rewrite pyproject.toml's table and docs/reference.md's
    python -m experiments.reference --check    # exit 1 naming what is stale (a test runs this)

Each key is declared once (`methods.base.setting`: key, default, choices or bounds, help) in the
settings class that owns it (`settings.config.RunConfig.owners`). This writes, from those
declarations alone: pyproject.toml's ``[tool.flwr.app.config]`` (the defaults Flower reads, each
with its help as a comment, grouped by owner) and the key tables of docs/reference.md between its
``<!-- BEGIN GENERATED: run-config keys -->`` and ``<!-- END GENERATED: run-config keys -->`` lines
(one table per owner; the ``strategy`` and ``aggregation`` rows list the registered names). A method
added as a package needs this command and nothing else outside its package.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import MISSING, fields
from pathlib import Path

import methods
from methods.base import MethodSettings
from settings.config import PROJECT_ROOT, RunConfig

TABLE = "[tool.flwr.app.config]"
BEGIN, END = "<!-- BEGIN GENERATED: run-config keys -->", "<!-- END GENERATED: run-config keys -->"
PYPROJECT = PROJECT_ROOT / "pyproject.toml"
REFERENCE = PROJECT_ROOT / "docs" / "reference.md"
COMMENT_AT = 41  # the column a key's comment starts at


def toml_value(value: object) -> str:
    """A default as TOML writes it (JSON's scalars are TOML's)."""
    return json.dumps(value)


def title(owner: type[MethodSettings]) -> str:
    """An owner's heading: its docstring's first sentence, up to a colon."""
    text = " ".join((owner.__doc__ or owner.__name__).split())
    return text.split(". ")[0].split(": ")[0].rstrip(".")


def _limits(meta: dict) -> str:
    if meta["choices"]:
        return " | ".join(map(str, meta["choices"]))
    low = "" if meta["low"] is None else f"{meta['low']} {'<' if meta['strict_low'] else '<='} "
    high = "" if meta["high"] is None else f" <= {meta['high']}"
    return f"{low}x{high}" if low or high else ""


def _help(key: str, meta: dict) -> str:
    """A key's help, with the registered names of ``strategy`` and ``aggregation``."""
    names = {"strategy": methods.SELECTIONS, "aggregation": methods.AGGREGATIONS}.get(key)
    return meta["help"] + (": " + ", ".join(f"`{name}`" for name in names) if names else "")


def _default(f) -> object:
    return f.default if f.default is not MISSING else f.default_factory()


def pyproject_table() -> str:
    """The body of ``[tool.flwr.app.config]``: every owner's keys under its title."""
    lines = ["# Written by `python -m experiments.reference` from each key's declaration",
             "# (methods.base.setting): edit the declaration, then run it again. Override a key with",
             "# --run-config \"key=value ...\"."]
    for owner in RunConfig.owners():
        lines.append(f"# {title(owner)} ({owner.__module__}.{owner.__name__})")
        for f in fields(owner):
            assignment = f"{f.metadata['key']} = {toml_value(_default(f))}"
            comment = " ".join(f.metadata["help"].split())
            lines.append(f"{assignment.ljust(COMMENT_AT)}# {comment}" if comment else assignment)
    return "\n".join(lines) + "\n"


def reference_tables() -> str:
    """The markdown key tables, one per owner."""
    parts = [BEGIN, ""]
    for owner in RunConfig.owners():
        parts += [f"**{title(owner)}** (`{owner.__module__}.{owner.__name__}`)", "",
                  "| key | default | values | meaning |", "|---|---|---|---|"]
        for f in fields(owner):
            meta = f.metadata
            limits = _limits(meta).replace("|", "\\|")
            parts.append(f"| `{meta['key']}` | `{toml_value(_default(f))}` | {limits} | "
                         f"{_help(meta['key'], meta).replace('|', chr(92) + '|')} |")
        parts.append("")
    parts.append(END)
    return "\n".join(parts)


def rewritten_pyproject(text: str) -> str:
    """``text`` (pyproject.toml) with the body of `TABLE` replaced by `pyproject_table`."""
    start = text.index(TABLE) + len(TABLE) + 1
    after = text.find("\n[", start)
    end = len(text) if after < 0 else after + 1
    return text[:start] + pyproject_table() + ("\n" if after >= 0 else "") + text[end:]


def rewritten_reference(text: str) -> str:
    """``text`` (docs/reference.md) with the lines from `BEGIN` to `END` replaced."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"{REFERENCE}: no {BEGIN} ... {END} block to write the key tables into")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + reference_tables() + text[end:]


def stale(root: Path = PROJECT_ROOT) -> list[str]:
    """The generated files whose text differs from what the declarations write."""
    pyproject, reference = root / "pyproject.toml", root / "docs" / "reference.md"
    found = []
    if rewritten_pyproject(pyproject.read_text()) != pyproject.read_text():
        found.append(str(pyproject))
    if rewritten_reference(reference.read_text()) != reference.read_text():
        found.append(str(reference))
    return found


def write(root: Path = PROJECT_ROOT) -> None:
    """Rewrite both generated parts in place."""
    pyproject, reference = root / "pyproject.toml", root / "docs" / "reference.md"
    pyproject.write_text(rewritten_pyproject(pyproject.read_text()))
    reference.write_text(rewritten_reference(reference.read_text()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the written files are stale")
    args = parser.parse_args(argv)
    if args.check:
        found = stale()
        if found:
            print(f"error: {', '.join(found)} differ from the settings' declarations: run "
                  "`python -m experiments.reference`", file=sys.stderr)
            return 1
        return 0
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
