"""Artificial bee colony (paper §5.3 (2); supplement Algorithms 35-45), every phase
vectorised over the bees. Registered as ``"abc"`` (the module is not named abc.py so that
it cannot shadow the standard library's ``abc``).

Per iteration: employed bees try one swap move each (Algorithm 41) and keep it if it
dominates (Algorithm 39, trial counters); onlooker bees pick food sources by fitness and try
the same move on them (Algorithm 37); sources whose counter reached ``limit`` are replaced
by scouts (Algorithm 38). The archive gets the bees after the onlooker phase and the new
scouts, so an improvement found just before a source is abandoned is not lost.

Deviations from the printed pseudo-code, and why:

* Initial and scout solutions are drawn with probability proportional to importance:
  Algorithm 36 computes those probabilities but then samples ``range(num_layers)``
  (= range(k_i), always layers 0..k_i-1) and ignores them.
* Onlookers: Algorithm 37 lets bee i move with probability f_i / sum(f), f = importance -
  diversity, which sends about one onlooker per iteration in total and is not a
  probability when some f are negative. Here, as in standard ABC (Karaboga 2005) and the
  paper's text ("onlooker bees select solutions based on a probability weighted by
  importance and diversity"), ``pop_size`` onlookers each choose a source by roulette on
  f - min(f) (+1e-12, so equal fitness means uniform). When several onlookers improve the
  same source, the first in draw order wins.
* ``limit`` (scout trials) is not given in §C.3; the default, 10, is half the paper's 20
  iterations.
* The text mentions employed bees "occasionally accepting worse solutions"; the
  pseudo-code is greedy, and so is this implementation.
"""

from __future__ import annotations

import numpy as np

from metaheuristics.archive import ParetoArchive
from metaheuristics.moves import sample_subsets, swap_one
from metaheuristics.problem import Instance

DEFAULTS = {"pop_size": 50, "n_gen": 20, "limit": 10}


def _dominates(imp_a, div_a, imp_b, div_b) -> np.ndarray:
    return (imp_a >= imp_b) & (div_a <= div_b) & ((imp_a > imp_b) | (div_a < div_b))


def run(
    instance: Instance,
    archive: ParetoArchive,
    seed: int,
    pop_size: int,
    n_gen: int,
    limit: int,
) -> None:
    """Run ``n_gen`` iterations of ``pop_size`` employed bees and onlookers."""
    rng = np.random.default_rng(seed)
    budgets, weights = instance.budgets, instance.sampling_weights
    bees = sample_subsets(weights, budgets, pop_size, rng)
    imp, div = instance.evaluate(bees)
    trials = np.zeros(pop_size, dtype=np.int64)
    archive.add(bees, imp, div)
    archive.record(0)
    for iteration in range(1, n_gen + 1):
        # employed bees
        cand = swap_one(bees, budgets, rng)
        c_imp, c_div = instance.evaluate(cand)
        won = _dominates(c_imp, c_div, imp, div)
        bees[won], imp[won], div[won] = cand[won], c_imp[won], c_div[won]
        trials = np.where(won, 0, trials + 1)
        # onlooker bees
        fitness = imp - div
        prob = fitness - fitness.min() + 1e-12
        source = rng.choice(pop_size, size=pop_size, p=prob / prob.sum())
        cand = swap_one(bees[source], budgets, rng)
        c_imp, c_div = instance.evaluate(cand)
        hits = np.flatnonzero(_dominates(c_imp, c_div, imp[source], div[source]))
        improved, first = np.unique(source[hits], return_index=True)
        pick = hits[first]
        bees[improved], imp[improved], div[improved] = cand[pick], c_imp[pick], c_div[pick]
        archive.add(bees, imp, div)
        # scout bees
        stale = np.flatnonzero(trials >= limit)
        if stale.size:
            bees[stale] = sample_subsets(weights, budgets, stale.size, rng)
            imp[stale], div[stale] = instance.evaluate(bees[stale])
            trials[stale] = 0
            archive.add(bees[stale], imp[stale], div[stale])
        archive.record(iteration)
