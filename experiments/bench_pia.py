"""How many server-PIA passes (``fedpia-iterations``): recovery of planted alignments and cost.

    python -m experiments.bench_pia [--trials 2000] [--seed 1] [--noise 0.2] [--json]

Planted cases: K = 3..5 clients hold the rank units of one random adapter (A: r x d, B: d x r,
r = 2..4, entries N(0, 1)) in their own random order, each unit moved by the client's own training
noise (N(0, noise²) per entry), equal example counts, γ = 0. Pure permutations (noise 0) are no
test: every client then solves the same OT problem up to relabelling, so one pass always aligns
them, and a miss can only come from tie-breaking. A case is recovered when the integrated B·A
equals, to 1e-9, that of the planted alignment (every client's units put back in the common
order, then averaged). ``d = 2`` makes neurons close enough for one pass to misalign some
(``d = 16`` for contrast). Cost: server PIA of one round with the default model's 67 LoRA pairs
(r = 8, 384 wide), 5 clients holding noisy permutations of one adapter, so that passes are really
taken; best of 3 per iteration cap, with the mean number of passes a pair took.
"""

from __future__ import annotations

import argparse
import json
import time
from itertools import islice

import numpy as np

from methods.fedpia.server import integrate_adapter, integration_passes

CAPS = (1, 2, 3, 5, 10)


def planted_case(rng: np.random.Generator, rank: int, dim: int, clients: int, noise: float
                 ) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """Clients' (A_k, B_k) holding one adapter's units in their own order plus noise, and the B·A
    of the planted alignment."""
    a, b = rng.normal(size=(rank, dim)), rng.normal(size=(dim, rank))
    orders = [rng.permutation(rank) for _ in range(clients)]
    a_list = [a[o] + noise * rng.normal(size=a.shape) for o in orders]
    b_list = [b[:, o] + noise * rng.normal(size=b.shape) for o in orders]
    back = [np.argsort(o) for o in orders]
    right_a = np.mean([x[i] for x, i in zip(a_list, back, strict=True)], axis=0)
    right_b = np.mean([y[:, i] for y, i in zip(b_list, back, strict=True)], axis=0)
    return a_list, b_list, right_b @ right_a


def recovery(trials: int, dim: int, seed: int, noise: float) -> dict[int, float]:
    """Share of planted cases whose planted alignment each iteration cap recovers."""
    rng = np.random.default_rng(seed)
    hits = dict.fromkeys(CAPS, 0)
    for _ in range(trials):
        rank, clients = int(rng.integers(2, 5)), int(rng.integers(3, 6))
        a_list, b_list, right = planted_case(rng, rank, dim, clients, noise)
        for cap in CAPS:
            ga, gb = integrate_adapter(a_list, b_list, [1] * len(a_list), gamma=0.0, iterations=cap)
            hits[cap] += bool(np.abs(gb @ ga - right).max() < 1e-9)
    return {cap: hits[cap] / trials for cap in CAPS}


def cost_ms(seed: int, noise: float, pairs: int = 67, rank: int = 8, width: int = 384, clients: int = 5
            ) -> dict[int, dict[str, float]]:
    """Server PIA milliseconds a round and mean passes a pair took, per iteration cap: ``pairs``
    LoRA adapters of rank ``rank`` on ``width``-wide modules (the default model's 67 pairs at r = 8;
    MiniLM is 384 wide), ``clients`` clients holding noisy permutations of each."""
    rng = np.random.default_rng(seed)
    # entries N(0, 1) and noise N(0, noise²): a unit's noise is `noise` times its own size at any width
    cases = [planted_case(rng, rank, width, clients, noise)[:2] for _ in range(pairs)]
    out = {}
    for cap in CAPS:
        times = []
        for _ in range(3):
            began = time.perf_counter()
            for a_list, b_list in cases:
                integrate_adapter(a_list, b_list, [100] * clients, iterations=cap)
            times.append(time.perf_counter() - began)
        passes = [sum(1 for _ in islice(integration_passes(a_list, b_list, [100] * clients), cap))
                  for a_list, b_list in cases]
        out[cap] = {"ms": round(1e3 * min(times), 1), "passes": round(float(np.mean(passes)), 2)}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--noise", type=float, default=0.2, help="std of each client's noise per entry")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = {"recovered_d2": recovery(args.trials, 2, args.seed, args.noise),
               "recovered_d16": recovery(args.trials, 16, args.seed, args.noise),
               "cost": cost_ms(args.seed, args.noise)}
    if args.json:
        print(json.dumps(figures))
        return
    print(f"{'iterations':>10} {'recovered d=2':>14} {'recovered d=16':>15} {'ms a round':>11} {'passes':>7}")
    for cap in CAPS:
        print(f"{cap:>10} {figures['recovered_d2'][cap]:>14.3f} {figures['recovered_d16'][cap]:>15.3f} "
              f"{figures['cost'][cap]['ms']:>11.1f} {figures['cost'][cap]['passes']:>7.2f}")


if __name__ == "__main__":
    main()
