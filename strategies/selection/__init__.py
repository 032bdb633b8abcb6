"""Which layers each client trains: one module per selection rule, registered in `SELECTIONS`.

All strategies share one round (query scores -> select -> train -> aggregate,
`strategies.layer_selection`); they differ only in which score the clients compute and how the
server turns scores and budgets into masks. Each module has one public function, ``rule(name,
optimizer, optimizer_params) -> SelectionRule``; a new method is one new module plus one line here.

- ``f3ocus`` (`f3ocus`): LNTK scores, refined on the server by a multi-objective optimiser (§5);
- ``lntk`` (`lntk`): LNTK scores, each client's own top-k (§4 without the server step);
- ``magnitude``, ``fishmask``, ``gradflow``, ``snip``, ``grasp``, ``synflow``, ``rgn``
  (`scores`): that pruning score's top-k (`tasks.scores.BASELINE_SCORERS`);
- ``random`` (`random_k`): k random layers per client (federated dropout);
- ``last`` (`last_k`): the last k layers;
- ``all`` (`all_layers`): every layer for every client (FedAvg of all adapters; budgets ignored);
- ``none`` (`none`): no layer; only the clients' own heads train, no adapter is sent.
"""

from __future__ import annotations

from collections.abc import Mapping

from settings import HEADS_ONLY
from strategies.selection import all_layers, f3ocus, last_k, lntk, none, random_k, scores
from strategies.selection.rule import Builder, SelectionRule
from tasks.scores import BASELINE_SCORERS

SELECTIONS: dict[str, Builder] = {
    "f3ocus": f3ocus.rule,
    "lntk": lntk.rule,
    "random": random_k.rule,
    "last": last_k.rule,
    "all": all_layers.rule,
    HEADS_ONLY: none.rule,
    **dict.fromkeys(BASELINE_SCORERS, scores.rule),
}


def make_rule(strategy: str, optimizer: str = "nsga2",
              optimizer_params: Mapping[str, object] | None = None) -> SelectionRule:
    """The rule of a strategy name (a key of `SELECTIONS`); ValueError naming it if unknown."""
    if strategy not in SELECTIONS:
        raise ValueError(f"strategy = {strategy!r} is unknown; choose one of {', '.join(SELECTIONS)}")
    return SELECTIONS[strategy](strategy, optimizer, dict(optimizer_params or {}))


__all__ = ["SELECTIONS", "Builder", "SelectionRule", "make_rule"]
