"""A registry model ready for gradient oracles: some layers and its head trainable, no dropout."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import tasks
from tasks.adapters import freeze_except


def prepared_model(name: str, layers: list[int], samples: int = 8) -> tuple[tasks.FederatedVLM, list]:
    """``name`` with ``layers`` and its head trainable, no dropout (so a batch and its examples run
    the same function), every LoRA B drawn at random (at its zero init, A has no gradient); with
    ``samples`` training samples of synthetic's partition 0."""
    partition = tasks.load_partition("synthetic", 0, 1, "iid", seed=0, max_train=samples, max_test=2)
    model = tasks.build_model(tasks.ModelSpec(name, seed=0), len(partition.labels))
    model.answers = tuple(partition.labels)
    mask = np.zeros(len(model.layer_names), dtype=bool)
    mask[layers] = True
    freeze_except(model, mask)
    model.train()
    generator = torch.Generator().manual_seed(0)
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    with torch.no_grad():
        for pname, param in model.named_parameters():
            if "lora_B" in pname and param.requires_grad:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    return model, partition.train
