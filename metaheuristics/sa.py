"""Archived multi-objective simulated annealing (AMOSA, Bandyopadhyay et al. 2008) in the
frame of the paper's SA (§5.3 (4); supplement Algorithms 19-26): ``pop_size`` chains
advanced together, one vectorised step per iteration for all of them.

Every chain proposes a move from its current state; the proposal enters the shared Pareto
archive when no archive member dominates it, and the chain moves by AMOSA's rules, which
weigh a worse proposal by its *amount of domination*
Δdom(a, b) = Π_{objectives where a and b differ} |f(a) - f(b)| / R (R: the objective's range):

* current dominates proposal, or an archive member dominates a proposal that does not
  dominate current: move with probability 1 / (1 + exp(Δ / T)), Δ the mean Δdom of the
  dominating points (current included when it dominates);
* proposal dominated by nothing (neither current nor archive): move;
* proposal dominates current but archive members dominate it: with probability
  1 / (1 + exp(-Δmin)) jump to the archive member of least Δdom, otherwise move.

The paper runs one chain (Table 5 lists no population for SA); ``pop_size=1`` is that.

Deviations from the printed pseudo-code, and why:

* Algorithm 19 scores a move by the weighted sum (new_imp - cur_imp) + (cur_div -
  new_div): one fixed trade-off, so a single run can only find one point of the front.
  AMOSA's dominance-based acceptance with the archive as guide is the multi-objective SA
  the comparison needs.
* Algorithm 25 accepts with exp(-delta / T) where delta is the *improvement*, which
  accepts every worse move with probability >= 1; AMOSA's logistic rule above decreases
  with the amount of domination, as the text describes.
* Δdom is taken on objectives normalised by the instance's exact bounds (indicators.py),
  so R = 1; AMOSA takes R from the archive, which changes as it grows. AMOSA prints the
  worse-move probability as 1 / (1 + exp(Δ * T)), which would *rise* as T falls; the
  Metropolis-like 1 / (1 + exp(Δ / T)) is used. With the §C.3 schedule (T0 = 100, cooling
  0.95, 20 iterations, T >= 36) and Δ <= 1 that probability stays close to 1/2: what
  steers the chains is the archive (the jump rule and dominated proposals being taken
  only half the time). Measured on the 10 x 32 benchmark, dividing the temperature by up
  to 1e7 changes the median hypervolume by less than 0.01 (1.176 to 1.183).
* Start and move: Algorithms 20-21 sample ``range(num_layers)`` with num_layers = k_i,
  i.e. always layers 0..k_i-1. Chains start from search.seeded_population (importance-
  proportional rows and the clients' own top-k, as NSGA-II) and a move is NSGA-II's
  balance-steered swap (moves.swap_one with the scores as weights). Median hypervolume on
  the 10 x 32 benchmark (5 seeds; NSGA-II 1.190): as here 1.176, without the top-k seed
  1.012, with a uniform swap 1.130, resampling a whole client row (Algorithm 21's intent)
  1.103.
* Below ``t_end`` only dominating moves (and the archive jump) are taken.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from scipy.special import expit

from metaheuristics.moves import swap_one
from metaheuristics.search import Batch, Context, dominates, seeded_population

DEFAULTS = {"pop_size": 50, "n_gen": 20, "t0": 100.0, "t_end": 1.0, "cooling": 0.95}
Objectives = tuple[np.ndarray, np.ndarray]


def _delta_dom(a: Objectives, b: Objectives) -> np.ndarray:
    """AMOSA's amount of domination on normalised objectives (broadcast over a and b)."""
    d_imp, d_div = np.abs(a[0] - b[0]), np.abs(a[1] - b[1])
    return np.where(d_imp > 0, d_imp, 1.0) * np.where(d_div > 0, d_div, 1.0)


def acceptance(
    cur: Objectives, prop: Objectives, arc: Objectives, temperature: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """AMOSA's decision for every chain (module docstring), on normalised objectives.

    ``cur`` and ``prop`` are (importance, diversity) arrays of shape (P,), ``arc`` those of
    the archive, shape (A,); ``temperature`` <= 0 means only dominating moves. Returns
    (move, jump, target): move to the proposal, jump to archive member ``target``.
    """
    arc_b, prop_b = (arc[0][None], arc[1][None]), (prop[0][:, None], prop[1][:, None])
    arc_wins = dominates(*arc_b, *prop_b)  # (P, A)
    amount = _delta_dom(arc_b, prop_b)
    cur_wins, prop_wins = dominates(*cur, *prop), dominates(*prop, *cur)
    n_worse = arc_wins.sum(axis=1) + cur_wins
    mean = ((amount * arc_wins).sum(axis=1) + cur_wins * _delta_dom(cur, prop)) / np.maximum(n_worse, 1)
    n_chains = len(cur[0])
    take_worse = np.zeros(n_chains, dtype=bool)
    if temperature > 0:
        take_worse = rng.random(n_chains) < expit(-mean / temperature)
    gaps = np.column_stack((np.where(arc_wins, amount, np.inf), np.full(n_chains, np.inf)))
    target = np.argmin(gaps, axis=1)  # A (past the end) only where nothing in the archive wins
    least = gaps[np.arange(n_chains), target]
    jump = prop_wins & arc_wins.any(axis=1) & (rng.random(n_chains) < expit(least))
    move = ~jump & (prop_wins | (n_worse == 0) | take_worse)
    return move, jump, target


def steps(ctx: Context, t0: float, t_end: float, cooling: float) -> Iterator[Batch]:
    """Run ``pop_size`` AMOSA chains for ``n_gen`` steps from T = t0, cooling geometrically."""
    inst, archive, rng = ctx.instance, ctx.archive, ctx.rng
    norm = archive.bounds.normalize
    current = seeded_population(inst, ctx.pop_size, rng)
    imp, div = inst.evaluate(current)
    yield current, imp, div
    temperature = t0
    for _ in range(ctx.n_gen):
        new = swap_one(current, inst.budgets, rng, inst.sampling_weights)
        new_imp, new_div = inst.evaluate(new)
        move, jump, target = acceptance(
            norm(imp, div),
            norm(new_imp, new_div),
            norm(archive.importance, archive.diversity),
            temperature if temperature > t_end else 0.0,
            rng,
        )
        current[move], imp[move], div[move] = new[move], new_imp[move], new_div[move]
        back = target[jump]
        current[jump] = archive.masks[back]
        imp[jump], div[jump] = archive.importance[back], archive.diversity[back]
        yield new, new_imp, new_div
        temperature *= cooling
