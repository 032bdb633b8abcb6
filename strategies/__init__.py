"""Flower strategies for layer-selecting federated fine-tuning (F3OCUS and baselines).

A run has two independent axes, each a registry of small modules:
- `strategies.selection` (`SELECTIONS`): which layers each client trains (run config ``strategy``);
- `strategies.aggregation` (`AGGREGATIONS`): how their updates are combined (``aggregation``).
`strategies.layer_selection` is the one Flower strategy that runs a round with any pair of them.
"""

from strategies.aggregation import AGGREGATIONS, Aggregate, Aggregator, ClientUpdate, masked_fedavg
from strategies.layer_selection import QUERY_LNTK, LayerSelectionStrategy, RoundLog
from strategies.selection import SELECTIONS, SelectionRule, make_rule
from strategies.validation import LayerReport, Rejected

__all__ = [
    "AGGREGATIONS",
    "QUERY_LNTK",
    "SELECTIONS",
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
