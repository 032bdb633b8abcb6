"""What keeps LNTK scoring (tasks.lntk) within the memory of training: pieces of samples sized by
memory, and the model's gradient checkpointing.

* Pieces: scoring runs m samples at a time, one forward and backward pass each (the hook path,
  tasks/lntk_hooks.py, and the per-sample-gradient path alike), so it holds the activations of m
  samples; the per-sample rows it keeps across pieces are n × p per scored matrix (small for LoRA),
  and the layer scores do not depend on m. A sample costs scoring more than training: scoring
  needs every block's backward pass and keeps every LoRA matrix's input for it, where a training
  step of a mask keeps only what the blocks from its lowest trained layer up need. So m is sized
  by memory (`memory_piece`): the bytes autograd keeps for one sample (`kept_bytes`: saved tensors
  and the inputs checkpointed blocks keep to recompute, the model's own weights excepted) are
  measured for scoring and for the training step (`TrainingStep`: the client's batch size, and its
  budget's k layers nearest the output, the mask whose step keeps the least), and m = the most
  samples whose scoring keeps no more than that step's batch does. The client passes its step
  (`client_app.app`).
* Checkpointing: Hugging Face recomputes a block (`GradientCheckpointingLayer`) in the backward
  pass only in training mode, but scoring runs in eval mode (no dropout, §4.1's Θ of the model as
  it is). `checkpointed` routes those blocks through the model's own checkpoint function in eval
  mode as well, so a model trained with ``gradient-checkpointing = true`` is scored with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
from torch import nn

from tasks.models.generative import split_inputs

Batch = dict[str, torch.Tensor]


def piece_bounds(n: int, size: int | None) -> list[tuple[int, int]]:
    """[start, stop) of consecutive pieces of at most ``size`` of ``n`` samples (None: one piece)."""
    if size is None:
        return [(0, n)]
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"LNTK piece size must be a positive int, got {size!r}")
    return [(start, min(start + size, n)) for start in range(0, n, size)]


@dataclass(frozen=True)
class TrainingStep:
    """The training step scoring must fit under: ``batch_size`` samples a pass (the client's
    physical batch), ``budget`` layers trained."""

    batch_size: int
    budget: int
    master_weights: bool = True
    """Whether training computes LoRA in the base's dtype (`tasks.train.MasterWeights`), as
    `tasks.train.train` does by default; where a step trains without them (DP-SGD, gradient
    tracking) its passes keep more, so pieces sized with them are smaller than they need be, never
    larger."""

    def reference_mask(self, num_layers: int) -> np.ndarray:
        """The ``budget`` layers nearest the output: of all masks of k layers, the one whose step
        keeps the least (its backward pass stops highest), so a piece under it is under every one."""
        mask = np.zeros(num_layers, dtype=bool)
        mask[num_layers - min(self.budget, num_layers):] = True
        return mask


MARGIN = 0.99
"""Pieces are sized to 99 % of the step's bytes: a pass also keeps a few bytes whatever its samples
(the losses' stack, indices), which the per-sample figures do not scale."""


def memory_piece(step: TrainingStep, scoring_bytes: int, training_bytes: int, n: int) -> int:
    """The most samples (1..n) a scoring pass may hold: `MARGIN` · ``batch_size`` · training's bytes
    a sample over scoring's bytes a sample, at least 1."""
    if scoring_bytes <= 0:
        return n
    return int(max(1, min(n, MARGIN * step.batch_size * training_bytes // scoring_bytes)))


@contextmanager
def kept_bytes(model: nn.Module) -> Iterator[list[int]]:
    """Within the block, count what autograd keeps for a backward pass: the storages of the tensors
    it saves (the model's parameters and buffers excepted: they are there anyway) and the inputs
    of checkpointed blocks that run with gradients (kept to recompute the block; what is saved
    inside such a block is not kept). Yields a list whose one entry holds the bytes at the end."""
    own = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    kept: dict[int, int] = {}

    def keep(tensor: object) -> None:
        if isinstance(tensor, torch.Tensor) and tensor.device.type != "meta":
            storage = tensor.untyped_storage()
            if storage.data_ptr() not in own:
                kept[storage.data_ptr()] = storage.nbytes()

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        keep(tensor)
        return tensor

    def block_inputs(module: nn.Module, args: tuple, output: object) -> None:
        out = output[0] if isinstance(output, tuple) else output
        if isinstance(out, torch.Tensor) and out.requires_grad:
            for arg in args:
                keep(arg)

    handles = [block.register_forward_hook(block_inputs) for block in _checkpointing_blocks(model)]
    total = [0]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            yield total
    finally:
        for handle in handles:
            handle.remove()
        total[0] = sum(kept.values())


def _checkpointing_blocks(model: nn.Module) -> list[nn.Module]:
    """Every Hugging Face block whose gradient checkpointing is on (none without transformers)."""
    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
    except ImportError:
        return []
    return [m for m in model.modules()
            if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing]


def training_kept(model: nn.Module, inputs: Batch, labels: torch.Tensor, mask: np.ndarray,
                  master_weights: bool = True) -> int:
    """`kept_bytes` of one training forward pass of ``inputs`` with ``mask`` trained, as
    `tasks.train.train` sets it up: the masked units and the personal parameters require gradients,
    train mode, and with ``master_weights`` the adapters in the base's dtype where it trains them so
    (`tasks.train.MasterWeights`: their products then keep half the bytes). The model's flags, mode,
    adapters and random state are left as they were."""
    from tasks.adapters import freeze_except, gradient_flags, layer_parameter_names
    from tasks.train import MasterWeights

    named = dict(model.named_parameters())
    unit = [named[n] for layer in np.flatnonzero(mask) for n in layer_parameter_names(model, int(layer))]
    master = MasterWeights.of(model, unit) if master_weights else None
    was_training = model.training
    devices = [labels.device.index or 0] if labels.device.type == "cuda" else []
    try:
        with gradient_flags(named), torch.random.fork_rng(devices=devices), master or nullcontext():
            freeze_except(model, mask)
            model.train()
            with torch.enable_grad(), kept_bytes(model) as kept:
                model.loss(model.forward_embedded(inputs), labels)
    finally:
        model.train(was_training)
    return kept[0]


def piece_inputs(emb: Batch, n: int, start: int, stop: int) -> Batch:
    """The model inputs of samples [start, stop) of an embedded batch of ``n`` samples: batch-first
    tensors sliced, packed image patches (Qwen2-VL) with their grid rows
    (`tasks.models.generative.split_inputs`)."""
    if (start, stop) == (0, n):
        return emb
    samples = split_inputs(emb, n)[start:stop]
    return {key: torch.cat([sample[key] for sample in samples]) for key in emb}


@contextmanager
def checkpointed(model: nn.Module) -> Iterator[int]:
    """Within the block, every Hugging Face block with gradient checkpointing on recomputes its
    activations in the backward pass in eval mode too (yields how many blocks)."""
    blocks = _checkpointing_blocks(model)
    before = [block.__dict__.get("forward") for block in blocks]
    for block in blocks:
        block.forward = _through_checkpoint(block, block.forward)
    try:
        yield len(blocks)
    finally:
        for block, forward in zip(blocks, before, strict=True):
            if forward is None:
                del block.forward
            else:
                block.forward = forward


def _through_checkpoint(block: nn.Module, forward: Callable[..., object]) -> Callable[..., object]:
    def run(*args: object, **kwargs: object) -> object:
        if not torch.is_grad_enabled():
            return forward(*args, **kwargs)
        return block._gradient_checkpointing_func(partial(forward, **kwargs), *args)

    return run
