"""experiments.paired: the paired t interval on a planted case and the report on planted run files."""

import json
import shutil
from pathlib import Path

import pytest

from experiments.paired import main, paired_interval, read_differences, report


def test_paired_interval_planted_case() -> None:
    # differences 1, 2, 3: mean 2, sd 1, n 3, t_{0.975, 2} = 4.302653 -> half width 2.484138
    mean, lo, hi = paired_interval([11.0, 12.0, 13.0], [10.0, 10.0, 10.0])
    assert mean == pytest.approx(2.0)
    assert lo == pytest.approx(2.0 - 2.484138, abs=1e-5)
    assert hi == pytest.approx(2.0 + 2.484138, abs=1e-5)


def test_paired_interval_needs_two_pairs() -> None:
    with pytest.raises(ValueError, match="1 pair"):
        paired_interval([1.0], [0.0])


def _run(root: Path, name: str, seed: int, accuracy: float, others: float, strategy: str = "all",
         optimizer: str = "nsga2") -> None:
    run = root / "runs" / name
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"strategy": strategy, "seed": seed, "num-server-rounds": 1,
                                                 "optimizer": optimizer}))
    round_row = {"round": 1, "seconds": 2.0, "bytes-up": 3e6, "evaluate": {"x": 1},
                 "phase-seconds": {"training": 1.5, "aggregating": 0.5}}
    (run / "rounds.jsonl").write_text(json.dumps(round_row) + "\n")
    ev = {"accuracy": accuracy, "num-examples": 10, "others-accuracy": others, "others-num-examples": 40}
    (run / "clients.jsonl").write_text(json.dumps({"round": 1, "partition-id": 0, "evaluate": ev}) + "\n")
    (run / "adapters.safetensors").write_bytes(b"")


def test_report_pairs_runs_by_seed(tmp_path: Path) -> None:
    for seed, (acc, oth) in enumerate([(0.5, 0.4), (0.6, 0.4), (0.7, 0.4)]):
        _run(tmp_path / "base", f"all-s{seed}", seed, acc, oth)
        _run(tmp_path / "other", f"all-s{seed}", seed, acc + 0.01 * (seed + 1), oth)
    text = report([tmp_path / "base", tmp_path / "other"])
    assert ("| base/all | 0,1,2 | 60.00 ± 10.00 | - | 40.00 ± 0.00 | 3.00 ± 0.00 | 2.0 ± 0.0 | 1.5 ± 0.0 "
            "| 0.500 ± 0.000 |") in text
    # overall differences +1, +2, +3 pp: the planted interval above; Others identical: zero width
    assert "| +1.00, +2.00, +3.00 | +2.00 | [-0.48, +4.48] | not distinguishable |" in text
    assert "| others | 0,1,2 | +0.00, +0.00, +0.00 | +0.00 | [+0.00, +0.00] | not distinguishable |" in text


def test_one_common_seed_gives_its_difference_and_no_interval(tmp_path: Path) -> None:
    """Planted: seed 0 in both (60 % against 50 %), seed 1 only in the baseline."""
    for seed, acc in enumerate((0.5, 0.7)):
        _run(tmp_path / "base", f"all-s{seed}", seed, acc, 0.4)
    _run(tmp_path / "other", "all-s0", 0, 0.6, 0.4)
    text = report([tmp_path / "base", tmp_path / "other"], figure=tmp_path / "fig.png")
    assert "| other/all − base/all | overall | 0 | +10.00 | +10.00 | - | one seed: no interval |" in text
    assert not (tmp_path / "fig.png").exists()  # nothing with an interval to draw
    _run(tmp_path / "other", "none-s0", 0, 0.45, 0.4, strategy="none")
    assert ("| other: all − none | overall | 0 | +15.00 | +15.00 | - | one seed: no interval | - | - |"
            in report([tmp_path / "other"], references=["none"]))


def test_against_pairs_each_strategy_with_the_reference_of_its_own_experiment(tmp_path: Path) -> None:
    """Planted: none 50/52/54 %, all = none + 1, 2, 3 pp (the planted interval above); stds 3 (all)
    and 2 (none) pp, so the mean gap is 2 / max(3, 2) = 0.7 larger std."""
    for seed in range(3):
        _run(tmp_path / "bench", f"none-s{seed}", seed, 0.50 + 0.02 * seed, 0.0, strategy="none")
        _run(tmp_path / "bench", f"all-s{seed}", seed, 0.51 + 0.03 * seed, 0.0)
    text = report([tmp_path / "bench"], references=["none"])
    assert ("| bench: all − none | overall | 0,1,2 | +1.00, +2.00, +3.00 | +2.00 | [-0.48, +4.48] "
            "| not distinguishable | 3.00 / 2.00 | +0.7 |") in text
    assert "none − none" not in text


def test_against_zero_shot_pairs_each_run_with_its_own_round_0(tmp_path: Path) -> None:
    """Planted: round 0 scores 30/20/40 % by seed (another test set each), round 1 scores 31/22/43 %:
    the pairing must be by seed (+1, +2, +3), not with the round-0 mean (which gives +1, +12, −7)."""
    for seed, start in enumerate((0.30, 0.20, 0.40)):
        _run(tmp_path / "bench", f"all-s{seed}", seed, start + 0.01 * (seed + 1), 0.0)
        clients = tmp_path / "bench" / "runs" / f"all-s{seed}" / "clients.jsonl"
        zero = {"round": 0, "partition-id": 0, "evaluate": {"accuracy": start, "num-examples": 10}}
        clients.write_text(json.dumps(zero) + "\n" + clients.read_text())
    text = report([tmp_path / "bench"], references=["zero-shot"])
    assert ("| bench: all − zero-shot | overall | 0,1,2 | +1.00, +2.00, +3.00 | +2.00 | [-0.48, +4.48] "
            "| not distinguishable |") in text


def test_against_an_absent_strategy_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    for seed in range(2):
        _run(tmp_path / "bench", f"all-s{seed}", seed, 0.5, 0.0)
    assert main([str(tmp_path / "bench"), "--against", "random"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: --against 'random': experiment 'bench' has no complete runs of it (it has all)"


def test_each_f3ocus_optimiser_is_its_own_row(tmp_path: Path) -> None:
    """Runs of F3OCUS with two optimisers share strategy and seeds; neither may hide the other."""
    for seed in range(2):
        _run(tmp_path / "bench", f"f3ocus-nsga2-s{seed}", seed, 0.60, 0.0, "f3ocus", "nsga2")
        _run(tmp_path / "bench", f"f3ocus-sa-s{seed}", seed, 0.50, 0.0, "f3ocus", "sa")
    text = report([tmp_path / "bench"], references=["f3ocus-nsga2"])
    assert "| bench/f3ocus-nsga2 | 0,1 | 60.00 ± 0.00 |" in text
    assert "| bench/f3ocus-sa | 0,1 | 50.00 ± 0.00 |" in text
    assert "| bench: f3ocus-sa − f3ocus-nsga2 | overall | 0,1 | -10.00, -10.00 | -10.00 |" in text


def test_a_one_strategy_baseline_pairs_with_another_strategy_and_is_drawn(tmp_path: Path) -> None:
    """F3OCUS + FedAvg (strategy f3ocus) against FedAvg of every layer (strategy all): planted +1,
    +2, +3 pp; a baseline of two strategies pairs only a shared one."""
    for seed in range(3):
        _run(tmp_path / "fedavg", f"all-s{seed}", seed, 0.50 + 0.02 * seed, 0.4)
        _run(tmp_path / "f3ocus", f"f3ocus-s{seed}", seed, 0.51 + 0.03 * seed, 0.4, strategy="f3ocus")
    figure = tmp_path / "paired.png"
    text = report([tmp_path / "fedavg", tmp_path / "f3ocus"], figure=figure)
    assert ("| f3ocus/f3ocus-nsga2 − fedavg/all | overall | 0,1,2 | +1.00, +2.00, +3.00 | +2.00 "
            "| [-0.48, +4.48] | not distinguishable |") in text
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for seed in range(3):
        _run(tmp_path / "fedavg", f"none-s{seed}", seed, 0.4, 0.4, strategy="none")
    assert " − fedavg/" not in report([tmp_path / "fedavg", tmp_path / "f3ocus"])


def test_the_figure_table_holds_the_plotted_differences_and_redraws_without_runs(tmp_path: Path) -> None:
    """Planted +1, +2, +3 pp on Self and 0 on Others: the figure's CSV holds exactly these per-seed
    differences, the seeds CSV the paired values, and `--redraw` draws the figure from the CSV alone."""
    for seed in range(3):
        _run(tmp_path / "fedavg", f"all-s{seed}", seed, 0.50 + 0.02 * seed, 0.4)
        _run(tmp_path / "f3ocus", f"f3ocus-s{seed}", seed, 0.51 + 0.03 * seed, 0.4, strategy="f3ocus")
    figure = tmp_path / "out" / "paired.png"
    figure.parent.mkdir()
    report([tmp_path / "fedavg", tmp_path / "f3ocus"], figure=figure)
    drawn, base = read_differences(figure.with_suffix(".csv"))
    assert base == "fedavg/all"
    assert [(label, key) for label, key, _ in drawn] == [("f3ocus/f3ocus-nsga2", "overall"),
                                                          ("f3ocus/f3ocus-nsga2", "others")]
    assert drawn[0][2] == pytest.approx({0: 1.0, 1: 2.0, 2: 3.0})
    assert drawn[1][2] == pytest.approx({0: 0.0, 1: 0.0, 2: 0.0})
    seeds = (figure.parent / "paired-seeds.csv").read_text().splitlines()
    assert seeds[0] == "experiment,strategy,seed,metric,value"
    assert "fedavg,all,2,overall,54" in seeds and "f3ocus,f3ocus-nsga2,2,overall,57" in seeds
    figure.unlink()
    shutil.rmtree(tmp_path / "fedavg")
    assert main(["--redraw", str(figure.with_suffix(".csv"))]) == 0
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_redraw_rejects_a_table_of_another_kind(tmp_path: Path, capsys) -> None:
    table = tmp_path / "x.csv"
    table.write_text("strategy,k,mean\nall,1,2\n")
    assert main(["--redraw", str(table)]) == 2
    assert "not a paired-differences table" in capsys.readouterr().err
