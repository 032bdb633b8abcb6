"""Non-optimising references used by the baselines; each returns one (1, N, L) solution.

* ``topk``: every client's own top-k_i layers (LNTK without the server step, paper
  Table 2 "LNTK"); ties go to the lower layer index.
* ``random``: k_i uniformly random layers per client (federated dropout baseline).
* ``last``: the last k_i layers of every client (last-K fine-tuning baseline).

``pop_size`` and ``n_gen`` are accepted and ignored so that callers can pass the same
parameters to every algorithm.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from metaheuristics.moves import take_smallest, top_k
from metaheuristics.names import REFERENCES
from metaheuristics.problem import Instance
from metaheuristics.search import Batch, Context

DEFAULTS = {"pop_size": 50, "n_gen": 20}


def topk(instance: Instance, seed: int) -> np.ndarray:
    return top_k(instance)[None]


def random(instance: Instance, seed: int) -> np.ndarray:
    keys = np.random.default_rng(seed).random((1, instance.n_clients, instance.n_layers))
    return take_smallest(keys, instance.budgets)


def last(instance: Instance, seed: int) -> np.ndarray:
    keys = np.broadcast_to(-np.arange(instance.n_layers, dtype=np.float64), instance.scores.shape)
    return take_smallest(keys[None], instance.budgets)


SOLVERS = dict(zip(REFERENCES, (topk, random, last), strict=True))


def steps(ctx: Context, name: str) -> Iterator[Batch]:
    """The one solution of reference ``name`` as a single batch (iteration 0)."""
    masks = SOLVERS[name](ctx.instance, ctx.seed)
    yield (masks, *ctx.instance.evaluate(masks))
