"""`experiments.privacy_client`: each target ε becomes its run config, and the tables and figure of
docs/results/privacy.md are read from the runs' ``rounds.jsonl`` as they are."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from experiments import privacy_client
from experiments.privacy_client import main, run_config, sites_table, summary, tables, write_csv
from privacy.client import ClientAccountant


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
    accountant = ClientAccountant(noise=1.9, delta=1e-3, cap=3.0)
    results = {(3.0, 0): (accountant, [planted_round(0, None, 0.1), planted_round(1, 1.5, 0.2),
                                       {**planted_round(2, 3.0, 0.3), "epsilon-rdp": 3.6}]),
               (math.inf, 0): (None, [planted_round(1, None, 0.4), planted_round(2, None, 0.6)])}
    per_run, per_round = tables(results, sites=7)
    assert [(r["sites"], r["target_epsilon"], r["rounds"], r["epsilon_spent"], r["epsilon_rdp"],
             r["accuracy"], r["uplink_mb"]) for r in per_run] == [(7, 3.0, 2, 3.0, 3.6, 0.3, 6.0),
                                                  (7, math.inf, 2, math.inf, math.inf, 0.6, 4.0)]
    # PRV is computed for the rounds trained, from the run's own z and δ; it differs from PLD's by < 1 %
    assert per_run[0]["epsilon_prv"] == pytest.approx(accountant.epsilon(2, "pld"), rel=0.01)
    assert per_run[0]["epsilon_prv"] != pytest.approx(accountant.epsilon(3, "pld"), rel=0.01)
    assert (per_run[0]["noise_multiplier"], per_run[0]["delta"]) == (1.9, 1e-3)
    assert math.isinf(per_run[1]["epsilon_prv"]) and per_run[1]["noise_multiplier"] == 0.0
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
             "epsilon_prv": spent * 1.001 + seed / 100, "epsilon_rdp": spent * 1.2,
             "initial_accuracy": 0.1, "accuracy": acc, "uplink_mb": 4.0}
            for eps, z, spent, accs in planted for seed, acc in enumerate(accs)]
    text = summary(runs)
    no_dp = "| ε = ∞ (no DP) | 0.000 | 0,1,2 | 2 | inf |"
    private = "| ε = 8 | 1.200 | 0,1,2 | 2 | 8.000 / 8.028 / 9.600 |"  # the largest of the seeds, each
    assert text.index(no_dp) < text.index(private)
    assert "| 10.0 ± 0.0 | 60.0 ± 10.0 | 2.00 ± 0.00 |" in text
    # differences -30, -40, -30 pp: mean -33.33, sd 5.774, t_{0.975,2} 4.302653 / sqrt 3 -> half 14.34
    assert ("| ε = 8 − ε = ∞ (no DP) | overall | 0,1,2 | -30.00, -40.00, -30.00 | -33.33 "
            "| [-47.68, -18.99] | lower |") in text


def _sweep(sites: int, z: float, base: tuple[float, ...], private: tuple[float, ...]) -> list[dict]:
    return [{"sites": str(sites), "target_epsilon": str(eps), "seed": str(seed), "accuracy": str(acc),
             "noise_multiplier": str(0.0 if math.isinf(eps) else z), "delta": str(1 / (10 * sites))}
            for eps, accs in ((math.inf, base), (8.0, private)) for seed, acc in enumerate(accs)]


@pytest.mark.parametrize("private, reading", [
    ((0.49, 0.59, 0.68), "yes"),  # -1, -1, -2 pp: [-2.77, +0.10], above -5
    ((0.30, 0.38, 0.52), "no"),  # -20, -22, -18: below -5
    ((0.40, 0.60, 0.64), "not resolved: −5 is inside"),  # -10, 0, -6
])
def test_the_sites_table_reads_each_size_against_the_five_point_cost(private, reading, tmp_path):
    rows = _sweep(200, 1.58, (0.5, 0.6, 0.7), private) + _sweep(50, 1.45, (0.5,), (0.4,))
    text = sites_table(rows, 8.0)
    lines = text.splitlines()
    assert lines[2].startswith("| 50 | 0.002 | 1.450 | 0 | 50.0 | 40.0 | -10.00 | - |")
    assert lines[2].endswith("| one seed: no interval |")  # sorted by size; one seed is not read
    assert lines[3].startswith("| 200 | 0.0005 | 1.580 | 0,1,2 | 60.0 ± 10.0 |")
    assert lines[3].endswith(f"| {reading} |")
    path = tmp_path / "runs.csv"
    write_csv(path, rows)
    assert main(["--sites", str(path), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "sites.md").read_text() == text
    assert "| 200 | - |" in sites_table(_sweep(200, 1.58, (0.5,), ()), 8.0)  # no run at the target
