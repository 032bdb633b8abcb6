"""How the updates of a round are combined: one module per method, registered in
`methods.AGGREGATIONS`.

Each module has one public function with the `Aggregator` signature (`strategies.aggregation.types`);
the run config's ``aggregation`` key picks its registry entry, which names the function lazily and
binds it with the method's own settings (`methods.options`). A new method is one new module plus one
registry line (CONTRIBUTING.md).

- ``masked-fedavg`` (`masked_fedavg`): each layer averaged over the clients that trained it.
- ``fedpia`` (`fedpia`): FedPIA's server-level PIA, each LoRA adapter's neurons permuted onto the
  clients' FedAvg by optimal transport before a distance-weighted integration; its settings
  (``fedpia-*``, `methods.options.FedPiaSettings`) are bound by its registry entry.
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

__all__ = ["Aggregate", "Aggregator", "ClientUpdate", "fedpia", "group_oracle", "local_only",
           "masked_fedavg", "sima"]
