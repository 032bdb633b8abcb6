"""End to end through Flower's Simulation Engine (Ray): tiny-vilt on synthetic data, 4 clients of
which half train each round. Ray's own processes of that run are watched too: they must bind
127.0.0.1 only. Ray gets one CPU, so one client actor serves the four clients in turn: a second
actor would cost its own torch import and model build and, on 2 cores shared with the suite's
other worker, save no time. The same command on the in-process engine must sample the same clients
and record the same masks and metrics: Ray's node ids are random, a seed must fix the run anyway."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from flwr.app import Array
from safetensors.numpy import load_file

from tests.helpers.compare import assert_close

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {"model": "'tiny-vilt'", "dataset": "'synthetic'", "partitioner": "'iid'",
            "budgets": "'2,1,3,2'", "num-server-rounds": "2", "local-steps": "8", "batch-size": "8",
            "lr": "0.001", "max-test-samples": "40", "optimizer-pop-size": "20",
            "optimizer-generations": "10", "fraction-train": "0.5", "seed": "1"}
CLIENTS, TRAINERS = 4, 2


def command(tmp_path: Path, name: str, **changes: str) -> list[str]:
    settings = {**SETTINGS, "results-dir": f"'{tmp_path}'", "run-name": f"'{name}'", **changes}
    run_config = " ".join(f"{key}={value}" for key, value in settings.items())
    return [sys.executable, "run_simulation.py", "--num-clients", str(CLIENTS), "--cpus", "1",
            "--client-cpus", "1", "--run-config", run_config]


def descendant_cmdlines(pid: int) -> list[str]:
    """Command lines of every process below ``pid`` (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(proc.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            with contextlib.suppress(OSError):
                cmdline = (Path("/proc") / str(child) / "cmdline").read_bytes()
                found.append(cmdline.replace(b"\0", b" ").decode())
    return found


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """The run, and the addresses Ray's gcs_server and raylet were told to bind (seen every 0.5 s)."""
    tmp_path = tmp_path_factory.mktemp("sim")
    with open(tmp_path / "stdout", "w+") as out, open(tmp_path / "stderr", "w+") as err:
        proc = subprocess.Popen(command(tmp_path, "e2e"), cwd=ROOT, stdout=out, stderr=err)
        addresses: set[str] = set()
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            addresses |= {a.split()[0] for c in descendant_cmdlines(proc.pid)
                          for a in c.split("--node-ip-address=")[1:]}
            time.sleep(0.5)
        proc.kill()
        proc.wait()
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), err.read())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return tmp_path / "e2e", done, addresses


def test_ray_binds_only_127_0_0_1(finished_run):
    _, _, addresses = finished_run
    assert addresses == {"127.0.0.1"}, addresses  # Ray's gcs_server/raylet name the IP they bind to


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_simulation_writes_every_results_file(finished_run):
    run_dir, proc, _ = finished_run
    for name in ("config.json", "rounds.jsonl", "clients.jsonl", "fronts.jsonl",
                 "adapters.safetensors", "checkpoint/state.json", "checkpoint/global-2.safetensors"):
        assert (run_dir / name).exists(), name
    initial, *rounds = read_jsonl(run_dir / "rounds.jsonl")
    assert [r["round"] for r in (initial, *rounds)] == [0, 1, 2]  # 0: the initial adapters
    assert not initial["aggregated"] and initial["evaluate"]["accuracy"] > 0
    assert all(r["aggregated"] and r["failures"] == 0 for r in rounds)
    # train + evaluate-and-score a round, who-are-you and evaluate-and-score before round 1
    assert [(r["exchanges"], r["messages"]) for r in (initial, *rounds)] == [
        (2, 2 * CLIENTS), (2, TRAINERS + CLIENTS), (2, TRAINERS + CLIENTS)]
    assert set(rounds[0]["phase-seconds"]) == {"identifying", "scoring", "optimising", "training",
                                               "aggregating", "evaluating"}
    config = json.loads((run_dir / "config.json").read_text())
    layers = {int(key.split(":")[0]) for key in load_file(run_dir / "adapters.safetensors")}
    assert layers == set(range(len(config["layer-names"])))
    assert "Results:" in proc.stdout and "client" in proc.stdout
    assert "layer budgets of 4 clients (partition 0..3): 2,1,3,2 (budgets = '2,1,3,2', as listed)" \
        in proc.stdout


def test_masks_follow_the_budgets_and_uplink_is_only_the_masked_layers(finished_run):
    run_dir, _, _ = finished_run
    budgets = [2, 1, 3, 2]
    rows = read_jsonl(run_dir / "clients.jsonl")
    assert len(rows) == 3 * CLIENTS and {r["round"] for r in rows[:CLIENTS]} == {0}  # 0: evaluation only
    rows = [r for r in rows[CLIENTS:] if r["mask"] is not None]
    assert len(rows) == 2 * TRAINERS
    per_layer = {}
    for key, value in load_file(run_dir / "adapters.safetensors").items():
        layer = int(key.split(":")[0])  # serialized size of the same-shaped array
        per_layer[layer] = per_layer.get(layer, 0) + len(Array(value).data)
    for row in rows:
        assert row["budget"] == budgets[row["partition-id"]]
        assert len(row["mask"]) == row["budget"]
        assert len(row["eigenvalues"]) == len(per_layer)
        payload = sum(per_layer[layer] for layer in row["mask"])
        assert row["bytes-up"] == payload


def test_training_loss_fell(finished_run):
    run_dir, _, _ = finished_run
    rounds = read_jsonl(run_dir / "rounds.jsonl")[1:]
    first, last = rounds[0]["train"]["train_loss_first"], rounds[-1]["train"]["train_loss_last"]
    assert last < first


def test_bad_run_config_stops_before_round_one_with_one_line(tmp_path, capsys, monkeypatch):
    """``run_simulation.main`` in this process (a process of its own costs 4.4 s of CPU for the
    imports; the script's exit status is checked by tests/experiments/test_ray_cluster.py): Ray is never
    asked."""
    import run_simulation

    monkeypatch.setattr(run_simulation, "simulate", lambda *args, **kwargs: pytest.fail("simulated"))
    code = run_simulation.main(command(tmp_path, "bad", budgets="'6,x'")[2:])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "budgets" in err and "'x'" in err
    assert not (tmp_path / "bad").exists()


def test_the_in_process_engine_samples_the_same_clients_with_the_same_masks_and_metrics(
        finished_run, tmp_path):
    """Each round's trained partitions and masks equal Ray's, every recorded number to 1e-6
    relative (LNTK scoring and the backward pass are not bit-reproducible on this CPU)."""
    import run_simulation

    run_dir, _, _ = finished_run
    assert run_simulation.main(["--engine", "in-process", *command(tmp_path, "inprocess")[2:]]) == 0
    skip = {"node", "bytes-down", "bytes-up", "seconds"}
    ray, inprocess = ([{k: v for k, v in row.items() if k not in skip}
                       for row in read_jsonl(d / "clients.jsonl")] for d in (run_dir, tmp_path / "inprocess"))
    assert [(r["round"], r["partition-id"], r["mask"]) for r in inprocess] == [
        (r["round"], r["partition-id"], r["mask"]) for r in ray]
    trained = [sorted(r["partition-id"] for r in ray if r["round"] == n and r["mask"]) for n in (1, 2)]
    assert trained[0] != trained[1] and all(len(t) == TRAINERS for t in trained), trained
    for a, b in zip(inprocess, ray, strict=True):
        assert_close(a, b)
