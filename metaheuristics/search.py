"""The loop every search shares, and the pieces of Pareto bookkeeping they all use.

A search is a generator ``steps(ctx, **own_settings)`` that yields one evaluated batch
``(masks, importance, diversity)`` per iteration: iteration 0 is its initial population,
iterations 1..n_gen its ``ctx.n_gen`` iterations. ``drive`` feeds every batch into the
Pareto archive and records the history entry of that iteration, so no algorithm repeats
the seed / archive / history scaffolding. The generator resumes only after its batch is in
the archive, so a search that steers by the archive (MOPSO leaders, ACO deposits, AMOSA
acceptance) always sees it up to date.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from metaheuristics.archive import ParetoArchive
from metaheuristics.moves import sample_subsets, top_k
from metaheuristics.problem import Instance

Batch = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Context:
    """What every search gets: the instance, the archive it feeds, its random generator
    (seeded from ``seed``; pymoo takes ``seed`` itself), population size and iterations."""

    instance: Instance
    archive: ParetoArchive
    seed: int
    pop_size: int
    n_gen: int
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rng", np.random.default_rng(self.seed))


def drive(steps: Iterator[Batch], archive: ParetoArchive) -> None:
    """Run a search to the end: archive every yielded batch, record iteration 0, 1, ..."""
    for iteration, batch in enumerate(steps):
        archive.add(*batch)
        archive.record(iteration)


def dominates(imp_a: np.ndarray, div_a: np.ndarray, imp_b: np.ndarray, div_b: np.ndarray) -> np.ndarray:
    """a dominates b (importance maximised, diversity minimised), element-wise / broadcast."""
    return (imp_a >= imp_b) & (div_a <= div_b) & ((imp_a > imp_b) | (div_a < div_b))


def seeded_population(instance: Instance, n: int, rng: np.random.Generator) -> np.ndarray:
    """n solutions drawn with probability proportional to importance (supplement
    Algorithm 3, without replacement so budgets are exact), member 0 replaced by the
    clients' own top-k (the LNTK selection the server step refines, paper §5.2)."""
    masks = sample_subsets(instance.sampling_weights, instance.budgets, n, rng)
    masks[0] = top_k(instance)
    return masks
