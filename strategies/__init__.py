"""Flower strategies for layer-selecting federated fine-tuning (F3OCUS and baselines).

A run has two independent axes, each chosen from the method packages' registries (`methods`):
which layers each client trains (``strategy``, `methods.SELECTIONS`, bound in `strategies.selection`)
and how their updates are combined (``aggregation``, `methods.AGGREGATIONS`, the step's signature in
`strategies.aggregation`). `strategies.layer_selection` is the one Flower strategy that runs a round
with any pair of them.

The public names load on first use (`lazy_loader`, SPEC 1): a client importing the wire format
(`strategies.records`) does not import the server's strategy and its optimisers (pymoo, scipy).
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs={
    "aggregation": ["Aggregate", "Aggregator", "ClientUpdate"],
    "layer_selection": ["LayerSelectionStrategy", "RoundLog"],
    "round.identity": ["NodesMissing"],
    "selection": ["SelectionRule"],
    "validation": ["LayerReport", "Rejected"],
})
