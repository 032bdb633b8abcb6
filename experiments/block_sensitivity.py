"""Does LNTK find the blocks that matter? One decoder block trained at a time, against its λ₁.

    python -m experiments.block_sensitivity --config conf/bench-gen-cover.toml \
        --out docs/results/bench-gen-paper/sensitivity

Independent of the federated noise: from the run config's starting model (for the paper-regime
configs, `smol-llava-aligned` with its frozen stage-1 projector), each selectable block in turn
gets the only trainable LoRA adapter, trained for ``--steps`` steps of the config's batch size and
learning rate on the pooled data of every client (one iid share of the whole data set, every
question type), and is scored on a fixed held-out set of ``--max-test`` test questions by the
closed-set answer scores (`GenerativeVLM.answer_scores`): accuracy and the right answer's negative
log-likelihood. A block's gain is what it buys over the untrained start (accuracy up, NLL down).
LNTK's principal eigenvalue λ₁ of every block (F3OCUS Eq. 5, `tasks.lntk`) is taken once at the
start on ``--score-batch`` training questions, as a client scores its layers.

``--stride n`` trains every n-th block only (the eigenvalues of all are recorded). Prints and
writes (``--out``): ``blocks.csv`` (block, λ₁, normalised score, accuracy, NLL, the two
gains) and ``summary.json``: Spearman's ρ of λ₁ with each gain and its 95 % percentile bootstrap
interval over the held-out questions (``--bootstrap`` resamples of the question set, the same
resample for every block), the start's accuracy and NLL, and the seconds spent.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
import tomllib
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

from tasks.build import build_model
from tasks.data import load_partition
from tasks.lntk import layer_scores
from tasks.models.registry import ModelSpec
from tasks.train import closed_set_answers, train


def bootstrap_rho(eigenvalues: np.ndarray, gains: np.ndarray, draws: int, seed: int) -> list[float]:
    """95 % percentile interval of Spearman's ρ(λ₁, mean gain) over resampled questions;
    ``gains``: (blocks, questions)."""
    rng = np.random.default_rng(seed)
    n = gains.shape[1]
    rhos = [spearmanr(eigenvalues, gains[:, rng.integers(0, n, n)].mean(1)).statistic for _ in range(draws)]
    return [float(np.nanpercentile(rhos, 2.5)), float(np.nanpercentile(rhos, 97.5))]


def run(args: argparse.Namespace) -> dict:
    config = tomllib.loads(Path(args.config).read_text())
    spec = ModelSpec(config["model"], seed=args.seed, dtype=config.get("dtype", "float32"),
                     frozen_head=config.get("head") == "frozen", lora_rank=config.get("lora-rank", 8))
    pooled = load_partition(config["dataset"], 0, 1, "iid", seed=args.seed)
    rng = np.random.default_rng(args.seed)
    held_out = [pooled.test[i] for i in np.sort(rng.choice(len(pooled.test), args.max_test, replace=False))]
    model = build_model(spec, len(pooled.labels), pooled.task)
    model.answers = tuple(pooled.labels)
    start = time.perf_counter()
    scoring = [pooled.train[i] for i in rng.choice(len(pooled.train), args.score_batch, replace=False)]
    lntk = layer_scores(model, scoring, piece_size=config.get("batch-size"))
    initial = {k: v.clone() for k, v in model.state_dict().items() if "lora_" in k}
    hits0, nll0 = closed_set_answers(model, held_out)
    rows, acc_gain, nll_gain = [], [], []
    blocks = range(len(model.layer_names))[::args.stride]
    for block in blocks:
        model.load_state_dict(initial, strict=False)
        mask = np.zeros(len(model.layer_names), dtype=bool)
        mask[block] = True
        train(model, pooled.train, mask, steps=args.steps, batch_size=config.get("batch-size", 8),
              lr=config.get("lr", 1e-3), seed=args.seed)
        hits, nll = closed_set_answers(model, held_out)
        acc_gain.append(hits.astype(float) - hits0)
        nll_gain.append(nll0 - nll)
        rows.append({"block": block, "eigenvalue": float(lntk.eigenvalues[block]),
                     "score": float(lntk.scores[block]), "accuracy": float(hits.mean()),
                     "nll": float(nll.mean()), "accuracy_gain": float(acc_gain[-1].mean()),
                     "nll_gain": float(nll_gain[-1].mean())})
        print(json.dumps(rows[-1]), flush=True)
    acc_gain, nll_gain = np.array(acc_gain), np.array(nll_gain)
    eig = lntk.eigenvalues[list(blocks)]
    summary = {
        "config": args.config, "steps": args.steps, "held_out": args.max_test,
        "score_batch": args.score_batch, "seed": args.seed, "start_accuracy": float(hits0.mean()),
        "start_nll": float(nll0.mean()),
        "rho_accuracy_gain": float(spearmanr(eig, acc_gain.mean(1)).statistic),
        "rho_accuracy_gain_95": bootstrap_rho(eig, acc_gain, args.bootstrap, args.seed),
        "rho_nll_gain": float(spearmanr(eig, nll_gain.mean(1)).statistic),
        "rho_nll_gain_95": bootstrap_rho(eig, nll_gain, args.bootstrap, args.seed),
        "blocks": list(blocks), "eigenvalues_all_blocks": [float(v) for v in lntk.eigenvalues],
        "best_blocks_by_nll_gain": [blocks[i] for i in np.argsort(-nll_gain.mean(1))[:5]],
        "top_blocks_by_eigenvalue": [blocks[i] for i in np.argsort(-eig)[:5]],
        "seconds": round(time.perf_counter() - start, 1), "torch_threads": torch.get_num_threads(),
    }
    print(json.dumps(summary))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "blocks.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="run-config file: model, data set, batch size, lr")
    parser.add_argument("--steps", type=int, default=20, help="training steps per block")
    parser.add_argument("--max-test", type=int, default=300, help="held-out test questions")
    parser.add_argument("--score-batch", type=int, default=16, help="training questions LNTK scores")
    parser.add_argument("--stride", type=int, default=1, help="train every n-th block only (0, n, 2n, ...)")
    parser.add_argument("--bootstrap", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="", help="folder for blocks.csv and summary.json")
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
