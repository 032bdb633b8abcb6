"""A sweep's ``--jobs``: several runs at once, each capped to ``--cpus`` CPUs in Ray.

The runs are stand-in processes (the sweep's ``subprocess.call`` is replaced by one that writes a
finished run after a short wait), so what is checked is the sweep's own scheduling: how many runs
are under way at once, what each run's command asks Ray for, and that outcomes keep spec order.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import experiments.sweep
import run_simulation

ROUNDS = 2
BASE = {**run_simulation.default_config(), "model": "tiny-vilt", "dataset": "synthetic",
        "num-server-rounds": ROUNDS}


class FakeRuns:
    """Stands in for ``subprocess.call``: records each command and the most runs seen at once,
    and leaves a complete run directory behind (every round logged and evaluated, adapters)."""

    def __init__(self, seconds: float = 0.3) -> None:
        self.seconds, self.commands, self.running, self.most = seconds, [], 0, 0
        self.lock = threading.Lock()

    def __call__(self, command: list[str], stdout, stderr=None, cwd=None) -> int:
        with self.lock:
            self.commands.append(command)
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(self.seconds)
        config = Path(command[command.index("--config") + 1])
        run_dir = config.parent.parent / experiments.sweep.RUNS / config.stem
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "rounds.jsonl").write_text(
            "".join(f'{{"round": {r}, "evaluate": {{"accuracy": 0.5}}}}\n' for r in range(1, ROUNDS + 1)))
        (run_dir / "adapters.safetensors").write_bytes(b"")
        with self.lock:
            self.running -= 1
        return 0


@pytest.mark.parametrize("jobs, cpus", [(1, None), (2, 1), (3, 2)])
def test_jobs_runs_that_many_at_once_each_capped_to_its_cpus(tmp_path, monkeypatch, jobs, cpus):
    fake = FakeRuns()
    monkeypatch.setattr(experiments.sweep.subprocess, "call", fake)
    specs = experiments.sweep.plan(["lntk", "random"], [0, 1, 2], [], "nsga2")
    outcomes = experiments.sweep.run_sweep(BASE, specs, tmp_path / "exp", 5, 1.0, 0.0, echo=lambda _: None,
                                     jobs=jobs, cpus=cpus)
    assert fake.most == jobs
    assert [o.spec for o in outcomes] == specs and {o.status for o in outcomes} == {"done"}
    for command in fake.commands:
        asked = command[command.index("--cpus") + 1] if "--cpus" in command else None
        assert asked == (None if cpus is None else str(cpus))
    again = experiments.sweep.run_sweep(BASE, specs, tmp_path / "exp", 5, 1.0, 0.0, echo=lambda _: None,
                                  jobs=jobs, cpus=cpus)
    assert {o.status for o in again} == {"skipped"} and len(fake.commands) == len(specs)


class SweepStarted(Exception):
    pass


def sweep_args(monkeypatch, *argv: str) -> dict:
    """What ``run_simulation.py <argv>`` hands `run_sweep` (which stops there)."""
    seen: dict = {}

    def run_sweep(*args, **kwargs):
        seen.update(kwargs)
        raise SweepStarted

    monkeypatch.setattr(experiments.sweep, "run_sweep", run_sweep)
    with pytest.raises(SweepStarted):
        run_simulation.main([*argv, "--run-config", "model='tiny-vilt' dataset='synthetic'"])
    return seen


def test_jobs_split_the_cores_unless_cpus_is_given(tmp_path, monkeypatch):
    monkeypatch.setattr(run_simulation, "available_cores", lambda: 4)
    common = ("--strategies", "lntk", "--client-cpus", "1", "--run-config", f"results-dir='{tmp_path}'")
    for extra, jobs, cpus in [((), 1, None), (("--jobs", "2"), 2, 2), (("--jobs", "3"), 3, 1),
                              (("--jobs", "2", "--cpus", "1"), 2, 1)]:
        seen = sweep_args(monkeypatch, *common, *extra)
        assert (seen["jobs"], seen["cpus"]) == (jobs, cpus), extra


@pytest.mark.parametrize("argv, named", [
    (("--strategies", "lntk", "--jobs", "0"), "--jobs 0"),
    (("--strategies", "lntk", "--cpus", "1", "--client-cpus", "2"), "--cpus 1"),
    (("--cpus", "1", "--client-cpus", "2"), "--cpus 1"),  # a single run
    (("--cpus", "0"), "--cpus 0"),
])
def test_bad_jobs_or_cpus_is_one_line_naming_it_before_anything_runs(tmp_path, monkeypatch, capsys,
                                                                      argv, named):
    monkeypatch.setattr(experiments.sweep, "run_sweep", lambda *a, **k: pytest.fail("a run started"))
    monkeypatch.setattr(run_simulation, "simulate", lambda *a, **k: pytest.fail("a run started"))
    code = run_simulation.main([*argv, "--run-config",
                                f"model='tiny-vilt' dataset='synthetic' results-dir='{tmp_path}'"])
    err = capsys.readouterr().err
    assert code == 2 and named in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "experiment").exists()


@pytest.mark.parametrize("engine", run_simulation.ENGINES)
def test_every_run_of_a_sweep_gets_its_engine(tmp_path, monkeypatch, engine):
    fake = FakeRuns(seconds=0)
    monkeypatch.setattr(experiments.sweep.subprocess, "call", fake)
    specs = experiments.sweep.plan(["lntk", "random"], [0], [], "nsga2")
    experiments.sweep.run_sweep(BASE, specs, tmp_path / "exp", 5, 1.0, 0.0, echo=lambda _: None,
                                engine=engine)
    assert [c[c.index("--engine") + 1] for c in fake.commands] == [engine] * len(specs)


def test_every_finished_run_is_on_the_ledger_with_its_commit_and_command(tmp_path, monkeypatch):
    import json
    import subprocess

    fake = FakeRuns(seconds=0.0)
    monkeypatch.setattr(experiments.sweep.subprocess, "call", fake)
    specs = experiments.sweep.plan(["lntk", "random"], [0], [], "nsga2")
    experiments.sweep.run_sweep(BASE, specs, tmp_path / "exp", 5, 1.0, 0.0, echo=lambda _: None)
    ledger = (tmp_path / "exp" / experiments.sweep.LEDGER_FILE).read_text()
    lines = [json.loads(line) for line in ledger.splitlines()]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=experiments.sweep.PROJECT_ROOT,
                          capture_output=True, text=True, check=True).stdout.strip()
    assert sorted(line["run"] for line in lines) == ["lntk-s0", "random-s0"]
    assert all(line["commit"].removesuffix("+dirty") == head and line["status"] == "done" for line in lines)
    assert all("run_simulation.py --config" in line["command"] for line in lines)
