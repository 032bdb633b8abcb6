"""All layers: every client trains and sends every layer's adapters (plain FedAvg of all adapters,
the budget-free upper reference; budgets are ignored). No client-side score."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from strategies.selection.rule import SelectionRule


def _every_layer(scores: np.ndarray, budgets: Sequence[int], seed: int) -> tuple[np.ndarray, None]:
    return np.ones(scores.shape, dtype=bool), None


def rule(name: str, optimizer: str, optimizer_params: Mapping[str, object]) -> SelectionRule:
    """No scores; every mask is all layers."""
    return SelectionRule(name, None, "all", pick=_every_layer)
