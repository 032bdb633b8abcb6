"""LNTK Gram matrices from ONE batched forward + backward pass, without per-sample autograd.

For a linear map y_t = W x_t (+ b) applied at positions t (tokens, or pixels of a convolution) of
sample i, the gradient of any scalar fᵢ of sample i alone is gᵢ = Σₜ δᵢₜ xᵢₜᵀ (bias: Σₜ δᵢₜ), with
δᵢₜ = ∂fᵢ/∂yᵢₜ. So the rows of Jˡ (paper Eq. 8) for the LoRA matrices of a layer follow from the
module inputs x (forward hooks) and output gradients δ of a single backward pass of Σᵢ fᵢ, as long
as samples do not interact in the batch (eval mode: no batch-norm statistics, no dropout). LoRA's
h = W₀x + s·B(A x) needs no special case: A and B are `nn.Linear` / `nn.Conv2d` modules of their
own, and autograd hands each its own δ (for A: s·Bᵀδ, the chain rule). Θˡ = Σ_modules ⟨gᵢ, gⱼ⟩ is
then computed per module by whichever of two exact forms is cheaper:

* rows: form gᵢ (n × out·in, small for LoRA's rank-r factors) and take G Gᵀ;
* kernel: ⟨gᵢ, gⱼ⟩ = Σₜ Σₜ' (δᵢₜ·δⱼₜ')(xᵢₜ·xⱼₜ') from two n·T × n·T inner-product matrices, never
  forming gᵢ (cheap when n·T is smaller than the weight).

A convolution with groups = 1 is the same linear map on unfolded patches (`F.unfold`; a 1×1
stride-1 convolution on its pixels directly). `hook_sites` returns None when a scored parameter is
not the weight or bias of a plain `nn.Linear` / groups = 1 zero-padded `nn.Conv2d` (e.g.
adapter="layer": LayerNorm, depthwise convolutions); `hooked_grams` raises `NotHookable` when a
module's input is not batch-first or a parameter is also used outside its module's forward (the
guard: in the autograd graph of the forward pass, each scored parameter must have exactly one
consumer per call of its module). In both cases tasks.lntk takes the per-sample-gradient path
(`torch.func.vmap`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.graph import GradientEdge, get_gradient_edge


class NotHookable(Exception):
    """The model's scored parameters cannot be scored from module hooks (see module doc)."""


@dataclass
class _Site:
    """One module that owns scored parameters, and what its hooks captured."""

    module: nn.Linear | nn.Conv2d
    params: dict[str, str]  # "weight" / "bias" -> full parameter name
    inputs: list[torch.Tensor] = field(default_factory=list)  # per call: (n, T, in) patches
    outputs: list[GradientEdge] = field(default_factory=list)  # per call: where its output's δ arrives
    shapes: list[torch.Size] = field(default_factory=list)  # per call: the output's shape


def hook_sites(model: nn.Module, groups: list[list[str]]) -> list[_Site] | None:
    """The modules owning the scored parameters, or None if one is not a plain Linear/Conv2d."""
    sites: dict[str, _Site] = {}
    for name in (name for group in groups for name in group):
        owner, _, kind = name.rpartition(".")
        try:
            module = model.get_submodule(owner)
        except AttributeError:
            return None
        if kind not in ("weight", "bias") or not _plain(module):
            return None
        sites.setdefault(owner, _Site(module, {})).params[kind] = name
    return list(sites.values())


def hooked_grams(
    sites: list[_Site],
    forward: Callable[[], torch.Tensor],
    per_sample: Callable[[torch.Tensor], torch.Tensor],
    groups: list[list[str]],
    n: int,
) -> list[torch.Tensor]:
    """Per-group Gram matrices Θ = J Jᵀ (float64) over the rows of `per_sample(forward())`.

    `sites` come from `hook_sites`; `forward()` runs the batch; `per_sample(logits)` returns an
    (n, R) matrix of per-sample quantities (R = 1: each sample's loss; R = C: its logits), row
    i·R + r of J is the gradient of quantity r of sample i, as in the per-sample-gradient path.
    One backward pass of the summed column (R = 1), or one pass batched over the R columns
    (`is_grads_batched`, R > 1)."""
    for site in sites:
        site.inputs.clear()
        site.outputs.clear()
        site.shapes.clear()
    scored = {name: getattr(site.module, kind) for site in sites for kind, name in site.params.items()}
    flags = {name: p.requires_grad for name, p in scored.items()}
    handles = [site.module.register_forward_hook(_capture(site, n)) for site in sites]
    try:
        for p in scored.values():
            p.requires_grad_(True)
        with torch.enable_grad():
            values = per_sample(forward())
            calls = [out for site in sites for out in site.outputs]
            grads: tuple[torch.Tensor | None, ...] = (None,) * len(calls)
            if values.grad_fn is not None:  # else no scored parameter reaches the outputs
                _check_uses(values, sites, scored)
                grads = _backward(values, calls) if calls else ()
    finally:
        for handle in handles:
            handle.remove()
        for name, p in scored.items():
            p.requires_grad_(flags[name])
    parts: dict[str, _Part] = {}
    offset = 0
    for site in (site for site in sites if site.outputs):  # a module never called adds nothing
        count = len(site.outputs)
        x, delta = _site_tensors(site, grads[offset : offset + count], n, values.shape[1])
        offset += count
        for kind, name in site.params.items():
            parts[name] = _param_part(kind, x, delta)
    return [_group_gram(group, parts, values.numel()) for group in groups]


def _backward(values: torch.Tensor, wrt: list[GradientEdge]) -> tuple[torch.Tensor | None, ...]:
    """Gradients of Σᵢ values[i, r] w.r.t. `wrt`, each with a leading axis over r."""
    n, r = values.shape
    if r == 1:
        grads = torch.autograd.grad(values, wrt, torch.ones_like(values), allow_unused=True)
        return tuple(None if g is None else g.unsqueeze(0) for g in grads)
    basis = torch.eye(r, dtype=values.dtype, device=values.device).unsqueeze(1).expand(r, n, r)
    try:
        return torch.autograd.grad(values, wrt, basis, is_grads_batched=True, allow_unused=True)
    except RuntimeError as err:  # a batching rule that vmap lacks
        raise NotHookable(f"batched backward failed: {str(err).splitlines()[0][:120]}") from err


def _check_uses(values: torch.Tensor, sites: list[_Site], scored: dict[str, torch.Tensor]) -> None:
    """The guard: walk the autograd graph of `values` once and count the consumers of every scored
    parameter; a plain Linear / Conv2d call consumes its weight and bias once each, so any other
    count means the parameter is also used outside its module's forward."""
    names = {id(p): name for name, p in scored.items()}
    uses = dict.fromkeys(scored, 0)
    seen, stack = set(), [values.grad_fn]
    while stack:
        for node, _ in stack.pop().next_functions:
            leaf = getattr(node, "variable", None)  # AccumulateGrad: a leaf tensor
            if leaf is not None:
                if id(leaf) in names:
                    uses[names[id(leaf)]] += 1
            elif node is not None and node not in seen:
                seen.add(node)
                stack.append(node)
    for site in sites:
        for name in site.params.values():
            if uses[name] != len(site.outputs):
                raise NotHookable(f"{name} is also used outside its module's forward")


def _plain(module: nn.Module | None) -> bool:
    if type(module) is nn.Linear:
        return True
    return (
        type(module) is nn.Conv2d
        and module.groups == 1
        and module.padding_mode == "zeros"
        and (module.padding != "same" or module.kernel_size == (1, 1))
    )


def _capture(site: _Site, n: int) -> Callable[..., None]:
    def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
        x = args[0] if args else None
        if not isinstance(x, torch.Tensor) or x.shape[0] != n or output.shape[0] != n:
            raise NotHookable(f"{type(module).__name__} input is not batch-first with {n} samples")
        site.inputs.append(_patches(module, x.detach()))
        site.outputs.append(get_gradient_edge(output))  # not the output: it is freed as usual
        site.shapes.append(output.shape)

    return hook


def _patches(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """(n, T, in): the rows a Linear / Conv2d multiplies by its (flattened) weight."""
    if isinstance(module, nn.Linear):
        return x.reshape(x.shape[0], -1, x.shape[-1])
    if module.kernel_size == (1, 1) and module.stride == (1, 1):
        return x.flatten(2).transpose(1, 2)
    padding = 0 if module.padding == "valid" else module.padding
    cols = F.unfold(x, module.kernel_size, module.dilation, padding, module.stride)
    return cols.transpose(1, 2)


def _site_tensors(
    site: _Site, grads: tuple[torch.Tensor | None, ...], n: int, r: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs (n, T, in) and output gradients (n, R, T, out), all calls of the module along T.
    `grads` holds, per call, the (R, *output shape) gradient of the call's output (or None)."""
    x = site.inputs[0] if len(site.inputs) == 1 else torch.cat(site.inputs, 1)
    parts = []
    for shape, d in zip(site.shapes, grads, strict=True):
        d = torch.zeros(r, *shape, dtype=x.dtype, device=x.device) if d is None else d
        d = d.flatten(3).transpose(2, 3) if d.dim() == 5 else d.reshape(d.shape[0], n, -1, d.shape[-1])
        parts.append(d)  # (R, n, T, out)
    delta = parts[0] if len(parts) == 1 else torch.cat(parts, 2)
    return x, delta.transpose(0, 1)


@dataclass
class _Part:
    """One parameter's share of Θ: its per-sample gradients, or its kernel-form Gram matrix."""

    rows: torch.Tensor | None  # (n, R, p): gᵢᵣ flattened; None when the kernel form was cheaper
    gram: torch.Tensor | None = None  # kernel form: (n·R, n·R) float64


def _param_part(kind: str, x: torch.Tensor, delta: torch.Tensor) -> _Part:
    """gᵢᵣ = Σₜ δᵢᵣₜ xᵢₜᵀ (weight) or Σₜ δᵢᵣₜ (bias), or, for a weight where it is cheaper, the
    kernel form ⟨gᵢᵣ, gⱼᵣ'⟩ = Σₜ Σₜ' (δᵢᵣₜ·δⱼᵣ'ₜ')(xᵢₜ·xⱼₜ') (module doc)."""
    n, r, t, out = delta.shape
    if kind == "bias":
        return _Part(delta.sum(2))
    width = x.shape[-1]
    rows_cost = n * r * t * width * out + (n * r) ** 2 * width * out
    kernel_cost = (n * r * t) ** 2 * out + (n * t) ** 2 * width + (n * r * t) ** 2
    if rows_cost <= kernel_cost:
        return _Part(torch.einsum("nrto,nti->nroi", delta, x).reshape(n, r, -1))
    x64, delta64 = x.to(torch.float64), delta.to(torch.float64)
    k_x = torch.einsum("nti,msi->nmts", x64, x64)  # (n, n, T, T)
    k_d = torch.einsum("arto,bqso->arbqts", delta64, delta64)  # (n, R, n, R, T, T)
    return _Part(None, torch.einsum("arbqts,abts->arbq", k_d, k_x).reshape(n * r, n * r))


def _group_gram(names: list[str], parts: dict[str, _Part], size: int) -> torch.Tensor:
    """Θ of one layer (float64): J Jᵀ over its stacked per-sample rows plus its kernel-form parts
    (parameters of modules the forward never called have no part: their gradient is zero)."""
    mine = [parts[name] for name in names if name in parts]
    rows = [part.rows for part in mine if part.rows is not None]
    gram = torch.zeros(size, size, dtype=torch.float64)
    if rows:
        jac = (rows[0] if len(rows) == 1 else torch.cat(rows, 2)).reshape(size, -1).to(torch.float64)
        gram = jac @ jac.T
    return sum((part.gram for part in mine if part.rows is None), gram)
