"""Last layers: every client trains its k_i layers closest to the output (the usual partial
fine-tuning baseline; paper §6.2 (i)). No client-side score."""

from __future__ import annotations

from collections.abc import Mapping

from strategies.selection.rule import SelectionRule


def rule(name: str, optimizer: str, optimizer_params: Mapping[str, object]) -> SelectionRule:
    """No scores; client i trains layers L-k_i..L-1."""
    return SelectionRule(name, None, "last")
