"""LNTK Gram matrices from batched forward + backward passes, without per-sample autograd.

For a linear map y_t = W x_t (+ b) applied at positions t (tokens, or pixels of a convolution) of
sample i, the gradient of any scalar fᵢ of sample i alone is gᵢ = Σₜ δᵢₜ xᵢₜᵀ (bias: Σₜ δᵢₜ), with
δᵢₜ = ∂fᵢ/∂yᵢₜ. So row i of Jˡ (paper Eq. 8) for the LoRA matrices of a layer follows from each
module's input x and output gradient δ in a backward pass of Σᵢ fᵢ, as long as samples do not
interact in the batch (eval mode: no batch-norm statistics, no dropout). LoRA's
h = W₀x + s·B(A x) needs no special case: A and B are `nn.Linear` / `nn.Conv2d` modules of their
own, and autograd hands each its own δ (for A: s·Bᵀδ, the chain rule).

Memory: a forward hook puts a capture node on each call's output that saves the call's input
through autograd's saved-tensor mechanism, and turns (x, δ) into the per-sample rows gᵢ the moment δ
arrives in the backward pass; x and δ are then freed. So the pass holds what training would (x is
the tensor the LoRA matrix saves for its own gradient anyway), and where the model recomputes
checkpointed blocks in the backward pass (`torch.utils.checkpoint`), x is recomputed with them:
only one block's inputs are alive at a time. The samples can be scored in pieces (`Piece`), one
forward and backward each: the rows of every piece (n × p per parameter, small for LoRA's rank-r
factors) are kept, and Θˡ = Jˡ Jˡᵀ over all n samples is formed after the last piece, so the
cross terms between samples of different pieces are those of one pass.

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

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from tasks.adapters import gradient_flags


class NotHookable(Exception):
    """The model's scored parameters cannot be scored from module hooks (see module doc)."""


@dataclass
class _Site:
    """One module that owns scored parameters."""

    module: nn.Linear | nn.Conv2d
    params: dict[str, str]  # "weight" / "bias" -> full parameter name


class Piece(NamedTuple):
    """``size`` samples scored in one forward and backward pass: ``forward()`` returns their logits,
    ``per_sample(logits)`` their (size, R) per-sample quantities (R = 1: each sample's loss; R = C:
    its logits)."""

    size: int
    forward: Callable[[], torch.Tensor]
    per_sample: Callable[[torch.Tensor], torch.Tensor]


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


def hooked_grams(sites: list[_Site], pieces: Iterable[Piece], groups: list[list[str]]) -> list[torch.Tensor]:
    """Per-group Gram matrices Θ = J Jᵀ (float64) over the rows of every piece's `per_sample`.

    `sites` come from `hook_sites`. Row i·R + r of J is the gradient of quantity r of sample i, the
    samples in the order of the pieces, as in the per-sample-gradient path; one backward pass per
    column r of a piece."""
    done = [_piece_rows(sites, piece) for piece in pieces]
    count = sum(sink.size * sink.columns for sink in done)
    return [_group_gram(group, done, count) for group in groups]


class _Sink:
    """One piece's capture state: the rows gᵢᵣ per parameter, filled as the δ arrive."""

    def __init__(self, size: int) -> None:
        self.size = size  # samples in the piece
        self.columns = 1  # R, known once the forward pass has run
        self.column = 0  # the r whose backward pass is running
        self.recording = True  # False in the backward pass, where checkpointed blocks run again
        self.calls: dict[int, int] = {}  # id(module) -> calls in the forward pass
        self.rows: dict[tuple[str, int], torch.Tensor] = {}  # (parameter name, r) -> (size, p)
        # every capture node feeds this leaf, so a backward pass to it runs each capture node but no
        # parameter's own gradient (the rows are those gradients, per sample)
        self.anchor: torch.Tensor | None = None

    def hook(self, site: _Site) -> Callable[..., torch.Tensor]:
        def capture(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
            x = args[0] if args else None
            if self.recording:
                if not isinstance(x, torch.Tensor) or not x.shape[0] == output.shape[0] == self.size:
                    raise NotHookable(f"{type(module).__name__} input is not batch-first with "
                                      f"{self.size} samples")
                self.calls[id(module)] = self.calls.get(id(module), 0) + 1
            if self.anchor is None:
                self.anchor = torch.zeros((), device=output.device, requires_grad=True)
            return _Capture.apply(output, x, self.anchor, self, site)

        return capture

    def add(self, site: _Site, x: torch.Tensor, delta: torch.Tensor) -> None:
        """gᵢᵣ = Σₜ δᵢᵣₜ xᵢₜᵀ (weight) or Σₜ δᵢᵣₜ (bias) of one call, added to the rows of column r."""
        dtype = torch.promote_types(torch.promote_types(x.dtype, delta.dtype), torch.float32)
        x, delta = _patches(site.module, x).to(dtype), _positions(site.module, delta).to(dtype)
        for kind, name in site.params.items():
            g = delta.sum(1) if kind == "bias" else torch.einsum("mto,mti->moi", delta, x)
            key = (name, self.column)
            if key in self.rows:  # another call of the module
                self.rows[key] += g.reshape(self.size, -1)
            else:
                self.rows[key] = g.reshape(self.size, -1)

    def rows_of(self, name: str) -> torch.Tensor | None:
        """(size·R, p): the rows of parameter `name`, sample-major; None if no call reached it."""
        parts = [self.rows.get((name, r)) for r in range(self.columns)]
        known = next((part for part in parts if part is not None), None)
        if known is None or self.columns == 1:
            return known
        return torch.stack([torch.zeros_like(known) if part is None else part for part in parts], 1
                           ).reshape(-1, known.shape[1])


class _Capture(torch.autograd.Function):
    """Identity on a module's output that saves the module's input and hands (input, δ) to the sink."""

    @staticmethod
    def forward(ctx, output: torch.Tensor, x: torch.Tensor, anchor: torch.Tensor, sink: _Sink,
                site: _Site) -> torch.Tensor:
        ctx.save_for_backward(x)  # recomputed, not kept, inside a checkpointed block
        ctx.sink, ctx.site = sink, site
        return output.clone()  # a new tensor, so later in-place ops on the output stay legal

    @staticmethod
    def backward(ctx, delta: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (x,) = ctx.saved_tensors
        ctx.sink.add(ctx.site, x, delta)
        return delta, None, torch.zeros_like(ctx.sink.anchor), None, None


@contextmanager
def _capturing(sites: list[_Site], size: int) -> Iterator[tuple[_Sink, dict[str, torch.Tensor]]]:
    """Within the block a capture hook on every scored module and every scored parameter requiring
    gradients (the parameters by name beside the sink); hooks and flags as they were afterwards."""
    scored = {name: getattr(site.module, kind) for site in sites for kind, name in site.params.items()}
    sink = _Sink(size)
    handles = [site.module.register_forward_hook(sink.hook(site)) for site in sites]
    try:
        with gradient_flags(scored, on=True), torch.enable_grad():
            yield sink, scored
    finally:
        for handle in handles:
            handle.remove()


def forward_kept(sites: list[_Site], piece: Piece, model: nn.Module) -> int:
    """`tasks.lntk_pieces.kept_bytes` of the piece's forward pass as scoring runs it (every scored
    parameter requiring gradients, a capture node on every scored module), without its backward."""
    from tasks.lntk_pieces import kept_bytes

    with _capturing(sites, piece.size), kept_bytes(model) as kept:
        piece.per_sample(piece.forward())
    return kept[0]


def _piece_rows(sites: list[_Site], piece: Piece) -> _Sink:
    """One forward pass of the piece with capture hooks, then one backward pass per column."""
    with _capturing(sites, piece.size) as (sink, scored):
        values = piece.per_sample(piece.forward())
        sink.recording, sink.columns = False, values.shape[1]
        if values.grad_fn is not None and sink.anchor is not None:  # else no row is reached
            _check_uses(values, sites, scored, sink.calls)
            for r in range(sink.columns):
                sink.column = r
                torch.autograd.grad(values[:, r].sum(), sink.anchor, retain_graph=r + 1 < sink.columns,
                                    allow_unused=True)
    return sink


def _check_uses(values: torch.Tensor, sites: list[_Site], scored: dict[str, torch.Tensor],
                calls: dict[int, int]) -> None:
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
            if uses[name] != calls.get(id(site.module), 0):
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


def _patches(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """(n, T, in): the rows a Linear / Conv2d multiplies by its (flattened) weight."""
    if isinstance(module, nn.Linear):
        return x.reshape(x.shape[0], -1, x.shape[-1])
    if module.kernel_size == (1, 1) and module.stride == (1, 1):
        return x.flatten(2).transpose(1, 2)
    padding = 0 if module.padding == "valid" else module.padding
    cols = F.unfold(x, module.kernel_size, module.dilation, padding, module.stride)
    return cols.transpose(1, 2)


def _positions(module: nn.Module, delta: torch.Tensor) -> torch.Tensor:
    """(n, T, out): the output gradient at the positions of `_patches`."""
    if isinstance(module, nn.Linear):
        return delta.reshape(delta.shape[0], -1, delta.shape[-1])
    return delta.flatten(2).transpose(1, 2)


def _group_gram(names: list[str], pieces: list[_Sink], count: int) -> torch.Tensor:
    """Θ of one layer (float64, n·R × n·R, on the CPU): J Jᵀ, J the rows of its parameters side by
    side over all pieces (a parameter a piece's forward never reached has zero rows there)."""
    columns = []
    for name in names:
        parts = [sink.rows_of(name) for sink in pieces]
        known = next((part for part in parts if part is not None), None)
        if known is not None:
            columns.append(torch.cat([known.new_zeros(sink.size * sink.columns, known.shape[1])
                                      if part is None else part
                                      for part, sink in zip(parts, pieces, strict=True)]))
    if not columns:
        return torch.zeros(count, count, dtype=torch.float64)
    jac = torch.cat(columns, 1).to(torch.float64)
    return (jac @ jac.T).cpu()
