"""Model registry: `build_model(name, ...)` -> `FederatedVLM` with adapters injected.

Names: "minilm-effnet" (default, pretrained, offline), "tiny-vilt" (random, for tests) and
"hf:<local dir>" (any transformers checkpoint on disk). See the modules for each model.
"""

from __future__ import annotations

import torch

from tasks.models.base import TASKS, FederatedVLM
from tasks.names import MODELS


def build_model(
    name: str,
    num_outputs: int,
    task: str = "vqa",
    adapter: str = "lora",
    lora_rank: int = 8,
    seed: int = 0,
) -> FederatedVLM:
    """Build a model, deterministic for `seed`: random backbone parts (tiny-vilt), the adapters
    and the personal head/projection are drawn from seeded generators, so every client and the
    server hold identical backbone + adapter weights. The global torch RNG is left untouched."""
    from tasks.adapters import ADAPTERS, apply_adapter

    if not isinstance(name, str) or not (name in MODELS[:2] or name.startswith("hf:")):
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    if adapter not in ADAPTERS:
        raise ValueError(f"unknown adapter {adapter!r}; choose one of {', '.join(ADAPTERS)}")
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if name == "minilm-effnet":
            from tasks.models.minilm_effnet import MiniLMEffNet

            model: FederatedVLM = MiniLMEffNet(num_outputs, task)
        elif name == "tiny-vilt":
            from tasks.models.hf import build_tiny_vilt

            model = build_tiny_vilt(num_outputs, task)
        else:
            from tasks.models.hf import build_hf

            model = build_hf(name[3:], num_outputs, task)
        torch.manual_seed(seed + 1)  # adapter init independent of the head's size
        apply_adapter(model, adapter, lora_rank)
    model.eval()
    return model


__all__ = ["MODELS", "TASKS", "FederatedVLM", "build_model"]
