"""Peak memory and time of LNTK scoring alone in any checkout of this project, measured the same way
for each: the before/after comparison of tasks.lntk on one model and machine (README.md here).

    python docs/results/lntk-memory/lntk_alone.py <checkout> hf:/tmp/llava-1b [--gradient-checkpointing]

The tasks package of <checkout> is imported (e.g. a `git worktree` of an earlier commit); the memory
is measured by this folder's checkout's `experiments.bench_client.PhasePeak`. As the benchmark does:
synthetic partition 0 of 5, bfloat16, one warm-up forward pass of 16 samples, then LNTK on 8 samples
twice (pieces of at most 16 where the checkout has them). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[3]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path)
    parser.add_argument("model")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(args.checkout.resolve()))
    import torch

    from tasks.build import build_model
    from tasks.data import load_partition
    from tasks.lntk import layer_scores
    from tasks.models.registry import ModelSpec

    source = importlib.util.spec_from_file_location("bench", HERE / "experiments" / "bench_client.py")
    bench = importlib.util.module_from_spec(source)
    source.loader.exec_module(bench)
    part = load_partition("synthetic", 0, 5, "by-question-type", seed=0)
    spec = ModelSpec(args.model, dtype="bfloat16", gradient_checkpointing=args.gradient_checkpointing)
    model = build_model(spec, len(part.labels), part.task)
    model.answers = tuple(part.labels)
    with torch.no_grad():
        model(model.collate(part.train[:16]))
    pieces = {"piece_size": 16} if "piece_size" in inspect.signature(layer_scores).parameters else {}
    out = {"checkout": str(args.checkout), "lntk": inspect.getsourcefile(layer_scores), "model": args.model,
           "gradient_checkpointing": args.gradient_checkpointing}
    for call in ("first", "second"):
        with bench.PhasePeak(model.device) as memory:
            wall, cpu = time.perf_counter(), time.process_time()
            scores = layer_scores(model, part.train[:8], **pieces)
            out[f"{call}_s"] = round(time.perf_counter() - wall, 2)
            out[f"{call}_cpu_s"] = round(time.process_time() - cpu, 2)
        out[f"{call}_base_mb"], out[f"{call}_peak_mb"] = memory.base_mb, memory.peak_mb
    out["eigenvalues"] = [float(f"{v:.6g}") for v in scores.eigenvalues]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
