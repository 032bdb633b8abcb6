"""The per-round checkpoint is atomic as a set: a kill at any instant of
``Recorder.checkpoint`` leaves a checkpoint that resumes from one round's complete adapters, never
a mix of two rounds. Kills are simulated by making one file operation raise; no torch, no Flower.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from experiments.sweep import incomplete
from server_app import results
from server_app.results import Recorder, load_checkpoint

CLIENTS = ("site-a", "partition-1")  # client ids


class Killed(Exception):
    """Stands in for SIGKILL: nothing after the failing operation runs."""


def states(server_round: int) -> tuple[dict, dict]:
    """Round-specific global and per-client adapters (every value says which round wrote it)."""
    global_state = {f"{layer}:lora_A": np.full((2, 3), server_round, np.float32) for layer in range(3)}
    personal = {c: {"head": np.full(4, 100 * server_round + i, np.float32)} for i, c in enumerate(CLIENTS)}
    return global_state, personal


def assert_round(run_dir: Path, expected: int) -> None:
    done, global_state, personal = load_checkpoint(run_dir)
    want_global, want_personal = states(expected)
    assert done == expected
    assert global_state.keys() == want_global.keys()
    for key, value in want_global.items():
        np.testing.assert_array_equal(global_state[key], value, err_msg=key)
    assert personal.keys() == want_personal.keys()
    for node, state in want_personal.items():
        np.testing.assert_array_equal(personal[node]["head"], state["head"], err_msg=str(node))


@pytest.fixture
def recorder(tmp_path: Path) -> Recorder:
    rec = Recorder(tmp_path / "run", num_rounds=5, layer_names=["a", "b", "c"])
    rec.checkpoint(1, *states(1))
    return rec


def test_failed_state_json_write_resumes_from_the_previous_rounds_adapters(recorder, monkeypatch):
    """The review's case: round 2's adapters are written, then the ``state.json`` write fails."""
    real = results._atomic_write

    def failing(path: Path, write) -> None:
        if path.name == "state.json":
            raise Killed(path)
        real(path, write)

    monkeypatch.setattr(results, "_atomic_write", failing)
    with pytest.raises(Killed):
        recorder.checkpoint(2, *states(2))
    assert_round(recorder.run_dir, 1)


def test_a_kill_at_any_file_operation_leaves_one_complete_round(recorder, monkeypatch):
    """Kill at the k-th write, rename or delete of round 2's checkpoint, for every k: the checkpoint
    is round 1 or round 2, each complete; repeating round 2 then leaves only round 2's files."""
    real_replace, real_unlink, real_save = os.replace, Path.unlink, results.save_file
    killed_at: list[int] = []
    for kill in range(100):
        count = 0

        def step(kill: int = kill) -> None:
            nonlocal count
            count += 1
            if count > kill:
                raise Killed(count)

        def replace(src, dst):
            step()
            real_replace(src, dst)

        def unlink(self, missing_ok=False):
            step()
            real_unlink(self, missing_ok=missing_ok)

        def save(tensors, filename):
            step()
            real_save(tensors, filename)

        monkeypatch.setattr(os, "replace", replace)
        monkeypatch.setattr(Path, "unlink", unlink)
        monkeypatch.setattr(results, "save_file", save)
        try:
            recorder.checkpoint(2, *states(2))
        except Killed:
            killed_at.append(kill)
        finally:
            monkeypatch.undo()
        state = json.loads((recorder.run_dir / "checkpoint" / "state.json").read_text())
        assert_round(recorder.run_dir, state["round"])
        if kill not in killed_at:
            break
        recorder.checkpoint(1, *states(1))  # back to a round-1 checkpoint for the next k
    # 3 saves + 3 renames of adapters, the rename of state.json, the deletion of round 1's 3 files
    assert killed_at == list(range(10)), killed_at
    recorder.checkpoint(2, *states(2))
    assert sorted(p.name for p in (recorder.run_dir / "checkpoint").iterdir()) == [
        "client-partition-1-2.safetensors", "client-site-a-2.safetensors", "global-2.safetensors",
        "state.json"]


def test_a_kill_before_the_rename_of_state_json_keeps_the_old_one(recorder, monkeypatch):
    real_replace = os.replace

    def replace(src, dst):
        if Path(dst).name == "state.json":
            raise Killed(dst)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(Killed):
        recorder.checkpoint(2, *states(2))
    monkeypatch.undo()
    assert (recorder.run_dir / "checkpoint" / "state.json.tmp").exists()
    assert_round(recorder.run_dir, 1)
    recorder.checkpoint(2, *states(2))  # the next checkpoint clears the leftovers
    assert not list((recorder.run_dir / "checkpoint").glob("*.tmp"))
    assert not list((recorder.run_dir / "checkpoint").glob("*-1.safetensors"))
    assert_round(recorder.run_dir, 2)


def old_layout(tmp_path: Path, personal: dict) -> Path:
    """``global.safetensors`` + ``personal-<node>.safetensors`` + ``"personal": [nodes]``."""
    run_dir = tmp_path / "old"
    directory = run_dir / "checkpoint"
    directory.mkdir(parents=True)
    save_file(states(3)[0], str(directory / "global.safetensors"))
    for node, state in personal.items():
        save_file(state, str(directory / f"personal-{node}.safetensors"))
    (directory / "state.json").write_text(json.dumps({"round": 3, "personal": list(personal)}))
    return run_dir


def test_checkpoint_of_the_older_layout_without_per_client_models_still_loads(tmp_path):
    run_dir = old_layout(tmp_path, {})
    done, global_state, personal = load_checkpoint(run_dir)
    assert done == 3 and not personal
    for key, value in states(3)[0].items():
        np.testing.assert_array_equal(global_state[key], value, err_msg=key)
    Recorder(run_dir, num_rounds=5, layer_names=["a", "b", "c"]).checkpoint(4, *states(4))
    assert_round(run_dir, 4)
    assert not (run_dir / "checkpoint" / "global.safetensors").exists()


def test_per_client_models_kept_by_node_id_are_refused_in_one_line(tmp_path):
    """Node ids differ from run to run (Ray draws them): loading such models would hand them to
    the wrong clients."""
    run_dir = old_layout(tmp_path, states(3)[1])
    with pytest.raises(ValueError, match="by Flower node id") as err:
        load_checkpoint(run_dir)
    assert "\n" not in str(err.value) and "state.json" in str(err.value)


def test_log_line_cut_short_by_a_kill_is_dropped_on_resume(recorder):
    """A kill during the append of round 2's lines (before its checkpoint) leaves half a line."""
    rounds = recorder.run_dir / "rounds.jsonl"
    full = json.dumps({"round": 1, "evaluate": {"accuracy": 0.5}}) + "\n"
    rounds.write_text(full + '{"round": 2, "evalu')
    assert incomplete(recorder.run_dir, 2) == "only 1 of 2 rounds completed"
    assert load_checkpoint(recorder.run_dir)[0] == 1
    assert rounds.read_text() == full


def test_round_0_is_not_counted_as_a_completed_round(recorder):
    """Round 0 evaluates the initial adapters: rounds 0 and 1 of 2 are not a whole run."""
    rounds = recorder.run_dir / "rounds.jsonl"
    rounds.write_text("".join(json.dumps({"round": r, "evaluate": {"accuracy": 0.5}}) + "\n" for r in (0, 1)))
    assert incomplete(recorder.run_dir, 2) == "only 1 of 2 rounds completed"


def test_round_0_is_recorded_but_not_checkpointed(tmp_path):
    """A run killed before round 1 ends has nothing to resume: it starts over (the sweep reruns it)."""
    from strategies import RoundLog

    rec = Recorder(tmp_path / "run", num_rounds=2, layer_names=["a", "b", "c"])
    rec.end_round(RoundLog(0, eval_metrics={7: {"accuracy": 0.5, "num-examples": 2}}), *states(0))
    assert [json.loads(ln)["round"] for ln in (rec.run_dir / "rounds.jsonl").read_text().splitlines()] == [0]
    assert not (rec.run_dir / "checkpoint" / "state.json").exists()
