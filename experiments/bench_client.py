"""Benchmark: LNTK scoring overhead relative to one local training round (paper supp. E, item 4:
F3OCUS's overhead is 151.4 s vs 137.5 s per round, i.e. ~10%).

    python -m experiments.bench_client --model minilm-effnet --dataset easy-vqa --json
    python -m experiments.bench_client --repeat 5      # 5 fresh processes: median, min, max of each figure
    python -m experiments.bench_client --model tiny-llava --budgets 1,2,4  # per k: s/step, overhead, memory
    python -m experiments.bench_client --config conf/bench-gen.toml --budgets 1,2,4,8  # its round's sizes
    python -m experiments.bench_client --config conf/bench-gen-cover.toml --threads 1  # + its evaluation
    python -m experiments.bench_client --config conf/bench-gen-cover.toml --profile 12  # LNTK by operator
    python -m experiments.bench_client --model hf:/tmp/llava-1b --dataset synthetic --dtype bfloat16 \
        --gradient-checkpointing --json   # docs/results/lntk-memory (experiments.random_llava)

The model, data set, scoring batch, local steps, batch size and learning rates default to the app's
own run config (`[tool.flwr.app.config]` in pyproject.toml), or, with ``--config``, to a run-config
file's values where it sets them, so "one local round" is the round a client of that run really
runs. LNTK (mode "loss") scores all layers; the round trains BUDGET = 4 layers (the top-4 LNTK
layers, as F3OCUS would train them). The client is partition 0 of 5 (by-question-type;
`--partition`, `--partitioner`). One forward pass warms up the kernels; LNTK then scores the batch
twice. The first call pays the process's one-time costs of its first backward pass (kernel and
autograd start-up, which training pays instead when it runs first); a client keeps its process
across rounds (simulation actors, deployed site workers), so every later round costs what the
second call costs. Prints lntk_s (the
second call: the per-round cost), train_round_s, overhead = lntk_s / train_round_s, lntk_first_s
and overhead_first (the first call: a fresh process's first round), samples_per_s (training),
peak_rss_mb (whole process), the peak memory of the scoring (both calls) and of the round apart
(lntk_peak_mb, train_peak_mb, their ratio lntk_over_train_peak, and the memory at each phase's
start, lntk_base_mb and train_base_mb; `PhasePeak` says how each is measured), and, because wall
time on a shared machine depends on the other processes, the same in process CPU seconds
(lntk_cpu_s, train_round_cpu_s, overhead_cpu) and the 1-minute load average at the start and at
the end of the run. With ``--eval-questions`` (a config's ``max-test-samples``) the round's
evaluation follows the training: eval_s for that many test questions scored as ``--eval-answers``
says (a config's ``eval-answers``), and round_s = lntk_s + train_round_s + eval_s, the client's
whole round. LNTK scores at most ``--batch-size`` samples at a time, as a client does
(`tasks.lntk_pieces`). For a model with token ids: step_s, step_tokens (one padded batch) and
step_flops (4·N·T), and with ``--peak-flops`` the share of that peak a step reaches.

`--repeat N` runs the benchmark N times, each in a fresh Python process (so every run pays the
first-call costs a client pays, none is warmed by an earlier one), one after the other, and prints
each run's figures and then the median, min and max of every numeric figure.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import resource
import subprocess
import sys
import threading
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
from tasks.names import HEADS, head_of
from tasks.train import evaluate, train

BUDGET = 4
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


SIZES = ("score-batch-size", "local-steps", "batch-size", "lr", "head-lr", "weight-decay")
"""The run-config keys of one local round that the benchmark shares with the app."""


def app_defaults(path: Path = PYPROJECT) -> dict[str, int | float]:
    """The run-config defaults the benchmark shares with the app (scoring batch, round, lrs)."""
    config = tomllib.loads(path.read_text())["tool"]["flwr"]["app"]["config"]
    return {key: config[key] for key in SIZES}


APP = app_defaults()
DEFAULTS = {"model": "minilm-effnet", "dataset": "easy-vqa", "dtype": "float32", "head": "private",
            "eval-answers": "generated", "max-test-samples": 0, **APP}
"""The options' defaults without ``--config``."""


def config_defaults(path: Path) -> dict[str, object]:
    """`DEFAULTS` with a run-config file's (e.g. conf/bench-gen.toml) model, data set and round sizes
    where it sets them; one line naming the file where it cannot be read."""
    try:
        config = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise SystemExit(f"--config {str(path)!r} cannot be read: {err}") from None
    return {**DEFAULTS, **{key: config[key] for key in DEFAULTS if key in config}}


def run(
    model_name: str,
    dataset: str,
    *,
    scoring_batch: int = APP["score-batch-size"],
    steps: int = APP["local-steps"],
    batch_size: int = APP["batch-size"],
    budget: int = BUDGET,
    seed: int = 0,
    partition: int = 0,
    partitioner: str = "by-question-type",
    rank_check: bool = False,
    rank_reference: int = 64,
    budgets: tuple[int, ...] = (),
    device: str = "cpu",
    model_options: dict | None = None,
    rates: dict[str, float] | None = None,
    peak_flops: float | None = None,
    evaluation: tuple[int, str] = (0, "generated"),
    profile: int = 0,
) -> dict[str, float]:
    """One client's round: LNTK scoring (in pieces of at most ``batch_size`` samples, as the client
    scores), then ``steps`` local steps on the top-``budget`` layers (and per ``budgets`` k,
    `per_budget`); ``rates``: lr, head-lr, weight-decay (default `APP`'s); ``peak_flops``: the
    device's peak FLOP/s, for the share of it a local step uses (`step_flops`); ``evaluation``:
    (test questions, `tasks.train.EVAL_ANSWERS` mode) of the round's evaluation, timed after the
    training (0 questions: none); ``profile``: that many operators of a third LNTK call
    (`lntk_profile`)."""
    rates = {**{k: APP[k] for k in ("lr", "head-lr", "weight-decay")}, **(rates or {})}
    load_start = os.getloadavg()[0]
    part = load_partition(dataset, partition, 5, partitioner, seed=seed)
    model = build_model(ModelSpec(model_name, seed=seed, **(model_options or {})), len(part.labels),
                        part.task).to(device)
    model.answers = tuple(part.labels)  # a generative model writes its answers as text
    with torch.no_grad():  # warm-up
        model(model.collate(part.train[:batch_size]))
    with PhasePeak(model.device) as lntk_memory:
        first = layer_scores(model, part.train[:scoring_batch], piece_size=batch_size)
        cpu = time.process_time()
        scores = layer_scores(model, part.train[:scoring_batch], piece_size=batch_size)
        lntk_cpu = time.process_time() - cpu
    hot = lntk_profile(model, part.train[:scoring_batch], batch_size, profile) if profile else []
    mask = np.zeros(len(model.layer_names), bool)
    mask[np.argsort(-scores.scores)[: min(budget, len(mask))]] = True
    with PhasePeak(model.device) as train_memory:
        start, cpu = time.perf_counter(), time.process_time()
        train(model, part.train, mask, steps=steps, batch_size=batch_size, lr=rates["lr"],
              head_lr=rates["head-lr"], weight_decay=rates["weight-decay"], device=device)
        train_s, train_cpu = time.perf_counter() - start, time.process_time() - cpu
    questions, answers = evaluation
    eval_s = eval_cpu = 0.0
    if questions:
        start, cpu = time.perf_counter(), time.process_time()
        evaluate(model, part.test[:questions], batch_size=max(64, batch_size), device=device, answers=answers)
        eval_s, eval_cpu = time.perf_counter() - start, time.process_time() - cpu
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    load = os.getloadavg()[0]
    extra = (rank_agreement(model, part.train, scoring_batch, int(mask.sum()), reference=rank_reference)
             if rank_check else {})
    if budgets:
        extra["per_budget"] = per_budget(model, part.train, scores.scores, scores.seconds, budgets, steps,
                                         batch_size, rates)
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
        "eval_s": round(eval_s, 4),
        "eval_questions": min(questions, len(part.test)),
        "eval_answers": answers,
        "round_s": round(scores.seconds + train_s + eval_s, 4),
        "lntk_share_of_round": round(scores.seconds / (scores.seconds + train_s + eval_s), 4),
        "lntk_first_s": round(first.seconds, 4),
        "overhead_first": round(first.seconds / train_s, 4),
        "lntk_cpu_s": round(lntk_cpu, 4),
        "train_round_cpu_s": round(train_cpu, 4),
        "overhead_cpu": round(lntk_cpu / train_cpu, 4),
        "eval_cpu_s": round(eval_cpu, 4),
        "lntk_share_of_round_cpu": round(lntk_cpu / (lntk_cpu + train_cpu + eval_cpu), 4),
        "samples_per_s": round(steps * batch_size / train_s, 2),
        "peak_rss_mb": round(peak_rss_mb, 1),
        "memory": lntk_memory.kind,
        "lntk_peak_mb": lntk_memory.peak_mb,
        "train_peak_mb": train_memory.peak_mb,
        "lntk_over_train_peak": round(lntk_memory.peak_mb / train_memory.peak_mb, 4),
        "lntk_base_mb": lntk_memory.base_mb,
        "train_base_mb": train_memory.base_mb,
        **step_flops(model, part.train[:batch_size], train_s / steps, peak_flops),
        "torch_threads": torch.get_num_threads(),
        "load_avg_1m_start": round(load_start, 2),
        "load_avg_1m": round(load, 2),
        **({"lntk_profile": hot} if hot else {}),
        **extra,
    }


def lntk_profile(model, samples: list, piece_size: int, top: int) -> list[dict]:
    """Where LNTK scoring's time goes: the ``top`` operators with the most self CPU time in one more
    call (torch.profiler; a call of its own, so the timed ``lntk_s`` carries no profiler overhead),
    each with its milliseconds, share of the call's self CPU time and number of calls."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    with profiler(activities=[ProfilerActivity.CPU]) as prof:
        layer_scores(model, samples, piece_size=piece_size)
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    return [{"op": e.key, "self_ms": round(e.self_cpu_time_total / 1e3, 2),
             "share": round(e.self_cpu_time_total / total, 4), "calls": e.count} for e in events[:top]]


class PhasePeak:
    """Peak memory of one phase of the run, as a context manager. CUDA: the most memory allocated
    during the phase. CPU: the most resident memory of the process, sampled every 2 ms by a thread
    (ru_maxrss only grows, so it cannot tell the training's peak from the scoring's before it), after
    handing freed heap memory back to the system (glibc's malloc_trim) so that the phase starts from
    what the process still holds. ``base_mb``: the memory at the start, ``peak_mb``: the peak, both
    including the model's weights."""

    INTERVAL_S = 0.002

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.kind = "cuda max allocated" if device.type == "cuda" else "rss sampled every 2 ms"
        self.base_mb = self.peak_mb = 0.0
        self._stop = threading.Event()

    def __enter__(self) -> PhasePeak:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base_mb = round(torch.cuda.memory_allocated(self.device) / 2**20, 1)
            return self
        _trim_heap()
        self.base_mb = self.peak_mb = round(_rss_mb(), 1)
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_mb = round(torch.cuda.max_memory_allocated(self.device) / 2**20, 1)
            return
        self._stop.set()
        self._thread.join()
        self.peak_mb = round(max(self.peak_mb, _rss_mb()), 1)

    def _sample(self) -> None:
        while not self._stop.wait(self.INTERVAL_S):
            self.peak_mb = max(self.peak_mb, _rss_mb())


def _rss_mb() -> float:
    """The process's resident memory now (Linux /proc)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _trim_heap() -> None:
    with contextlib.suppress(OSError, AttributeError):  # not glibc: the phase starts from what the heap keeps
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def step_flops(model: torch.nn.Module, batch: list, step_s: float, peak_flops: float | None
               ) -> dict[str, float]:
    """Frozen-base LoRA costs about 4·N·T FLOPs a step (forward, and the backward pass of the
    activations; N parameters, T tokens of one batch, padded): that and, with ``peak_flops``, the
    share of the device's peak a step of ``step_s`` seconds reaches. Empty without token ids."""
    ids = model.collate(batch).get("input_ids")
    if ids is None:
        return {}
    flops = 4 * sum(p.numel() for p in model.parameters()) * ids.numel()
    out = {"step_s": round(step_s, 4), "step_tokens": ids.numel(), "step_flops": float(f"{flops:.4g}")}
    if peak_flops:
        out["step_peak_share"] = float(f"{flops / step_s / peak_flops:.4g}")
    return out


def peak_memory_mb(device: torch.device) -> float:
    """CUDA: the most memory allocated since the last reset; else the process's peak RSS (it
    only grows, so on CPU a later budget's figure includes the earlier ones')."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def per_budget(model, samples: list, scores: np.ndarray, lntk_s: float, budgets: tuple[int, ...],
               steps: int, batch_size: int, rates: dict[str, float]) -> list[dict[str, float]]:
    """For each budget k: one local round on the top-k LNTK layers (learning rates ``rates``);
    seconds per local step, the LNTK overhead (lntk_s over that round) and peak memory."""
    rows = []
    for k in budgets:
        mask = np.zeros(len(model.layer_names), bool)
        mask[np.argsort(-scores)[: min(k, len(mask))]] = True
        if model.device.type == "cuda":
            torch.cuda.synchronize(model.device)
            torch.cuda.reset_peak_memory_stats(model.device)
        start = time.perf_counter()
        train(model, samples, mask, steps=steps, batch_size=batch_size, lr=rates["lr"],
              head_lr=rates["head-lr"], weight_decay=rates["weight-decay"], device=str(model.device))
        if model.device.type == "cuda":
            torch.cuda.synchronize(model.device)
        seconds = time.perf_counter() - start
        rows.append({"k": int(mask.sum()), "step_s": round(seconds / steps, 4),
                     "overhead": round(lntk_s / seconds, 4),
                     "peak_mb": round(peak_memory_mb(model.device), 1)})
    return rows


def rank_agreement(
    model: torch.nn.Module, samples: list, scoring_batch: int, budget: int, batches: int = 4,
    reference: int = 64,
) -> dict[str, float]:
    """Is the scoring batch big enough? Spearman ρ between the layer scores of `batches` disjoint
    scoring batches and those of `reference` (at least 2 scoring batches) other samples, and the
    share of the reference top-k layers (k = budget) that each batch also ranks top-k. A batch
    whose scores are all equal has no rank order; it counts as ρ = 0."""
    reference = max(reference, 2 * scoring_batch)
    if len(samples) < batches * scoring_batch + reference:
        raise ValueError(f"--rank-check needs {batches * scoring_batch + reference} training samples, "
                         f"the partition has {len(samples)}")
    ref = layer_scores(model, samples[-reference:]).scores
    top = set(np.argsort(-ref)[:budget])
    rho, overlap = [], []
    for b in range(batches):
        scores = layer_scores(model, samples[b * scoring_batch : (b + 1) * scoring_batch]).scores
        constant = np.ptp(scores) == 0 or np.ptp(ref) == 0
        rho.append(0.0 if constant else spearmanr(scores, ref).statistic)
        overlap.append(len(top & set(np.argsort(-scores)[:budget])) / budget)
    return {
        "rank_rho_mean": round(float(np.mean(rho)), 3),
        "rank_rho_min": round(float(np.min(rho)), 3),
        "topk_overlap_mean": round(float(np.mean(overlap)), 3),
    }


def summarize(runs: list[dict]) -> dict[str, dict[str, float]]:
    """Median, min and max over the runs of every numeric figure (in the runs' key order)."""
    keys = [k for k, v in runs[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    values = {k: np.array([run[k] for run in runs], dtype=float) for k in keys}
    return {
        stat: {k: round(float(fn(v)), 4) for k, v in values.items()}
        for stat, fn in (("median", np.median), ("min", np.min), ("max", np.max))
    }


def run_fresh(argv: list[str]) -> dict:
    """One benchmark run in a fresh Python process (the repository root on its path)."""
    root = str(PYPROJECT.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "experiments.bench_client", *argv, "--json"],
                          capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"benchmark run failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not >= 1")
    return value


def child_argv(args: argparse.Namespace) -> list[str]:
    """The command line of one of `--repeat`'s runs: the same settings, run once."""
    argv = []
    for key in ("config", "model", "dataset", "scoring_batch", "steps", "batch_size", "budget", "seed",
                "partition", "partitioner", "rank_reference", "threads", "budgets", "device", "dtype",
                "peak_flops", "head", "eval_questions", "eval_answers", "profile"):
        value = getattr(args, key)
        if value is not None and value != "":
            argv += [f"--{key.replace('_', '-')}", str(value)]
    return (argv + (["--rank-check"] if args.rank_check else [])
            + (["--gradient-checkpointing"] if args.gradient_checkpointing else []))


def main(argv: list[str] | None = None) -> None:
    config_help = ("run-config TOML (e.g. conf/bench-gen.toml) whose model, dataset, score-batch-size, "
                   "local-steps, batch-size and learning rates are the defaults of the options below")
    first = argparse.ArgumentParser(add_help=False)  # --config first: it sets the others' defaults
    first.add_argument("--config", default=None)
    known, _ = first.parse_known_args(argv)
    base = config_defaults(Path(known.config)) if known.config else DEFAULTS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=None, help=config_help)
    parser.add_argument("--model", default=base["model"])
    parser.add_argument("--dataset", default=base["dataset"])
    parser.add_argument("--scoring-batch", type=_positive, default=base["score-batch-size"])
    parser.add_argument("--steps", type=_positive, default=base["local-steps"])
    parser.add_argument("--batch-size", type=_positive, default=base["batch-size"])
    parser.add_argument("--budget", type=_positive, default=BUDGET)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--partition", type=int, default=0, help="which of the 5 partitions is the client")
    parser.add_argument("--partitioner", default="by-question-type",
                        help="how the data set is cut among the 5 clients (by-question-type:<gamma>, "
                             "dirichlet:<gamma>: without flwr-datasets)")
    parser.add_argument("--rank-check", action="store_true",
                        help="after the round, layer ranks of 4 scoring batches vs a reference batch")
    parser.add_argument("--rank-reference", type=_positive, default=64,
                        help="samples in the --rank-check reference batch (at least 2 scoring batches)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--repeat", type=_positive, default=1,
                        help="runs, each in a fresh process; prints median, min and max of each figure")
    parser.add_argument("--budgets", default="",
                        help="comma-separated budgets k: per k, seconds per local step, LNTK overhead "
                             "and peak memory (CUDA max allocated, else process RSS)")
    parser.add_argument("--device", default="cpu", help="device of the model (default cpu)")
    parser.add_argument("--dtype", default=base["dtype"], choices=("float32", "bfloat16", "float16"),
                        help="generative models' frozen weights")
    parser.add_argument("--head", default=base["head"], choices=HEADS)
    parser.add_argument("--eval-questions", type=int, default=base["max-test-samples"],
                        help="test questions the round's evaluation scores (0: no evaluation)")
    parser.add_argument("--eval-answers", default=base["eval-answers"], choices=("generated", "closed-set"))
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--peak-flops", type=float, default=None,
                        help="the device's peak FLOP/s (e.g. 790e12, an H200's bf16): prints the share "
                             "of it a local step reaches (4·N·T FLOPs)")
    parser.add_argument("--profile", type=_positive, default=None, metavar="K",
                        help="the K operators with the most self CPU time in one more LNTK call")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args(argv)
    if args.repeat > 1:
        runs = []
        for _ in range(args.repeat):
            runs.append(run_fresh(child_argv(args)))
            if not args.json:
                print(json.dumps(runs[-1]), flush=True)
        summary = summarize(runs)
        if args.json:
            print(json.dumps({"repeat": args.repeat, "runs": runs, **summary}))
        else:
            print(f"{'figure':>18} {'median':>10} {'min':>10} {'max':>10}")
            for key in summary["median"]:
                print(f"{key:>18} " + " ".join(f"{summary[s][key]:>10g}" for s in ("median", "min", "max")))
        sys.stdout.flush()
        return
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
        partition=args.partition,
        partitioner=args.partitioner,
        rank_check=args.rank_check,
        rank_reference=args.rank_reference,
        budgets=tuple(int(k) for k in args.budgets.split(",") if k.strip()),
        device=args.device,
        model_options={"dtype": args.dtype, "gradient_checkpointing": args.gradient_checkpointing,
                       "device": args.device, "shared_head": head_of(args.head).shared,
                       "frozen_head": head_of(args.head).frozen},
        rates={k: base[k] for k in ("lr", "head-lr", "weight-decay")},
        peak_flops=args.peak_flops,
        evaluation=(args.eval_questions, args.eval_answers),
        profile=args.profile or 0,
    )
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            if key not in ("per_budget", "lntk_profile"):
                print(f"{key:>14}: {value}")
        if result.get("per_budget"):
            print(f"{'k':>4} {'s/step':>8} {'overhead':>9} {'peak MB':>9}")
            for row in result["per_budget"]:
                print(f"{row['k']:>4} {row['step_s']:>8.4f} {row['overhead']:>9.4f} {row['peak_mb']:>9.1f}")
        for row in result.get("lntk_profile", []):
            print(f"{row['self_ms']:>10.1f} ms {row['share']:>7.1%} {row['calls']:>6}  {row['op']}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
