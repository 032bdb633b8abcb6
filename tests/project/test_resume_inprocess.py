"""Resume through ``run_simulation.py`` itself and through an interrupted sweep.

``run_simulation.main`` runs as on the command line (config resolution, run directory, completeness
check, client table), except that its ``simulate`` drives the real ServerApp and ClientApp on an
in-process grid instead of Ray, so every message can be inspected. A run is "killed" by failing
the ``state.json`` write of round 2, after round 2's adapters are on disk: the worst instant of
the old checkpoint. Tiny model, synthetic data, one local step.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from flwr.app import MessageType

import experiments.sweep
import run_simulation
from flower_compat.inprocess import InProcessGrid
from server_app import results
from strategies.records import from_record
from tests.helpers.inprocess import Simulator as InProcessSimulator
from tests.helpers.inprocess import call_in_process

SETTINGS = {"model": "tiny-vilt", "dataset": "synthetic", "partitioner": "iid", "budgets": "2,1",
            "num-server-rounds": 2, "local-steps": 1, "batch-size": 4, "score-batch-size": 4,
            "max-train-samples": 16, "max-test-samples": 8, "optimizer-pop-size": 8,
            "optimizer-generations": 2}
CLIENTS = 2


class Killed(Exception):
    """The run dies here; nothing after it runs (``run_simulation.main`` reports it as a failure)."""


class Simulator(InProcessSimulator):
    """The in-process simulator; ``kill_rounds`` lists rounds whose ``state.json`` write fails,
    ``kill_after`` rounds after whose complete checkpoint the run dies, once each;
    ``reverse_nodes`` gives the nodes their ids in reverse partition order (Ray draws node ids at
    random, so a resumed run's nodes need not have the ids they had)."""

    def __init__(self) -> None:
        super().__init__()
        self.kill_rounds: set[int] = set()
        self.kill_after: set[int] = set()
        self.reverse_nodes = False

    def __call__(self, config, num_clients: int, *args, **kwargs) -> None:
        from client_app.app import app as client_app
        from server_app.app import app as server_app

        nodes = [{"partition-id": i, "num-partitions": num_clients} for i in range(num_clients)]
        grid = InProcessGrid(client_app, nodes[::-1] if self.reverse_nodes else nodes, config.to_dict())
        self.grids.append(grid)
        grid.serve(server_app)


@pytest.fixture
def simulator(monkeypatch) -> Simulator:
    sim = Simulator()
    monkeypatch.setattr(run_simulation, "simulate", sim)
    real_write, real_checkpoint = results._atomic_write, results.Recorder.checkpoint

    def failing_write(path: Path, write) -> None:
        if path.name == "state.json":
            raise Killed(f"killed before {path} moved")
        real_write(path, write)

    def checkpoint(recorder, server_round, global_state, personal) -> None:
        if server_round in sim.kill_rounds:
            sim.kill_rounds.discard(server_round)
            monkeypatch.setattr(results, "_atomic_write", failing_write)
        try:
            real_checkpoint(recorder, server_round, global_state, personal)
        finally:
            monkeypatch.setattr(results, "_atomic_write", real_write)
        if server_round in sim.kill_after:
            sim.kill_after.discard(server_round)
            raise Killed(f"killed after round {server_round}'s checkpoint")

    monkeypatch.setattr(results.Recorder, "checkpoint", checkpoint)
    return sim


def run_config(clients: int = CLIENTS, **extra: object) -> list[str]:
    settings = {**SETTINGS, **extra}
    text = " ".join(f"{k}='{v}'" if isinstance(v, str) else f"{k}={v}" for k, v in settings.items())
    return ["--num-clients", str(clients), "--run-config", text]


def sent_arrays(grid: InProcessGrid, server_round: int, kind: str) -> list[dict[str, np.ndarray]]:
    return [from_record(m.content["arrays"]) for m in grid.sent
            if m.metadata.message_type == kind and m.content["config"]["server-round"] == server_round]


def round_start(grid: InProcessGrid, server_round: int) -> dict[str, np.ndarray]:
    """The global adapters every client's training of ``server_round`` started from."""
    sent = sent_arrays(grid, server_round, MessageType.TRAIN)
    assert len(sent) == CLIENTS
    for arrays in sent[1:]:
        assert arrays.keys() == sent[0].keys()
        for key, value in arrays.items():
            np.testing.assert_array_equal(value, sent[0][key], err_msg=key)
    return sent[0]


def assert_same(got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)


def test_run_simulation_resumes_a_killed_run_from_the_last_complete_round(tmp_path, simulator, capsys):
    """Killed between round 2's adapter files and its ``state.json``: ``--run-config
    resume-from=...`` repeats round 2 from round 1's global adapters (what the killed run sent
    for round 2) and finishes the run."""
    simulator.kill_rounds = {2}
    code = run_simulation.main(run_config(**{"results-dir": str(tmp_path), "run-name": "run",
                                             "strategy": "lntk"}))
    run_dir = tmp_path / "run"
    assert code == 1 and "error: the run failed" in capsys.readouterr().err
    assert json.loads((run_dir / "checkpoint" / "state.json").read_text())["round"] == 1
    after_round_1 = round_start(simulator.grids[0], 2)

    code = run_simulation.main(run_config(**{"resume-from": str(run_dir), "strategy": "lntk"}))
    out = capsys.readouterr().out
    assert code == 0, out
    resumed = simulator.grids[1]
    assert {m.content["config"]["server-round"] for m in resumed.sent} == {1, 2}  # 1: scores for 2
    assert_same(round_start(resumed, 2), after_round_1)
    scored = sent_arrays(resumed, 1, "evaluate")  # the LNTK scores for round 2 too
    assert len(scored) == CLIENTS
    for arrays in scored:
        assert_same(arrays, after_round_1)
    rounds = [json.loads(ln)["round"] for ln in (run_dir / "rounds.jsonl").read_text().splitlines()]
    assert rounds == [0, 1, 2]
    assert f"Results: {run_dir}" in out and "budget" in out  # the client table
    assert experiments.sweep.incomplete(run_dir, 2) is None


def by_client(run_dir: Path) -> dict[tuple[int, int], dict]:
    rows = [json.loads(ln) for ln in (run_dir / "clients.jsonl").read_text().splitlines()]
    return {(r["round"], r["partition-id"]): r for r in rows}


def test_a_run_killed_after_round_2_and_resumed_equals_the_uninterrupted_run(tmp_path, simulator):
    """4 clients, half of them trained each round, each keeping its own model (``aggregation =
    "local"``), 3 rounds; the resumed run's nodes have other node ids. Every round's sample,
    masks, budgets and accuracies equal the uninterrupted run's; test losses and eigenvalues to
    1e-6 relative (LNTK scoring is not bit-reproducible on this CPU)."""
    job = {"results-dir": str(tmp_path), "num-server-rounds": 3, "fraction-train": 0.5,
           "aggregation": "local", "seed": 1}
    assert run_simulation.main(run_config(4, **job, **{"run-name": "whole"})) == 0
    simulator.kill_after = {2}
    assert run_simulation.main(run_config(4, **job, **{"run-name": "killed"})) == 1
    killed = tmp_path / "killed"
    assert json.loads((killed / "checkpoint" / "state.json").read_text())["round"] == 2
    simulator.reverse_nodes = True
    assert run_simulation.main(run_config(4, **{**job, "resume-from": str(killed)})) == 0
    whole, resumed = by_client(tmp_path / "whole"), by_client(killed)
    assert whole.keys() == resumed.keys() and {r for r, _ in whole} == {0, 1, 2, 3}
    trained = {r: sorted(p for (rr, p), row in whole.items() if rr == r and row["mask"]) for r in (1, 2, 3)}
    assert all(len(pids) == 2 for pids in trained.values()) and trained[2] != trained[3], trained
    for key, row in whole.items():
        other = resumed[key]
        assert (row["mask"], row["budget"], row["evaluate"]["accuracy"]) == (
            other["mask"], other["budget"], other["evaluate"]["accuracy"]), key
        assert other["evaluate"]["loss"] == pytest.approx(row["evaluate"]["loss"], rel=1e-6), key
        if row["eigenvalues"] is not None:
            np.testing.assert_allclose(other["eigenvalues"], row["eigenvalues"], rtol=1e-6, err_msg=str(key))


def test_sweep_resumes_its_incomplete_run_skips_the_finished_one_and_restarts_a_leftover(
        tmp_path, simulator, monkeypatch):
    """``run_sweep`` as ``run_simulation.py --strategies ...`` calls it; each run is
    ``run_simulation.main`` in this process (the sweep's subprocess call is replaced)."""
    monkeypatch.setattr(experiments.sweep.subprocess, "call", call_in_process)
    base = {**run_simulation.default_config(), **SETTINGS, "results-dir": str(tmp_path)}
    exp = tmp_path / "exp"
    lines: list[str] = []

    def sweep(strategies: list[str]) -> list[experiments.sweep.Outcome]:
        specs = experiments.sweep.plan(strategies, [0], [], "nsga2")
        return experiments.sweep.run_sweep(base, specs, exp, CLIENTS, 1.0, 0.0, echo=lines.append)

    simulator.kill_rounds = {2}  # the first run of the first sweep dies in round 2
    first = sweep(["last", "random"])
    assert [(o.spec.name, o.status) for o in first] == [("last-s0", "failed"), ("random-s0", "done")]
    killed_dir = exp / "runs" / "last-s0"
    after_round_1 = round_start(simulator.grids[0], 2)
    leftover = exp / "runs" / "all-s0"  # e.g. a run whose clients all failed: no checkpoint
    leftover.mkdir()
    (leftover / "rounds.jsonl").write_text('{"round": 1, "evaluate": {}}\n')
    finished = (exp / "runs" / "random-s0" / "rounds.jsonl").stat().st_mtime_ns
    lines.clear()
    grids_before = len(simulator.grids)

    second = sweep(["last", "random", "all"])
    assert [(o.spec.name, o.status) for o in second] == [
        ("last-s0", "done"), ("random-s0", "skipped"), ("all-s0", "done")], lines
    assert "(resumed)" in lines[0] and "complete, skipped" in lines[1]
    assert "(resumed)" not in lines[2]
    resumed, fresh = simulator.grids[grids_before:]
    assert {m.content["config"]["server-round"] for m in resumed.sent} == {1, 2}
    assert_same(round_start(resumed, 2), after_round_1)
    config = (exp / "configs" / "last-s0.toml").read_text()
    assert f'resume-from = "{killed_dir}"' in config
    assert {m.content["config"]["server-round"] for m in fresh.sent} == {0, 1, 2}
    assert (exp / "runs" / "random-s0" / "rounds.jsonl").stat().st_mtime_ns == finished
    for name in ("last-s0", "random-s0", "all-s0"):
        run_dir = exp / "runs" / name
        assert experiments.sweep.incomplete(run_dir, 2) is None, name
        rows = [json.loads(ln)["round"] for ln in (run_dir / "rounds.jsonl").read_text().splitlines()]
        assert rows == [0, 1, 2], name
