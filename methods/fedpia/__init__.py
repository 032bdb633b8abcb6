"""FedPIA: permutation-aligned integration of LoRA adapters (paper, "Methodology: FedPIA").

`server`: server-level PIA (each client's neurons aligned onto the FedAvg by optimal transport, then a
distance-weighted integration); `client`: the client-level PIA hook (the global adapter aligned to the
client's own, their combination trained); `alignment`: the optimal-transport matching both share;
`combine`: the client's torch side.
"""

from __future__ import annotations

from methods.base import Aggregation, register
from methods.fedpia.settings import FedPiaSettings

NO_DP = ("its server alignment permutes and weights each site's un-noised update by its distance to the "
         "others' mean, so one site moves every site's weight: no per-site bound by dp-clip")


register(Aggregation("fedpia", "methods.fedpia.server:fedpia", FedPiaSettings,
                     client="methods.fedpia.client:start", client_dp_refusal=NO_DP))
