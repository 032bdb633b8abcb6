"""The layer-assignment instance: input validation and the two objectives of paper Eq. 21.

A solution is an (N, L) boolean mask; populations are (P, N, L) arrays and are always
evaluated in one vectorised call, never one solution at a time.

* importance = sum_i sum_l m_il * S_il (maximise; supplement Algorithm 5),
* diversity  = standard deviation of the per-layer selection counts n_l = sum_i m_il
  (minimise; supplement Algorithm 4 takes sqrt of the population variance, Eq. 21 the
  variance itself; both order solutions identically).

Because every solution selects exactly K = sum_i k_i layers, the variance is
(L * sum_l n_l^2 - K^2) / L^2; it is computed from that integer numerator, so solutions
with the same histogram multiset get bit-identical diversity (no float-noise ties).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from numbers import Integral

import numpy as np


@dataclass(frozen=True, eq=False)
class Instance:
    """A validated instance: scores (N, L) float64 and budgets (N,) int64."""

    scores: np.ndarray
    budgets: np.ndarray

    @property
    def n_clients(self) -> int:
        return self.scores.shape[0]

    @property
    def n_layers(self) -> int:
        return self.scores.shape[1]

    def evaluate(self, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(importance, diversity) of a (P, N, L) bool population, each of shape (P,).

        One ``einsum`` contracts the masks with the scores (importance) and layer_counts
        gives the (P, L) histogram; each streams the masks once.
        """
        importance = np.einsum("pnl,nl->p", masks, self.scores)
        return importance, histogram_std(layer_counts(masks))

    @cached_property
    def sampling_weights(self) -> np.ndarray:
        """Per-row sampling weights proportional to importance (Algorithm 3, NORMALIZE)."""
        return positive_weights(self.scores)


def layer_counts(masks: np.ndarray) -> np.ndarray:
    """(P, L) int64 selection counts n_l = sum_i m_il of a (P, N, L) bool population.

    Summed as bytes over blocks of 255 clients (a byte cannot overflow within a block) and
    only then widened, which is about twice as fast as a bool -> int64 sum at 10,000
    clients.
    """
    as_bytes = masks.view(np.uint8)
    counts = np.zeros((masks.shape[0], masks.shape[2]), dtype=np.int64)
    for start in range(0, masks.shape[1], 255):
        counts += np.add.reduce(as_bytes[:, start : start + 255], axis=1, dtype=np.uint8)
    return counts


def histogram_std(counts: np.ndarray) -> np.ndarray:
    """Population std of each row of an integer (P, L) count array, via the exact integer
    numerator L * sum(n^2) - (sum n)^2."""
    counts = np.asarray(counts, dtype=np.int64)
    n_layers = counts.shape[-1]
    total = counts.sum(axis=-1)
    numerator = n_layers * (counts * counts).sum(axis=-1) - total * total
    return np.sqrt(numerator.astype(np.float64)) / n_layers


def positive_weights(weights: np.ndarray) -> np.ndarray:
    """Make (..., L) sampling weights strictly positive without changing their meaning.

    An all-zero row becomes uniform (a zero row means uniform importance, `optimize`); a zero
    entry in a non-zero row gets 1e-12 of the row maximum, so it is only drawn when a
    budget cannot be filled otherwise, and then uniformly among the zero entries.
    """
    row_max = weights.max(axis=-1, keepdims=True)
    w = np.where(row_max > 0, weights, 1.0)
    return w + 1e-12 * w.max(axis=-1, keepdims=True)


def make_instance(scores: np.ndarray, budgets: Sequence[int]) -> Instance:
    """Validate scores and budgets; raise ValueError naming the argument and bad value.

    Rows need not sum to 1 (they are used as given); all-zero rows are legal.
    """
    try:
        arr = np.array(scores, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"scores: not a numeric array ({err})") from None
    if arr.ndim != 2:
        raise ValueError(f"scores: expected a 2-D array (clients x layers), got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"scores: need at least 1 client and 1 layer, got shape {arr.shape}")
    bad = ~np.isfinite(arr) | (arr < 0)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(f"scores: values must be finite and >= 0, got scores[{i}, {j}] = {arr[i, j]}")
    n_clients, n_layers = arr.shape
    if isinstance(budgets, (str, bytes)) or not hasattr(budgets, "__len__"):
        raise ValueError(f"budgets: expected a sequence of {n_clients} ints, got {budgets!r}")
    if len(budgets) != n_clients:
        raise ValueError(f"budgets: expected {n_clients} entries (one per client), got {len(budgets)}")
    for i, k in enumerate(budgets):
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, Integral):
            raise ValueError(f"budgets: entry {i} must be an int, got {k!r}")
        if not 1 <= int(k) <= n_layers:
            raise ValueError(f"budgets: entry {i} must be in [1, {n_layers}], got {int(k)}")
    arr.setflags(write=False)
    ks = np.array([int(k) for k in budgets], dtype=np.int64)
    ks.setflags(write=False)
    return Instance(arr, ks)
