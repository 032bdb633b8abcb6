"""Pruning-score baselines (paper §6.2 (iii)-(iv), Tables 2 and 5): the client computes the named
criterion (magnitude, FishMask, GradFlow, SNIP, GraSP, SynFlow, RGN; `tasks.scores`) per layer and
keeps its own top-k_i layers of it. One rule for all of them: the score's name is the strategy's."""

from __future__ import annotations

from collections.abc import Mapping

from strategies.selection.rule import SelectionRule


def rule(name: str, optimizer: str, optimizer_params: Mapping[str, object]) -> SelectionRule:
    """Clients report the ``name`` score of every layer; each gets its own top-k_i layers."""
    return SelectionRule(name, name, "topk")
