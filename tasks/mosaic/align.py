"""PQ-LoRA weight alignment of a larger client model to the smaller pivot (paper §4.2.2, Eq. 8, A.4).

Public data that no client owns: ``PUBLIC_SAMPLES`` generated images and questions of the
``synthetic`` generator under a seed no run uses (``PUBLIC_SEED + seed``), so clients of easy-VQA,
medmnist-vqa or even of ``synthetic`` (other seed, other images) never hold them. Both models see the
same public batch; every PQ-LoRA site of the larger model is matched to the pivot's site with the
same canonical name (block-wise, `tasks.mosaic.attach`), and

* **A** (Eq. 8): the MSE min_A Σ ‖A_pivot x_pivot − A x‖² over the site's inputs, solved in closed
  form (least squares with a tiny ridge, instead of the paper's gradient steps with the orthogonality
  penalty λ of Eq. 22), then projected to the closest matrix with orthonormal rows, U Vᵀ of its SVD
  (Eq. 23-25);
* **B** (Eq. 21): regularised CCA between the pivot's and the larger model's outputs of the site's
  pre-trained layer (official code: γ = 1e-4, map = S_ll^{1/2} U Vᵀ S_pp^{-1/2} with U S Vᵀ the SVD of
  the whitened cross-covariance), on each side's top 128 principal components (cost: a 1536-wide
  layer's full CCA takes minutes on a CPU); B = map · B_pivot, then the same orthonormal projection.

The pivot keeps its seeded orthonormal A, B (official code). Everything is deterministic for the
seed, so every client of the larger size rebuilds the same aligned A, B (nothing is shipped).
Rows are token / pixel positions when both models give the same count at a site, else per-sample
means.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from tasks.data.synthetic import load_synthetic
from tasks.data.types import Sample
from tasks.mosaic.modules import MosaicLinear

PUBLIC_SEED = 7_919_000
PUBLIC_SAMPLES = 64
RIDGE = 1e-4
CCA_COMPONENTS = 128


def public_samples(seed: int, count: int = PUBLIC_SAMPLES) -> list[Sample]:
    """Generated (image, question) samples no client owns (see the module doc): `count` distinct
    images, each with one of its three questions (shape, colour, yes/no in turn)."""
    split = load_synthetic(PUBLIC_SEED + seed).train
    picks = np.arange(count) * 3 + np.arange(count) % 3
    return [Sample(split.blocks[0][split.rows[j]], split.questions[j], int(split.targets[j]),
                   str(split.qtypes[j])) for j in picks]


def polar(matrix: torch.Tensor) -> torch.Tensor:
    """The closest matrix with orthonormal rows (wide) or columns (tall): U Vᵀ of the SVD (Eq. 25)."""
    u, _, vt = torch.linalg.svd(matrix, full_matrices=False)
    return u @ vt


def _capture(model: nn.Module, samples: list) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Canonical site name -> (inputs, base outputs) as (batch, positions, features) float64."""
    seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def hook(mod: MosaicLinear, args: tuple, _out: torch.Tensor) -> None:
        x = args[0]
        y = mod.base(x)
        if isinstance(mod.base, nn.Conv2d):
            x, y = x.movedim(1, -1), y.movedim(1, -1)
        seen[mod.canonical] = tuple(t.reshape(t.shape[0], -1, t.shape[-1]).double() for t in (x, y))

    hooks = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, MosaicLinear)]
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(PUBLIC_SEED)  # e.g. ViLT samples image patches: the same for both models
            model.eval()
            model(model.collate(samples))
    finally:
        for h in hooks:
            h.remove()
    return seen


def _rows(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if a.shape[1] == b.shape[1]:
        return a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    return a.mean(1), b.mean(1)


def _inv_sqrt_and_sqrt(cov: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    values, vectors = torch.linalg.eigh(cov)
    values = values.clamp_min(1e-12)
    return (vectors * values.rsqrt()) @ vectors.T, (vectors * values.sqrt()) @ vectors.T


def fit_a(x_pivot: torch.Tensor, a_pivot: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Eq. 8 in closed form + orthonormal rows: argmin_A ‖x_pivot A_pivotᵀ − x Aᵀ‖² (ridge RIDGE)."""
    target = x_pivot @ a_pivot.T
    gram = x.T @ x
    ridge = RIDGE * gram.diagonal().mean().clamp_min(1e-12)
    a_t = torch.linalg.solve(gram + ridge * torch.eye(gram.shape[0], dtype=gram.dtype), x.T @ target)
    return polar(a_t.T)


def _principal(y: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Centred scores (n, k') and basis (d, k') of the top-k principal components (k' <= k)."""
    yc = y - y.mean(0)
    k = min(k, *yc.shape)
    if k == yc.shape[1]:
        basis = torch.eye(k, dtype=yc.dtype)
    else:
        _, _, basis = torch.svd_lowrank(yc, q=k, niter=4)
    return yc @ basis, basis


def fit_b(y_pivot: torch.Tensor, b_pivot: torch.Tensor, y: torch.Tensor, gamma: float = 1e-4) -> torch.Tensor:
    """Eq. 21 by regularised CCA (module doc), then orthonormal columns. For cost, the CCA runs on
    the top ``CCA_COMPONENTS`` principal components of each side's outputs (all of them when the
    layer is narrower), and the map is lifted back through those bases."""
    zp, basis_p = _principal(y_pivot, CCA_COMPONENTS)
    zl, basis_l = _principal(y, CCA_COMPONENTS)
    n = zp.shape[0]
    s_pp = zp.T @ zp / n + gamma * torch.eye(zp.shape[1], dtype=zp.dtype)
    s_ll = zl.T @ zl / n + gamma * torch.eye(zl.shape[1], dtype=zl.dtype)
    inv_pp, _ = _inv_sqrt_and_sqrt(s_pp)
    inv_ll, sqrt_ll = _inv_sqrt_and_sqrt(s_ll)
    u, _, vt = torch.linalg.svd(inv_ll @ (zl.T @ zp / n) @ inv_pp, full_matrices=False)
    mapping = basis_l @ (sqrt_ll @ u @ vt @ inv_pp) @ basis_p.T  # (d_out large, d_out pivot)
    return polar(mapping @ b_pivot)


def align_to_pivot(model: nn.Module, pivot: nn.Module, *, seed: int, samples: list | None = None) -> None:
    """Overwrite the PQ-LoRA A, B of `model` by their alignment to `pivot` (module doc)."""
    samples = public_samples(seed) if samples is None else samples
    mine, theirs = _capture(model, samples), _capture(pivot, samples)
    pivot_sites = {m.canonical: m for m in pivot.modules() if isinstance(m, MosaicLinear)}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(PUBLIC_SEED)  # svd_lowrank's random start: the same on every client
        _align_sites(model, pivot_sites, mine, theirs)


def _align_sites(model: nn.Module, pivot_sites: dict, mine: dict, theirs: dict) -> None:
    for module in model.modules():
        if not isinstance(module, MosaicLinear) or module.kind != "pq":
            continue
        if module.canonical not in pivot_sites:
            raise ValueError(f"PQ-LoRA site {module.canonical!r} has no counterpart in the pivot model")
        ref = pivot_sites[module.canonical]
        (x, y), (xp, yp) = mine[module.canonical], theirs[module.canonical]
        x, xp = _rows(x, xp)
        y, yp = _rows(y, yp)
        with torch.no_grad():
            module.pq_A.copy_(fit_a(xp, ref.pq_A.double(), x).to(module.pq_A.dtype))
            module.pq_B.copy_(fit_b(yp, ref.pq_B.double(), y).to(module.pq_B.dtype))
