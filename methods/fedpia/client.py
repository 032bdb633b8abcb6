"""FedPIA's client-level PIA in the ClientApp's train step (math: `methods.fedpia.combine`).

FedPIA's client hook (`methods.hooks`, named by its registry entry in `methods`): on when
``fedpia-level`` is ``both`` or ``client`` and the adapter is LoRA. For the layers this client
trains this round: its own adapter from its last round (stored with its personal state,
`client_app.personal`, so a resumed or restarted client finds it; the global adapter where it has
none yet) and the received global one aligned to it by OT; training runs the combination of
`tasks.client_pia.combined` with the local adapter trainable; the client uploads their neuron-wise
mean and keeps the trained local adapter (layers it did not train keep their stored one).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import numpy as np

import tasks
from methods.fedpia import combine as client_pia
from methods.fedpia.settings import FedPiaSettings
from methods.hooks import ClientHook, TrainStep
from strategies.records import State, select_layers
from tasks.names import adapter_of


def uses_client_pia(adapter: str, settings: FedPiaSettings) -> bool:
    """Does a FedPIA run with this adapter align and combine adapters on the client?"""
    return settings.client_level and adapter_of(adapter).peft


class PiaRound(ClientHook):
    """One train step's client-level PIA: the aligned global adapters of the trained layers and
    the client's stored local adapters (all layers it ever trained)."""

    def __init__(self, model: tasks.FederatedVLM, aligned: State, stored: State) -> None:
        self.model, self.aligned, self.stored = model, aligned, stored

    def training(self) -> AbstractContextManager[None]:
        return client_pia.combined(self.model, self.aligned)

    def finish(self, upload: State, personal: dict[str, np.ndarray], reply: dict[str, Any]
               ) -> tuple[State, State]:
        """(upload, local adapters to keep) from the trained local adapters."""
        return client_pia.integrate(self.aligned, upload), {**self.stored, **upload}


def start(step: TrainStep, settings: FedPiaSettings) -> PiaRound | None:
    """Align the global adapters of the trained layers to this client's own and load its own into
    the model (None when the run has no client-level PIA or trains no layer). The model must hold
    the global adapters."""
    setup = step.setup
    if not uses_client_pia(setup.config.adapter, settings) or not len(step.layers):
        return None
    stored = step.own_adapters()
    received = select_layers(step.received, step.layers)
    local = {key: stored.get(key, value) for key, value in received.items()}
    rng = np.random.default_rng([setup.config.seed, step.server_round, setup.partition_id, 14])
    train = setup.partition.train
    batch = [train[i] for i in rng.permutation(len(train))[:settings.samples]]
    aligned = client_pia.align_global(setup.model, received, local, batch, cost=settings.client_cost)
    tasks.set_layer_state(setup.model, local)
    return PiaRound(setup.model, aligned, stored)
