"""Client-side layer scores by name: what a client computes for the server's layer selection.

``lntk`` is F3OCUS's principal LNTK eigenvalue per layer (paper §4.1); every strategy that ranks
layers on the client asks for its score here, so adding a scorer needs no new strategy class.

The baselines (paper §6.2 (iii)-(iv), Tables 2 and 5) are weight-pruning criteria turned into layer
selection the same way for all of them: a per-weight saliency is computed on one scoring batch, the
layer's score is the **mean saliency over the layer's weights** (a mean, not a sum, so that layers of
different size compare: a budget counts layers, not parameters), and the client keeps its own
top-k layers (``strategies.selection``: any name in ``BASELINE_SCORERS`` is a top-k rule).

Scored weights: a layer's own weights (``adapter="layer"``: exactly its trainable unit). With LoRA
the trainable unit is (A, B) with B = 0 at initialisation, so every criterion that multiplies a
weight by its gradient (SNIP, GraSP, GradFlow, SynFlow) would be identically 0 there; the criteria
are therefore evaluated on the dense weights the LoRA modules adapt (all non-LoRA parameters of
the layer, at the current adapted model). LoRA's own gradients are projections of exactly this
dense gradient (∂L/∂A = s·Bᵀ ∂L/∂W, ∂L/∂B = s·∂L/∂W Aᵀ). Consequence: ``magnitude`` (data-free)
is constant across rounds under LoRA, since the base weights are frozen.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import numpy as np
import torch

from tasks.adapters import is_under
from tasks.data import Sample
from tasks.lntk import layer_scores
from tasks.lntk_pieces import TrainingStep
from tasks.models import FederatedVLM
from tasks.names import BASELINE_SCORERS, LNTK

Weights = list[list[tuple[str, torch.Tensor]]]  # per layer: (name, parameter)


def _layer_weights(model: FederatedVLM) -> Weights:
    """Per selectable layer, its own (non-LoRA) parameters."""
    named = [(n, p) for n, p in model.named_parameters() if "lora_" not in n]
    return [[(n, p) for n, p in named if is_under(n, prefixes)] for prefixes in model.layer_prefixes]


def _per_layer_mean(weights: Weights, saliency: dict[str, torch.Tensor]) -> np.ndarray:
    """Mean of a per-weight saliency over each layer's weights, float64."""
    out = np.zeros(len(weights))
    for layer, group in enumerate(weights):
        total = sum(float(saliency[n].double().sum()) for n, _ in group)
        size = sum(p.numel() for _, p in group)
        out[layer] = total / size if size else 0.0
    return out


class _Grad:
    """Gradients of the mean loss w.r.t. every layer's weights, in eval mode; ``requires_grad`` flags
    and the train/eval mode are restored on exit."""

    def __init__(self, model: FederatedVLM) -> None:
        self.model = model
        self.weights = _layer_weights(model)
        self.names = [n for group in self.weights for n, _ in group]
        self.params = [p for group in self.weights for _, p in group]

    def __enter__(self) -> _Grad:
        self.flags = {n: p.requires_grad for n, p in self.model.named_parameters()}
        self.was_training = self.model.training
        self.model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        for p in self.params:
            p.requires_grad_(True)
        return self

    def __exit__(self, *exc: object) -> None:
        for n, p in self.model.named_parameters():
            p.requires_grad_(self.flags[n])
        self.model.train(self.was_training)

    def __call__(self, samples: Sequence[Sample], hvp: bool = False
                 ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """g = ∂L/∂θ and, if ``hvp``, the Hessian-gradient product Hg = ∇(gᵀ stop_grad(g))."""
        batch = {k: v.to(self.model.device) for k, v in self.model.collate(samples).items()}
        labels = batch.pop("labels")
        with torch.enable_grad():
            loss = self.model.loss(self.model(batch), labels)
            grads = torch.autograd.grad(loss, self.params, create_graph=hvp, allow_unused=True)
            grads = [torch.zeros_like(p) if g is None else g
                     for p, g in zip(self.params, grads, strict=True)]
            hg: dict[str, torch.Tensor] = {}
            if hvp:
                dot = sum((g * g.detach()).sum() for g in grads if g.requires_grad)
                hvps = (torch.autograd.grad(dot, self.params, allow_unused=True)
                        if isinstance(dot, torch.Tensor) else [None] * len(self.params))
                hg = {n: torch.zeros_like(p) if h is None else h.detach()
                      for n, p, h in zip(self.names, self.params, hvps, strict=True)}
        return {n: g.detach() for n, g in zip(self.names, grads, strict=True)}, hg


def magnitude(model: FederatedVLM, samples: Sequence[Sample]) -> np.ndarray:
    """Weight magnitude (Han et al., NeurIPS 2015, paper ref. [26]): saliency |θ|; data-free.

    Pruning drops the smallest |θ|; as layer selection, the layer of largest mean |θ| ranks first."""
    weights = _layer_weights(model)
    return _per_layer_mean(weights, {n: p.detach().abs() for group in weights for n, p in group})


def fishmask(model: FederatedVLM, samples: Sequence[Sample]) -> np.ndarray:
    """Fisher information (FishMask, Sung et al., NeurIPS 2021, paper ref. [66]): the empirical
    Fisher diagonal Σᵢ (∂ℓᵢ/∂θ)² over the scoring samples (one backward pass per sample).

    FishMask keeps the weights of largest Fisher value; here the layers of largest mean value."""
    total: dict[str, torch.Tensor] = {}
    with _Grad(model) as grad:
        for sample in samples:
            for n, g in grad([sample])[0].items():
                total[n] = total[n] + g.double() ** 2 if n in total else g.double() ** 2
    return _per_layer_mean(grad.weights, total)


def snip(model: FederatedVLM, samples: Sequence[Sample]) -> np.ndarray:
    """Connection sensitivity (SNIP, Lee et al., ICLR 2019, paper ref. [40]): |θ ⊙ ∂L/∂θ|, the
    first-order change of the loss when a weight is removed; layers of largest mean rank first."""
    with _Grad(model) as grad:
        grads, _ = grad(samples)
    return _per_layer_mean(grad.weights, {n: (p.detach() * grads[n]).abs()
                                          for g in grad.weights for n, p in g})


def second_order():
    """Scaled dot-product attention on its math kernel: the fused CPU/flash kernels have no
    double backward, which the Hessian-gradient products of GraSP and GradFlow need."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.MATH)


def grasp(model: FederatedVLM, samples: Sequence[Sample]) -> np.ndarray:
    """Gradient signal preservation (GraSP, Wang et al., ICLR 2020, paper ref. [72]).

    GraSP scores S(−θ) = −θ ⊙ Hg and prunes the largest; the weights whose removal lowers the
    gradient flow most, i.e. of largest θ ⊙ Hg, are kept. The layer score is the mean of θ ⊙ Hg,
    shifted by its minimum over layers so it is non-negative (a rank-preserving shift: the
    lowest layer scores 0)."""
    with _Grad(model) as grad, second_order():
        _, hg = grad(samples, hvp=True)
    raw = _per_layer_mean(grad.weights, {n: p.detach() * hg[n] for g in grad.weights for n, p in g})
    return raw - raw.min()


def gradflow(model: FederatedVLM, samples: Sequence[Sample]) -> np.ndarray:
    """Gradient-norm preservation (Lubana & Dick, ICLR 2021, paper ref. [54]): |θ ⊙ Hg|, the
    magnitude of a weight's first-order effect on the gradient norm ‖g‖² (their fix of GraSP's
    signed score, which also removes weights that increase the gradient flow)."""
    with _Grad(model) as grad, second_order():
        _, hg = grad(samples, hvp=True)
    return _per_layer_mean(grad.weights, {n: (p.detach() * hg[n]).abs()
                                          for g in grad.weights for n, p in g})


def synflow(model: FederatedVLM, samples: Sequence[Sample]) -> np.ndarray:
    """Iterative synaptic flow (SynFlow, Tanaka et al., NeurIPS 2020, paper ref. [69]): data-free.

    On a float64 copy with every parameter replaced by |θ|, R = Σ logits for an all-ones input and
    the saliency is |θ ⊙ ∂R/∂θ|. Adaptations: the input replaces every floating tensor of the
    model's embedded input (`embed`: token embeddings, image stem) by a fixed, seeded |N(0, 1)|
    tensor, attention masks kept: an all-ones input makes every pre-LayerNorm transformer layer see
    a constant vector, which LayerNorm maps to its bias, so with zero biases every score vanishes;
    the fixed positive input keeps the score data-free and non-negative. One iteration (a pruning
    schedule has no counterpart when whole layers are chosen). ``samples`` only fixes the shapes
    (its first sample)."""
    twin = copy.deepcopy(model).double().eval()
    with torch.no_grad():
        for p in twin.parameters():
            p.abs_()
        batch = {k: v.to(twin.device) for k, v in twin.collate(samples[:1]).items()}
        batch.pop("labels")
        gen = torch.Generator().manual_seed(0)
        emb = {k: torch.randn(v.shape, generator=gen, dtype=v.dtype).abs().to(v.device)
               if v.is_floating_point() else v for k, v in twin.embed(batch).items()}
    weights = _layer_weights(twin)
    params = [p for group in weights for _, p in group]
    for p in twin.parameters():
        p.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    with torch.enable_grad():
        flow = twin.forward_embedded(emb).sum()
        grads = torch.autograd.grad(flow, params, allow_unused=True)
    names = [n for group in weights for n, _ in group]
    saliency = {n: torch.zeros_like(p) if g is None else (p.detach() * g).abs()
                for n, p, g in zip(names, params, grads, strict=True)}
    return np.nan_to_num(_per_layer_mean(weights, saliency), nan=0.0, posinf=np.finfo(np.float64).max)


def rgn(model: FederatedVLM, samples: Sequence[Sample]) -> np.ndarray:
    """Relative gradient norm (Auto-RGN of surgical fine-tuning, Lee et al., ICLR 2023, paper
    ref. [42]): ‖∂L/∂θ‖ / ‖θ‖ per parameter tensor, averaged over the layer's tensors (tensors with
    ‖θ‖ = 0 are skipped). Auto-RGN uses it as a per-layer learning-rate weight; here the layers of
    largest RGN are selected."""
    with _Grad(model) as grad:
        grads, _ = grad(samples)
    out = np.zeros(len(grad.weights))
    for layer, group in enumerate(grad.weights):
        ratios = [float(grads[n].double().norm() / p.detach().double().norm())
                  for n, p in group if float(p.detach().norm()) > 0]
        out[layer] = float(np.mean(ratios)) if ratios else 0.0
    return out


_BASELINES: dict[str, Callable[[FederatedVLM, Sequence[Sample]], np.ndarray]] = {
    name: globals()[name] for name in BASELINE_SCORERS  # each name's function of the same name
}
SCORERS: tuple[str, ...] = (LNTK, *BASELINE_SCORERS)


def score_layers(model: FederatedVLM, samples: Sequence[Sample], scorer: str = LNTK,
                 mode: str = "loss", step: TrainingStep | None = None, clip: float | None = None
                 ) -> np.ndarray:
    """Non-negative per-layer score (L,) of ``scorer`` on ``samples``; the server normalises it.

    ``mode`` (the LNTK Jacobian mode), ``step`` (the training step whose memory the scoring's
    pieces stay under, `tasks.lntk_pieces`) and ``clip`` (each sample's Jacobian clipped,
    `tasks.lntk.clip_grams`) only apply to ``lntk``; a pruning score refuses ``clip`` (no bounded
    sensitivity here)."""
    if scorer not in SCORERS:
        raise ValueError(f"score = {scorer!r} is unknown; choose one of {', '.join(SCORERS)}")
    if scorer not in _BASELINES:
        return layer_scores(model, samples, mode=mode, clip=clip, step=step).eigenvalues
    if clip is not None:
        raise ValueError(f"score = {scorer!r} has no clipped form for a private release; use lntk")
    if len(samples) == 0:
        raise ValueError("samples is empty: layer scoring needs at least one sample")
    scores = np.asarray(_BASELINES[scorer](model, samples), dtype=np.float64)
    return np.clip(np.nan_to_num(scores, nan=0.0), 0.0, None)
