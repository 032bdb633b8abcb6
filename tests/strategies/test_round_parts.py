"""The round's strategy is kept in parts a reader can hold: `strategies.layer_selection` and each of
its phases in `strategies.round` stay within 150 lines."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 150


def long_parts(paths: list[Path]) -> dict[str, int]:
    counts = {p.name: len(p.read_text().splitlines()) for p in paths}
    return {name: n for name, n in counts.items() if n > LIMIT}


def test_the_strategy_and_each_phase_fit_in_150_lines(tmp_path):
    strategies = ROOT / "strategies"
    parts = [strategies / "layer_selection.py", *sorted((strategies / "round").glob("*.py"))]
    assert len(parts) >= 5 and long_parts(parts) == {}
    planted = tmp_path / "long.py"
    planted.write_text("x = 1\n" * (LIMIT + 1))
    assert long_parts([planted]) == {"long.py": LIMIT + 1}
