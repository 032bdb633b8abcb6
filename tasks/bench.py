"""Benchmark: LNTK scoring overhead relative to one local training round (paper supp. E, item 4:
F3OCUS's overhead is 151.4 s vs 137.5 s per round, i.e. ~10%).

    python -m tasks.bench --model minilm-effnet --dataset easy-vqa --json

Defaults (the app's run config uses the same): LNTK on SCORING_BATCH = 16 training samples
(mode "loss"); one local round = LOCAL_STEPS = 20 AdamW steps of BATCH_SIZE = 16, lr 1e-4,
head_lr 3e-3, on BUDGET = 4 layers (the top-4 LNTK layers, as F3OCUS would train them). The
client is partition 0 of 5 (by-question-type). Before timing, one forward pass warms up the
kernels (both timings then measure steady state). Prints lntk_s, train_round_s,
overhead = lntk_s / train_round_s, samples_per_s (training), peak_rss_mb (whole process), and,
because wall time on a shared machine depends on the other processes, the same in process CPU
seconds (lntk_cpu_s, train_round_cpu_s, overhead_cpu) and the 1-minute load average.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import numpy as np
import torch

from tasks.data import load_partition
from tasks.lntk import layer_scores
from tasks.models import build_model
from tasks.train import train

SCORING_BATCH = 16
LOCAL_STEPS = 20
BATCH_SIZE = 16
LR = 1e-4
HEAD_LR = 3e-3
BUDGET = 4


def run(
    model_name: str,
    dataset: str,
    *,
    scoring_batch: int = SCORING_BATCH,
    steps: int = LOCAL_STEPS,
    batch_size: int = BATCH_SIZE,
    budget: int = BUDGET,
    seed: int = 0,
) -> dict[str, float]:
    part = load_partition(dataset, 0, 5, "by-question-type", seed=seed)
    model = build_model(model_name, len(part.labels), task=part.task, seed=seed)
    with torch.no_grad():  # warm-up
        model(model.collate(part.train[:batch_size]))
    cpu = time.process_time()
    scores = layer_scores(model, part.train[:scoring_batch])
    lntk_cpu = time.process_time() - cpu
    mask = np.zeros(len(model.layer_names), bool)
    mask[np.argsort(-scores.scores)[: min(budget, len(mask))]] = True
    start, cpu = time.perf_counter(), time.process_time()
    train(model, part.train, mask, steps=steps, batch_size=batch_size, lr=LR, head_lr=HEAD_LR)
    train_s, train_cpu = time.perf_counter() - start, time.process_time() - cpu
    return {
        "model": model_name,
        "dataset": dataset,
        "layers": len(model.layer_names),
        "scoring_batch": scoring_batch,
        "steps": steps,
        "batch_size": batch_size,
        "budget": int(mask.sum()),
        "lntk_s": round(scores.seconds, 4),
        "train_round_s": round(train_s, 4),
        "overhead": round(scores.seconds / train_s, 4),
        "lntk_cpu_s": round(lntk_cpu, 4),
        "train_round_cpu_s": round(train_cpu, 4),
        "overhead_cpu": round(lntk_cpu / train_cpu, 4),
        "samples_per_s": round(steps * batch_size / train_s, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "torch_threads": torch.get_num_threads(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm-effnet")
    parser.add_argument("--dataset", default="easy-vqa")
    parser.add_argument("--scoring-batch", type=int, default=SCORING_BATCH)
    parser.add_argument("--steps", type=int, default=LOCAL_STEPS)
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    parser.add_argument("--budget", type=int, default=BUDGET)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    result = run(
        args.model,
        args.dataset,
        scoring_batch=args.scoring_batch,
        steps=args.steps,
        batch_size=args.batch_size,
        budget=args.budget,
        seed=args.seed,
    )
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>14}: {value}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
