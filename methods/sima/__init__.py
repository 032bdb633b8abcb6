"""FedMosaic's SIMA: similarity-aware aggregation, one customised global model per client (paper
§4.1, Eq. 3-5).

`tracker`: the client's decayed last-layer gradient ĝ_i on a frozen shared model; `client`: the hook
that runs it during local training and sends ĝ_i with the reply; `server`: the similarity-weighted
per-client models. The model carries a frozen global branch beside the local one (Eq. 9).
"""

from __future__ import annotations

from methods.base import Aggregation, register
from methods.sima.settings import SimaSettings

NO_DP = ("its sites send gradient features with every update and get one un-noised model each, releases "
         "that the DP-FedAvg noise does not cover")


register(Aggregation("sima", "methods.sima.server:sima", SimaSettings, client="methods.sima.client:start",
                     needs_gated_model=True, adapters=("lora", "pq-lora"), client_dp_refusal=NO_DP))
