"""The reference selection rules, against which F3OCUS is compared (paper §6): the clients' own top-k
of a layer score (LNTK, and each pruning score of `tasks.scores`), k random or the last k layers, and
the two bounds, every layer (budgets ignored) and none (only the clients' heads train)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from methods.base import Selection, register
from tasks.names import BASELINE_SCORERS, LNTK


def every_layer(scores: np.ndarray, budgets: Sequence[int], seed: int) -> np.ndarray:
    return np.ones(scores.shape, dtype=bool)


def no_layer(scores: np.ndarray, budgets: Sequence[int], seed: int) -> np.ndarray:
    return np.zeros(scores.shape, dtype=bool)


register(
    Selection("lntk", scorer=LNTK, algorithm="topk"),
    Selection("random", algorithm="random"),
    Selection("last", algorithm="last"),
    Selection("all", pick=every_layer, needs_budget=False),
    Selection("none", pick=no_layer, trains_adapter=False),
    *(Selection(name, scorer=name, algorithm="topk") for name in BASELINE_SCORERS),
)
