"""Ant colony optimisation (paper §5.3 (3); supplement Algorithms 27-34), all ants of an
iteration built in one vectorised draw.

Each ant gives client i the k_i layers drawn with probability proportional to
tau[i, l]^alpha * S[i, l]^beta; then the pheromone evaporates, tau <- (1 - rho) tau, and
every archive member deposits ``deposit`` on each (client, layer) it selects (Algorithm 31).

Deviations from the printed pseudo-code, and why:

* Algorithm 28 indexes a per-layer ``pheromone[layer]`` while Algorithm 31 updates a
  per-client matrix ``pheromone[client][layer]``; the matrix is used for both.
* Algorithm 28 draws k_i layers *with* replacement from ``range(num_layers)`` (= range(k_i))
  and then "removes duplicates and fills missing layers" without saying how; here the k_i
  distinct layers are drawn from all L layers sequentially without replacement with the
  same weights, which is what that repair approximates.
* Client rows of zero scores count as uniform importance (otherwise S^beta would zero every
  weight of the row).
"""

from __future__ import annotations

import numpy as np

from metaheuristics.archive import ParetoArchive
from metaheuristics.moves import sample_subsets
from metaheuristics.problem import Instance, positive_weights

DEFAULTS = {
    "pop_size": 50,
    "n_gen": 20,
    "evaporation": 0.1,
    "deposit": 1.0,
    "tau0": 0.1,
    "alpha": 1.0,
    "beta": 2.0,
}


def run(
    instance: Instance,
    archive: ParetoArchive,
    seed: int,
    pop_size: int,
    n_gen: int,
    evaporation: float,
    deposit: float,
    tau0: float,
    alpha: float,
    beta: float,
) -> None:
    """Run ``n_gen`` iterations of ``pop_size`` ants, feeding ``archive``. Algorithm 27 has
    no initial population, so the history starts at iteration 1."""
    rng = np.random.default_rng(seed)
    heuristic = positive_weights(instance.scores) ** beta
    pheromone = np.full((instance.n_clients, instance.n_layers), tau0)
    for iteration in range(1, n_gen + 1):
        weights = positive_weights(pheromone**alpha * heuristic)
        ants = sample_subsets(weights, instance.budgets, pop_size, rng)
        archive.add(ants, *instance.evaluate(ants))
        pheromone *= 1.0 - evaporation
        pheromone += deposit * archive.masks.sum(axis=0)
        archive.record(iteration)
