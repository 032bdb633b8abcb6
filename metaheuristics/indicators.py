"""Instance bounds, objective normalisation and hypervolume (pymoo ``HV``).

Exact bounds of both objectives over all budget-respecting assignments:

* importance: from every client's bottom-k_i to its top-k_i scores;
* diversity: minimum at the most balanced histogram (counts floor/ceil(K/L), K = sum k_i),
  maximum when all clients stack on the same layers (counts n_l = #{i : k_i > l}).
  Both histograms are realisable (Gale-Ryser: any count vector majorised by the
  conjugate of the budgets is), and the std is Schur-convex, so these are the extremes.

Normalised objectives are in [0, 1] on every instance (importance 1 = best, diversity
0 = best), so fronts of different instances can be compared. The hypervolume reference
point is the worst corner (importance 0, diversity 1) pushed out by 0.1 on both axes, so
the two extreme points of a front also count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pymoo.indicators.hv import HV

from metaheuristics.problem import Instance, histogram_std, make_instance

HV_MARGIN = 0.1


@dataclass(frozen=True)
class Bounds:
    importance_min: float
    importance_max: float
    diversity_min: float
    diversity_max: float

    def normalize(self, importance: np.ndarray, diversity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(importance - min) / range and (diversity - min) / range; a zero range maps to 0."""
        imp_range = self.importance_max - self.importance_min
        div_range = self.diversity_max - self.diversity_min
        imp_n = (np.asarray(importance, dtype=np.float64) - self.importance_min) / (imp_range or 1.0)
        div_n = (np.asarray(diversity, dtype=np.float64) - self.diversity_min) / (div_range or 1.0)
        return imp_n, div_n


def instance_bounds(instance: Instance) -> Bounds:
    """Exact objective ranges of an instance (see module docstring)."""
    ordered = np.sort(instance.scores, axis=1)
    n_layers, ks = instance.n_layers, instance.budgets
    ranks = np.arange(n_layers)
    imp_min = float(ordered[ranks < ks[:, None]].sum())
    imp_max = float(ordered[ranks >= n_layers - ks[:, None]].sum())
    total = int(ks.sum())
    balanced = np.full(n_layers, total // n_layers)
    balanced[: total % n_layers] += 1
    stacked = (ks[:, None] > ranks).sum(axis=0)
    div_min, div_max = histogram_std(np.stack([balanced, stacked]))
    return Bounds(imp_min, imp_max, float(div_min), float(div_max))


def _as_instance(instance: Instance | tuple[np.ndarray, Sequence[int]]) -> Instance:
    if isinstance(instance, Instance):
        return instance
    if not isinstance(instance, tuple) or len(instance) != 2:
        raise ValueError(f"instance: expected (scores, budgets), got {type(instance).__name__}")
    return make_instance(*instance)


def normalize_front(
    importance: np.ndarray,
    diversity: np.ndarray,
    instance: Instance | tuple[np.ndarray, Sequence[int]],
) -> tuple[np.ndarray, np.ndarray]:
    """Map objectives to [0, 1] by the instance's exact bounds (Bounds.normalize)."""
    return instance_bounds(_as_instance(instance)).normalize(importance, diversity)


def hypervolume(
    importance: np.ndarray,
    diversity: np.ndarray,
    ref_point: tuple[float, float] | None = None,
    instance: Instance | tuple[np.ndarray, Sequence[int]] | None = None,
) -> float:
    """Hypervolume dominated by the points (importance maximised, diversity minimised).

    With ``instance``, objectives are first normalised (normalize_front) and ``ref_point``
    (importance, diversity) defaults to (-0.1, 1.1). Without it, raw objectives are used and
    ``ref_point`` is required. Points not strictly better than the reference count zero.
    """
    imp = np.asarray(importance, dtype=np.float64).ravel()
    div = np.asarray(diversity, dtype=np.float64).ravel()
    if imp.shape != div.shape:
        raise ValueError(f"diversity: shape {div.shape} differs from importance {imp.shape}")
    if instance is not None:
        imp, div = normalize_front(imp, div, instance)
        if ref_point is None:
            ref_point = (-HV_MARGIN, 1.0 + HV_MARGIN)
    elif ref_point is None:
        raise ValueError("ref_point: required when no instance is given, got None")
    ref = np.array([-float(ref_point[0]), float(ref_point[1])])
    if not np.all(np.isfinite(ref)):
        raise ValueError(f"ref_point: must be finite, got {ref_point}")
    if imp.size == 0:
        return 0.0
    points = np.column_stack([-imp, div])
    return float(HV(ref_point=ref)(points))
