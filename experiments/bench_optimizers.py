"""Benchmark every algorithm on random instances (a script, not a timed test).

    python -m experiments.bench_optimizers --clients 10 --layers 32 \\
        --budgets 6,6,4,4,2,6,6,4,4,2 --pop 50 --gens 20 --repeats 5 --json
    python -m experiments.bench_optimizers --clients 10,100,1000,10000 --layers 80 \\
        --algorithms nsga2 --no-reference

Instance: client i's scores are a Dirichlet(1, ..., 1) draw over the L layers (non-negative,
row sums 1), all rows from ``numpy.random.default_rng(--seed)``; without ``--budgets``,
budgets are then drawn from the same generator, uniform in 1..min(8, L). ``--clients``
takes one count or a comma-separated list; with a list every size is benchmarked in turn
and a last table shows how the time grows with the number of clients.

Per algorithm: one untimed warm-up call, then ``--repeats`` runs with seeds seed, seed+1, …
(``paper-ga`` only ``--paper-ga-repeats`` runs, default 1, 0 to leave it out: one run
takes minutes at 10 x 32 and far longer at 100 x 80). Reported: ``median_s`` (wall time
of ``optimize``), ``median_cpu_s`` (its process CPU time, less sensitive than wall time to
other jobs on a shared machine), ``hv`` (median hypervolume of the returned fronts,
normalised objectives, indicators.py), ``hv_ratio`` = hv / hv of a
reference run (nsga2 with 4x the population and 10x the generations on the same instance,
seed --seed; described in the ``reference`` field; ``--no-reference`` skips that run,
which takes minutes at 10,000 clients, and leaves hv_ratio empty), ``front_size``
(median), and ``budgets_ok`` (every returned mask and front member has exactly k_i
layers per client).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence

import numpy as np

from metaheuristics.api import ALGORITHMS, optimize
from metaheuristics.indicators import hypervolume
from metaheuristics.result import Assignment


def make_scores(
    clients: int, layers: int, seed: int, budgets: Sequence[int] | None
) -> tuple[np.ndarray, list[int]]:
    """Dirichlet(1) score rows and budgets (random in 1..min(8, L) when not given)."""
    rng = np.random.default_rng(seed)
    scores = rng.dirichlet(np.ones(layers), size=clients)
    if budgets is None:
        budgets = rng.integers(1, min(8, layers) + 1, size=clients).tolist()
    return scores, list(budgets)


def _budgets_ok(result: Assignment, budgets: Sequence[int]) -> bool:
    ks = np.asarray(budgets)
    return bool((result.masks.sum(axis=1) == ks).all() and (result.front.masks.sum(axis=2) == ks).all())


def _run(scores, budgets, algorithm, seed, pop, gens) -> tuple[float, float, Assignment]:
    """Wall and process-CPU seconds of one ``optimize`` call, and its result."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = optimize(scores, budgets, algorithm=algorithm, seed=seed, pop_size=pop, n_gen=gens)
    return time.perf_counter() - wall, time.process_time() - cpu, result


def _reference(scores, budgets, args) -> dict | None:
    """The reference run (nsga2, 4x population, 10x generations), or None if disabled."""
    if args.no_reference:
        return None
    ref_pop, ref_gens = 4 * args.pop, 10 * args.gens
    seconds, _, ref = _run(scores, budgets, "nsga2", args.seed, ref_pop, ref_gens)
    return {
        "algorithm": "nsga2",
        "pop_size": ref_pop,
        "n_gen": ref_gens,
        "seed": args.seed,
        "hv": round(hypervolume(ref.front.importance, ref.front.diversity, instance=(scores, budgets)), 6),
        "seconds": round(seconds, 3),
    }


def bench_instance(clients: int, args: argparse.Namespace) -> list[dict]:
    """One row per algorithm on the instance with ``clients`` clients."""
    scores, budgets = make_scores(clients, args.layers, args.seed, args.budgets)
    reference = _reference(scores, budgets, args)
    rows = []
    names = [n for n in args.algorithms if n != "paper-ga" or args.paper_ga_repeats > 0]
    for name in names:
        repeats = min(args.repeats, args.paper_ga_repeats) if name == "paper-ga" else args.repeats
        if name != "paper-ga":
            _run(scores, budgets, name, args.seed, args.pop, args.gens)
        times, cpus, hvs, sizes, ok = [], [], [], [], True
        for r in range(repeats):
            seconds, cpu, result = _run(scores, budgets, name, args.seed + r, args.pop, args.gens)
            times.append(seconds)
            cpus.append(cpu)
            front = result.front
            hvs.append(hypervolume(front.importance, front.diversity, instance=(scores, budgets)))
            sizes.append(len(front))
            ok = ok and _budgets_ok(result, budgets)
        hv = statistics.median(hvs)
        rows.append(
            {
                "name": name,
                "median_s": round(statistics.median(times), 4),
                "median_cpu_s": round(statistics.median(cpus), 4),
                "hv": round(hv, 6),
                "hv_ratio": None if reference is None else round(hv / reference["hv"], 4),
                "front_size": int(statistics.median(sizes)),
                "budgets_ok": ok,
                "repeats": repeats,
                "clients": clients,
                "layers": args.layers,
                "pop_size": args.pop,
                "n_gen": args.gens,
                "reference": reference,
            }
        )
    return rows


def bench(args: argparse.Namespace) -> list[dict]:
    """Rows for every ``--clients`` value in turn."""
    return [row for clients in args.clients for row in bench_instance(clients, args)]


def _ratio(row: dict) -> str:
    return "–" if row["hv_ratio"] is None else f"{row['hv_ratio']:.4f}"


def print_tables(rows: list[dict], args: argparse.Namespace) -> None:
    """One markdown table per instance and, for several ``--clients``, the time growth."""
    for clients in args.clients:
        mine = [r for r in rows if r["clients"] == clients]
        ref = mine[0]["reference"] if mine else None
        reference = (
            "none" if ref is None else f"nsga2 pop {ref['pop_size']} gens {ref['n_gen']}, hv {ref['hv']}"
        )
        print(
            f"instance {clients} clients x {args.layers} layers, pop {args.pop}, gens {args.gens}; "
            f"reference: {reference}"
        )
        print("| algorithm | median s | median CPU s | hv | hv ratio | front | budgets ok | runs |")
        print("|---|---:|---:|---:|---:|---:|---|---:|")
        for r in mine:
            print(
                f"| {r['name']} | {r['median_s']:.4f} | {r['median_cpu_s']:.4f} | {r['hv']:.4f} "
                f"| {_ratio(r)} | {r['front_size']} | {r['budgets_ok']} | {r['repeats']} |"
            )
        print()
    if len(args.clients) > 1:
        print("median s (median CPU s) by number of clients:")
        print("| algorithm | " + " | ".join(f"{c} clients" for c in args.clients) + " |")
        print("|---|" + "---:|" * len(args.clients))
        for name in dict.fromkeys(r["name"] for r in rows):
            cells = [
                f"{r['median_s']:.4f} ({r['median_cpu_s']:.4f})"
                for c in args.clients
                for r in rows
                if r["name"] == name and r["clients"] == c
            ]
            print(f"| {name} | " + " | ".join(cells) + " |")


def _int_list(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints, got {text!r}") from None


def _algorithm_list(text: str) -> list[str]:
    names = text.split(",")
    unknown = [n for n in names if n not in ALGORITHMS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown algorithm(s) {unknown}; known: {ALGORITHMS}")
    return names


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m experiments.bench_optimizers", description=__doc__)
    parser.add_argument("--clients", type=_int_list, default=[10], help="one count or a list: 10,100,1000")
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--budgets", type=_int_list, default=None)
    parser.add_argument("--pop", type=int, default=50)
    parser.add_argument("--gens", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--paper-ga-repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--algorithms", type=_algorithm_list, default=list(ALGORITHMS))
    parser.add_argument("--no-reference", action="store_true", help="skip the reference run (hv ratio -)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    args = parser.parse_args(argv)
    for name in ("layers", "pop", "gens", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if min(args.clients) < 1:
        parser.error(f"--clients must be >= 1, got {min(args.clients)}")
    if args.budgets is not None and set(args.clients) != {len(args.budgets)}:
        parser.error(f"--budgets has {len(args.budgets)} entries, --clients asks for {args.clients}")
    if args.paper_ga_repeats < 0:
        parser.error(f"--paper-ga-repeats must be >= 0, got {args.paper_ga_repeats}")
    try:
        rows = bench(args)
    except ValueError as err:
        parser.error(str(err))
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return
    print_tables(rows, args)


if __name__ == "__main__":
    main()
