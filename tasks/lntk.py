"""Client-level layer importance: principal eigenvalue of the layerwise NTK (paper §4.1).

For selectable layer l with trainable unit θˡ (LoRA A/B, or the layer's weights) and n samples,
Θˡ = Jˡ Jˡᵀ (Eq. 8) and Sˡ = λ₁ˡ / Σ_k λ₁ᵏ (§4.1, "client-specific layer importance score").

Modes:
* "loss" (default): row i of Jˡ is the gradient of sample i's loss w.r.t. θˡ (n × p); Θˡ is the
  n × n Gram matrix, in float64 — never a p × p matrix.
* "logit": rows are the per-sample Jacobians of all C logits, Θˡ is nC × nC: the NTK of Eq. 8
  literally; costs C backward passes (batched into one).
* "paper": supplement Algorithm 1 as printed, for comparison. One backward pass of the batch-mean
  loss gives ∇θ; the printed double loop over samples b and classes i adds (param.grad)² n·C times
  without recomputing it, i.e. G = n·C·(∇θ)²; each parameter tensor is flattened to rows
  `G.view(G.shape[0], -1)` and NTK = J Jᵀ is a Gram matrix over *parameter rows* (output
  channels), not over samples. Differences from Eq. 8: it squares a batch-averaged gradient (no
  per-sample structure, so it is a rank-one-per-row magnitude statistic rather than an NTK), and
  Algorithm 1 scores parameter tensors, not layers; here a layer's value is the sum of its
  tensors' λ₁ (Eq. 9 sums NTKs over a layer's parameters, and λ₁ is subadditive). λ₁ of J Jᵀ is
  taken from the smaller of J Jᵀ and Jᵀ J (same non-zero spectrum).

How Θˡ is computed in modes "loss" and "logit" (both exact, same Θˡ up to rounding):
* hooks (used whenever every scored parameter is the weight/bias of a plain nn.Linear or
  groups = 1 nn.Conv2d, i.e. LoRA's A and B): per piece of at most ``piece_size`` samples, one
  batched forward and one backward of the summed per-sample losses (for "logit": one backward per
  class), the rows of Jˡ from the module inputs and output gradients without per-sample autograd,
  and Θˡ over all pieces at the end (tasks/lntk_hooks.py). Exact because samples do not interact in
  the batch in eval mode (BatchNorm uses its running statistics). Blocks the model checkpoints in
  training are checkpointed here too, and the pieces bound the samples held at once
  (tasks/lntk_pieces.py): scoring needs no more memory than training;
* per-sample gradients otherwise (adapter="layer", or when the hook guard trips): one
  `torch.func.vmap(grad(...))` (`vmap(jacrev(...))` for "logit") pass over `functional_call`, all
  samples at once.

The model is scored in eval mode (no dropout) and restored to its previous mode afterwards.
λ₁ is `torch.linalg.eigvalsh` (float64) up to LANCZOS_ABOVE rows, else Lanczos
(`scipy.sparse.linalg.eigsh`, k=1), as in the supplement's timing note (Table 7).
If the hooks cannot be used at run time (a module input that is not batch-first, a parameter also
used outside its module), the per-sample-gradient path runs instead, with a RuntimeWarning. If vmap
cannot trace a model (e.g. a Hugging Face forward with data-dependent mask checks), the
per-sample gradients come from a loop of n backward passes instead, with a RuntimeWarning saying so.
Inputs that are not batch-first (Qwen2-VL packs all images' patches into one `pixel_values` with an
`image_grid_thw` row per image) cannot be mapped by vmap and go to that loop directly, each sample
on its own patches and grid row (`tasks.models.generative.split_inputs`).

Which settings score (tests/tasks/test_generative_lntk.py, every family × `vlm-layers`): "loss" and
"paper" for every model; "logit" only for a classification head — a generator's (n, T, vocabulary)
logits are refused in one line (`check_mode`, and before round 1 by check_model_settings).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import torch
from scipy.sparse.linalg import eigsh
from torch import nn
from torch.func import functional_call, grad, jacrev, vmap

from tasks.adapters import gradient_flags, layer_parameter_names
from tasks.lntk_hooks import NotHookable, Piece, forward_kept, hook_sites, hooked_grams
from tasks.lntk_pieces import (
    TrainingStep,
    checkpointed,
    kept_bytes,
    memory_piece,
    piece_bounds,
    piece_inputs,
    training_kept,
)
from tasks.models.base import FederatedVLM
from tasks.models.generative import split_inputs
from tasks.names import SCORE_MODES

if TYPE_CHECKING:
    from tasks.data import Sample

LANCZOS_ABOVE = 512  # Gram matrices with more rows use Lanczos for λ₁

Params = dict[str, torch.Tensor]
Batch = dict[str, torch.Tensor]


@dataclass(frozen=True)
class LayerScores:
    eigenvalues: np.ndarray  # (L,) principal eigenvalue λ1 of Θ^l = J^l J^lT
    scores: np.ndarray  # (L,) S^l = λ1^l / Σ_k λ1^k (uniform if all zero)
    seconds: float
    piece_size: int = 0  # the most samples one forward and backward pass held (0: mode "paper")


def layer_scores(model: FederatedVLM, samples: Sequence[Sample], mode: str = "loss",
                 piece_size: int | None = None, clip: float | None = None,
                 step: TrainingStep | None = None) -> LayerScores:
    """λ₁ of every selectable layer's LNTK on `samples` and the normalised scores Sˡ, scoring at most
    ``piece_size`` samples at a time (None: all at once), or, with ``step``, as many as keep no more
    memory than that training step does (`tasks.lntk_pieces.memory_piece`); the result is the same.
    ``clip``: every sample's Jacobian over all layers clipped to that L2 norm first (`clip_grams`;
    mode "loss" only), what a differentially private release of λ₁ needs."""
    check_mode(model, mode)
    if clip is not None and mode != "loss":
        raise ValueError(f"score-mode = {mode!r} cannot clip a sample's Jacobian for a private release; "
                         "use score-mode = 'loss'")
    if len(samples) == 0:
        raise ValueError("samples is empty: LNTK scoring needs at least one sample")
    piece_bounds(len(samples), piece_size)  # a bad size fails before anything runs
    start = time.perf_counter()
    groups = [layer_parameter_names(model, layer) for layer in range(len(model.layer_names))]
    was_training = model.training
    model.eval()
    try:
        batch = {k: v.to(model.device) for k, v in model.collate(samples).items()}
        if mode == "paper":
            eigenvalues, piece_size = _paper_eigenvalues(model, batch, groups), 0
        else:
            grams, piece_size = _grams(model, batch, groups, mode, piece_size, step)
            if clip is not None:
                grams = clip_grams(grams, clip)
            eigenvalues = np.array([principal_eigenvalue(g) for g in grams])
    finally:
        if was_training:
            model.train()
    total = eigenvalues.sum()
    n = len(eigenvalues)
    scores = eigenvalues / total if total > 0 else np.full(n, 1.0 / n)
    return LayerScores(eigenvalues, scores, time.perf_counter() - start, piece_size)


def check_mode(model: FederatedVLM, mode: str) -> None:
    """One line for a mode `model` cannot be scored in: an unknown one, or "logit" on a generator,
    whose logits are (n, T, vocabulary) where Eq. 8's logit NTK takes the C classes of an (n, C)
    head (T·V rows per sample: not a layer score one can afford). tasks.models.check_model_settings
    refuses the same setting before round 1."""
    if mode not in SCORE_MODES:
        raise ValueError(f"unknown LNTK mode {mode!r}; choose one of {', '.join(SCORE_MODES)}")
    if mode == "logit" and model.generative:
        raise ValueError(f"score-mode = 'logit' cannot score generator {type(model).__name__}: its logits "
                         "are per token over its vocabulary; use score-mode = 'loss' or 'paper'")


def clip_grams(grams: Sequence[torch.Tensor], clip: float) -> list[torch.Tensor]:
    """The per-layer n × n Grams (mode "loss") of the samples' gradients each scaled to L2 norm at
    most ``clip`` over all layers together (per-sample clipping as in DP-SGD): sample i's squared
    norm is Σ_l Θˡ_ii, its factor cᵢ = min(1, clip / normᵢ), and the clipped Θˡ is D Θˡ D, D = diag(c),
    exactly the Gram of the clipped rows, so no Jacobian is formed again. A sample whose gradient is
    not finite gets factor 0 (it is left out rather than let a NaN through)."""
    norms = torch.stack([g.diagonal() for g in grams]).sum(0).clamp_min(0).sqrt()
    factor = (clip / norms.clamp_min(torch.finfo(norms.dtype).tiny)).clamp(max=1.0)
    factor = torch.where(torch.isfinite(norms), factor, torch.zeros_like(factor))
    grams = [torch.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0) for g in grams]
    outer = factor[:, None] * factor[None, :]
    return [g * outer for g in grams]


def principal_eigenvalue(gram: torch.Tensor, lanczos_above: int = LANCZOS_ABOVE) -> float:
    """Largest eigenvalue of a symmetric PSD matrix (float64 eigvalsh, or Lanczos when large)."""
    gram = gram.detach().to(torch.float64).cpu()
    if gram.shape[0] <= lanczos_above:
        return float(torch.linalg.eigvalsh(gram)[-1])
    return float(eigsh(gram.numpy(), k=1, which="LA", return_eigenvectors=False, tol=0)[0])


class _Tail(nn.Module):
    """`forward_embedded` as a module forward, so that `functional_call` can drive it."""

    def __init__(self, model: FederatedVLM) -> None:
        super().__init__()
        self.model = model

    def forward(self, emb: Batch) -> torch.Tensor:
        return self.model.forward_embedded(emb)


def _grams(model: FederatedVLM, batch: Batch, groups: list[list[str]], mode: str, piece_size: int | None,
           step: TrainingStep | None) -> tuple[list[torch.Tensor], int]:
    """Per-layer Gram matrices J Jᵀ (float64), from hooks where possible, else per-sample gradients,
    in pieces of ``piece_size`` samples or of the size ``step``'s memory allows; and that size."""
    labels = batch.pop("labels")
    n = labels.shape[0]
    with torch.no_grad():
        emb = model.embed(batch)
    sites = hook_sites(model, groups)
    with checkpointed(model):
        if step is not None:
            piece_size = _memory_piece(model, emb, labels, groups, mode, sites, step)
        bounds = piece_bounds(n, piece_size)
        if sites is not None:
            try:
                return hooked_grams(sites, _pieces(model, emb, labels, mode, bounds), groups), bounds[0][1]
            except NotHookable as err:
                warnings.warn(
                    f"LNTK hooks cannot score {type(model).__name__} ({err}); "
                    "falling back to per-sample gradients",
                    RuntimeWarning,
                    stacklevel=3,
                )
    return per_sample_grams(model, emb, labels, groups, mode, bounds), bounds[0][1]


def _memory_piece(model: FederatedVLM, emb: Batch, labels: torch.Tensor, groups: list[list[str]], mode: str,
                  sites: list | None, step: TrainingStep) -> int:
    """`tasks.lntk_pieces.memory_piece` from the bytes one sample keeps in scoring (as the path that
    scores runs it) and in ``step``'s training."""
    n = labels.shape[0]
    one, first = piece_inputs(emb, n, 0, 1), labels[:1]
    scoring = None
    if sites is not None:
        try:
            scoring = forward_kept(sites, next(_pieces(model, emb, labels, mode, [(0, 1)])), model)
        except NotHookable:
            scoring = None
    if scoring is None:
        named = dict(model.named_parameters())
        scored = {name: named[name] for group in groups for name in group}
        with gradient_flags(scored, on=True), torch.enable_grad(), kept_bytes(model) as kept:
            model.loss(model.forward_embedded(one), first)
        scoring = kept[0]
    training = training_kept(model, one, first, step.reference_mask(len(groups)), step.master_weights)
    return memory_piece(step, scoring, training, n)


def _pieces(model: FederatedVLM, emb: Batch, labels: torch.Tensor, mode: str,
            bounds: list[tuple[int, int]]) -> Iterator[Piece]:
    """The hook path's pieces (tasks/lntk_hooks.py), each on its own inputs; rows are per-sample
    losses or logits."""
    n = labels.shape[0]
    for start, stop in bounds:
        inputs, targets = piece_inputs(emb, n, start, stop), labels[start:stop]

        def per_sample(logits: torch.Tensor, targets: torch.Tensor = targets) -> torch.Tensor:
            if mode == "logit":
                return logits
            return torch.stack([model.loss(logits[i : i + 1], targets[i : i + 1])
                                for i in range(targets.shape[0])])[:, None]

        yield Piece(stop - start, partial(model.forward_embedded, inputs), per_sample)


def per_sample_grams(
    model: FederatedVLM, emb: Batch, labels: torch.Tensor, groups: list[list[str]], mode: str,
    bounds: list[tuple[int, int]] | None = None,
) -> list[torch.Tensor]:
    """Per-layer Gram matrices J Jᵀ (float64) from per-sample gradients / Jacobians, the samples in
    the pieces ``bounds`` (None: one): one vmap pass a piece when every input is batch-first, else
    (packed patches, or vmap cannot trace the model) a loop over the samples' own inputs
    (`tasks.models.generative.split_inputs`)."""
    named = dict(model.named_parameters())
    n = labels.shape[0]
    parts = [_per_sample_rows(model, piece_inputs(emb, n, a, b), labels[a:b], groups, mode)
             for a, b in (bounds or [(0, n)])]
    jac = {key: torch.cat([part[key] for part in parts]) for key in parts[0]}
    grams = []
    for group in groups:
        gram = torch.zeros(0, 0, dtype=torch.float64)
        for name in group:
            rows = jac[f"model.{name}"].reshape(-1, named[name].numel()).to(torch.float64)
            gram = rows @ rows.T if gram.numel() == 0 else gram + rows @ rows.T
        grams.append(gram if gram.numel() else torch.zeros(n, n, dtype=torch.float64))
    return grams


def _per_sample_rows(model: FederatedVLM, emb: Batch, labels: torch.Tensor, groups: list[list[str]],
                     mode: str) -> Params:
    """Per-sample gradients (loss) or Jacobians (logit) of the scored parameters, for the samples of
    ``emb``, keyed ``model.<name>``."""
    tail = _Tail(model)
    named = dict(model.named_parameters())
    params = {f"model.{n}": named[n].detach() for group in groups for n in group}
    n = labels.shape[0]

    def single(p: Params, e: Batch, y: torch.Tensor) -> torch.Tensor:  # e: one sample, batch axis 1
        logits = functional_call(tail, p, (e,))
        return model.loss(logits, y[None]) if mode == "loss" else logits[0]

    def unbatched(p: Params, e: Batch, y: torch.Tensor) -> torch.Tensor:
        return single(p, {k: v[None] for k, v in e.items()}, y)

    jac = None
    if all(v.dim() and v.shape[0] == n for v in emb.values()):  # packed patches cannot be mapped
        transform = grad(unbatched) if mode == "loss" else jacrev(unbatched)
        try:
            with torch.no_grad():
                jac = vmap(transform, in_dims=(None, 0, 0))(params, emb, labels)
        except (RuntimeError, NotImplementedError, ValueError) as err:
            warnings.warn(
                f"vmap cannot trace {type(model).__name__} ({str(err).splitlines()[0][:120]}); "
                "LNTK falls back to a loop of per-sample backward passes",
                RuntimeWarning,
                stacklevel=4,
            )
    if jac is None:
        jac = _looped(single, params, split_inputs(emb, n), labels, mode)
    return jac


def _looped(
    single: Callable[..., torch.Tensor], params: Params, inputs: list[Batch], labels: torch.Tensor, mode: str
) -> Params:
    """Per-sample gradients (loss) or Jacobians (logit) by explicit backward passes, sample i on
    `inputs[i]`, its own single-sample inputs."""
    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    out: dict[str, list[torch.Tensor]] = {k: [] for k in leaves}
    for i, inp in enumerate(inputs):
        with torch.enable_grad():
            value = single(leaves, inp, labels[i])
        outputs = value.reshape(-1)
        rows = []
        for j in range(outputs.shape[0]):
            g = torch.autograd.grad(outputs[j], list(leaves.values()), retain_graph=True, allow_unused=True)
            rows.append(
                [torch.zeros_like(v) if d is None else d for v, d in zip(leaves.values(), g, strict=True)]
            )
        for idx, key in enumerate(leaves):
            stacked = torch.stack([r[idx] for r in rows])
            out[key].append(stacked[0] if mode == "loss" else stacked)
    return {k: torch.stack(v) for k, v in out.items()}


def _paper_eigenvalues(model: FederatedVLM, batch: Batch, groups: list[list[str]]) -> np.ndarray:
    """Supplement Algorithm 1 as printed (see module doc)."""
    named = dict(model.named_parameters())
    leaves = {n: named[n].detach().clone().requires_grad_(True) for g in groups for n in g}
    labels = batch.pop("labels")
    with torch.enable_grad():
        logits = functional_call(model, leaves, (batch,))
        loss = model.loss(logits, labels)
        grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    n, c = logits.shape[0], logits.shape[-1]  # a generator's logits: (n, T, vocabulary)
    squared = {
        name: torch.zeros_like(v, dtype=torch.float64)
        if g is None
        else (n * c) * g.detach().to(torch.float64) ** 2
        for (name, v), g in zip(leaves.items(), grads, strict=True)
    }
    values = []
    for group in groups:
        total = 0.0
        for name in group:
            sq = squared[name]
            j = sq.reshape(sq.shape[0], -1) if sq.dim() else sq.reshape(1, 1)
            gram = j @ j.T if j.shape[0] <= j.shape[1] else j.T @ j
            total += principal_eigenvalue(gram)
        values.append(total)
    return np.array(values)
