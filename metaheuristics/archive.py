"""Pareto archive shared by all algorithms: vectorised non-dominated filtering and the pick.

The archive keeps mutually non-dominated solutions with one representative per objective
vector (the one found first), so different masks with identical objectives (possible with
tied scores) do not bloat it. Every algorithm feeds it and returns its pick, so results
are comparable across algorithms.

Pick rules (``pick``):

* ``"weighted"`` (default; supplement Algorithm 34/45, PICK_BEST_SOLUTION): maximise
  w * importance' - (1 - w) * diversity', on objectives normalised to [0, 1] by the
  instance's exact bounds (indicators.normalize_front). Algorithm 34 takes the two weights as
  inputs and the paper gives none; ``weight`` = w (default W_IMPORTANCE = 0.5: equal weights
  on the normalised scale treat both objectives alike). One number suffices: scaling both
  weights picks the same point.
* ``"least-diversity"`` (supplement Algorithm 2, line 23): the member with the smallest count
  std (the front's most balanced point; on a front it is unique).
* ``"knee"``: the front point farthest from the straight line through the two extreme
  points, on the ideal side, in the same normalised space (ties: the weighted rule).
"""

from __future__ import annotations

import numpy as np

from metaheuristics.indicators import Bounds, instance_bounds
from metaheuristics.problem import Instance
from metaheuristics.result import Front

W_IMPORTANCE = 0.5
PICKS = ("weighted", "knee", "least-diversity")


def nondominated(importance: np.ndarray, diversity: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated points (max importance, min diversity), best importance
    first, keeping the first of several points with equal objectives. O(n log n)."""
    order = np.lexsort((diversity, -importance))
    div = diversity[order]
    best_before = np.minimum.accumulate(np.concatenate(([np.inf], div[:-1])))
    return order[div < best_before]


def pick_index(importance: np.ndarray, diversity: np.ndarray, bounds: Bounds, pick: str,
               weight: float = W_IMPORTANCE) -> int:
    """Index of the picked point of a front (see module docstring); ``weight``: the importance's
    weight w of the weighted rule, the diversity's being 1 - w."""
    imp_n, div_n = bounds.normalize(importance, diversity)
    weighted = weight * imp_n - (1.0 - weight) * div_n
    if pick == "weighted":
        return int(np.argmax(weighted))
    if pick == "least-diversity":
        return int(np.lexsort((-importance, diversity))[0])
    # knee: signed distance to the chord between the extremes, positive towards the ideal
    a = np.array([imp_n.max(), div_n[np.argmax(imp_n)]])
    b = np.array([imp_n[np.argmin(div_n)], div_n.min()])
    chord = b - a
    length = np.hypot(*chord)
    if length == 0:
        return int(np.argmax(weighted))
    signed = (chord[0] * (div_n - a[1]) - chord[1] * (imp_n - a[0])) / length
    return int(np.lexsort((-weighted, -np.round(signed, 12)))[0])


class ParetoArchive:
    """Non-dominated archive of an instance with per-iteration history."""

    def __init__(self, instance: Instance, pick: str = "weighted", weight: float = W_IMPORTANCE) -> None:
        self.bounds = instance_bounds(instance)
        self.pick = pick
        self.weight = weight
        self.masks = np.zeros((0, instance.n_clients, instance.n_layers), dtype=bool)
        self.importance = np.zeros(0)
        self.diversity = np.zeros(0)
        self.history: list[dict] = []

    def add(self, masks: np.ndarray, importance: np.ndarray, diversity: np.ndarray) -> None:
        """Merge a (P, N, L) population with its objectives into the archive."""
        imp = np.concatenate((self.importance, importance))
        div = np.concatenate((self.diversity, diversity))
        keep = nondominated(imp, div)
        old = keep < len(self.importance)
        merged = np.empty((len(keep), *masks.shape[1:]), dtype=bool)
        merged[old] = self.masks[keep[old]]
        merged[~old] = masks[keep[~old] - len(self.importance)]
        self.masks, self.importance, self.diversity = merged, imp[keep], div[keep]

    def best(self) -> int:
        return pick_index(self.importance, self.diversity, self.bounds, self.pick, self.weight)

    def record(self, iteration: int) -> None:
        """Append the history entry of ``iteration`` (the current pick and archive size)."""
        i = self.best()
        self.history.append(
            {
                "iteration": iteration,
                "best_importance": float(self.importance[i]),
                "best_diversity": float(self.diversity[i]),
                "front_size": len(self.importance),
            }
        )

    def front(self) -> Front:
        return Front(self.masks.copy(), self.importance.copy(), self.diversity.copy())
