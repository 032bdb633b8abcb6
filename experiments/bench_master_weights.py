"""Benchmark: a training step with float32 LoRA adapters cast on every call against adapters in the
base's dtype from float32 master weights (`tasks.train.MasterWeights`), at equal loss curves.

    python -m experiments.bench_master_weights --model hf:/tmp/llava-1b --steps 20 --batch-size 8 \
        --threads 1 --repeats 2 --out docs/results/lntk-memory/cpu-1b/master-weights.json

Each path trains the same freshly built model (bfloat16 base, seed 0) on the same batches, the
``--budget`` first layers' adapters: the steps' process CPU seconds and wall seconds (each step
timed alone, `tasks.train._step`), and the loss of every step. The paths run ``--repeats`` times
each in ABBA order, so a change in the machine's load during the benchmark falls on both. Prints and
writes the median step of each path, the speed-up, the largest difference between the two loss
curves, and the load average at the end.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

from tasks.build import build_model
from tasks.data import load_partition
from tasks.models.registry import ModelSpec

training = importlib.import_module("tasks.train")  # the module: `tasks.train` is also its function


def curve(model_name: str, master: bool, steps: int, batch_size: int, budget: int, lr: float) -> dict:
    """One path's per-step losses and seconds (module doc), and the device it ran on."""
    part = load_partition("synthetic", 0, 5, "iid", seed=0)
    model = build_model(ModelSpec(model_name, dtype="bfloat16", seed=0, frozen_head=True), len(part.labels),
                        part.task)
    model.answers = tuple(part.labels)
    mask = np.zeros(len(model.layer_names), dtype=bool)
    mask[:budget] = True
    losses, cpu, wall = [], [], []
    real = training._step

    def timed(*args, **kwargs) -> float:
        start_cpu, start = time.process_time(), time.perf_counter()
        loss = real(*args, **kwargs)
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start)
        losses.append(loss)
        return loss

    training._step = timed
    try:
        training.train(model, part.train, mask, steps=steps, batch_size=batch_size, lr=lr, seed=0,
                       master_weights=master)
    finally:
        training._step = real
    return {"losses": losses, "step_cpu_s": cpu, "step_wall_s": wall, "device": str(model.device)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--budget", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each path, in ABBA order")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    paths = (("float32-adapters", False), ("master-weights", True))
    runs: dict[str, list[dict]] = {name: [] for name, _ in paths}
    for repeat in range(args.repeats):  # ABBA...: drift in the machine's load falls on both paths
        for name, master in paths if repeat % 2 == 0 else paths[::-1]:
            runs[name].append(curve(args.model, master, args.steps, args.batch_size, args.budget, args.lr))
    plain, mixed = runs["float32-adapters"][0], runs["master-weights"][0]

    def median(kind: str) -> dict[str, float]:
        """Each path's median step over its repeats, each curve's first step (warm-up) left out."""
        return {k: float(np.median([t for c in v for t in c[kind][1:]])) for k, v in runs.items()}

    record = {
        "model": args.model, "steps": args.steps, "batch_size": args.batch_size, "budget": args.budget,
        "lr": args.lr, "repeats": args.repeats, "threads": torch.get_num_threads(),
        "torch": torch.__version__, "machine": platform.machine(), "device": plain["device"],
        "load_average": os.getloadavg()[0],
        "median_step_cpu_s": median("step_cpu_s"), "median_step_wall_s": median("step_wall_s"),
        "largest_loss_difference": float(np.max(np.abs(np.subtract(plain["losses"], mixed["losses"])))),
        "loss_drop": float(plain["losses"][0] - plain["losses"][-1]),
        "runs": runs,
    }
    record["speedup_cpu"] = record["median_step_cpu_s"]["float32-adapters"] / record["median_step_cpu_s"][
        "master-weights"]
    shown = {k: v for k, v in record.items() if k != "runs"}
    print(json.dumps(shown, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
