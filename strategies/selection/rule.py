"""What every selection module builds: a `SelectionRule`, i.e. which score the clients compute and
how the server turns the scores and budgets of one round into one layer mask per client."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from metaheuristics import Assignment, optimize

Pick = Callable[[np.ndarray, Sequence[int], int], tuple[np.ndarray, Assignment | None]]
"""(scores (N, L), budgets (N,), seed) -> (masks (N, L) bool, the optimiser's result or None)."""

Builder = Callable[[str, str, Mapping[str, object]], "SelectionRule"]
"""A selection module's one public function: (strategy name, optimiser, optimiser settings) ->
rule. Most rules ignore the optimiser; ``f3ocus`` runs it."""


@dataclass(frozen=True)
class SelectionRule:
    """Which score clients compute (``scorer``; None = none) and how the server picks masks.

    ``algorithm`` (with ``params``) names a `metaheuristics.optimize` algorithm the masks come
    from; a rule that needs no optimiser (``all``, ``none``) gives its own ``pick`` instead.
    """

    name: str
    scorer: str | None
    algorithm: str
    params: tuple[tuple[str, object], ...] = ()
    pick: Pick | None = None

    def select(
        self, scores: np.ndarray, budgets: Sequence[int], seed: int
    ) -> tuple[np.ndarray, Assignment | None]:
        """Masks (N, L) for the clients of this round, and the optimiser's result if one ran."""
        if self.pick is not None:
            return self.pick(scores, budgets, seed)
        assignment = optimize(scores, budgets, algorithm=self.algorithm, seed=seed,
                              **dict(self.params))
        return assignment.masks, assignment
