"""The client-hook protocol: a method's work in one train step, called by `client_app.app.train`
without knowing which method runs. It lives with the methods, below the ClientApp that calls it, so
a method package imports nothing of the app.

An aggregation's registry entry (`methods.base.Aggregation.client`) loads a factory
``(TrainStep, settings) -> ClientHook | None``; None (or no factory) is plain local training. The
train step calls, in order: the factory once the global adapters and the client's stored state are
loaded; `ClientHook.training` around local training, with `ClientHook.on_batch` seeing every batch;
`ClientHook.finish` with the trained adapters, the personal state to store and the reply metrics.
FedPIA's client-level PIA (`methods.fedpia.client`) uses training + finish, SIMA's gradient tracker
(`methods.sima.client`) on_batch + finish.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from strategies.records import State


@dataclass(frozen=True)
class TrainStep:
    """What a hook sees of one train message: the client (``setup``, `client_app.runtime.ClientSetup`:
    its run config, model, partition), the global adapters as received (the model holds them), its
    stored personal state (with a method's own entries), the layers it trains, and ``own_adapters``,
    which reads the client's own adapters kept with its newest personal state of an earlier round."""

    setup: Any
    received: State
    stored: State
    layers: Sequence[int]
    server_round: int
    own_adapters: Callable[[], State]


class ClientHook:
    """A method's client work in one train step; this base does nothing (plain local training)."""

    on_batch: Callable[[int, list[Any]], None] | None = None
    """Sees every training batch before its step (`tasks.train`'s ``on_batch``); None: no callback."""

    def training(self) -> AbstractContextManager[None]:
        """The context local training runs in (e.g. a combined forward)."""
        return nullcontext()

    def finish(self, upload: State, personal: dict[str, np.ndarray], reply: dict[str, Any]
               ) -> tuple[State, State | None]:
        """(arrays to upload, local adapters to keep or None) from the trained adapters; may add
        entries to the personal state to store and to the reply metrics."""
        return upload, None
