"""pymoo operators on the flattened (N * L) binary mask that keep exactly k_i ones per row.

They draw all randomness from the ``random_state`` generator pymoo passes in (seeded by
the algorithm's ``seed``), so runs are reproducible. ``problem`` must be a
``LayerProblem`` (nsga2.py), which carries the validated instance. ``RowCrossover`` and
``SwapMutation`` work in place on the ``X`` they are given, which pymoo (and ArrayMating)
always builds fresh for the call: at 10,000 clients a population is 40 MB, and every copy
saved counts.
"""

from __future__ import annotations

import numpy as np
from pymoo.core.crossover import Crossover
from pymoo.core.duplicate import DuplicateElimination
from pymoo.core.infill import InfillCriterion
from pymoo.core.mutation import Mutation
from pymoo.core.population import Population
from pymoo.core.sampling import Sampling
from pymoo.core.variable import get

from metaheuristics.moves import swap_one, union_resample
from metaheuristics.search import seeded_population


def _as_masks(problem, x: np.ndarray) -> np.ndarray:
    inst = problem.instance
    return x.reshape(*x.shape[:-1], inst.n_clients, inst.n_layers).astype(bool, copy=False)


class ImportanceSampling(Sampling):
    """Initial population: search.seeded_population, i.e. importance-proportional rows
    (supplement Algorithm 3; drawn without replacement so the budget is met exactly, where
    the printed RANDOM_CHOICES may repeat layers) and, as individual 0, the clients' own
    top-k assignment, the LNTK selection that the server step refines (paper §5.2, Fig. 6)."""

    def _do(self, problem, n_samples, *args, random_state=None, **kwargs):
        return seeded_population(problem.instance, n_samples, random_state).reshape(n_samples, -1)


class RowCrossover(Crossover):
    """Two parents -> two complementary children; each client row comes from the parent a
    fair coin picks (uniform crossover over rows, so good client rows survive intact)."""

    def __init__(self, prob: float = 0.5) -> None:
        super().__init__(n_parents=2, n_offsprings=2, prob=prob)

    def _do(self, problem, X, *args, random_state=None, **kwargs):
        first, second = _as_masks(problem, X)
        coin = random_state.random(first.shape[:2]) < 0.5
        differ = (first ^ second) & coin[..., None]  # swap the coin's rows with two xors
        first ^= differ
        second ^= differ
        return X


class UnionCrossover(Crossover):
    """Two parents -> two children; every child row is k_i layers drawn uniformly from the
    union of the parents' rows (supplement Algorithm 10, CROSSOVER)."""

    def __init__(self, prob: float = 0.5) -> None:
        super().__init__(n_parents=2, n_offsprings=2, prob=prob)

    def _do(self, problem, X, *args, random_state=None, **kwargs):
        first, second = _as_masks(problem, X)
        budgets = problem.instance.budgets
        children = [union_resample(first, second, budgets, random_state) for _ in range(2)]
        return np.stack(children).reshape(X.shape)


class SwapMutation(Mutation):
    """With probability ``prob`` per individual, one client swaps one selected layer for an
    unselected one, steered towards balance (moves.swap_one with the client scores as
    weights). The printed Algorithm 11 resamples range(k_i), i.e. always layers
    0..k_i-1, which is not a mutation; this swap is one."""

    def _do(self, problem, X, *args, random_state=None, **kwargs):
        inst = problem.instance
        swap_one(_as_masks(problem, X), inst.budgets, random_state, inst.sampling_weights, in_place=True)
        return X


def _keys(x: np.ndarray) -> list[int]:
    """Hash of every row's bits (equal rows, equal keys; a 64-bit collision would only drop
    one valid child). Packing the bits first makes hashing 8x cheaper."""
    return [hash(row.tobytes()) for row in np.packbits(x.reshape(len(x), -1), axis=1)]


class ExactDuplicates(DuplicateElimination):
    """Drop offspring identical to another offspring or to an individual of ``other``,
    comparing the raw bytes of the boolean decision vectors through a hash set (O(P)
    instead of pymoo's O(P^2) distance matrix)."""

    def _do(self, pop, other, is_duplicate):
        keys = _keys(pop.get("X"))
        if other is None:
            seen: set[int] = set()
            for i, key in enumerate(keys):
                is_duplicate[i] = key in seen
                seen.add(key)
        else:
            known = set(_keys(other.get("X")))
            is_duplicate[:] = [key in known for key in keys]
        return is_duplicate


def dominance_tournament(pop, P, random_state=None, **kwargs):
    """Binary tournament of pymoo's NSGA-II (``comp_by_dom_and_crowding``) vectorised over
    all tournaments: the dominating individual wins, else the larger crowding distance,
    else a coin flip. Pass to ``TournamentSelection(func_comp=...)``."""
    f = np.array([ind.F for ind in pop])
    crowding = np.array([ind.get("crowding") for ind in pop])
    a, b = P[:, 0], P[:, 1]
    fa, fb = f[a], f[b]
    a_dom = np.all(fa <= fb, axis=1) & np.any(fa < fb, axis=1)
    b_dom = np.all(fb <= fa, axis=1) & np.any(fb < fa, axis=1)
    coin = random_state.random(len(a)) < 0.5
    wider = (crowding[a] > crowding[b]) | ((crowding[a] == crowding[b]) & coin)
    return np.where(a_dom | (~b_dom & wider), a, b)[:, None]


def _apply(operator, problem, x: np.ndarray, chosen: np.ndarray, random_state, axis: int) -> None:
    """Write ``operator`` applied to the ``chosen`` entries of ``x`` (along ``axis``) back
    into ``x``; with every entry chosen the operator gets ``x`` itself (no gather/scatter)."""
    if chosen.all():
        result = operator._do(problem, x, random_state=random_state)
        if result is not x:
            x[...] = result
    elif chosen.any():
        index = (slice(None),) * axis + (chosen,)
        x[index] = operator._do(problem, x[index], random_state=random_state)


class ArrayMating(InfillCriterion):
    """pymoo's mating step (selection, crossover with probability ``crossover.prob``,
    mutation with probability ``mutation.prob``, removal of duplicates of parents and of
    each other) done on plain arrays. pymoo's ``Mating`` builds a Population of Individual
    objects after every stage, which costs more than the whole vectorised search at the
    paper's sizes; this builds only the final offspring Population. Pass as ``mating=``.
    """

    def __init__(self, selection, crossover: Crossover, mutation: Mutation) -> None:
        super().__init__(n_max_iterations=100)
        self.selection, self.crossover, self.mutation = selection, crossover, mutation

    def do(self, problem, pop, n_offsprings, random_state=None, **kwargs):
        parents = [ind.X for ind in pop]
        seen = {key for key in pop.get("key") if key is not None}
        if len(seen) < len(pop):  # the initial population carries no keys yet
            seen = set(_keys(np.array(parents)))
        parts: list[np.ndarray] = []
        keys: list[int] = []
        while len(keys) < n_offsprings and len(parts) < self.n_max_iterations:
            n_matings = -(-(n_offsprings - len(keys)) // self.crossover.n_offsprings)
            mates = self.selection.do(
                problem, pop, n_matings, n_parents=2, to_pop=False, random_state=random_state, **kwargs
            )
            x = np.array([[parents[i] for i in row] for row in mates.T])  # (2, matings, N * L)
            cross = random_state.random(n_matings) < get(self.crossover.prob)
            _apply(self.crossover, problem, x, cross, random_state, axis=1)
            children = x.reshape(-1, x.shape[-1])
            mutate = random_state.random(len(children)) < get(self.mutation.prob)
            _apply(self.mutation, problem, children, mutate, random_state, axis=0)
            fresh = []
            for i, key in enumerate(_keys(children)):
                if key not in seen:
                    seen.add(key)
                    fresh.append(i)
                    keys.append(key)
            parts.append(children if len(fresh) == len(children) else children[fresh])
        x = (parts[0] if len(parts) == 1 else np.concatenate(parts))[:n_offsprings]
        keys = keys[:n_offsprings]
        return Population.new("X", x, "key", np.array(keys, dtype=object))
