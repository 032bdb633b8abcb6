"""LNTK top-k: every client keeps its own k_i highest-LNTK layers (paper §4 without the server
optimisation of §5; the "client-level" ablation)."""

from __future__ import annotations

from collections.abc import Mapping

from strategies.selection.rule import SelectionRule


def rule(name: str, optimizer: str, optimizer_params: Mapping[str, object]) -> SelectionRule:
    """Clients report LNTK eigenvalues; each gets the top-k_i layers of its own scores."""
    return SelectionRule(name, "lntk", "topk")
