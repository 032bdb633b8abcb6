"""Result types returned by ``optimize``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class Front:
    """A Pareto set: masks (F, N, L) bool and objectives (F,), best importance first."""

    masks: np.ndarray
    importance: np.ndarray
    diversity: np.ndarray

    def __len__(self) -> int:
        return int(self.importance.shape[0])


@dataclass(frozen=True, eq=False)
class Assignment:
    """The picked solution (row i of ``masks`` has exactly budgets[i] ones) and its search.

    ``history`` has one entry per iteration: {"iteration", "best_importance",
    "best_diversity", "front_size"}, "best" being the archive's pick at that iteration.
    """

    masks: np.ndarray
    importance: float
    diversity: float
    front: Front
    history: list[dict]
    algorithm: str
    seconds: float

    def to_dict(self) -> dict:
        """JSON-serialisable summary; masks (also the front's) become, per client, the list of
        selected layer indices."""
        return {
            "algorithm": self.algorithm,
            "seconds": self.seconds,
            "importance": self.importance,
            "diversity": self.diversity,
            "masks": _layer_lists(self.masks),
            "front": {
                "importance": self.front.importance.tolist(),
                "diversity": self.front.diversity.tolist(),
                "masks": [_layer_lists(m) for m in self.front.masks],
            },
            "history": [dict(h) for h in self.history],
        }


def _layer_lists(masks: np.ndarray) -> list[list[int]]:
    return [np.flatnonzero(row).tolist() for row in masks]
