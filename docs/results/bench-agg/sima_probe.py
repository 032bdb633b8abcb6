"""SIMA's features on the frozen model for the clients of a setting, offline: each client's round
mean of 4 batches of 16 (`tasks.mosaic.sima`), the similarity matrix as a flat cosine of the raw
gradients and as the official per-column mean (column-normalised), and the τ = 0.5 weights.

Usage: python docs/results/bench-agg/sima_probe.py NUM_CLIENTS [key=value ...]
(overrides of conf/bench-agg-conflict.toml, e.g. partitioner=by-question-type group-conflict=none)
"""

from __future__ import annotations

import sys
import tomllib

import numpy as np

from client_app.mosaic import _frozen
from client_app.runtime import client_partition
from settings.config import RunConfig
from strategies.aggregation.sima import TAU, client_weights, similarity_matrix
from tasks.mosaic.sima import column_normalised, last_layer_gradient


def main(num: int, overrides: dict[str, str]) -> None:
    with open("pyproject.toml", "rb") as f:
        values = tomllib.load(f)["tool"]["flwr"]["app"]["config"]
    with open("conf/bench-agg-conflict.toml", "rb") as f:
        values.update(tomllib.load(f))
    values.update(aggregation="sima", adapter="lora", **overrides)
    config = RunConfig.from_mapping(values)
    parts = [client_partition(config, config.dataset, p, num) for p in range(num)]
    print("question types per client:", [sorted({s.qtype for s in p.train}) for p in parts])
    classes = len(parts[0].labels)
    frozen = _frozen(config.model_spec("cpu"), classes, parts[0].task)
    grads = np.stack([np.mean([last_layer_gradient(frozen, p.train[i:i + 16]) for i in range(0, 64, 16)], 0)
                      for p in parts])
    np.set_printoptions(precision=3, suppress=True)
    for name, vectors in (("flat", grads), ("per-column", np.stack([column_normalised(g, classes)
                                                                     for g in grads]))):
        sim = similarity_matrix(vectors)
        print(f"{name} similarity\n{sim}\nweights (tau {TAU})\n{client_weights(sim, TAU)}")


if __name__ == "__main__":
    main(int(sys.argv[1]), dict(a.split("=", 1) for a in sys.argv[2:]))
