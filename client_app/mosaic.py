"""FedMosaic on the client: SIMA's decayed gradient and the 'Others' accuracy (paper §4.1, §5).

* `sima_tracker`: with ``aggregation = "sima"``, the Eq. 4 tracker on the shared frozen model
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

import numpy as np

import tasks
from client_app.runtime import ClientSetup, client_partition
from tasks.mosaic import SimaTracker
from tasks.names import MODEL_SIZES, SIMA_VECTOR


@lru_cache(maxsize=1)
def _frozen(spec: tasks.ModelSpec, num_outputs: int, task: str) -> tasks.FederatedVLM:
    model = tasks.build_model(replace(spec, adapter="layer", gated=False), num_outputs, task).to(spec.device)
    model.requires_grad_(False)
    return model


def sima_tracker(setup: ClientSetup, stored: dict[str, np.ndarray]) -> SimaTracker | None:
    """The SIMA gradient tracker of this round, or None when the run does not aggregate by SIMA."""
    config = setup.config
    if config.aggregation != "sima":
        return None
    frozen = _frozen(config.model_spec(setup.device), len(setup.partition.labels), setup.partition.task)
    frozen.answers = setup.model.answers
    return SimaTracker(frozen, ema=config.sima_ema, freq=config.sima_freq, previous=stored.get(SIMA_VECTOR))


def with_vector(tracker: SimaTracker | None, personal: dict, reply: dict) -> None:
    """Store ĝ with the client's personal state and send it, column-normalised, with the train reply
    (`tasks.mosaic.sima`: the official per-column similarity)."""
    if tracker is not None and tracker.vector is not None:
        personal[SIMA_VECTOR] = tracker.vector
        reply[SIMA_VECTOR] = [float(v) for v in tracker.shared()]


def others_metrics(setup: ClientSetup, server_round: int) -> dict[str, float]:
    """'Others' accuracy (or F1) and example count in the last round, plus the client's model
    size (module doc)."""
    config, node = setup.config, setup.node
    metrics: dict[str, float] = {"model-size": MODEL_SIZES.index(node.model_size)}
    if not config.eval_others or node.num_partitions < 2 or server_round < config.num_server_rounds:
        return metrics
    samples = [s for pid in range(node.num_partitions) if pid != node.partition_id
               for s in client_partition(config, node.dataset, pid, node.num_partitions).test]
    result = tasks.evaluate(setup.model, samples, batch_size=max(64, config.batch_size), device=setup.device)
    for key, value in result.items():
        metrics[f"others-{key.replace('_', '-')}"] = value
    return metrics
