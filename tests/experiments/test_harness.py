"""The sweep harness end to end: 2 strategies × 2 seeds × 1 round of tiny-vilt on synthetic data.

``run_simulation.main`` runs as on the command line, except that each run's federation is the
in-process grid of `tests.helpers.inprocess` instead of Ray (four Ray start-ups cost more than the runs;
Ray's path is tested by tests/project/test_simulation.py and tests/project/test_resume.py)."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import experiments.sweep
import run_simulation
from experiments import report
from tests.helpers.inprocess import Simulator, call_in_process

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = """model = "tiny-vilt"
dataset = "synthetic"
partitioner = "iid"
budgets = "2,1"
num-server-rounds = 1
local-steps = 2
batch-size = 4
score-batch-size = 4
max-test-samples = 20
optimizer-pop-size = 8
optimizer-generations = 2
"""
FIGURES = ("convergence.png", "accuracy.png", "eigenvalues.png", "layer_ranks.png", "selection_histogram.png",
           "pareto_front.png")


def sweep(config: Path, *extra: str) -> subprocess.CompletedProcess:
    """``run_simulation.py --config ... --experiment exp`` in this process, federations in-process."""
    argv = ["--config", str(config), "--num-clients", "2", "--client-cpus", "1", "--experiment", "exp",
            *extra]
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        patch.setattr(run_simulation, "simulate", Simulator())
        patch.setattr(experiments.sweep.subprocess, "call", call_in_process)
        code = run_simulation.main(argv)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("harness")
    config = tmp / "tiny.toml"
    config.write_text(SETTINGS + f'results-dir = "{tmp}"\n')
    proc = sweep(config, "--strategies", "lntk,f3ocus", "--seeds", "0,1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return tmp / "exp", config, proc


def final_accuracy(run_dir: Path, round_: int | None = None) -> tuple[float, dict[int, float]]:
    """Overall and per-client accuracy of a round (default the last) from ``clients.jsonl``."""
    rows = [json.loads(line) for line in (run_dir / "clients.jsonl").read_text().splitlines()]
    last = [r for r in rows if r["round"] == (max(r["round"] for r in rows) if round_ is None else round_)]
    acc = np.array([r["evaluate"]["accuracy"] for r in last])
    n = np.array([r["evaluate"]["num-examples"] for r in last])
    return float(acc @ n / n.sum()), {r["partition-id"]: r["evaluate"]["accuracy"] for r in last}


def test_sweep_runs_every_strategy_and_seed(experiment):
    exp, _, proc = experiment
    names = sorted(p.name for p in (exp / "runs").iterdir())
    assert names == ["f3ocus-nsga2-s0", "f3ocus-nsga2-s1", "lntk-s0", "lntk-s1"]
    info = json.loads((exp / "experiment.json").read_text())
    assert info["strategies"] == ["lntk", "f3ocus"] and info["seeds"] == [0, 1]
    assert "--strategies lntk,f3ocus" in info["commands"][0]
    for name in names:
        config = json.loads((exp / "runs" / name / "config.json").read_text())
        assert config["seed"] == int(name[-1]) and config["model"] == "tiny-vilt"
    assert proc.stdout.count(": done") == 4


def test_table_holds_mean_and_std_over_seeds_of_the_run_files(experiment):
    exp, _, _ = experiment
    rows = {r["strategy"]: r for r in csv.DictReader((exp / "table.csv").read_text().splitlines())}
    assert list(rows) == ["lntk", "f3ocus", report.ZERO_SHOT]
    # zero-shot: round 0 evaluates the same initial model in both strategies' runs of a seed
    initial = [[final_accuracy(exp / "runs" / f"{p}-s{s}", 0)[0] for p in ("lntk", "f3ocus-nsga2")]
               for s in (0, 1)]
    assert all(a == pytest.approx(b) for a, b in initial)
    assert float(rows[report.ZERO_SHOT]["overall_mean"]) == pytest.approx(100 * np.mean(initial), abs=1e-4)
    for strategy, prefix in (("lntk", "lntk"), ("f3ocus", "f3ocus-nsga2")):
        overall, clients = zip(*(final_accuracy(exp / "runs" / f"{prefix}-s{s}") for s in (0, 1)),
                               strict=True)
        row = rows[strategy]
        assert float(row["overall_mean"]) == pytest.approx(100 * np.mean(overall), abs=1e-4)
        assert float(row["overall_std"]) == pytest.approx(100 * np.std(overall, ddof=1), abs=1e-4)
        c1 = [c[1] for c in clients]
        assert float(row["c1_mean"]) == pytest.approx(100 * np.mean(c1), abs=1e-4)
        assert float(row["c1_std"]) == pytest.approx(100 * np.std(c1, ddof=1), abs=1e-4)
        assert float(row["uplink_mb_mean"]) > 0 and float(row["seconds_mean"]) > 0
    table = (exp / "table.md").read_text()
    mean, std = float(rows["lntk"]["overall_mean"]), float(rows["lntk"]["overall_std"])
    assert f"**{mean:.2f} ± {std:.2f}**" in table
    assert "client 0 (k=2)" in table and "client 1 (k=1)" in table


def test_report_redraws_tables_and_figures_without_training(experiment):
    exp, _, _ = experiment
    for name in ("table.md", "table.csv", *FIGURES):
        (exp / name).unlink()
    runs_before = {p: p.stat().st_mtime_ns for p in (exp / "runs").rglob("*") if p.is_file()}
    proc = subprocess.run([sys.executable, "-m", "experiments.report", str(exp)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for name in ("table.md", "table.csv", *FIGURES):
        assert (exp / name).stat().st_size > 0, name
    assert runs_before == {p: p.stat().st_mtime_ns for p in (exp / "runs").rglob("*") if p.is_file()}


def test_rerun_skips_finished_runs(experiment):
    exp, config, _ = experiment
    stamps = {p.name: (p / "rounds.jsonl").stat().st_mtime_ns for p in (exp / "runs").iterdir()}
    proc = sweep(config, "--strategies", "lntk,f3ocus", "--seeds", "0,1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("complete, skipped") == 4
    assert stamps == {p.name: (p / "rounds.jsonl").stat().st_mtime_ns for p in (exp / "runs").iterdir()}


@pytest.mark.parametrize(("extra", "config_line", "message"), [
    (("--strategies", "lntk,nope"), "", "strategy = 'nope' is unknown"),
    (("--strategies", ""), "", "--strategies '' is empty"),
    (("--seeds", ""), "", "--seeds '' is empty"),
    (("--seeds", "0,x"), "", "'x' is not a non-negative integer"),
    (("--strategies", "lntk", "--optimizers", "nsga2,nope"), "", "optimizer = 'nope' is unknown"),
    (("--strategies", "lntk"), "local-stepz = 3\n", "unknown run-config key 'local-stepz'"),
    (("--strategies", "lntk"), 'local-steps = "3"\n', "local-steps = '3' must be of type int"),
    (("--seeds", "0"), 'dataset = "mixed:synthetic+nope"\n', "dataset = 'nope' is unknown"),
])
def test_bad_input_fails_before_anything_runs(tmp_path, capsys, extra, config_line, message):
    config = tmp_path / "bad.toml"
    key = config_line.split(" =")[0].removesuffix("z")
    kept = [ln for ln in SETTINGS.splitlines(keepends=True) if not key or not ln.startswith(key + " =")]
    config.write_text("".join(kept) + config_line + f'results-dir = "{tmp_path}"\n')
    code = run_simulation.main(["--config", str(config), "--experiment", "exp", *extra])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "exp").exists()


def test_config_files_apply_in_order_and_run_config_last(tmp_path):
    """A benchmark file, then a recipe file on top of it: the later file's keys win, --run-config
    wins over both, and a key only the first file sets survives."""
    bench, recipe = tmp_path / "bench.toml", tmp_path / "recipe.toml"
    bench.write_text('batch-size = 16\nlocal-steps = 20\nmodel = "tiny-vilt"\n')
    recipe.write_text("batch-size = 256\nlocal-steps = 5\n")
    values = run_simulation.load_overrides([str(bench), str(recipe)], ["local-steps=3"])
    assert values == {"batch-size": 256, "local-steps": 3, "model": "tiny-vilt"}
    assert run_simulation.load_overrides([str(recipe), str(bench)], [])["batch-size"] == 16
