"""Client-level differential privacy on the server (``dp = "client"``): DP-FedAvg (McMahan et al.,
ICLR 2018, Algorithm 1 with the flat clip and the unbiased estimator over the senders), written as an
aggregation step that wraps the run's own aggregator instead of copying it.

Each client's update is the change of the arrays it sends from what it received, clipped as one
vector to L2 norm ≤ C (`clip_update`; the client clips, and the server clips again so that one
client that does not cannot raise the sensitivity). `with_client_dp` then averages the clipped
arrays with the wrapped aggregator at uniform weights and adds, for every array k, Gaussian noise of
standard deviation z·C to its sum over the n_k clients that sent it, i.e. z·C/n_k to its mean.

Why per array: with masks (paper Eq. 5) each layer is averaged over its own clients, so one client's
clipped update moves the concatenated vector of sums by at most C in L2 norm whichever arrays it
sent; independent N(0, (zC)²) on every coordinate of every sent array's sum is therefore the Gaussian
mechanism with noise multiplier z on that vector (sensitivity C when one site's update is replaced
by zeros: zero-out DP, participation public, as README's threat model says), whatever n_k is; only
the noise relative to the mean differs per array. Arrays no client sent are
not released this round and get no noise.

Where this deviates from masked FedAvg (Eq. 1/5): weights are uniform, not by example count, since
example-weighted means give a client with many examples a larger share and so a sensitivity above
C/n_k (and the counts would be private too). The guarantee treats which sites took part and which
arrays each sent (the masks) as public; the wrapped aggregator must return each array's uniform mean
over its senders (`methods.base.Aggregation.client_dp_refusal`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from functools import update_wrapper

import numpy as np

from strategies.aggregation.types import Aggregate, Aggregator, ClientUpdate
from strategies.records import State


def update_norm(state: State, base: State) -> float:
    """L2 norm of the update ``state - base`` over all of ``state``'s arrays together."""
    return math.sqrt(sum(float(np.sum((value.astype(np.float64) - base[key]) ** 2))
                         for key, value in state.items()))


def clip_update(state: State, base: State, clip: float) -> State:
    """``state`` with its update from ``base`` scaled down to L2 norm ≤ ``clip`` (McMahan et al. 2018,
    ClipFn, flat clipping over all the arrays sent); an update within the bound is returned as is.

    The result is cast back to the arrays' dtype, which rounds each entry x by up to eps/2·|x|, so the
    scale aims below ``clip`` by eps/2·(‖base‖ + clip): the float32 arrays a client sends are within
    the bound too. (The server clips again, in float64: `with_client_dp`.)
    """
    norm = update_norm(state, base)
    if norm <= clip:
        return dict(state)
    eps = max(float(np.finfo(value.dtype).eps) for value in state.values())
    base_norm = math.sqrt(sum(float(np.sum(base[key].astype(np.float64) ** 2)) for key in state))
    target = clip - eps * (base_norm + clip) - 1e-12 * clip
    if target <= 0:
        raise ValueError(f"dp-clip = {clip!r} is below the rounding of the adapters' "
                         f"{state[next(iter(state))].dtype} entries")
    scale = target / norm
    return {key: (base[key] + scale * (value.astype(np.float64) - base[key])).astype(value.dtype)
            for key, value in state.items()}


def _float64(state: State) -> State:
    return {key: value.astype(np.float64) for key, value in state.items()}


def with_client_dp(aggregator: Aggregator, *, clip: float, noise: float,
                   rng: np.random.Generator) -> Aggregator:
    """``aggregator`` made DP-FedAvg (module doc): updates clipped to ``clip`` and weighted equally,
    then N(0, (noise·clip)²) per coordinate added to each sent array's sum, divided by its senders.

    ``rng`` draws the noise; the server passes an unseeded generator (entropy from the OS), since
    noise that a seed in config.json reproduces could be subtracted again.
    """

    def private(global_state: State, updates: Sequence[ClientUpdate]) -> Aggregate:
        clipped = [replace(u, state=clip_update(_float64(u.state), _float64(u.base or global_state), clip),
                           num_examples=1) for u in updates]
        result = aggregator(global_state, clipped)
        if result.personal:
            raise ValueError("dp = 'client' needs an aggregation without per-client models")
        senders: dict[str, int] = {}
        for update in clipped:
            for key in update.state:
                senders[key] = senders.get(key, 0) + 1
        noisy = dict(result.global_state)
        for key, count in senders.items():
            mean = noisy[key].astype(np.float64)
            noisy[key] = (mean + rng.normal(0.0, noise * clip, mean.shape) / count).astype(noisy[key].dtype)
        return Aggregate(global_state=noisy)

    private = update_wrapper(private, aggregator)
    private.__name__ = f"client_dp({private.__name__})"
    return private
