"""Multi-objective particle swarm optimisation (paper §5.3 (5); supplement Algorithms 12-18),
vectorised over the swarm.

Deviations from the printed pseudo-code, and why:

* Positions. Algorithm 14 moves the k_i layer *indices* of a client by a velocity, which
  treats layer 7 as "between" layers 6 and 8 and makes the result depend on the order in
  which a client lists its layers. Here a position is the (N, L) 0/1 mask and the velocity
  an (N, L) real array; the same update is applied per layer,
  v <- w v + c1 r1 (pbest - x) + c2 r2 (gbest - x), the continuous position x + v is
  clamped to [0, 1] (Algorithm 14 line 13), and the new selection of row i is the k_i
  layers with the largest clamped value, ties broken at random (the ROUND / REMOVE_DUPLICATES
  / fill-with-random-layers repair of lines 12-20, which keeps the budget exact).
* Initial positions are drawn with probability proportional to importance (Algorithm 3),
  as the paper's §5.3 text says; Algorithm 13 samples range(k_i), i.e. always layers
  0..k_i-1. Initial velocities are uniform in [-1, 1] ("random velocities").
* Leaders. The pseudo-code draws one global best per iteration from the non-dominated
  particles of the current swarm; here every particle draws its own leader from the
  external Pareto archive (standard MOPSO, Coello Coello et al. 2004), which keeps the
  swarm spread along the front instead of collapsing onto one point each iteration.
* The personal best is replaced when the new position weakly dominates it (line 11).
"""

from __future__ import annotations

import numpy as np

from metaheuristics.archive import ParetoArchive
from metaheuristics.moves import sample_subsets, take_smallest
from metaheuristics.problem import Instance

DEFAULTS = {"pop_size": 50, "n_gen": 20, "inertia": 0.5, "cognitive": 1.5, "social": 1.5}


def run(
    instance: Instance,
    archive: ParetoArchive,
    seed: int,
    pop_size: int,
    n_gen: int,
    inertia: float,
    cognitive: float,
    social: float,
) -> None:
    """Run the swarm for ``n_gen`` iterations after initialisation, feeding ``archive``."""
    rng = np.random.default_rng(seed)
    budgets = instance.budgets
    x = sample_subsets(instance.sampling_weights, budgets, pop_size, rng)
    v = rng.uniform(-1.0, 1.0, size=x.shape)
    imp, div = instance.evaluate(x)
    best_x, best_imp, best_div = x.copy(), imp, div
    archive.add(x, imp, div)
    archive.record(0)
    for iteration in range(1, n_gen + 1):
        leaders = archive.masks[rng.integers(len(archive.importance), size=pop_size)]
        xf = x.astype(np.float64)
        r1, r2 = rng.random(x.shape), rng.random(x.shape)
        v = inertia * v + cognitive * r1 * (best_x - xf) + social * r2 * (leaders - xf)
        position = np.clip(xf + v, 0.0, 1.0)
        x = take_smallest(-position + 1e-9 * rng.random(x.shape), budgets)
        imp, div = instance.evaluate(x)
        better = (imp >= best_imp) & (div <= best_div)
        best_x[better] = x[better]
        best_imp, best_div = np.where(better, imp, best_imp), np.where(better, div, best_div)
        archive.add(x, imp, div)
        archive.record(iteration)
