"""How the updates of a round are combined: one module per method, registered in `AGGREGATIONS`.

Each module has one public function with the `Aggregator` signature (`strategies.aggregation.types`);
the run config's ``aggregation`` key picks one by name. A new method (FedPIA's permutation
alignment, FedMosaic's SIMA) is one new module plus one line here and in
`settings.config.AGGREGATIONS`, the names the run config accepts (a test keeps the two equal).

- ``masked-fedavg`` (`masked_fedavg`): each layer averaged over the clients that trained it.
"""

from __future__ import annotations

from strategies.aggregation.masked_fedavg import masked_fedavg
from strategies.aggregation.types import Aggregate, Aggregator, ClientUpdate

AGGREGATIONS: dict[str, Aggregator] = {"masked-fedavg": masked_fedavg}

__all__ = ["AGGREGATIONS", "Aggregate", "Aggregator", "ClientUpdate", "masked_fedavg"]
