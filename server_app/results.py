"""What a run records under ``results/<run-name>/`` and the per-round checkpoint it resumes from.

Files:
- ``config.json``: the validated run config, layer names, strategy;
- ``rounds.jsonl``: one line per round: weighted metrics, phase seconds, bytes, rejections;
- ``clients.jsonl``: one line per client per round: eigenvalues, scores, budget, mask, bytes
  down/up, train and evaluation metrics;
- ``fronts.jsonl``: the optimiser's Pareto front and picked solution per round (F3OCUS);
- ``checkpoint/``: global (and per-client) adapters + ``state.json`` after every round,
  written atomically; ``adapters.safetensors``: the final global adapters.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file
from tqdm import tqdm

from strategies import RoundLog
from strategies.layer_selection import weighted_means
from strategies.records import State

CHECKPOINT = "checkpoint"
MB = 1e6


def _atomic_write(path: Path, write) -> None:
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def _save_state(path: Path, state: State) -> None:
    _atomic_write(path, lambda tmp: save_file(
        {k: np.ascontiguousarray(v) for k, v in state.items()}, str(tmp)))


def _jsonable(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value)}")


class Recorder:
    """Writes a run's files; ``end_round`` is the strategy's ``on_round_end`` hook."""

    def __init__(self, run_dir: Path, num_rounds: int, layer_names: list[str],
                 progress_bar: bool = False, first_round: int = 1) -> None:
        self.run_dir = run_dir
        self.num_rounds = num_rounds
        self.layer_names = layer_names
        self.history: list[dict] = []
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / CHECKPOINT).mkdir(exist_ok=True)
        self._round_start = time.perf_counter()
        self.bar = (tqdm(total=num_rounds, initial=first_round - 1, desc="rounds", unit="round")
                    if progress_bar else None)

    def write_config(self, config: dict) -> None:
        text = json.dumps({**config, "layer-names": self.layer_names}, indent=2)
        _atomic_write(self.run_dir / "config.json", lambda tmp: tmp.write_text(text))

    def _append(self, name: str, rows: list[dict]) -> None:
        with open(self.run_dir / name, "a", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, default=_jsonable) + "\n")

    def end_round(self, log: RoundLog, global_state: State, personal: dict[int, State]) -> None:
        """Append this round's lines, print its summary line, then checkpoint (atomically)."""
        seconds = time.perf_counter() - self._round_start
        self._round_start = time.perf_counter()
        clients = sorted(set(log.masks) | set(log.eval_metrics) | set(log.reports))
        rows = [self._client_row(log, node) for node in clients]
        summary = {
            "round": log.server_round,
            "seconds": seconds,
            "phase-seconds": log.seconds,
            "train": weighted_means(log.train_metrics),
            "evaluate": weighted_means(log.eval_metrics),
            "clients": len(log.masks),
            "aggregated": log.aggregated,
            "bytes-down": sum(log.bytes_down.values()),
            "bytes-up": sum(log.bytes_up.values()),
            "rejected": log.rejected,
            "failures": len(log.rejected),
        }
        self._append("clients.jsonl", rows)
        self._append("rounds.jsonl", [summary])
        if log.assignment is not None:
            self._append("fronts.jsonl", [{"round": log.server_round, **log.assignment.to_dict()}])
        self.history.append(summary)
        if self.bar is None:
            print(self.round_line(summary), flush=True)
        else:
            self.bar.write(self.round_line(summary))
            self.bar.update(1)
        self.checkpoint(log.server_round, global_state, personal)

    def _client_row(self, log: RoundLog, node: int) -> dict:
        report = log.reports.get(node)
        mask = log.masks.get(node)
        return {
            "round": log.server_round,
            "node": node,
            "partition-id": report.partition_id if report else
            log.eval_metrics.get(node, {}).get("partition-id", -1),
            "eigenvalues": report.eigenvalues if report else None,
            "scores": report.scores if report else None,
            "budget": report.budget if report else None,
            "mask": np.flatnonzero(mask).tolist() if mask is not None else None,
            "bytes-down": log.bytes_down.get(node, 0),
            "bytes-up": log.bytes_up.get(node, 0),
            "train": log.train_metrics.get(node),
            "evaluate": log.eval_metrics.get(node),
        }

    def round_line(self, summary: dict) -> str:
        ev = summary["evaluate"]
        score = ev.get("accuracy", ev.get("f1_micro", float("nan")))
        return (f"round {summary['round']}/{self.num_rounds} | "
                f"{'acc' if 'accuracy' in ev else 'f1'} {score:.4f} | "
                f"loss {ev.get('loss', float('nan')):.4f} | {summary['seconds']:.1f} s | "
                f"up {summary['bytes-up'] / MB:.2f} MB | rejected {summary['failures']}")

    def checkpoint(self, server_round: int, global_state: State, personal: dict[int, State]
                   ) -> None:
        """Global and per-client adapters first, then ``state.json`` naming the round."""
        directory = self.run_dir / CHECKPOINT
        _save_state(directory / "global.safetensors", global_state)
        for node, state in personal.items():
            _save_state(directory / f"personal-{node}.safetensors", state)
        state = {"round": server_round, "personal": sorted(personal)}
        _atomic_write(directory / "state.json", lambda tmp: tmp.write_text(json.dumps(state)))

    def finish(self, global_state: State) -> None:
        _save_state(self.run_dir / "adapters.safetensors", global_state)
        if self.bar is not None:
            self.bar.close()


def load_checkpoint(run_dir: Path) -> tuple[int, State, dict[int, State]]:
    """Last completed round, its global adapters and per-client states; trims later log lines."""
    directory = run_dir / CHECKPOINT
    state_file = directory / "state.json"
    if not state_file.exists():
        raise FileNotFoundError(f"resume-from = {str(run_dir)!r}: no checkpoint at {state_file}")
    state = json.loads(state_file.read_text())
    done = int(state["round"])
    global_state = load_file(str(directory / "global.safetensors"))
    personal = {int(n): load_file(str(directory / f"personal-{n}.safetensors"))
                for n in state["personal"]}
    for name in ("rounds.jsonl", "clients.jsonl", "fronts.jsonl"):
        path = run_dir / name
        if path.exists():  # drop lines of a round that ran after the checkpoint but did not finish
            lines = [ln for ln in path.read_text().splitlines() if json.loads(ln)["round"] <= done]
            _atomic_write(path, lambda tmp, lines=lines: tmp.write_text(
                "".join(ln + "\n" for ln in lines)))
    return done, global_state, personal
