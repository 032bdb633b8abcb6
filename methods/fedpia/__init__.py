"""FedPIA: permutation-aligned integration of LoRA adapters (paper, "Methodology: FedPIA").

`server`: server-level PIA (each client's neurons aligned onto the FedAvg by optimal transport, then a
distance-weighted integration); `client`: the client-level PIA hook (the global adapter aligned to the
client's own, their combination trained); `alignment`: the optimal-transport matching both share;
`combine`: the client's torch side.
"""

from __future__ import annotations

from collections.abc import Callable

from methods.base import Aggregation, register
from methods.fedpia.settings import FedPiaSettings

NO_DP = ("its server alignment permutes and weights each site's un-noised update by its distance to the "
         "others' mean, so one site moves every site's weight: no per-site bound by dp-clip")


def server_step() -> Callable:
    """The server step, imported when a run uses this method."""
    from methods.fedpia.server import fedpia

    return fedpia


def client_hook() -> Callable:
    """The client hook factory, imported when a run uses this method."""
    from methods.fedpia.client import start

    return start


register(Aggregation("fedpia", server_step, FedPiaSettings, client=client_hook, client_dp_refusal=NO_DP))
