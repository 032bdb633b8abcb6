"""Aggregation of masked client updates: a replaceable step of every layer-selecting strategy.

An aggregator maps the current global adapter state and the accepted client updates to the next
global state, and may also return per-client global models (personalised aggregation such as
FedMosaic's; FedPIA's permutation alignment would run inside an aggregator before averaging).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from strategies.records import State


@dataclass(frozen=True)
class ClientUpdate:
    """What one client sent back: the arrays of the layers it trained and its example count."""

    node_id: int
    state: State
    num_examples: int


@dataclass(frozen=True)
class Aggregate:
    """Result of aggregation: the new global state and optional per-client global models."""

    global_state: State
    personal: dict[int, State] = field(default_factory=dict)


class Aggregator(Protocol):
    """Signature every aggregation step implements."""

    def __call__(self, global_state: State, updates: Sequence[ClientUpdate]) -> Aggregate: ...


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


AGGREGATORS: dict[str, Aggregator] = {"masked-fedavg": masked_fedavg}
