"""Heads only: no adapter is trained or sent; each client trains only its personal head and
projection (the lower reference: what the shared adapters add over local heads on a frozen model).

Every mask is empty: the server sends ``mask = []``, the client (which accepts an empty mask only
in a ``strategy = "none"`` run, `client_app.replies.check_mask`) returns no adapter arrays, and the
global adapters never change. No client-side score."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from strategies.selection.rule import SelectionRule


def _no_layer(scores: np.ndarray, budgets: Sequence[int], seed: int) -> tuple[np.ndarray, None]:
    return np.zeros(scores.shape, dtype=bool), None


def rule(name: str, optimizer: str, optimizer_params: Mapping[str, object]) -> SelectionRule:
    """No scores; every mask is empty."""
    return SelectionRule(name, None, "none", pick=_no_layer)
