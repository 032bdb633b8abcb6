"""What a run records under ``results/<run-name>/`` and the per-round checkpoint it resumes from.

Files:
- ``config.json``: the validated run config, layer names, strategy;
- ``rounds.jsonl``: one line per round: weighted metrics, phase seconds, message exchanges and
  messages sent, bytes, rejections, and the ``epsilon`` spent after it: with ``dp = "client"`` every
  site's (`privacy.client`, PLD; ``epsilon-rdp`` beside it), with ``dp = "sample"`` the most any
  client has spent; round 0 is
  the initial adapters' evaluation (nothing trained);
- ``clients.jsonl``: one line per client per round: eigenvalues, scores, budget, mask, bytes
  down/up, train and evaluation metrics (round 0: the initial evaluation and round 1's scores go
  out in one message, counted in round 0's bytes; the scores are recorded with round 1; with
  ``dp = "sample"``: the ε spent, ``dp-epsilon``; a client that sat the round out to stay within it
  has ``dp-sat-out`` = 1 there);
- ``fronts.jsonl``: the optimiser's Pareto front and picked solution per round (F3OCUS);
- ``checkpoint/``: after every trained round, ``global-<round>.safetensors`` (and each client's own
  global model, ``client-<partition id>-<round>.safetensors``) and ``state.json`` naming the round
  and its files;
  ``adapters.safetensors``: the final global adapters;
- ``stopped.json``: only for a run that ended before its last round by design (its privacy budget
  spent, `privacy.client`): the last round run and why, so the run counts as finished.

The checkpoint is atomic as a set: a round's adapter files get new names, ``state.json`` is
replaced (``os.replace``) only once they are all written, and the previous round's files are
deleted only after that. A kill at any instant therefore leaves a ``state.json`` that names a
complete set of files of one round; files of a round it does not name are leftovers and ignored.
On resume, log lines of rounds after the checkpoint, and a line cut short by a kill during its
append, are dropped. Older checkpoints load unless they hold per-client models: those were keyed by
Flower's node ids, which differ from run to run, so they are refused rather than handed to the
wrong clients.
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
STATE_FILE = "state.json"
STOPPED_FILE = "stopped.json"
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
        self.first_round = first_round
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

    def end_round(self, log: RoundLog, global_state: State, personal: dict[str, State]) -> None:
        """Append this round's lines, print its summary line, then checkpoint (atomically)."""
        seconds = time.perf_counter() - self._round_start
        self._round_start = time.perf_counter()
        nodes = set(log.masks) | set(log.eval_metrics) | set(log.reports)
        rows = sorted((self._client_row(log, node) for node in nodes),
                      key=lambda row: (row["partition-id"], row["client"] or "", row["node"]))
        summary = {
            "round": log.server_round,
            "seconds": seconds,
            "phase-seconds": log.seconds,
            "train": weighted_means(log.train_metrics),
            "evaluate": weighted_means(log.eval_metrics),
            "clients": len(log.masks),
            "aggregated": log.aggregated,
            "exchanges": log.exchanges,
            "messages": log.messages,
            "bytes-down": sum(log.bytes_down.values()),
            "bytes-up": sum(log.bytes_up.values()),
            "rejected": log.rejected,
            "failures": len(log.rejected),
            "sat-out": sorted(log.sat_out),
        }
        spent = [m["dp-epsilon"] for m in (*log.train_metrics.values(), *log.sat_out.values())
                 if "dp-epsilon" in m]
        if log.epsilon is not None or spent:  # client: every site's; sample: the most any client spent
            summary["epsilon"] = log.epsilon if log.epsilon is not None else max(spent)
        if log.epsilon_rdp is not None:
            summary["epsilon-rdp"] = log.epsilon_rdp
        self._append("clients.jsonl", rows)
        self._append("rounds.jsonl", [summary])
        if log.assignment is not None:
            self._append("fronts.jsonl", [{"round": log.server_round, **log.assignment.to_dict()}])
        self.history.append(summary)
        if self.bar is None:
            print(self.round_line(summary), flush=True)
        else:
            self.bar.write(self.round_line(summary))
            self.bar.update(int(log.server_round > 0))
        if log.server_round > 0:  # round 0 trained nothing; a run killed before round 1 starts over
            self.checkpoint(log.server_round, global_state, personal)

    def _client_row(self, log: RoundLog, node: int) -> dict:
        report = log.reports.get(node)
        mask = log.masks.get(node)
        return {
            "round": log.server_round,
            "node": node,
            "client": log.clients.get(node),
            "partition-id": report.partition_id if report else
            log.eval_metrics.get(node, {}).get("partition-id", -1),
            "eigenvalues": report.eigenvalues if report else None,
            "scores": report.scores if report else None,
            "budget": report.budget if report else None,
            "mask": np.flatnonzero(mask).tolist() if mask is not None else None,
            "bytes-down": log.bytes_down.get(node, 0),
            "bytes-up": log.bytes_up.get(node, 0),
            "train": log.train_metrics.get(node, log.sat_out.get(node)),
            "evaluate": log.eval_metrics.get(node),
        }

    def round_line(self, summary: dict) -> str:
        ev = summary["evaluate"]
        score = ev.get("accuracy", ev.get("f1_micro", float("nan")))
        return (f"round {summary['round']}/{self.num_rounds} | "
                f"{'acc' if 'accuracy' in ev else 'f1'} {score:.4f} | "
                f"loss {ev.get('loss', float('nan')):.4f} | {summary['seconds']:.1f} s | "
                f"up {summary['bytes-up'] / MB:.2f} MB | rejected {summary['failures']}"
                + (f" | ε {summary['epsilon']:.3g}" if "epsilon" in summary else ""))

    def checkpoint(self, server_round: int, global_state: State, personal: dict[str, State]
                   ) -> None:
        """This round's adapter files under new names, then ``state.json`` naming them, then the
        files of earlier rounds are pruned (see the module doc: atomic as a set). ``personal`` is
        keyed by client id (`tasks.names.CLIENT_ID`: safe in a file name)."""
        directory = self.run_dir / CHECKPOINT
        files = {"global": f"global-{server_round}.safetensors",
                 "clients": {client: f"client-{client}-{server_round}.safetensors"
                             for client in sorted(personal)}}
        _save_state(directory / files["global"], global_state)
        for client, state in personal.items():
            _save_state(directory / files["clients"][client], state)
        text = json.dumps({"round": server_round, **files})
        _atomic_write(directory / STATE_FILE, lambda tmp: tmp.write_text(text))
        keep = {STATE_FILE, files["global"], *files["clients"].values()}
        for path in directory.iterdir():
            if path.name not in keep:
                path.unlink(missing_ok=True)

    def finish(self, global_state: State, stopped: str | None = None) -> None:
        """The final adapters, and ``stopped.json`` when the run ended early by design (module doc)."""
        _save_state(self.run_dir / "adapters.safetensors", global_state)
        if stopped is not None:
            last = self.history[-1]["round"] if self.history else self.first_round - 1
            text = json.dumps({"after-round": last, "reason": stopped})
            _atomic_write(self.run_dir / STOPPED_FILE, lambda tmp: tmp.write_text(text))
        if self.bar is not None:
            self.bar.close()


def _checkpoint_files(state: dict, state_file: Path) -> tuple[str, dict[str, str]]:
    """The global file and the per-client files by client id that a ``state.json`` names."""
    if state.get("personal"):
        raise ValueError(f"{state_file} keeps per-client models by Flower node id (an older layout); "
                         "node ids differ from run to run, so this run cannot be resumed")
    clients = dict(state.get("clients", {}))
    return state.get("global", "global.safetensors"), clients


def load_checkpoint(run_dir: Path) -> tuple[int, State, dict[str, State]]:
    """Last completed round, its global adapters and per-client states; trims later log lines."""
    directory = run_dir / CHECKPOINT
    state_file = directory / STATE_FILE
    if not state_file.exists():
        raise FileNotFoundError(f"resume-from = {str(run_dir)!r}: no checkpoint at {state_file}")
    state = json.loads(state_file.read_text())
    done = int(state["round"])
    global_file, personal_files = _checkpoint_files(state, state_file)
    global_state = load_file(str(directory / global_file))
    personal = {client: load_file(str(directory / name)) for client, name in personal_files.items()}
    for name in ("rounds.jsonl", "clients.jsonl", "fronts.jsonl"):
        path = run_dir / name
        if path.exists():  # drop lines of a round that ran after the checkpoint but did not finish
            lines = [ln for ln in path.read_text().splitlines() if _round_of(ln) <= done]
            _atomic_write(path, lambda tmp, lines=lines: tmp.write_text(
                "".join(ln + "\n" for ln in lines)))
    return done, global_state, personal


def _round_of(line: str) -> float:
    """The round of a log line; infinite for a line cut short by a kill during its append."""
    try:
        return json.loads(line)["round"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return float("inf")
