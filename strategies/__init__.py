"""Flower strategies for layer-selecting federated fine-tuning (F3OCUS and baselines)."""

from strategies.aggregation import AGGREGATORS, Aggregate, Aggregator, ClientUpdate, masked_fedavg
from strategies.layer_selection import QUERY_LNTK, LayerSelectionStrategy, RoundLog
from strategies.selection import FIXED_RULES, SelectionRule, make_rule
from strategies.validation import LayerReport, Rejected

__all__ = [
    "AGGREGATORS",
    "FIXED_RULES",
    "QUERY_LNTK",
    "Aggregate",
    "Aggregator",
    "ClientUpdate",
    "LayerReport",
    "LayerSelectionStrategy",
    "Rejected",
    "RoundLog",
    "SelectionRule",
    "make_rule",
    "masked_fedavg",
]
