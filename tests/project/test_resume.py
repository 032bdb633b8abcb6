"""Interrupt a run after round 2 of 4 and resume it.

The run is ``run_simulation.py`` in a child process of its own, killed with SIGKILL as soon as its
round-2 checkpoint exists. Its clients run in that process (``--engine in-process``, no Ray): what a
kill can leave behind is the run's files, which the same code writes either way, and Ray's start-up and
two client actors cost about 45 s of the suite's CPU (Ray itself is run by
tests/project/test_simulation.py). The resume runs the same ServerApp and ClientApp in this process on
an in-process grid too, so every message it sends can be inspected: it must run rounds 3-4 only, send
exactly the round-2 global adapters, and every client must start from the head it kept in
``<run dir>/clients/partition-<id>/`` (the simulation default): the round-2 head, even where a round-3
head was written before the kill.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, RecordDict
from safetensors.numpy import load_file, save_file

from client_app import runtime as client_runtime
from client_app.app import app as client_app
from flower_compat.inprocess import InProcessGrid
from server_app.app import app as server_app
from settings import default_config
from strategies.records import from_record

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = 2  # two heads are enough to tell them apart; each client more is its share of 4 rounds
# small data and search: what is checked is which round and state a resume starts from, not learning;
# 4 local steps keep round 3 from ending inside the 0.02 s poll between the round-2 checkpoint and the kill
SETTINGS = {"model": "tiny-vilt", "dataset": "synthetic", "partitioner": "iid", "budgets": "2,1",
            "num-server-rounds": 4, "local-steps": 4, "batch-size": 4, "score-batch-size": 4, "lr": 0.001,
            "max-train-samples": 16, "max-test-samples": 8, "optimizer-pop-size": 8,
            "optimizer-generations": 2}


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL the run's process group (the run and anything it started) and reap the run."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def checkpoint_round(run_dir: Path) -> int:
    try:
        return json.loads((run_dir / "checkpoint" / "state.json").read_text())["round"]
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


def toml(value: object) -> str:
    return f"'{value}'" if isinstance(value, str) else str(value)


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A 4-round simulation killed right after its round-2 checkpoint; snapshots taken then."""
    tmp = tmp_path_factory.mktemp("resume")
    run_dir = tmp / "run"
    settings = {**SETTINGS, "results-dir": str(tmp), "run-name": "run"}
    command = [sys.executable, "run_simulation.py", "--engine", "in-process", "--num-clients", str(CLIENTS),
               "--run-config", " ".join(f"{k}={toml(v)}" for k, v in settings.items())]
    with open(tmp / "simulation.log", "wb") as log:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 900
        while checkpoint_round(run_dir) < 2:
            assert proc.poll() is None, (tmp / "simulation.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "round 2 never finished"
            time.sleep(0.02)  # a short round 3 must not end between two looks
    finally:
        kill(proc)
    snapshot = tmp / "at-kill"
    shutil.copytree(run_dir, snapshot)
    return run_dir, snapshot


def test_the_interrupted_run_stopped_with_round_2_checkpointed(interrupted):
    run_dir, snapshot = interrupted
    assert checkpoint_round(snapshot) == 2
    rounds = [json.loads(ln)["round"] for ln in (snapshot / "rounds.jsonl").read_text().splitlines()]
    assert rounds == [0, 1, 2]  # round 0: the initial adapters' evaluation
    assert not (run_dir / "adapters.safetensors").exists()  # it did not finish
    heads = sorted(p.parent.name for p in (snapshot / "clients").glob("partition-*/personal-2.safetensors"))
    assert heads == [f"partition-{i}" for i in range(CLIENTS)]


@pytest.fixture(scope="module")
def resumed(interrupted, tmp_path_factory):
    """Resume with ``resume-from`` through the real ServerApp/ClientApp, recording what they do.

    Before resuming, every client gets a round-3 head as if it had trained round 3 just before the
    kill (the server had not checkpointed it): the repeated round 3 must not start from it."""
    run_dir, _ = interrupted
    for pid in range(CLIENTS):
        folder = run_dir / "clients" / f"partition-{pid}"
        trained = {k: v + 1.0 for k, v in load_file(folder / "personal-2.safetensors").items()}
        save_file(trained, folder / "personal-3.safetensors")
    config = {**default_config(), **SETTINGS, "resume-from": str(run_dir), "progress-bar": False}
    grid = InProcessGrid(client_app, [{"partition-id": i, "num-partitions": CLIENTS}
                                      for i in range(CLIENTS)], config)
    loaded: list[tuple[int, int, dict | None]] = []
    original = client_runtime.load_personal

    def spy(context, run_dir_="", *, before):
        state = original(context, run_dir_, before=before)
        loaded.append((int(context.node_config["partition-id"]), before, state))
        return state

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(client_runtime, "load_personal", spy)
        server_app(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                 run_config=config))
    return grid, loaded


def test_resume_runs_rounds_3_and_4_only(interrupted, resumed):
    run_dir, _ = interrupted
    grid, _ = resumed
    sent_rounds = {int(m.content["config"]["server-round"]) for m in grid.sent}
    assert sent_rounds == {2, 3, 4}  # round 2's model is scored again for round 3, not evaluated
    assert all(not m.content["config"]["evaluate"] for m in grid.sent
               if m.content["config"]["server-round"] == 2)
    rounds = [json.loads(ln)["round"] for ln in (run_dir / "rounds.jsonl").read_text().splitlines()]
    assert rounds == [0, 1, 2, 3, 4]  # none lost, none twice
    clients = [json.loads(ln)["round"] for ln in (run_dir / "clients.jsonl").read_text().splitlines()]
    assert sorted(set(clients)) == [0, 1, 2, 3, 4] and len(clients) == 5 * CLIENTS
    assert checkpoint_round(run_dir) == 4 and (run_dir / "adapters.safetensors").exists()


def test_resume_starts_from_exactly_the_round_2_global_adapters(interrupted, resumed):
    _, snapshot = interrupted
    grid, _ = resumed
    named = json.loads((snapshot / "checkpoint" / "state.json").read_text())["global"]
    expected = load_file(snapshot / "checkpoint" / named)
    first = [m for m in grid.sent if m.metadata.message_type == "evaluate"
             and m.content["config"]["server-round"] == 2 and m.content["config"]["score"] != "none"]
    assert len(first) == CLIENTS
    for msg in first:
        sent = from_record(msg.content["arrays"])
        assert sent.keys() == expected.keys()
        for key, value in expected.items():
            np.testing.assert_array_equal(sent[key], value, err_msg=key)


def test_every_client_continues_with_its_own_head(interrupted, resumed):
    """Round 3 (scoring and training) starts from the round-2 head, not the planted round-3 one,
    and round 3's training then replaces the planted head."""
    run_dir, snapshot = interrupted
    _, loaded = resumed
    round_3 = [(pid, state) for pid, before, state in loaded if before == 3]
    assert sorted({pid for pid, _ in round_3}) == list(range(CLIENTS))
    assert len(round_3) == 2 * CLIENTS  # the scores for round 3 and its training
    for pid, state in round_3:
        expected = load_file(snapshot / "clients" / f"partition-{pid}" / "personal-2.safetensors")
        assert state is not None and state.keys() == expected.keys()
        for key, value in expected.items():
            np.testing.assert_array_equal(state[key], value, err_msg=f"partition {pid}: {key}")
    for pid in range(CLIENTS):
        planted = {k: v + 1.0 for k, v in
                   load_file(snapshot / "clients" / f"partition-{pid}" / "personal-2.safetensors").items()}
        retrained = load_file(run_dir / "clients" / f"partition-{pid}" / "personal-3.safetensors")
        assert any(not np.array_equal(retrained[k], planted[k]) for k in planted)
    heads = [load_file(snapshot / "clients" / f"partition-{p}" / "personal-2.safetensors") for p in range(2)]
    assert any(not np.array_equal(heads[0][k], heads[1][k]) for k in heads[0])  # heads are per client
