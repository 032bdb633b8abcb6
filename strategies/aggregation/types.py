"""The signature every aggregation module implements, and what it receives and returns.

An aggregator maps the current global adapter state and the accepted client updates of one round
to the next global state, and may also return per-client global models. A step that works on the
adapters alone (FedPIA) reads ``ClientUpdate.state``; one that needs more of each client (SIMA's
vector) reads what the client's hook added to its train reply from ``ClientUpdate.metrics``; a
personalising step returns per-client models in ``Aggregate.personal``, which the strategy then
sends to those clients instead of the shared one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from strategies.records import State


@dataclass(frozen=True)
class ClientUpdate:
    """What one client sent back: the arrays of the layers it trained, its example count, and the
    rest of its train reply's metrics (numbers or lists of numbers, e.g. a SIMA task vector);
    ``base`` is the whole state the server sent that client this round (its personal model where
    it has one), which local-only training continues from."""

    node_id: int
    state: State
    num_examples: int
    metrics: Mapping[str, object] = field(default_factory=dict)
    base: State = field(default_factory=dict)


@dataclass(frozen=True)
class Aggregate:
    """Result of aggregation: the new global state and optional per-client global models."""

    global_state: State
    personal: dict[int, State] = field(default_factory=dict)  # by node id


class Aggregator(Protocol):
    """Signature every aggregation step implements."""

    def __call__(self, global_state: State, updates: Sequence[ClientUpdate]) -> Aggregate: ...
