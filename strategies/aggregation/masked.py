"""Masked FedAvg (paper Eq. 1 and 5): each layer is averaged over the clients that trained it. The
round's default step (`methods.masked_fedavg` registers it as ``aggregation = "masked-fedavg"``), and
the mean other steps fall back to for the arrays they do not treat."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from strategies.aggregation.types import Aggregate, ClientUpdate
from strategies.records import State


def masked_fedavg(global_state: State, updates: Sequence[ClientUpdate]) -> Aggregate:
    """Average each array over the clients that trained it, weighted by example count.

    Paper Eq. 1 and 5: client i contributes with weight alpha_i = d_i / sum_j d_j, the sum running
    over the clients that updated that layer in this round (the masked form of FedAvg). Arrays no
    client sent keep their current value. Means are taken in float64 and cast back.
    """
    new_state = dict(global_state)
    contributions: dict[str, list[tuple[np.ndarray, int]]] = {}
    for update in updates:
        for key, value in update.state.items():
            contributions.setdefault(key, []).append((value, update.num_examples))
    for key, pairs in contributions.items():
        stacked = np.stack([value.astype(np.float64) for value, _ in pairs])
        weights = np.asarray([count for _, count in pairs], dtype=np.float64)
        mean = np.tensordot(weights / weights.sum(), stacked, axes=1)
        new_state[key] = mean.astype(global_state[key].dtype)
    return Aggregate(global_state=new_state)
