"""Which layers each client trains: one module per selection rule, registered in `methods.SELECTIONS`.

All strategies share one round (scores -> select -> train -> aggregate -> evaluate, the
evaluation and the next round's scores in one message, `strategies.layer_selection`); they differ
only in which score the clients compute and how the server turns scores and budgets into masks.
Each module has one public function, ``rule(name, optimizer, optimizer_params) -> SelectionRule``;
a new rule is one new module plus one registry line (its entry also says whether the rule needs
budgets and trains adapters, CONTRIBUTING.md).

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

import methods
from strategies.selection.rule import Builder, SelectionRule


def make_rule(strategy: str, optimizer: str = "nsga2",
              optimizer_params: Mapping[str, object] | None = None) -> SelectionRule:
    """The rule of a strategy name (its `methods.SELECTIONS` entry's builder); ValueError naming it
    if unknown."""
    builder: Builder = methods.resolve(methods.selection(strategy).rule)
    return builder(strategy, optimizer, dict(optimizer_params or {}))


__all__ = ["Builder", "SelectionRule", "make_rule"]
