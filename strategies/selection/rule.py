"""A selection rule bound to a run: its registry entry (`methods.base.Selection`, as far as the round
needs it: `Entry`) with the run's optimiser and the optimiser's settings, which only an optimising
rule (F3OCUS) uses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from metaheuristics import Assignment, optimize  # noqa: F401  (see below)

# The optimisers' libraries (pymoo, scipy) load with the server's strategy, before any model runs:
# loading them later, at the first selection, shifts the last bits of a client's float results
# (the default run's round 2 differs in the fourth decimal), so a run would not repeat across
# versions that load them at different times.


class Entry(Protocol):
    """What the round reads of a selection rule's registry entry."""

    name: str
    scorer: str | None
    algorithm: str | None
    optimises: bool

    def select(self, scores: np.ndarray, budgets: Sequence[int], seed: int, optimizer: str = "nsga2",
               params: Mapping[str, object] | None = None) -> tuple[np.ndarray, Any]: ...


@dataclass(frozen=True)
class SelectionRule:
    """The run's selection: which score its clients compute and how the server picks masks."""

    entry: Entry
    optimizer: str = "nsga2"
    params: tuple[tuple[str, object], ...] = ()

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def scorer(self) -> str | None:
        """The `tasks.scores` name the clients compute, or None (they report their budgets only)."""
        return self.entry.scorer

    @property
    def algorithm(self) -> str:
        """What picks the masks, for the log: the optimiser, a reference algorithm, or the own pick."""
        return self.optimizer if self.entry.optimises else self.entry.algorithm or "pick"

    def select(self, scores: np.ndarray, budgets: Sequence[int], seed: int
               ) -> tuple[np.ndarray, Assignment | None]:
        """Masks (N, L) for the clients of this round, and the optimiser's result if one ran."""
        return self.entry.select(scores, budgets, seed, self.optimizer, dict(self.params))
