"""`experiments.sweep_time`: run and sweep wall times from the files a sweep leaves (planted mtimes)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from experiments import sweep_time

T0 = 1_800_000_000.0


def planted_run(experiment: Path, name: str, start: float, end: float, *, log: bool = True) -> None:
    """A complete run whose config was written at `start` and whose log last changed at `end`."""
    run_dir = experiment / "runs" / name
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps({"num-server-rounds": 1, "strategy": "lntk", "seed": 0}))
    (run_dir / "rounds.jsonl").write_text('{"round": 1, "evaluate": {"accuracy": 0.5}}\n')
    (run_dir / "adapters.safetensors").write_bytes(b"")
    for sub, stamp in (("configs", start), ("logs", end)):
        if sub == "logs" and not log:
            continue
        path = experiment / sub / f"{name}.{'toml' if sub == 'configs' else 'log'}"
        path.parent.mkdir(exist_ok=True)
        path.write_text("x")
        os.utime(path, (stamp, stamp))


def test_two_runs_at_once_share_the_wall_time_and_all_counts_no_pause(tmp_path, capsys):
    first, second = tmp_path / "k2", tmp_path / "k4"
    planted_run(first, "a-s0", T0, T0 + 100)  # with --jobs 2: a and b at once, then c
    planted_run(first, "b-s0", T0, T0 + 110)
    planted_run(first, "c-s0", T0 + 100, T0 + 190)
    planted_run(second, "a-s0", T0 + 5000, T0 + 5050)
    (first / "runs" / "d-s0").mkdir()  # an unfinished run is not timed
    timing = sweep_time.timing(first)
    assert sorted(timing.seconds) == [90, 100, 110] and timing.wall == 190
    assert sweep_time.main([str(first), str(second)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2] == "| k2 | 3 | 90 / 100 / 110 | 300 | 190 s (0.05 h) |"
    assert out[3] == "| k4 | 1 | 50 / 50 / 50 | 50 | 50 s (0.01 h) |"
    # the pause between the experiments is not counted
    assert out[4] == "| **all** | 4 | 50 / 95 / 110 | 350 | 240 s (0.07 h) |"


def test_interleaved_experiments_count_their_shared_time_once(tmp_path, capsys):
    """Seeds added later by a second sweep: each experiment's wall is its runs' busy time, and
    'all' counts the time two experiments' runs overlap once."""
    first, second = tmp_path / "x", tmp_path / "y"
    planted_run(first, "a-s0", T0, T0 + 100)
    planted_run(second, "a-s0", T0, T0 + 120)  # x and y at once
    planted_run(first, "a-s1", T0 + 1000, T0 + 1100)  # later seeds: x, then y
    planted_run(second, "a-s1", T0 + 1100, T0 + 1200)
    assert sweep_time.timing(first).wall == 200 and sweep_time.timing(second).wall == 220
    assert sweep_time.main([str(first), str(second)]) == 0
    all_row = capsys.readouterr().out.splitlines()[4]
    assert all_row == "| **all** | 4 | 100 / 100 / 120 | 420 | 320 s (0.09 h) |"


def test_a_run_without_its_log_or_an_empty_experiment_is_a_one_line_error(tmp_path, capsys):
    planted_run(tmp_path / "exp", "a-s0", T0, T0 + 10, log=False)
    assert sweep_time.main([str(tmp_path / "exp")]) == 2
    err = capsys.readouterr().err
    assert "'a-s0'" in err and "a-s0.log" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "empty" / "runs").mkdir(parents=True)
    assert sweep_time.main([str(tmp_path / "empty")]) == 2
    assert "no complete runs" in capsys.readouterr().err


def test_the_run_intervals_table_recomputes_the_sweep_time_without_runs(tmp_path, capsys):
    first, second = tmp_path / "k2", tmp_path / "k4"
    planted_run(first, "a-s0", T0, T0 + 100)
    planted_run(first, "b-s0", T0, T0 + 110)
    planted_run(second, "a-s0", T0 + 5000, T0 + 5050)
    table = tmp_path / "sweep_time.csv"
    assert sweep_time.main([str(first), str(second), "--csv", str(table)]) == 0
    printed = capsys.readouterr().out
    assert table.read_text().splitlines()[:2] == ["experiment,run,start,end",
                                                  f"k2,a-s0,{T0:.3f},{T0 + 100:.3f}"]
    shutil.rmtree(first)
    shutil.rmtree(second)
    assert sweep_time.main(["--from-csv", str(table)]) == 0
    again = capsys.readouterr().out
    assert again == printed and "| **all** | 3 | 50 / 100 / 110 | 260 | 160 s (0.04 h) |" in again
    (tmp_path / "bad.csv").write_text("row,base\n")
    assert sweep_time.main(["--from-csv", str(tmp_path / "bad.csv")]) == 2
    assert "not a sweep-time table" in capsys.readouterr().err
    assert sweep_time.main(["--from-csv", str(table), str(first)]) == 2
