"""Random layers: k_i layers drawn uniformly for every client each round, seeded by the round
(federated dropout; paper §6.2 baseline (ii)). No client-side score."""

from __future__ import annotations

from collections.abc import Mapping

from strategies.selection.rule import SelectionRule


def rule(name: str, optimizer: str, optimizer_params: Mapping[str, object]) -> SelectionRule:
    """No scores; ``metaheuristics``' seeded ``random`` algorithm draws the masks."""
    return SelectionRule(name, None, "random")
