"""``run_simulation.py --engine in-process``: the real ServerApp and ClientApp in this process,
without Ray (`flower_compat.inprocess`), and its refusal of a Ray cluster. Tiny model, synthetic
data, one round."""

from __future__ import annotations

import json

import pytest

import flower_compat
import run_simulation

SETTINGS = ("model='tiny-vilt' dataset='synthetic' partitioner='iid' budgets='2,1' num-server-rounds=1 "
            "local-steps=1 batch-size=4 score-batch-size=4 max-train-samples=16 max-test-samples=8")


def test_in_process_engine_runs_the_apps_without_ray_and_writes_the_rounds(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(flower_compat, "simulate", lambda *a, **k: pytest.fail("Ray's engine started"))
    monkeypatch.setenv("RAY_ADDRESS", "head:6379")  # a cluster in the environment is not for in-process
    code = run_simulation.main(["--engine", "in-process", "--num-clients", "2", "--run-config",
                                f"{SETTINGS} results-dir='{tmp_path}' run-name='run'"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = (tmp_path / "run" / "rounds.jsonl").read_text().splitlines()
    assert [json.loads(line)["round"] for line in lines] == [0, 1]  # round 0: the initial evaluation
    assert f"Results: {tmp_path / 'run'}" in out


def test_in_process_engine_refuses_a_ray_address_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(run_simulation, "simulate", lambda *a, **k: pytest.fail("a run started"))
    code = run_simulation.main(["--engine", "in-process", "--ray-address", "x", "--run-config",
                                f"{SETTINGS} results-dir='{tmp_path}'"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--ray-address 'x'" in err and "--engine in-process" in err
