"""Wire format of adapter state: ``{"<layer>:<parameter>": ndarray}`` <-> Flower ``ArrayRecord``.

Every array key starts with the index of the selectable layer it belongs to (``"3:encoder.layer.3...
lora_B.weight"``), so the server can aggregate per layer without knowing the model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
from flwr.app import Array, ArrayRecord

State = dict[str, np.ndarray]


def layer_index(key: str) -> int:
    """Layer index encoded in an array key; ``ValueError`` if the key has no ``"<int>:"`` prefix."""
    head, sep, _ = key.partition(":")
    if not sep or not head.isdigit():
        raise ValueError(f"array key {key!r} does not start with '<layer index>:'")
    return int(head)


def to_record(state: Mapping[str, np.ndarray]) -> ArrayRecord:
    """Pack a state dict into an ``ArrayRecord`` (keys kept in order)."""
    return ArrayRecord({key: Array(np.ascontiguousarray(value)) for key, value in state.items()})


def from_record(record: ArrayRecord) -> State:
    """Unpack an ``ArrayRecord`` into a state dict of numpy arrays."""
    return {key: array.numpy() for key, array in record.items()}


def record_bytes(record: ArrayRecord) -> int:
    """Serialized payload size of the arrays in a record (what actually crosses the network)."""
    return sum(len(array.data) for array in record.values())


def select_layers(state: Mapping[str, np.ndarray], layers: Iterable[int]) -> State:
    """The entries of ``state`` that belong to the given layers."""
    wanted = set(layers)
    return {key: value for key, value in state.items() if layer_index(key) in wanted}
