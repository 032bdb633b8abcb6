"""`experiments.privacy_client`: each target ε becomes its run config, and the tables and figure of
docs/results/privacy.md are read from the runs' ``rounds.jsonl`` as they are."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from experiments.privacy_client import main, run_config, tables, write_csv


def test_each_target_epsilon_is_a_dp_setting_and_infinity_is_no_dp(tmp_path):
    private = run_config(3.0, 1, tmp_path, {"num-server-rounds": 2})
    assert (private["dp"], private["dp-epsilon"], private["dp-noise"], private["seed"]) == (
        "client", 3.0, 0.0, 1)
    assert private["num-server-rounds"] == 2 and private["run-name"] == "eps-3-s1"
    assert run_config(math.inf, 0, tmp_path, {})["dp"] == "none"


def planted_round(k: int, epsilon: float | None, accuracy: float) -> dict:
    row = {"round": k, "evaluate": {"accuracy": accuracy}, "bytes-up": 2_000_000}
    return row if epsilon is None else {**row, "epsilon": epsilon}


def test_the_tables_hold_the_last_rounds_accuracy_the_uplink_and_epsilon_per_round(tmp_path: Path):
    results = {(3.0, 0): (1.9, [planted_round(1, 1.5, 0.2), planted_round(2, 3.0, 0.3)]),
               (math.inf, 0): (0.0, [planted_round(1, None, 0.4), planted_round(2, None, 0.6)])}
    per_run, per_round = tables(results)
    assert [(r["target_epsilon"], r["epsilon_spent"], r["accuracy"], r["uplink_mb"]) for r in per_run] == [
        (3.0, 3.0, 0.3, 4.0), (math.inf, math.inf, 0.6, 4.0)]
    assert [(r["round"], r["epsilon"]) for r in per_round] == [
        (1, 1.5), (2, 3.0), (1, math.inf), (2, math.inf)]
    write_csv(tmp_path / "rounds.csv", per_round)
    assert main(["--redraw", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "epsilon.png").stat().st_size > 0
    with open(tmp_path / "rounds.csv", encoding="utf-8") as fh:
        assert len(list(csv.DictReader(fh))) == 4
