"""Where a local training step's device time goes: `torch.profiler` over a few steps of
`tasks.train` on a model, the CUDA kernels' time summed by kind (matrix products, attention,
normalisation and element-wise work, copies), for the share of the GPU's peak a step reaches
(`experiments.bench_client`'s ``step_peak_share``).

    python -m experiments.profile_step --model hf:/tmp/llava-7b-random --device cuda --json
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from tasks.build import build_model
from tasks.data import load_partition
from tasks.models.registry import ModelSpec
from tasks.train import train

KINDS = (
    ("matmul", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "matmul", "splitk", "aten::mm", "aten::addmm",
                "aten::bmm")),
    ("attention", ("flash", "fmha", "attention", "efficient_attention", "softmax")),
    ("copy", ("copy", "memcpy", "memset", "cat", "index")),
    ("norm", ("norm", "rsqrt", "mean")),
)
"""Substrings of a kernel's name, by kind (the first that matches); the rest is "other"."""


def kind(name: str) -> str:
    lowered = name.lower()
    return next((k for k, marks in KINDS if any(m in lowered for m in marks)), "other")


def profile(model_name: str, *, steps: int = 3, warmup: int = 2, batch_size: int = 16, budget: int = 4,
            device: str = "cuda", dtype: str = "bfloat16", top: int = 12) -> dict:
    """Seconds of CUDA kernel time (on a CPU: operator self time) per step by kind, and the ``top``
    kernels, over ``steps`` steps after ``warmup`` (training the first ``budget`` layers' adapters,
    synthetic data)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    part = load_partition("synthetic", 0, 5, "by-question-type:0.5", seed=0)
    model = build_model(ModelSpec(model_name, seed=0, dtype=dtype, device=device), len(part.labels),
                        part.task).to(device)
    model.answers = tuple(part.labels)
    mask = np.zeros(len(model.layer_names), bool)
    mask[:budget] = True
    args = {"batch_size": batch_size, "lr": 1e-4, "device": device}
    cuda = torch.device(device).type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    train(model, part.train, mask, steps=warmup, **args)
    sync()
    with torch_profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        train(model, part.train, mask, steps=steps, **args)
        sync()
    kernels = [(e.key, (e.device_time_total if cuda else e.self_cpu_time_total) / 1e6)
               for e in prof.key_averages()]
    kernels = [(name, seconds) for name, seconds in kernels if seconds > 0]
    by_kind: dict[str, float] = {}
    for name, seconds in kernels:
        by_kind[kind(name)] = by_kind.get(kind(name), 0.0) + seconds / steps
    kernels.sort(key=lambda k: -k[1])
    attention = next((m.config._attn_implementation for m in model.modules()
                      if hasattr(getattr(m, "config", None), "_attn_implementation")), None)
    return {"model": model_name, "steps": steps, "batch_size": batch_size, "attention": attention,
            "kernel_s_per_step": round(sum(by_kind.values()), 4),
            "by_kind_s_per_step": {k: round(v, 4) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
            "top": [{"kernel": name[:120], "s_per_step": round(s / steps, 4)} for name, s in kernels[:top]]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args(argv)
    result = profile(args.model, steps=args.steps, batch_size=args.batch_size, device=args.device,
                     dtype=args.dtype)
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
