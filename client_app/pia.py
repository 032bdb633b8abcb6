"""FedPIA's client-level PIA in the ClientApp's train step (math: `tasks.client_pia`).

On when ``aggregation = "fedpia"``, ``fedpia-level`` is ``both`` or ``client`` and the adapter is
LoRA. For the layers this client trains this round: its own adapter from its last round (stored
with its personal state, `client_app.personal`, so a resumed or restarted client finds it; the
global adapter where it has none yet) and the received global one aligned to it by OT; training
runs the combination of `tasks.client_pia.combined` with the local adapter trainable; the client
uploads their neuron-wise mean and keeps the trained local adapter (layers it did not train keep
their stored one).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import numpy as np
from flwr.app import Context

import tasks
from client_app.personal import load_local_adapters
from client_app.runtime import ClientSetup
from settings import RunConfig
from strategies.records import State, select_layers
from tasks import client_pia


def uses_client_pia(config: RunConfig) -> bool:
    """Does this run align and combine adapters on the client?"""
    return (config.aggregation == "fedpia" and config.fedpia_level in ("both", "client")
            and config.adapter == "lora")


@dataclass(frozen=True)
class PiaRound:
    """One train step's client-level PIA: the aligned global adapters of the trained layers and
    the client's stored local adapters (all layers it ever trained)."""

    aligned: State
    stored: State

    def combined(self, setup: ClientSetup) -> AbstractContextManager[None]:
        return client_pia.combined(setup.model, self.aligned)

    def finish(self, trained: State) -> tuple[State, State]:
        """(upload, local adapters to keep) from the trained local adapters."""
        return client_pia.integrate(self.aligned, trained), {**self.stored, **trained}


def prepare(setup: ClientSetup, context: Context, global_state: State, layers: Sequence[int],
            run_dir: str, server_round: int) -> PiaRound | None:
    """Align the global adapters of `layers` to this client's own and load its own into the model
    (None when the run has no client-level PIA). `setup.model` must hold the global adapters."""
    config = setup.config
    if not uses_client_pia(config) or not len(layers):
        return None
    stored = load_local_adapters(context, run_dir, before=server_round)
    received = select_layers(global_state, layers)
    local = {key: stored.get(key, value) for key, value in received.items()}
    rng = np.random.default_rng([config.seed, server_round, setup.partition_id, 14])
    train = setup.partition.train
    batch = [train[i] for i in rng.permutation(len(train))[:config.fedpia_samples]]
    aligned = client_pia.align_global(setup.model, received, local, batch,
                                      cost=config.fedpia_client_cost)
    tasks.set_layer_state(setup.model, local)
    return PiaRound(aligned, stored)


def combined(pia: PiaRound | None, setup: ClientSetup) -> AbstractContextManager[None]:
    """The training forward of client-level PIA, or the plain one without it."""
    return nullcontext() if pia is None else pia.combined(setup)
