"""F3OCUS: LNTK layer scores from the clients, refined on the server by a multi-objective
optimiser (paper §5, Eq. 21; the optimiser and its settings are the run's ``optimizer*`` keys)."""

from __future__ import annotations

from collections.abc import Mapping

from strategies.selection.rule import SelectionRule


def rule(name: str, optimizer: str, optimizer_params: Mapping[str, object]) -> SelectionRule:
    """Clients report LNTK eigenvalues; ``optimizer`` (e.g. NSGA-II) picks every client's mask."""
    return SelectionRule(name, "lntk", optimizer, tuple(sorted(optimizer_params.items())))
