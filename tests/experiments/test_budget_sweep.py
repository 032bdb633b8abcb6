"""experiments.budget_sweep: accuracy against a uniform budget k, on planted run files."""

import json
import shutil
from pathlib import Path

import pytest

from experiments.budget_sweep import main, markdown, read_table, sweep


def _run(root: Path, strategy: str, seed: int, budgets: str, accuracy: float) -> None:
    run = root / "runs" / f"{strategy}-s{seed}"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"strategy": strategy, "seed": seed, "budgets": budgets,
                                                 "num-server-rounds": 1, "optimizer": "nsga2"}))
    (run / "rounds.jsonl").write_text(json.dumps({"round": 1, "seconds": 1.0, "bytes-up": 0,
                                                  "evaluate": {"accuracy": accuracy}}) + "\n")
    row = {"round": 1, "partition-id": 0, "evaluate": {"accuracy": accuracy, "num-examples": 10}}
    (run / "clients.jsonl").write_text(json.dumps(row) + "\n")
    (run / "adapters.safetensors").write_bytes(b"")


def _planted(tmp_path: Path) -> list[Path]:
    """random: 50/52 % at k = 1 and 60/64 % at k = 4; all (k = 4's experiment): 70/70 %."""
    for seed in range(2):
        _run(tmp_path / "k1", "random", seed, "1", 0.50 + 0.02 * seed)
        _run(tmp_path / "k4", "random", seed, "4", 0.60 + 0.04 * seed)
        _run(tmp_path / "k4", "all", seed, "4", 0.70)
    return [tmp_path / "k1", tmp_path / "k4"]


def test_table_has_a_column_per_budget_and_one_for_budget_free_strategies(tmp_path: Path) -> None:
    data = sweep(_planted(tmp_path))
    assert data["random"] == {1: pytest.approx([50.0, 52.0]), 4: pytest.approx([60.0, 64.0])}
    assert data["all"] == {"any": pytest.approx([70.0, 70.0])}
    text = markdown(data)
    assert "| strategy | k = 1 | k = 4 | any k (all / none) | seeds |" in text
    assert "| random | 51.00 ± 1.41 | 62.00 ± 2.83 | - | 2 |" in text
    assert "| all | - | - | 70.00 ± 0.00 | 2 |" in text


def test_main_prints_the_table_and_writes_the_figure(tmp_path: Path, capsys) -> None:
    figure = tmp_path / "sweep.png"
    assert main([*map(str, _planted(tmp_path)), "--figure", str(figure)]) == 0
    assert "| random | 51.00 ± 1.41 |" in capsys.readouterr().out
    assert figure.stat().st_size > 0


def test_the_figure_table_holds_the_plotted_values_and_redraws_without_runs(tmp_path: Path) -> None:
    """The planted means and stds (random 51 ± 1.41 at k = 1, 62 ± 2.83 at k = 4; all 70 ± 0) are the
    figure's CSV, and --redraw draws the figure from it after the runs are gone."""
    figure = tmp_path / "out" / "sweep.png"
    figure.parent.mkdir()
    assert main([*map(str, _planted(tmp_path)), "--figure", str(figure)]) == 0
    table = figure.with_suffix(".csv")
    assert table.read_text().splitlines()[0] == "strategy,k = 1,k = 4,any k (all / none),seeds"
    stats = read_table(table)
    assert stats["random"] == {1: pytest.approx((51.0, 1.41)), 4: pytest.approx((62.0, 2.83))}
    assert stats["all"] == {"any": pytest.approx((70.0, 0.0))}
    for name in ("k1", "k4"):
        shutil.rmtree(tmp_path / name)
    figure.unlink()
    assert main(["--redraw", str(table)]) == 0
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_redraw_rejects_another_table(tmp_path: Path, capsys) -> None:
    table = tmp_path / "x.csv"
    table.write_text("row,base,metric,seed,difference\n")
    assert main(["--redraw", str(table)]) == 2
    assert "not a budget-sweep table" in capsys.readouterr().err


def test_an_experiment_with_mixed_budgets_is_refused_naming_it(tmp_path: Path, capsys) -> None:
    _run(tmp_path / "hetero", "random", 0, "6,6,4,4,2", 0.5)
    assert main([str(tmp_path / "hetero")]) == 2
    err = capsys.readouterr().err
    assert "hetero" in err and "6,6,4,4,2" in err and len(err.strip().splitlines()) == 1


def test_the_same_strategy_and_budget_twice_is_refused(tmp_path: Path) -> None:
    _run(tmp_path / "a", "random", 0, "2", 0.5)
    _run(tmp_path / "b", "random", 0, "2", 0.6)
    with pytest.raises(ValueError, match="random at budget 2 appears in two experiments"):
        sweep([tmp_path / "a", tmp_path / "b"])
