"""FedPIA server-level PIA (paper, "Methodology: FedPIA", Server-level PIA): permute each client's
LoRA neurons onto the FedAvg of the clients, then integrate them with distance-dependent weights.

Per LoRA adapter (the A/B pair of one module, found from the state keys, `methods.fedpia.alignment`), over
the clients that sent it this round (layer masks as in masked FedAvg):
1. initialise the global adapter W_G by FedAvg of the client adapters (weights α_k ∝ examples);
2. for every client k, the OT plan between its r neurons and W_G's (supports: row i of A with
   column i of B; uniform masses; Euclidean cost) is a permutation (`methods.fedpia.alignment`), which
   aligns the client: W̃_k = (P_k A_k, B_k P_kᵀ), a reordering that leaves B_k A_k unchanged;
3. integrate: the paper writes W_G ← (1/K) Σ_k W̃_k exp(−γ ‖W̃_k − W_G‖₂) (``integration =
   "paper"``). Those weights sum to (1/K) Σ_k exp(−γ d_k) < 1 whenever γ d_k > 0, so every round
   shrinks A and B (and B A quadratically) towards zero, and the shrinking compounds over rounds.
   The default ``integration = "normalised"`` divides the weights by their sum:
   W_G ← Σ_k w_k W̃_k with w_k ∝ α_k exp(−γ d_k), a convex combination that keeps the adapter's
   scale and reduces to FedAvg of the aligned adapters at γ = 0 (the paper: "we use FedAvg as the
   chosen aggregation scheme"). d_k = ‖W̃_k − W_G‖₂ is the Frobenius distance of the aligned pair
   (A and B together) to the FedAvg initialisation.

Arrays that are not part of a LoRA pair (``adapter = "layer"`` weights, a lone A or B) are
averaged by masked FedAvg. ``align = False`` (``fedpia-level = "client"``, the paper's Table 5
"w/o server PIA") is masked FedAvg for every array.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice

import numpy as np

from methods.fedpia.alignment import lora_pairs, match_neurons, neuron_supports, permute_pair
from strategies.aggregation.masked import masked_fedavg
from strategies.aggregation.types import Aggregate, ClientUpdate
from strategies.records import State

INTEGRATIONS = ("normalised", "paper")


def fedpia(global_state: State, updates: Sequence[ClientUpdate], *, gamma: float = 1.0,
           integration: str = "normalised", align: bool = True, iterations: int = 1) -> Aggregate:
    """Server-level PIA of every LoRA adapter the clients sent (module docstring); masked FedAvg
    for every other array."""
    if isinstance(gamma, bool) or not isinstance(gamma, int | float) or not gamma >= 0:
        raise ValueError(f"fedpia-gamma = {gamma!r} must be a number >= 0")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"fedpia-iterations = {iterations!r} must be an int >= 1")
    if integration not in INTEGRATIONS:
        raise ValueError(f"fedpia-integration = {integration!r} is unknown; choose one of "
                         f"{', '.join(INTEGRATIONS)}")
    result = masked_fedavg(global_state, updates)
    if not align:
        return result
    state = dict(result.global_state)
    for a_key, b_key in lora_pairs({key for update in updates for key in update.state}):
        sent = [u for u in updates if a_key in u.state and b_key in u.state]
        a, b = integrate_adapter([u.state[a_key] for u in sent], [u.state[b_key] for u in sent],
                                 [u.num_examples for u in sent], gamma=gamma,
                                 integration=integration, iterations=iterations)
        state[a_key] = a.astype(global_state[a_key].dtype)
        state[b_key] = b.astype(global_state[b_key].dtype)
    return Aggregate(global_state=state, personal=result.personal)


def integrate_adapter(a_list: Sequence[np.ndarray], b_list: Sequence[np.ndarray],
                      counts: Sequence[int], *, gamma: float = 1.0, integration: str = "normalised",
                      iterations: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Steps 1-3 of the module docstring for one adapter: K clients' (A_k, B_k) -> global (A, B),
    in float64, after at most ``iterations`` passes of `integration_passes`."""
    *_, last = islice(integration_passes(a_list, b_list, counts, gamma=gamma, integration=integration),
                      iterations)
    return last


def integration_passes(a_list: Sequence[np.ndarray], b_list: Sequence[np.ndarray],
                       counts: Sequence[int], *, gamma: float = 1.0, integration: str = "normalised"
                       ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The integrated adapter after each server-PIA pass, until the assignment settles.

    Pass 1 is the paper's: align every client to the FedAvg of the unaligned adapters and
    integrate. Every further pass (``fedpia-iterations`` > 1, a deviation from the paper's single
    pass) aligns every client again, now to the latest integrated adapter, and integrates again
    (distances to that adapter); the passes stop when no client's assignment changes. The FedAvg
    of unaligned adapters can blend different neurons in one slot, and clients whose neurons differ
    (they trained differently) can then be aligned to that blend inconsistently; re-aligning to the
    integrated adapter repairs it (tests/strategies/test_fedpia.py plants such a case)."""
    a_own = np.stack(a_list).astype(np.float64)
    b_own = np.stack(b_list).astype(np.float64)
    alpha = np.asarray(counts, dtype=np.float64)
    alpha = alpha / alpha.sum() if alpha.sum() > 0 else np.full(len(alpha), 1 / len(alpha))
    a_glob, b_glob = np.tensordot(alpha, a_own, axes=1), np.tensordot(alpha, b_own, axes=1)
    previous = None
    while True:
        target = neuron_supports(a_glob, b_glob)
        perms = [match_neurons(neuron_supports(a_k, b_k), target)
                 for a_k, b_k in zip(a_own, b_own, strict=True)]
        if previous is not None and all(np.array_equal(p, q) for p, q in zip(perms, previous, strict=True)):
            return  # the assignment has settled
        aligned = [permute_pair(a_k, b_k, p) for a_k, b_k, p in zip(a_own, b_own, perms, strict=True)]
        a, b = np.stack([x for x, _ in aligned]), np.stack([y for _, y in aligned])
        distance = np.sqrt(((a - a_glob) ** 2).reshape(len(a), -1).sum(1)
                           + ((b - b_glob) ** 2).reshape(len(b), -1).sum(1))
        if integration == "paper":
            weights = np.exp(-gamma * distance) / len(a)
        else:  # shifted by the smallest distance: same ratios, no underflow to 0/0 at large γ d
            weights = alpha * np.exp(-gamma * (distance - distance.min()))
            weights /= weights.sum()
        a_glob, b_glob, previous = np.tensordot(weights, a, axes=1), np.tensordot(weights, b, axes=1), perms
        yield a_glob, b_glob
