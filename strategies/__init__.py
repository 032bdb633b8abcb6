"""Flower strategies for layer-selecting federated fine-tuning (F3OCUS and baselines).

A run has two independent axes, each a package of small modules registered in `methods`:
- `strategies.selection` (`methods.SELECTIONS`): which layers each client trains (``strategy``);
- `strategies.aggregation` (`methods.AGGREGATIONS`): how their updates are combined (``aggregation``).
`strategies.layer_selection` is the one Flower strategy that runs a round with any pair of them.

The public names load on first use (`lazy_loader`, SPEC 1): a client importing the wire format
(`strategies.records`) does not import the server's strategy and its optimisers (pymoo, scipy).
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs={
    "aggregation": ["Aggregate", "Aggregator", "ClientUpdate", "masked_fedavg"],
    "layer_selection": ["LayerSelectionStrategy", "RoundLog"],
    "selection": ["SelectionRule", "make_rule"],
    "validation": ["LayerReport", "Rejected"],
})
