"""FedMosaic on the client: SIMA's decayed gradient and the 'Others' accuracy (paper §4.1, §5).

* `start`: SIMA's client hook (`client_app.hooks`, named by its registry entry in `methods`), the
  Eq. 4 tracker on the shared frozen model
  (the ``base``-size model without adapters, one seeded copy per process), continuing from the
  vector this client stored with its personal state in an earlier round (kill-safe and resumable
  like the head, `client_app.personal`).
* `others_metrics`: with ``eval-others = true``, accuracy of this client's final model on the other
  partitions' test splits as their clients see them (the same seeded split every client computes,
  with a planted conflict's rotated answers where the other client has them; the answer vocabulary
  is the data set's, shared by all). It costs an evaluation pass over N − 1 test splits per client,
  so it runs in the last round only (the one the tables report) and is off by default; a site
  that cannot build the other partitions (its own ``dataset``/``data-dir``) reports none.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Any

import numpy as np

import tasks
from client_app.hooks import ClientHook, TrainStep
from client_app.runtime import ClientSetup, client_partition
from methods.options import SimaSettings
from strategies.records import State
from tasks.mosaic import SimaTracker
from tasks.names import MODEL_SIZES, SIMA_VECTOR


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
        reply (`tasks.mosaic.sima`: the official per-column similarity)."""
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


def others_metrics(setup: ClientSetup, server_round: int) -> dict[str, float]:
    """'Others' accuracy (or F1) and example count in the last round, plus the client's model
    size (module doc)."""
    config, node = setup.config, setup.node
    metrics: dict[str, float] = {"model-size": MODEL_SIZES.index(node.model_size)}
    if not config.eval_others or node.num_partitions < 2 or server_round < config.num_server_rounds:
        return metrics
    samples = [s for pid in range(node.num_partitions) if pid != node.partition_id
               for s in client_partition(config, node.dataset, pid, node.num_partitions).test]
    result = tasks.evaluate(setup.model, samples, batch_size=max(64, config.batch_size), device=setup.device,
                            answers=config.eval_answers)
    for key, value in result.items():
        metrics[f"others-{key.replace('_', '-')}"] = value
    return metrics
