"""`experiments.privacy_client`: each target ε becomes its run config, and the tables and figure of
docs/results/privacy.md are read from the runs' ``rounds.jsonl`` as they are."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from experiments import privacy_client
from experiments.privacy_client import main, run_config, summary, tables, write_csv


def test_each_target_epsilon_is_a_dp_setting_and_infinity_is_no_dp(tmp_path):
    private = run_config(3.0, 1, tmp_path, {"num-server-rounds": 2})
    assert (private["dp"], private["dp-epsilon"], private["dp-noise"], private["seed"]) == (
        "client", 3.0, 0.0, 1)
    assert private["num-server-rounds"] == 2 and private["run-name"] == "eps-3-s1"
    assert run_config(math.inf, 0, tmp_path, {})["dp"] == "none"


def planted_round(k: int, epsilon: float | None, accuracy: float) -> dict:
    row = {"round": k, "evaluate": {"accuracy": accuracy}, "bytes-up": 2_000_000}
    return row if epsilon is None else {**row, "epsilon": epsilon}


def test_the_tables_hold_the_last_rounds_accuracy_the_uplink_and_epsilon_per_round(tmp_path: Path,
                                                                                   monkeypatch):
    results = {(3.0, 0): (1.9, [planted_round(0, None, 0.1), planted_round(1, 1.5, 0.2),
                                planted_round(2, 3.0, 0.3)]),
               (math.inf, 0): (0.0, [planted_round(1, None, 0.4), planted_round(2, None, 0.6)])}
    per_run, per_round = tables(results)
    assert [(r["target_epsilon"], r["rounds"], r["epsilon_spent"], r["accuracy"], r["uplink_mb"])
            for r in per_run] == [(3.0, 2, 3.0, 0.3, 6.0), (math.inf, 2, math.inf, 0.6, 4.0)]
    assert per_run[0]["initial_accuracy"] == 0.1 and math.isnan(per_run[1]["initial_accuracy"])
    assert [(r["round"], r["epsilon"]) for r in per_round] == [
        (0, math.inf), (1, 1.5), (2, 3.0), (1, math.inf), (2, math.inf)]
    write_csv(tmp_path / "rounds.csv", per_round)
    assert main(["--redraw", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "epsilon.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    drawn = []
    monkeypatch.setattr(privacy_client, "save_figure", lambda fig, path: drawn.append(fig) or path)
    assert main(["--redraw", "--out", str(tmp_path)]) == 0
    left, right = drawn[0].axes  # what the figure plots is what rounds.csv holds
    assert [(line.get_label(), list(line.get_ydata())) for line in left.lines] == [
        ("target ε = 3", [math.inf, 1.5, 3.0])]
    assert [(line.get_label(), list(line.get_ydata())) for line in right.lines] == [
        ("target ε = 3", [0.1, 0.2, 0.3]), ("ε = ∞ (no DP)", [0.4, 0.6])]
    with open(tmp_path / "rounds.csv", encoding="utf-8") as fh:
        assert len(list(csv.DictReader(fh))) == 5


def test_the_summary_pairs_each_epsilon_with_no_dp_by_seed():
    planted = ((math.inf, 0.0, math.inf, (0.5, 0.6, 0.7)), (8.0, 1.2, 8.0, (0.2, 0.2, 0.4)))
    runs = [{"target_epsilon": eps, "seed": seed, "noise_multiplier": z, "rounds": 2, "epsilon_spent": spent,
             "initial_accuracy": 0.1, "accuracy": acc, "uplink_mb": 4.0}
            for eps, z, spent, accs in planted for seed, acc in enumerate(accs)]
    text = summary(runs)
    no_dp, private = "| ε = ∞ (no DP) | 0.000 | 0,1,2 | 2 |", "| ε = 8 | 1.200 | 0,1,2 | 2 | 8.000 |"
    assert text.index(no_dp) < text.index(private)
    assert "| 10.0 ± 0.0 | 60.0 ± 10.0 | 2.00 ± 0.00 |" in text
    # differences -30, -40, -30 pp: mean -33.33, sd 5.774, t_{0.975,2} 4.302653 / sqrt 3 -> half 14.34
    assert ("| ε = 8 − ε = ∞ (no DP) | overall | 0,1,2 | -30.00, -40.00, -30.00 | -33.33 "
            "| [-47.68, -18.99] | lower |") in text
