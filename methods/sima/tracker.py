"""SIMA's client-wise decayed gradient ĝ_i (paper §4.1, Eq. 3-4), computed on the client.

The gradient is taken on a small *frozen* pre-trained model W_s shared by all clients (the smallest
client model, ``model-size = "base"``, without adapters: every client builds the same seeded copy),
at its last layer only (§4.1: earlier layers' gradients are proportional by the chain rule). Client
heads are personal and differ, so the last layer here is a head over the data set's *whole* answer
vocabulary (every client's `Partition.labels` is that vocabulary), set to zero: a pre-trained
model has no head for these answers, and a zero head makes the gradient the same closed form on
every client (official code also takes it in closed form, FM:60-88):

  vqa:        ∂ CE / ∂W = mean_b (softmax(0) − e_{y_b}) h_bᵀ = mean_b (1/C − e_{y_b}) h_bᵀ
  multilabel: ∂ BCE / ∂W = mean_b (σ(0) − y_b) h_bᵀ = mean_b (1/2 − y_b) h_bᵀ

with h_b the frozen model's pooled features (a generative model's: its last hidden state at the
position that predicts the answer's first token, over the data set's answers as classes).

Which samples and how they decay follow the official code (snumprlab/fedmosaic, see the SIMA section
of docs/results/bench-agg.md): every ``freq``-th local step (official 10, FM:604-606) the batch's
gradient is taken, the round's samples are averaged (FM:651,660), and across rounds
ĝ(t) = (1 − a) ĝ(t−1) + a · mean_round (FM:788-789, a = 0.5; the first round starts it): Eq. 4 with
t counting rounds, not samples. ĝ is kept on the client across rounds (`client_app.personal`),
flattened (classes × d). What is *sent* is ĝ with every column (one feature, over the classes)
scaled to unit norm (`column_normalised`): the official similarity is the cosine per column
averaged over columns (MAIN:194-211), which is the plain cosine of such vectors; a flat cosine of
the raw ĝ is dominated by the few features of largest magnitude, shared by all clients.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from tasks.models.base import FederatedVLM


@torch.no_grad()
def last_layer_gradient(frozen: FederatedVLM, samples: Sequence) -> np.ndarray:
    """Eq. 3 for one batch: the zero head's gradient (module doc), shape (C · d,), float64.

    A function of the batch alone: a model that samples (ViLT's image patches) runs under a fixed
    seed, and the training RNG is left untouched."""
    batch = frozen.collate(samples)
    devices = [frozen.device.index or 0] if frozen.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(0)
        features = frozen.features(frozen.embed(batch)).double().cpu()
    # a generator's labels are tokens: its classes are the answers, h the state before the first
    labels = torch.tensor([int(s.target) for s in samples]) if frozen.generative else batch["labels"]
    classes = len(frozen.answers) if frozen.generative else frozen.num_outputs
    if frozen.task == "vqa":
        size = (len(samples), classes)
        residual = torch.full(size, 1.0 / classes, dtype=torch.float64)
        residual[torch.arange(len(samples)), labels] -= 1.0
    else:
        residual = 0.5 - labels.double()
    return (residual.T @ features / len(samples)).reshape(-1).numpy()


def column_normalised(vector: np.ndarray, classes: int) -> np.ndarray:
    """ĝ (flattened classes × d) with each column scaled to unit norm (zero columns stay zero).

    The cosine of two such vectors is the mean over columns of the per-column cosines, the
    official similarity (MAIN:194-211), when no column is zero (a zero column is left out of the
    mean here; the official F.normalize counts it as cosine 0)."""
    matrix = np.asarray(vector, dtype=np.float64).reshape(classes, -1)
    norms = np.linalg.norm(matrix, axis=0, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0).reshape(-1)


class SimaTracker:
    """Decayed client-wise gradient (Eq. 4, per round as FM:788-789) fed by `tasks.train`'s
    ``on_batch`` hook; `vector` is ĝ after the samples of this round so far."""

    def __init__(self, frozen: FederatedVLM, *, ema: float, freq: int, previous: np.ndarray | None = None
                 ) -> None:
        if not 0.0 < ema <= 1.0:
            raise ValueError(f"sima-ema = {ema!r} must be in (0, 1]")
        if not isinstance(freq, int) or freq < 1:
            raise ValueError(f"sima-freq = {freq!r} must be an int >= 1")
        self.frozen, self.ema, self.freq = frozen, ema, freq
        self.classes = len(frozen.answers) if frozen.generative else frozen.num_outputs
        self.previous = None if previous is None else np.asarray(previous, dtype=np.float64)
        self.round_sum: np.ndarray | None = None
        self.samples_taken = 0

    def __call__(self, step: int, samples: Sequence) -> None:
        if step % self.freq:
            return
        g = last_layer_gradient(self.frozen, samples)
        self.round_sum = g if self.round_sum is None else self.round_sum + g
        self.samples_taken += 1

    @property
    def vector(self) -> np.ndarray | None:
        """ĝ(t) = (1 − a) ĝ(t−1) + a · (mean of this round's samples); the round mean alone in the
        first round or when the vocabulary (the vector's length) changed."""
        if self.round_sum is None:
            return self.previous
        mean = self.round_sum / self.samples_taken
        if self.previous is None or self.previous.shape != mean.shape:
            return mean
        return (1 - self.ema) * self.previous + self.ema * mean

    def shared(self) -> np.ndarray | None:
        """What the client sends: `vector` column-normalised (module doc)."""
        vector = self.vector
        return None if vector is None else column_normalised(vector, self.classes)
