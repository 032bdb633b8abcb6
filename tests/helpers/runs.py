"""A finished run's ``rounds.jsonl`` and ``clients.jsonl`` as the tests read them."""

from __future__ import annotations

import json
from pathlib import Path


def read_jsonl(path: Path) -> list[dict]:
    """Every line of a run's JSON-lines file."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def trained_rounds(path: Path) -> list[dict]:
    """The lines of rounds 1..N: round 0 evaluates the initial adapters and trains nothing."""
    return [row for row in read_jsonl(path) if row["round"] > 0]
