"""Selection rules: how a round turns client layer reports into one layer mask per client.

All strategies share one round (query scores -> select -> train -> aggregate); they differ only in
which score clients compute and how the server turns scores and budgets into masks:

- ``f3ocus``: LNTK scores, refined on the server by a multi-objective optimiser (paper §5, Eq. 21);
- ``lntk``: LNTK scores, each client's own top-k (paper §4 without the server step);
- ``random``: k random layers per client (federated dropout);
- ``last``: the last k layers;
- ``all``: every layer for every client (FedAvg of all adapters; budgets ignored);
- any other client-side scorer name (e.g. a pruning-style baseline): that score's top-k.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from metaheuristics import Assignment, optimize

FIXED_RULES: dict[str, tuple[str | None, str | None]] = {
    # strategy: (client-side scorer, server algorithm); None algorithm = take the optimiser
    "f3ocus": ("lntk", None),
    "lntk": ("lntk", "topk"),
    "random": (None, "random"),
    "last": (None, "last"),
    "all": (None, "all"),
}


@dataclass(frozen=True)
class SelectionRule:
    """Which score clients compute (``scorer``; None = none) and how the server picks masks."""

    name: str
    scorer: str | None
    algorithm: str
    params: tuple[tuple[str, object], ...] = ()

    def select(
        self, scores: np.ndarray, budgets: Sequence[int], seed: int
    ) -> tuple[np.ndarray, Assignment | None]:
        """Masks (N, L) for the clients of this round, and the optimiser's result if one ran."""
        if self.algorithm == "all":
            return np.ones(scores.shape, dtype=bool), None
        assignment = optimize(scores, budgets, algorithm=self.algorithm, seed=seed,
                              **dict(self.params))
        return assignment.masks, assignment


def make_rule(
    strategy: str,
    optimizer: str = "nsga2",
    optimizer_params: dict | None = None,
    scorers: Sequence[str] = (),
) -> SelectionRule:
    """Build the rule for a strategy name; ``scorers`` lists extra client-side score names."""
    if strategy in FIXED_RULES:
        scorer, algorithm = FIXED_RULES[strategy]
        if algorithm is None:
            return SelectionRule(strategy, scorer, optimizer,
                                 tuple(sorted((optimizer_params or {}).items())))
        return SelectionRule(strategy, scorer, algorithm)
    if strategy in scorers:
        return SelectionRule(strategy, strategy, "topk")
    known = ", ".join([*FIXED_RULES, *scorers])
    raise ValueError(f"strategy = {strategy!r} is unknown; choose one of {known}")
