"""experiments.report on hand-made run files: exact means/stds, left-out runs, figures, bad input."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from experiments import report

LAYERS = ["l0", "l1", "l2", "l3"]


def write_run(root: Path, name: str, strategy: str, seed: int, acc: tuple[float, float],
              optimizer: str = "nsga2", complete: bool = True, evaluated: bool = True) -> None:
    run = root / "runs" / name
    run.mkdir(parents=True)
    config = {"strategy": strategy, "seed": seed, "optimizer": optimizer, "budgets": "2,1",
              "num-server-rounds": 2, "layer-names": LAYERS}
    (run / "config.json").write_text(json.dumps(config))
    # round 0, the initial evaluation: only the zero-shot row may include it; client 0
    # scores 0.01 × (seed + 1), client 1 scores 0
    rounds = [{"round": 0, "seconds": 1e4, "bytes-up": 0, "phase-seconds": {"optimising": 0.0},
               "train": {}, "evaluate": {"accuracy": 0.01}}]
    clients = [{"round": 0, "partition-id": pid, "budget": None, "eigenvalues": None, "scores": None,
                "mask": None, "evaluate": {"accuracy": 0.01 * (seed + 1) * (pid == 0), "num-examples": n,
                                           "majority-accuracy": 0.0},
                "bytes-up": 0} for pid, n in enumerate((30, 10))]
    for r in (1, 2):
        rounds.append({"round": r, "seconds": 10.0 * r + seed, "bytes-up": 1e6 * (r + seed),
                       "phase-seconds": {"optimising": 0.1 * r + seed},
                       "train": {"train_loss": 2.0 / r + seed},
                       "evaluate": {"accuracy": 0.5} if evaluated else {}})
        for pid, (k, n) in enumerate(((2, 30), (1, 10))):
            scores = np.roll([0.4, 0.3, 0.2, 0.1], pid + r).tolist()
            clients.append({"round": r, "partition-id": pid, "budget": k, "eigenvalues": scores,
                            "scores": scores, "mask": [pid, 3][:k],
                            "evaluate": {"accuracy": acc[pid], "num-examples": n,
                                         "majority-accuracy": (0.25, 0.5)[pid]}, "bytes-up": 5})
    for file, rows in (("rounds.jsonl", rounds), ("clients.jsonl", clients)):
        (run / file).write_text("".join(json.dumps(row) + "\n" for row in rows))
    if strategy == "f3ocus":
        front = {"round": 2, "algorithm": optimizer, "importance": 1.0, "diversity": 0.5,
                 "front": {"importance": [1.0, 1.2], "diversity": [0.5, 0.9]}}
        (run / "fronts.jsonl").write_text(json.dumps(front) + "\n")
    if complete:
        (run / "adapters.safetensors").write_bytes(b"x")


@pytest.fixture
def experiment(tmp_path):
    accs = {"lntk": [(0.5, 0.7), (0.6, 0.9), (0.7, 0.8)], "f3ocus": [(0.8, 0.6), (0.9, 0.7), (1.0, 0.5)]}
    for strategy, values in accs.items():
        for seed, acc in enumerate(values):
            name = f"f3ocus-nsga2-s{seed}" if strategy == "f3ocus" else f"lntk-s{seed}"
            write_run(tmp_path, name, strategy, seed, acc)
    write_run(tmp_path, "f3ocus-sa-s0", "f3ocus", 0, (0.1, 0.1), optimizer="sa")
    write_run(tmp_path, "lntk-s3", "lntk", 3, (0.0, 0.0), complete=False)
    write_run(tmp_path, "lntk-s4", "lntk", 4, (0.0, 0.0), evaluated=False)  # every client failed
    (tmp_path / "experiment.json").write_text(json.dumps(
        {"strategies": ["lntk", "f3ocus"], "optimizer": "nsga2", "optimizers": ["nsga2", "sa"],
         "commands": ["python run_simulation.py --strategies lntk,f3ocus"]}))
    return tmp_path, accs


def test_table_means_and_sample_stds_are_exact(experiment):
    root, accs = experiment
    written = report.write_report(root)
    rows = {r["strategy"]: r for r in csv.DictReader((root / "table.csv").read_text().splitlines())}
    assert list(rows) == ["lntk", "f3ocus", report.ZERO_SHOT]
    for strategy, values in accs.items():
        overall = [100 * (30 * a + 10 * b) / 40 for a, b in values]
        assert float(rows[strategy]["overall_mean"]) == pytest.approx(np.mean(overall), abs=1e-3)
        assert float(rows[strategy]["overall_std"]) == pytest.approx(np.std(overall, ddof=1), abs=1e-3)
        c0 = [100 * a for a, _ in values]
        assert float(rows[strategy]["c0_mean"]) == pytest.approx(np.mean(c0), abs=1e-3)
        assert rows[strategy]["seeds"] == "0 1 2"
    # uplink per round: mean over rounds of (r + seed) MB, then mean over seeds 0..2
    assert float(rows["lntk"]["uplink_mb_mean"]) == pytest.approx(2.5)
    assert float(rows["lntk"]["seconds_std"]) == pytest.approx(1.0)
    assert float(rows["lntk"]["server_s_mean"]) == pytest.approx(1.15)  # mean of 0.15 + seed 0..2
    assert float(rows["lntk"]["majority_mean"]) == pytest.approx(100 * (30 * 0.25 + 10 * 0.5) / 40)
    table = (root / "table.md").read_text()
    assert "Incomplete runs left out: lntk-s3, lntk-s4" in table
    assert "| f3ocus | 0,1,2 |" in table and "client 1 (k=1)" in table and "majority answer" in table
    assert "python run_simulation.py --strategies lntk,f3ocus" in table
    names = {p.name for p in written}
    assert {"table.md", "table.csv", "optimizers.md", "convergence.png", "accuracy.png", "eigenvalues.png",
            "layer_ranks.png", "selection_histogram.png", "pareto_front.png"} <= names
    optimizers = (root / "optimizers.md").read_text()
    assert "| f3ocus-nsga2 | 0,1,2 |" in optimizers and "| f3ocus-sa | 0 |" in optimizers


def test_zero_shot_row_is_the_round_0_evaluation_per_seed(experiment):
    """Round 0 planted: client 0 (30 examples) scores 1 % × (seed + 1), client 1 (10) scores 0, the
    same in every run of a seed; seeds 0-2 (seed 3's only run is incomplete and left out)."""
    root, _ = experiment
    report.write_report(root)
    row = {r["strategy"]: r for r in csv.DictReader((root / "table.csv").read_text().splitlines())}[
        report.ZERO_SHOT]
    overall = [0.75 * (seed + 1) for seed in range(3)]
    assert row["seeds"] == "0 1 2"
    assert float(row["overall_mean"]) == pytest.approx(np.mean(overall))
    assert float(row["overall_std"]) == pytest.approx(np.std(overall, ddof=1))
    assert float(row["c1_mean"]) == 0.0 and float(row["uplink_mb_mean"]) == 0.0
    assert f"| {report.ZERO_SHOT} | 0,1,2 | 2.0 ± 1.0 | 0.0 ± 0.0 | **1.50 ± 0.75** |" in (
        root / "table.md").read_text()


def test_round_curves_are_each_seeds_round_log(experiment):
    root, _ = experiment
    runs, _ = report.load_runs(root)
    loss = report.round_curves(runs, "lntk", "train", "train_loss")  # 2 / round + seed, seeds 0..2
    np.testing.assert_allclose(loss, [[2.0, 1.0], [3.0, 2.0], [4.0, 3.0]])
    np.testing.assert_allclose(report.round_curves(runs, "f3ocus-sa", "evaluate", "accuracy"), [[0.5, 0.5]])
    assert report.round_curves(runs, "random", "evaluate", "accuracy").size == 0


def test_layer_ranks_and_selection_counts():
    np.testing.assert_array_equal(report.layer_ranks([0.1, 0.4, 0.4, 0.2]), [4, 1, 2, 3])


def test_report_cli_errors(tmp_path, capsys):
    assert report.main([str(tmp_path / "missing")]) == 2
    assert "no runs/ directory" in capsys.readouterr().err
    (tmp_path / "runs").mkdir()
    assert report.main([str(tmp_path)]) == 2
    assert "no complete run yet" in capsys.readouterr().err
    assert report.main([]) == 2


def _table(path: Path) -> list[dict]:
    return list(csv.DictReader(path.read_text().splitlines()))


def test_every_figure_is_written_with_the_values_it_plots(experiment):
    """Planted: training loss 2 / round + seed (seeds 0-2), client masks [0, 3] (k = 2) and [1] (k = 1)
    in both rounds, round-1 scores = eigenvalues rolled by client + round, one front of two points."""
    root, _ = experiment
    written = {p.name for p in report.write_report(root)}
    stems = ["convergence", "accuracy", "eigenvalues", "layer_ranks", "selection_histogram", "pareto_front"]
    assert {f"{s}.csv" for s in stems} | {f"{s}.png" for s in stems} <= written
    loss = {(r["series"], r["round"]): (float(r["mean"]), float(r["std"]))
            for r in _table(root / "convergence.csv")}
    # seeds 0, 1, 2 add 0, 1, 2: the sample std (ddof = 1, as the tables) is 1, not sqrt(2/3)
    assert loss[("lntk", "1")] == pytest.approx((3.0, 1.0))
    assert loss[("f3ocus", "2")] == pytest.approx((2.0, 1.0))
    hist = [(r["series"], r["layer"], float(r["selections_per_run"]))
            for r in _table(root / "selection_histogram.csv")]
    assert hist[:4] == [("lntk", "0", 2.0), ("lntk", "1", 2.0), ("lntk", "2", 0.0), ("lntk", "3", 2.0)]
    eig = [float(r["eigenvalue"]) for r in _table(root / "eigenvalues.csv") if r["client"] == "0"]
    assert eig == pytest.approx([0.1, 0.4, 0.3, 0.2])
    ranks = [r for r in _table(root / "layer_ranks.csv") if (r["client"], r["round"]) == ("0", "1")]
    assert [(r["rank"], r["own_top_k"], r["assigned"]) for r in ranks] == [
        ("4", "0", "1"), ("1", "1", "0"), ("2", "1", "0"), ("3", "0", "1")]
    front = [(float(r["importance"]), float(r["diversity"]), r["picked"])
             for r in _table(root / "pareto_front.csv")]
    assert front == [(1.0, 0.5, "0"), (1.2, 0.9, "0"), (1.0, 0.5, "1")]


def test_figures_are_redrawn_from_their_tables_without_runs(experiment, capsys):
    root, _ = experiment
    report.write_report(root)
    shutil.rmtree(root / "runs")
    for png in root.glob("*.png"):
        png.unlink()
    assert report.main(["--from-tables", str(root)]) == 0
    for stem in report.DRAW:
        assert (root / f"{stem}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report.main(["--from-tables", str(root / "runs")]) == 2
    assert "no figure table" in capsys.readouterr().err


def test_without_lntk_runs_the_histogram_sets_f3ocus_beside_random(tmp_path):
    """Planted: random's masks are those of `write_run` too, so both series count layers 0, 1, 3."""
    for seed in (0, 1):
        write_run(tmp_path, f"f3ocus-nsga2-s{seed}", "f3ocus", seed, (0.5, 0.5))
        write_run(tmp_path, f"random-s{seed}", "random", seed, (0.4, 0.4))
    (tmp_path / "experiment.json").write_text(json.dumps({"strategies": ["f3ocus", "random"]}))
    report.write_report(tmp_path)
    hist = [(r["series"], r["runs"], r["layer"], float(r["selections_per_run"]))
            for r in _table(tmp_path / "selection_histogram.csv")]
    assert hist == [(s, "2", str(layer), count) for s in ("random", "f3ocus")
                    for layer, count in enumerate((2.0, 2.0, 0.0, 2.0))]


def test_f3ocus_alone_gets_its_histogram_alone(tmp_path):
    """An experiment of one F3OCUS setting (another Pareto pick, say): its selections per run, with
    no other series (planted: `write_run`'s masks count layers 0, 1, 3 twice a run)."""
    write_run(tmp_path, "f3ocus-nsga2-s0", "f3ocus", 0, (0.5, 0.5))
    (tmp_path / "experiment.json").write_text(json.dumps({"strategies": ["f3ocus"]}))
    report.write_report(tmp_path)
    hist = [(r["series"], r["runs"], r["layer"], float(r["selections_per_run"]))
            for r in _table(tmp_path / "selection_histogram.csv")]
    assert hist == [("f3ocus", "1", str(layer), count) for layer, count in enumerate((2.0, 2.0, 0.0, 2.0))]
    assert (tmp_path / "selection_histogram.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
