"""Benchmark: does LNTK scoring keep no more memory than a training step, at equal sample counts?

    python -m experiments.random_llava /tmp/llava-1b --shape 1b
    python -m experiments.bench_lntk_memory --model hf:/tmp/llava-1b --batch-size 8 --score-batch-sizes 8,16 \
        --budget 4 --out docs/results/lntk-memory/cpu-1b/equal-counts.jsonl
    python -m experiments.bench_lntk_memory ... --gradient-checkpointing --out ...   # the same, recomputed

Memory here is what autograd keeps for the backward pass (`tasks.lntk_pieces.kept_bytes`: saved
tensors and the inputs checkpointed blocks keep, the weights excepted), the part of a pass's peak
that grows with its samples; it is counted exactly, so the figures do not depend on the machine's
allocator or load. For each scoring batch it records: the piece the client's scoring chooses for a
training step of ``--batch-size`` and ``--budget`` (`tasks.lntk.layer_scores` with ``step``), the
bytes one scoring pass of that piece keeps (the LNTK peak), the bytes one pass of the whole scoring
batch would keep (scoring unpieced), and the bytes a training
step of ``--batch-size`` keeps with the budget's last layers (the reference mask, the least of all
masks of that many layers) and with its first layers (the most): the training peaks, measured as
clients train (LoRA in the base's dtype from float32 masters; ``--no-master-weights``: float32). One JSON line
per scoring batch, with its settings beside its figures; a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

import tasks.lntk as lntk
from tasks.adapters import layer_parameter_names
from tasks.build import build_model
from tasks.data import load_partition
from tasks.lntk_hooks import forward_kept, hook_sites
from tasks.lntk_pieces import TrainingStep, checkpointed, training_kept
from tasks.models.registry import ModelSpec

MIB = 2**20


def measure(model, samples: list, step: TrainingStep) -> dict:
    """The figures of one scoring batch (module doc), in MiB."""
    groups = [layer_parameter_names(model, layer) for layer in range(len(model.layer_names))]
    start = time.perf_counter()
    piece = lntk.layer_scores(model, samples, step=step).piece_size
    seconds = time.perf_counter() - start
    batch = model.collate(samples)
    labels = batch.pop("labels")
    with torch.no_grad():
        emb = model.embed(batch)
    n = len(samples)
    sites = hook_sites(model, groups)
    with checkpointed(model):
        pieced = forward_kept(sites, next(lntk._pieces(model, emb, labels, "loss", [(0, piece)])), model)
        whole = forward_kept(sites, next(lntk._pieces(model, emb, labels, "loss", [(0, n)])), model)
    train = model.collate(samples[:step.batch_size])
    train_labels = train.pop("labels")
    with torch.no_grad():
        train_emb = model.embed(train)
    first = np.zeros(len(groups), dtype=bool)
    first[:step.budget] = True
    least, most = (training_kept(model, train_emb, train_labels, mask, step.master_weights)
                   for mask in (step.reference_mask(len(groups)), first))
    return {"piece": piece, "lntk_peak_mib": pieced / MIB, "lntk_whole_batch_mib": whole / MIB,
            "training_peak_least_mib": least / MIB, "training_peak_first_layers_mib": most / MIB,
            "lntk_over_training": pieced / least, "lntk_seconds": round(seconds, 2)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a model name, e.g. hf:/tmp/llava-1b")
    parser.add_argument("--dataset", default="synthetic")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch-size", type=int, default=8, help="the training step's batch")
    parser.add_argument("--score-batch-sizes", default="8,16", help="scoring batches, comma-separated")
    parser.add_argument("--budget", type=int, default=4, help="layers the training step trains")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--master-weights", action=argparse.BooleanOptionalAction, default=True,
                        help="training's LoRA in the base's dtype from float32 masters, as clients train")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--out", type=Path, help="append one JSON line per scoring batch here")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = [int(s) for s in args.score_batch_sizes.split(",")]
    part = load_partition(args.dataset, 0, 5, "iid", seed=0, max_train=max(sizes + [args.batch_size]))
    spec = ModelSpec(args.model, dtype=args.dtype, gradient_checkpointing=args.gradient_checkpointing)
    model = build_model(spec, len(part.labels), part.task)
    model.answers = tuple(part.labels)
    step = TrainingStep(args.batch_size, args.budget, args.master_weights)
    print("| gradient checkpointing | scoring batch | batch size | budget | piece | LNTK peak MiB | whole "
          "scoring batch MiB | training peak MiB (least; first layers) | LNTK / training |")
    print("|---|---|---|---|---|---|---|---|---|")
    for size in sizes:
        figures = measure(model, part.train[:size], step)
        record = {"model": args.model, "dtype": args.dtype,
                  "gradient_checkpointing": args.gradient_checkpointing,
                  "master_weights": args.master_weights, "scoring_batch": size,
                  "batch_size": args.batch_size, "budget": args.budget, "layers": len(model.layer_names),
                  "memory": "saved-for-backward bytes (kept_bytes)", "torch": torch.__version__,
                  "threads": torch.get_num_threads(), "machine": platform.machine(), **figures}
        print(f"| {'on' if args.gradient_checkpointing else 'off'} | {size} | {args.batch_size} | "
              f"{args.budget} | {figures['piece']} | {figures['lntk_peak_mib']:.1f} | "
              f"{figures['lntk_whole_batch_mib']:.1f} | {figures['training_peak_least_mib']:.1f}; "
              f"{figures['training_peak_first_layers_mib']:.1f} | {figures['lntk_over_training']:.3f} |",
              flush=True)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            with open(args.out, "a") as fh:
                fh.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
