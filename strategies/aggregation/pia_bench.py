"""How many server-PIA passes (``fedpia-iterations``): recovery of planted permutations and cost.

    python -m strategies.aggregation.pia_bench [--trials 2000] [--seed 1] [--json]

Planted cases: K = 3..5 clients hold rank-unit permutations of one random adapter (A: r x d,
B: d x r, r = 2..4, equal example counts, γ = 0), so aligning them recovers B·A exactly; a case is
recovered when the integrated adapter's B·A equals the planted one to 1e-9. ``d = 2`` makes
neurons close enough for one pass to misalign some (``d = 16`` for contrast). Cost: server PIA of
one round with the default model's 67 LoRA pairs (r = 8, 384 wide, 5 clients around one state),
best of 3, per iteration cap.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from strategies.aggregation.fedpia import fedpia, integrate_adapter
from strategies.aggregation.types import ClientUpdate

CAPS = (1, 2, 3, 5, 10)


def recovery(trials: int, dim: int, seed: int) -> dict[int, float]:
    """Share of planted cases whose common adapter each iteration cap recovers."""
    rng = np.random.default_rng(seed)
    hits = dict.fromkeys(CAPS, 0)
    for _ in range(trials):
        rank, clients = int(rng.integers(2, 5)), int(rng.integers(3, 6))
        a, b = rng.normal(size=(rank, dim)), rng.normal(size=(dim, rank))
        perms = [rng.permutation(rank) for _ in range(clients)]
        for cap in CAPS:
            ga, gb = integrate_adapter([a[p] for p in perms], [b[:, p] for p in perms], [1] * clients,
                                       gamma=0.0, iterations=cap)
            hits[cap] += bool(np.abs(gb @ ga - b @ a).max() < 1e-9)
    return {cap: hits[cap] / trials for cap in CAPS}


def cost_ms(seed: int, pairs: int = 67, rank: int = 8, width: int = 384) -> dict[int, float]:
    """Server PIA milliseconds a round, per iteration cap: ``pairs`` LoRA adapters of rank
    ``rank`` on ``width``-wide modules (the default model's 67 pairs at r = 8; MiniLM is 384 wide),
    5 clients around one state."""
    rng = np.random.default_rng(seed)
    start = {}
    for i in range(pairs):
        start[f"{i}:m{i}.lora_A.weight"] = rng.normal(size=(rank, width)).astype(np.float32)
        start[f"{i}:m{i}.lora_B.weight"] = rng.normal(size=(width, rank)).astype(np.float32)
    updates = [ClientUpdate(k, {key: (v + 0.01 * rng.standard_normal(v.shape)).astype(v.dtype)
                                for key, v in start.items()}, 100) for k in range(5)]
    out = {}
    for cap in CAPS:
        times = []
        for _ in range(3):
            began = time.perf_counter()
            fedpia(start, updates, iterations=cap)
            times.append(time.perf_counter() - began)
        out[cap] = round(1e3 * min(times), 1)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = {"recovered_d2": recovery(args.trials, 2, args.seed),
               "recovered_d16": recovery(args.trials, 16, args.seed), "ms_per_round": cost_ms(args.seed)}
    if args.json:
        print(json.dumps(figures))
        return
    print(f"{'iterations':>10} {'recovered d=2':>14} {'recovered d=16':>15} {'ms a round':>11}")
    for cap in CAPS:
        print(f"{cap:>10} {figures['recovered_d2'][cap]:>14.3f} {figures['recovered_d16'][cap]:>15.3f} "
              f"{figures['ms_per_round'][cap]:>11.1f}")


if __name__ == "__main__":
    main()
