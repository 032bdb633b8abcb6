"""Simulated annealing (paper §5.3 (4); supplement Algorithms 19-26) as ``pop_size``
independent chains advanced together (one vectorised step per iteration for all chains).

The paper runs one chain (Table 5 lists no population for SA); with ``pop_size=1`` this is
that single chain. Every chain's current solution enters the shared Pareto archive after
each step (Algorithm 19 line 15).

Deviations from the printed pseudo-code, and why:

* Algorithms 20-21 sample ``range(num_layers)`` with num_layers = k_i, i.e. always layers
  0..k_i-1; the text means k_i layers out of all L (uniform), which is what is drawn here,
  both for the start and for the move (resample one random client's row).
* Algorithm 25 accepts with exp(-delta / T) where delta = (new_imp - cur_imp) +
  (cur_div - new_div) is the *improvement*; that accepts every worse move with probability
  >= 1 and rejects better ones. The Metropolis rule the text describes ("less optimal
  configurations may be accepted with a probability that decreases with temperature") is
  exp(delta / T), used here. Below ``t_end`` only dominating moves are accepted.

Note: with the §C.3 settings (T0 = 100, cooling 0.95, 20 iterations, T ends near 36) and
objective changes of order 0.1, exp(delta / T) is close to 1, so nearly every move is
accepted and SA behaves like a random walk whose visited non-dominated points the archive
keeps; that matches its last place among the paper's methods (supplement Table 6).
"""

from __future__ import annotations

import numpy as np

from metaheuristics.archive import ParetoArchive
from metaheuristics.moves import resample_one_row, sample_subsets
from metaheuristics.problem import Instance

DEFAULTS = {"pop_size": 50, "n_gen": 20, "t0": 100.0, "t_end": 1.0, "cooling": 0.95}


def run(
    instance: Instance,
    archive: ParetoArchive,
    seed: int,
    pop_size: int,
    n_gen: int,
    t0: float,
    t_end: float,
    cooling: float,
) -> None:
    """Run ``pop_size`` chains for ``n_gen`` steps from T = t0, cooling geometrically."""
    rng = np.random.default_rng(seed)
    budgets = instance.budgets
    uniform = np.ones((instance.n_clients, instance.n_layers))
    current = sample_subsets(uniform, budgets, pop_size, rng)
    imp, div = instance.evaluate(current)
    archive.add(current, imp, div)
    archive.record(0)
    temperature = t0
    for iteration in range(1, n_gen + 1):
        candidate = resample_one_row(current, budgets, rng)
        new_imp, new_div = instance.evaluate(candidate)
        dominates = (new_imp >= imp) & (new_div <= div) & ((new_imp > imp) | (new_div < div))
        delta = (new_imp - imp) + (div - new_div)
        accept = dominates
        if temperature > t_end:
            metropolis = np.exp(np.minimum(delta, 0.0) / temperature)
            accept = dominates | (rng.random(pop_size) < metropolis)
        current[accept] = candidate[accept]
        imp, div = np.where(accept, new_imp, imp), np.where(accept, new_div, div)
        archive.add(current[accept], imp[accept], div[accept])
        temperature *= cooling
        archive.record(iteration)
