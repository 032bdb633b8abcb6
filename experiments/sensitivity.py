"""Screening for a benchmark where layer choice matters (docs/results/sensitivity.md).

    python -m experiments.sensitivity --dataset easy-vqa --qtype yes/no --lr 1e-4 --head-lr 1e-4 --steps 160

A centralised proxy of a federated run, cheap enough to try many settings: one client's share of a
data set (partition `--partition` of `--num-partitions`, iid), local training only, with the heads
alone (``none``: no adapter trains), the adapters of the last k layers (``last``) or of all layers
(``all``), each from the same freshly built model. Prints one JSON line per mode (test accuracy,
the majority-answer accuracy of the same test samples, seconds) and then the gaps all − none and
all − last in points. A setting that shows no gap here will not show one federated; one that does
is then checked with the federated runs (`run_simulation.py`, 3 seeds) that decide.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator, Sequence

import numpy as np

from tasks.build import build_model
from tasks.data import load_partition, majority_accuracy
from tasks.models.registry import ModelSpec
from tasks.train import evaluate, train

MODES = ("none", "last", "all")


def layer_mask(mode: str, num_layers: int, last_k: int) -> np.ndarray:
    """Which layers' adapters train: none, the last `last_k`, or all."""
    if mode not in MODES:
        raise ValueError(f"--modes: unknown mode {mode!r}; choose from {', '.join(MODES)}")
    mask = np.zeros(num_layers, dtype=bool)
    if mode == "all":
        mask[:] = True
    elif mode == "last":
        mask[-last_k:] = True
    return mask


def screen(args: argparse.Namespace) -> Iterator[dict]:
    """Train and evaluate one model per mode (module doc); yields one result dict per mode."""
    modes = args.modes.split(",")
    for mode in modes:
        layer_mask(mode, 1, 1)  # a bad mode fails before any training
    part = load_partition(args.dataset, args.partition, args.num_partitions, "iid", seed=args.seed)
    train_set = [s for s in part.train if not args.qtype or s.qtype == args.qtype][: args.max_train]
    test_set = [s for s in part.test if not args.qtype or s.qtype == args.qtype][: args.max_test]
    if not train_set or not test_set:
        raise ValueError(f"--qtype {args.qtype!r}: partition {part.name} has no such samples")
    for mode in modes:
        model = build_model(ModelSpec(args.model, seed=args.seed), len(part.labels), part.task)
        mask = layer_mask(mode, len(model.layer_names), args.last_k)
        start = time.perf_counter()
        train(model, train_set, mask, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
              head_lr=args.head_lr, seed=args.seed)
        accuracy = evaluate(model, test_set, batch_size=64)["accuracy"]
        yield {"mode": mode, "accuracy": round(accuracy, 4),
               "majority": round(majority_accuracy(test_set), 4), "n_train": len(train_set),
               "n_test": len(test_set), "seconds": round(time.perf_counter() - start, 1)}


def gaps(results: Sequence[dict]) -> dict[str, float]:
    """all − none and all − last in points of accuracy, where those modes ran."""
    acc = {r["mode"]: 100 * r["accuracy"] for r in results}
    return {f"all-{m}": round(acc["all"] - acc[m], 2) for m in ("none", "last") if "all" in acc and m in acc}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m experiments.sensitivity",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm-effnet")
    parser.add_argument("--dataset", default="easy-vqa")
    parser.add_argument("--qtype", default="", help="keep only questions of this type, e.g. yes/no")
    parser.add_argument("--partition", type=int, default=0)
    parser.add_argument("--num-partitions", type=int, default=5)
    parser.add_argument("--max-train", type=int, default=2000)
    parser.add_argument("--max-test", type=int, default=300)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--head-lr", type=float, default=3e-3)
    parser.add_argument("--last-k", type=int, default=2)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    settings = {k: v for k, v in vars(args).items() if k != "modes"}
    results = []
    for result in screen(args):
        results.append(result)
        print(json.dumps({**settings, **result}), flush=True)
    print(json.dumps({**settings, "gaps": gaps(results)}), flush=True)


if __name__ == "__main__":
    main()
