"""How the updates of a round are combined: one module per method, registered in `AGGREGATIONS`.

Each module has one public function with the `Aggregator` signature (`strategies.aggregation.types`);
the run config's ``aggregation`` key picks one by name. A new method (FedPIA's permutation
alignment, FedMosaic's SIMA) is one new module plus one line here and in
`settings.config.AGGREGATIONS`, the names the run config accepts (a test keeps the two equal).

- ``masked-fedavg`` (`masked_fedavg`): each layer averaged over the clients that trained it.
- ``fedpia`` (`fedpia`): FedPIA's server-level PIA, each LoRA adapter's neurons permuted onto the
  clients' FedAvg by optimal transport before a distance-weighted integration; its settings
  (``fedpia-*``) are bound by `server_app.app.aggregator_for`.
- ``sima`` (`sima`): FedMosaic's similarity-aware aggregation, one customised global model per
  client (its keyword ``tau`` is the run config's ``sima-tau``).
- ``local`` (`local`): no aggregation, each client keeps its own adapters (FedMosaic's local-only
  reference).
- ``group-oracle`` (`group_oracle`): FedAvg within client groups known in advance
  (``client-groups``), the upper reference for personalised aggregation.
"""

from __future__ import annotations

from strategies.aggregation.fedpia import fedpia
from strategies.aggregation.group_oracle import group_oracle
from strategies.aggregation.local import local_only
from strategies.aggregation.masked_fedavg import masked_fedavg
from strategies.aggregation.sima import sima
from strategies.aggregation.types import Aggregate, Aggregator, ClientUpdate

AGGREGATIONS: dict[str, Aggregator] = {"masked-fedavg": masked_fedavg, "fedpia": fedpia, "sima": sima,
                                   "local": local_only, "group-oracle": group_oracle}

__all__ = ["AGGREGATIONS", "Aggregate", "Aggregator", "ClientUpdate", "fedpia", "group_oracle", "local_only",
           "masked_fedavg", "sima"]
