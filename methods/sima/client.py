"""SIMA's client hook (`methods.hooks`): the decayed-gradient tracker of Eq. 4 on the shared frozen
model (the ``base``-size model without adapters, one seeded copy per process), continuing from the
vector this client stored with its personal state in an earlier round (kill-safe and resumable
like the head, `client_app.personal`)."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Any

import numpy as np

import tasks
from methods.hooks import ClientHook, TrainStep
from methods.sima.settings import VECTOR as SIMA_VECTOR
from methods.sima.settings import SimaSettings
from methods.sima.tracker import SimaTracker
from strategies.records import State


@lru_cache(maxsize=1)
def _frozen(spec: tasks.ModelSpec, num_outputs: int, task: str) -> tasks.FederatedVLM:
    model = tasks.build_model(replace(spec, adapter="layer", gated=False), num_outputs, task).to(spec.device)
    model.requires_grad_(False)
    return model


class SimaHook(ClientHook):
    """SIMA's tracker sees every training batch; its vector goes with the personal state and the
    reply."""

    def __init__(self, tracker: SimaTracker) -> None:
        self.tracker = self.on_batch = tracker

    def finish(self, upload: State, personal: dict[str, np.ndarray], reply: dict[str, Any]
               ) -> tuple[State, None]:
        """Store ĝ with the client's personal state and send it, column-normalised, with the train
        reply (`methods.sima.tracker`: the official per-column similarity)."""
        if self.tracker.vector is not None:
            personal[SIMA_VECTOR] = self.tracker.vector
            reply[SIMA_VECTOR] = [float(v) for v in self.tracker.shared()]
        return upload, None


def start(step: TrainStep, settings: SimaSettings) -> SimaHook:
    """This round's SIMA tracker, continuing from the vector the client stored."""
    setup, config = step.setup, step.setup.config
    frozen = _frozen(config.model_spec(setup.device), len(setup.partition.labels), setup.partition.task)
    frozen.answers = setup.model.answers
    return SimaHook(SimaTracker(frozen, ema=settings.ema, freq=settings.freq,
                                previous=step.stored.get(SIMA_VECTOR)))

