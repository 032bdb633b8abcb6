"""Local-only training, the no-collaboration reference of FedMosaic's tables (paper §5, "Local"):
no client's adapters are combined with any other's.

Each client's next model is the one it started the round from with the arrays it trained replaced
by its own update; layers it did not train this round keep its own earlier values. The shared
``global_state`` never changes. The simulation still carries a client's adapters to the server and
back (so rounds, checkpoints and resume work as for every other method); a deployment of this
reference would keep them on the client, so its uplink figures are an upper bound.
"""

from __future__ import annotations

from collections.abc import Sequence

from strategies.aggregation.types import Aggregate, ClientUpdate
from strategies.records import State


def local_only(global_state: State, updates: Sequence[ClientUpdate]) -> Aggregate:
    """Every client keeps its own adapters; nothing is averaged (module doc)."""
    personal = {u.node_id: {**global_state, **u.base, **u.state} for u in updates}
    return Aggregate(global_state=dict(global_state), personal=personal)
