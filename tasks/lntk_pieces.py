"""What keeps LNTK scoring (tasks.lntk) within the memory of training: pieces of samples, and the
model's gradient checkpointing.

* Pieces: the hook path (tasks/lntk_hooks.py) scores m samples at a time, one forward and backward
  pass each, so it holds the activations of m samples, as a training step of batch m does; the
  per-sample rows it keeps across pieces are n × p per scored matrix (small for LoRA). The client
  passes its training batch size as the piece size (`client_app.app`), so scoring never holds more
  samples' activations at once than its training steps do; the layer scores do not depend on it.
* Checkpointing: Hugging Face recomputes a block (`GradientCheckpointingLayer`) in the backward
  pass only in training mode, but scoring runs in eval mode (no dropout, §4.1's Θ of the model as
  it is). `checkpointed` routes those blocks through the model's own checkpoint function in eval
  mode as well, so a model trained with ``gradient-checkpointing = true`` is scored with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

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
    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
    except ImportError:  # no Hugging Face blocks to checkpoint
        yield 0
        return
    blocks = [m for m in model.modules()
              if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing]
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
