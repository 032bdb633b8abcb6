"""Neuron alignment of LoRA adapters by optimal transport (FedPIA paper, "Methodology: FedPIA").

Pure numpy/scipy (no torch, no Flower), shared by the server (`methods.fedpia.server`) and
the client (`methods.fedpia.combine`).

A LoRA adapter ΔW = B A (A: r × d_in, B: d_out × r; for a Conv2d A: r × c_in × k × k and
B: c_out × r × 1 × 1) has r hidden units, its *neurons*: permuting A's rows and B's columns together
leaves B A unchanged. FedPIA matches the neurons of two adapters by the optimal transport plan
between uniform measures over them (masses 1/n and 1/m) with ground cost
C^{ij} = ‖X^i − X^j‖₂ between the neurons' supports (paper, Server-level PIA). Both adapters have
r neurons, so n = m and uniform masses: the optimal plan is then a permutation matrix divided by r
(the vertices of the transport polytope are permutations, Birkhoff–von Neumann), the paper's
diag(1/β) Pᵀ is exactly that permutation, and the linear assignment problem gives it exactly
(`scipy.optimize.linear_sum_assignment`).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist

LORA_A, LORA_B = ".lora_A.", ".lora_B."


def lora_pairs(keys: Iterable[str]) -> list[tuple[str, str]]:
    """The (A key, B key) pairs of the LoRA adapters among `keys`, sorted; a ``lora_A`` key whose
    ``lora_B`` partner is missing, and every other key, belongs to no pair."""
    keyset = set(keys)
    pairs = []
    for key in sorted(keyset):
        head, sep, tail = key.rpartition(LORA_A)
        if sep and (partner := f"{head}{LORA_B}{tail}") in keyset:
            pairs.append((key, partner))
    return pairs


def neuron_supports(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Weight supports of the r neurons, shape (r, ·): row i of A followed by column i of B."""
    if a.shape[0] != b.shape[1]:
        raise ValueError(f"LoRA A {a.shape} and B {b.shape} disagree on the rank")
    rank = a.shape[0]
    return np.concatenate([a.reshape(rank, -1), np.moveaxis(b, 1, 0).reshape(rank, -1)], axis=1)


def match_neurons(source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The permutation ``perm`` that transports `source`'s neurons onto `target`'s: source neuron
    ``perm[j]`` goes to slot j. Supports are (r, ·) arrays, one row per neuron; the plan minimises
    Σ_j ‖source[perm[j]] − target[j]‖₂ (OT with uniform masses and Euclidean cost)."""
    if source.ndim != 2 or source.shape != target.shape:
        raise ValueError(f"neuron supports must be two (r, d) arrays of one shape, got "
                         f"{source.shape} and {target.shape}")
    rows, cols = linear_sum_assignment(cdist(source, target))
    perm = np.empty(len(cols), dtype=np.intp)
    perm[cols] = rows
    return perm


def permute_pair(a: np.ndarray, b: np.ndarray, perm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The adapter with its neurons reordered: A's rows and B's columns by `perm` (B A unchanged)."""
    return a[perm], b[:, perm]
