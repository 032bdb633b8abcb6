"""Cardinality-preserving moves on (P, N, L) bool populations, vectorised over P and N.

Every function returns masks whose row i has exactly budgets[i] ones, given inputs that do.
They are shared by the pymoo operators (operators.py) and the hand-written algorithms.
"""

from __future__ import annotations

import numpy as np

from metaheuristics.problem import Instance, layer_counts


def take_smallest(keys: np.ndarray, budgets: np.ndarray) -> np.ndarray:
    """Mask of the budgets[i] smallest keys in every (…, i, :) row of ``keys``.

    A partition finds every row's budgets[i]-th smallest key and the mask is ``keys <=``
    it (no full sort, no scatter); the rare rows where equal keys straddle that threshold
    are redone with a stable sort, so ties go to the lower layer index and every row has
    exactly budgets[i] ones.
    """
    k_max = int(budgets.max())
    head = np.partition(keys, k_max - 1, axis=-1)[..., :k_max]
    head.sort(axis=-1)
    masks = keys <= head[..., np.arange(len(budgets)), budgets - 1][..., None]
    tied = np.count_nonzero(masks, axis=-1) != budgets
    if tied.any():
        ks = np.broadcast_to(budgets, tied.shape)[tied]
        ranks = np.argsort(np.argsort(keys[tied], axis=-1, kind="stable"), axis=-1)
        masks[tied] = ranks < ks[:, None]
    return masks


def top_k(instance: Instance) -> np.ndarray:
    """(N, L) mask of every client's own top-k_i layers; ties go to the lower index."""
    ranks = np.argsort(np.argsort(-instance.scores, axis=1, kind="stable"), axis=1)
    return ranks < instance.budgets[:, None]


def sample_subsets(weights: np.ndarray, budgets: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Draw n solutions; row i holds budgets[i] distinct layers drawn with probability
    proportional to weights[i] (sequential sampling without replacement, done at once with
    exponential keys E/w: Efraimidis & Spirakis 2006). ``weights`` is (N, L) or (n, N, L)
    and must be strictly positive (see problem.positive_weights). Keys are float32, which
    halves the cost at cross-device sizes; take_smallest settles the rare exact ties."""
    n_clients, n_layers = budgets.shape[0], weights.shape[-1]
    keys = rng.standard_exponential((n, n_clients, n_layers), dtype=np.float32)
    keys /= weights.astype(np.float32)
    return take_smallest(keys, budgets)


def union_resample(
    first: np.ndarray, second: np.ndarray, budgets: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Each row: budgets[i] layers drawn uniformly from the union of both parents' rows
    (supplement Algorithm 10, CROSSOVER)."""
    union = first | second
    keys = rng.random(union.shape) + (~union) * 2.0
    return take_smallest(keys, budgets)


def swap_one(
    masks: np.ndarray,
    budgets: np.ndarray,
    rng: np.random.Generator,
    weights: np.ndarray | None = None,
    in_place: bool = False,
) -> np.ndarray:
    """``masks`` (a copy, or the array itself with ``in_place``) where, in every solution,
    one client (uniform among clients with 0 < k_i < L) swaps one selected layer for one
    unselected layer.

    Without ``weights`` both layers are uniform (supplement Algorithm 41, PERTURB_SOLUTION).
    With (N, L) positive ``weights`` the swap is steered towards a balanced histogram: the
    dropped layer is drawn with probability proportional to its selection count n_l in that
    solution, the added one proportional to weights[i, l] / (n_l + 1).
    """
    out = masks if in_place else masks.copy()
    n_pop, _, n_layers = masks.shape
    movable = np.flatnonzero(budgets < n_layers)
    if movable.size == 0:
        return out
    rows = np.arange(n_pop)
    clients = movable[rng.integers(movable.size, size=n_pop)]
    row = out[rows, clients]
    drop_keys = rng.standard_exponential((n_pop, n_layers))
    add_keys = rng.standard_exponential((n_pop, n_layers))
    if weights is not None:
        counts = layer_counts(out)
        drop_keys /= np.maximum(counts, 1)
        add_keys *= (counts + 1) / weights[clients]
    drop = np.argmin(np.where(row, drop_keys, np.inf), axis=1)
    add = np.argmin(np.where(row, np.inf, add_keys), axis=1)
    out[rows, clients, drop] = False
    out[rows, clients, add] = True
    return out
