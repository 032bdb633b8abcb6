"""SIMA, similarity-aware aggregation (FedMosaic, paper §4.1, Eq. 5): one customised global model
per client, weighted towards the clients whose tasks are most alike.

Each train reply carries the client's decayed last-layer gradient ĝ_i (``metrics["sima-grad"]``,
`methods.sima.tracker`). The server builds S_ij = cos(ĝ_i, ĝ_j) and, for client i,

    G_i = Σ_{j≠i} w_ij L_j,   w_ij = exp(S_ij / τ) / Σ_{n≠i} exp(S_in / τ),

over the clients j that sent that array (so masked updates combine per array). The client's own
model is left out (official code, FMU:81-86: its own weight is set to −1e9 before the softmax): its
local module stays on the client and is combined with G_i through the gate of Eq. 9. Where no other
client sent an array, G_i keeps the example-weighted mean (its own array if it alone sent it); a
client without a valid vector (missing or of another length) gets that mean everywhere and counts
as dissimilar (cos 0) to the others. The shared ``global_state`` is the masked FedAvg of the
updates (for checkpoints and clients that took no part); ``personal`` holds every G_i.
"""

from __future__ import annotations

from collections.abc import Sequence
from logging import WARNING, getLogger

import numpy as np

from methods.sima.settings import VECTOR as SIMA_VECTOR
from strategies.aggregation.masked import masked_fedavg
from strategies.aggregation.types import Aggregate, ClientUpdate
from strategies.records import State

log = getLogger("flwr").log  # Flower's logger: its handlers reach the console and `flwr run --stream`

TAU = 0.5  # paper appendix "Implementation Details": τ = 0.5 in all experiments


def similarity_matrix(vectors: np.ndarray) -> np.ndarray:
    """Pairwise cosine similarities of the rows (a zero row is dissimilar to all, 1 with itself)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    sim = unit @ unit.T
    np.fill_diagonal(sim, 1.0)
    return sim


def client_weights(sim: np.ndarray, tau: float = TAU) -> np.ndarray:
    """Row i: softmax over j ≠ i of S_ij / τ (Eq. 5 with the own model excluded); diagonal 0."""
    if not tau > 0:
        raise ValueError(f"sima-tau must be > 0, got {tau!r}")
    logits = sim / tau
    np.fill_diagonal(logits, -np.inf)
    logits -= logits.max(axis=1, keepdims=True)
    weights = np.exp(logits)
    return weights / weights.sum(axis=1, keepdims=True)


def _vectors(updates: Sequence[ClientUpdate]) -> np.ndarray:
    raw = [u.metrics.get(SIMA_VECTOR) for u in updates]
    sizes = [len(v) for v in raw if isinstance(v, list) and v]
    size = max(set(sizes), key=sizes.count) if sizes else 0
    out = np.zeros((len(updates), size))
    for i, (update, vector) in enumerate(zip(updates, raw, strict=True)):
        if isinstance(vector, list) and len(vector) == size > 0:
            out[i] = vector
        else:
            log(WARNING, "sima: node %d sent no usable '%s' (%s values, expected %d); it gets the mean",
                update.node_id, SIMA_VECTOR, len(vector) if isinstance(vector, list) else "no", size)
    return out


def sima(global_state: State, updates: Sequence[ClientUpdate], tau: float = TAU) -> Aggregate:
    """Customised global model per client (module doc, paper Eq. 5)."""
    mean = masked_fedavg(global_state, updates).global_state
    if len(updates) < 2:
        return Aggregate(global_state=mean, personal={u.node_id: dict(mean) for u in updates})
    vectors = _vectors(updates)
    valid = np.linalg.norm(vectors, axis=1) > 0
    weights = client_weights(similarity_matrix(vectors), tau)
    personal: dict[int, State] = {}
    for i, update in enumerate(updates):
        state = dict(mean)
        if valid[i]:
            for key in mean:
                senders = [j for j, u in enumerate(updates) if j != i and key in u.state]
                if not senders:
                    continue
                w = weights[i, senders]
                w = w / w.sum() if w.sum() > 0 else np.full(len(senders), 1.0 / len(senders))
                stacked = np.stack([updates[j].state[key].astype(np.float64) for j in senders])
                state[key] = np.tensordot(w, stacked, axes=1).astype(global_state[key].dtype)
        personal[update.node_id] = state
    return Aggregate(global_state=mean, personal=personal)
