"""The lists written for readers agree with the registries they describe: the run-config table of
docs/reference.md has a row for every run-config key (pyproject's, which Flower reads) and names every
registered strategy and aggregation in its ``strategy``/``aggregation`` row; ``--help`` names them
and describes every key a method or a section owns from its one declaration
(`methods.base.setting`). The table check is shown to fail on a planted omission."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import methods
from settings import RunConfig, default_config

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference.md"


def config_rows(page: str) -> dict[str, str]:
    """Key -> its row of the page's run-config table (a row may name several keys)."""
    rows = {}
    for line in page.splitlines():
        if line.startswith("| `") and line.count("|") >= 4:
            cell = line.split("|")[1]
            rows.update(dict.fromkeys(re.findall(r"`([a-z0-9-]+)`", cell), line))
    return rows


def missing(page: str) -> list[str]:
    """Keys without a row, and registered names their row does not mention."""
    rows = config_rows(page)
    gaps = [f"key {key}" for key in default_config() if key not in rows]
    for key, names in (("strategy", methods.SELECTIONS), ("aggregation", methods.AGGREGATIONS)):
        gaps += [f"{key} {name}" for name in names if f"`{name}`" not in rows.get(key, "")]
    return gaps


def test_the_reference_table_lists_every_key_and_every_registered_method():
    assert missing(REFERENCE.read_text()) == []


def test_the_table_check_sees_a_planted_omission():
    text = REFERENCE.read_text()
    assert missing(text.replace("`sima`", "`simma`")) == ["aggregation sima"]
    assert missing(text.replace("| `seed` |", "| seed |")) == ["key seed"]


def test_help_names_every_registered_method_and_describes_every_owned_key():
    out = subprocess.run([sys.executable, "run_simulation.py", "--help"], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=120).stdout
    flat = " ".join(out.split())
    assert all(name in flat for name in (*methods.SELECTIONS, *methods.AGGREGATIONS))
    for owner in RunConfig.owners():
        for key, line in zip(owner.own_keys(), owner.describe(), strict=True):
            assert line.startswith(f"{key} = ") and not line.endswith(": "), line  # declared with its help
            assert line in out, line
