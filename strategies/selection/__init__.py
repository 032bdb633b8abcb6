"""Which layers each client trains: the run's selection rule, a registered `methods.base.Selection`
(F3OCUS in `methods.f3ocus`, the reference rules in `methods.reference`) bound to the run's
optimiser (`strategies.selection.rule.SelectionRule`)."""

from __future__ import annotations

from collections.abc import Mapping

import methods
from strategies.selection.rule import SelectionRule


def make_rule(strategy: str, optimizer: str = "nsga2",
              optimizer_params: Mapping[str, object] | None = None) -> SelectionRule:
    """The rule of a strategy name bound to the optimiser; ValueError naming it if unknown."""
    params = tuple(sorted((optimizer_params or {}).items()))
    return SelectionRule(methods.selection(strategy), optimizer, params)


__all__ = ["SelectionRule", "make_rule"]
