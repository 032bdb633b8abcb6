"""Model registry: `build_model(name, ...)` -> `FederatedVLM` with adapters injected.

Names: "minilm-effnet" (default, pretrained, offline), "tiny-vilt" (random, for tests), "tiny-llava"
(random generative LLaVA, `tasks.models.tiny_llava`) and "hf:<local dir>" (any transformers
checkpoint on disk; image-text-to-text ones generate, `tasks.models.generative`).
"""

from __future__ import annotations

import torch

from tasks.models.base import TASKS, FederatedVLM
from tasks.models.checks import check_model_settings
from tasks.names import MODEL_SIZES, MODELS


def build_model(
    name: str,
    num_outputs: int,
    task: str = "vqa",
    adapter: str = "lora",
    lora_rank: int = 8,
    seed: int = 0,
    *,
    size: str = "base",
    gated: bool = False,
    num_blocks: int = 4,
    lora_targets: tuple[str, ...] = (),
    vlm_layers: str = "language",
    max_new_tokens: int = 0,
    dtype: str = "float32",
    quantization: str = "none",
    gradient_checkpointing: bool = False,
    device: str = "cpu",
    shared_head: bool = False,
    base_weights: bool = True,
) -> FederatedVLM:
    """Build a model, deterministic for `seed`: random backbone parts (tiny-vilt), the adapters
    and the personal head/projection are drawn from seeded generators, so every client and the
    server hold identical backbone + adapter weights. The global torch RNG is left untouched.

    FedMosaic (`tasks.mosaic`): ``size`` picks the client model size, ``gated`` adds SIMA's global
    branch and gate (Eq. 9), ``num_blocks`` is N_B of PQ-LoRA (Eq. 7). A ``large`` PQ-LoRA model
    has its A, B aligned to the ``base`` model of the same seed on public data (A.4,
    `tasks.mosaic.align`), the same computation on every client.

    ``lora_targets`` keeps LoRA on the named Linear modules only. Generative models
    (`tasks.models.generative`: ``tiny-llava``, an image-text-to-text ``hf:<dir>``) also take
    ``vlm_layers``, ``max_new_tokens``, the frozen weights' ``dtype``, a 4-bit base
    (``quantization``, on CUDA ``device``) and ``gradient_checkpointing``. ``shared_head`` makes the
    answer head shared state (every client trains it, the server aggregates it).

    ``base_weights=False`` is the coordinator's build (issue 35): an ``hf:<dir>`` backbone is read
    from its ``config.json`` only, as weightless placeholders (`tasks.models.skeleton`), while
    the adapters and head are drawn exactly as here, so layer names and the initial shared state
    equal a full build's. It cannot serve ``adapter = "layer"`` (the trainable units are the
    checkpoint's own weights) or a ``large`` PQ-LoRA model (aligned by running the base), which
    load the weights; the built-in models are small and always do."""
    from tasks.adapters import ADAPTERS, apply_adapter

    if not isinstance(name, str) or not (name in MODELS[:-1] or name.startswith("hf:")):
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    if adapter not in ADAPTERS:
        raise ValueError(f"unknown adapter {adapter!r}; choose one of {', '.join(ADAPTERS)}")
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    fixed = name.startswith("hf:") or name in ("tiny-llava", "smol-llava")
    if size not in MODEL_SIZES or (size != "base" and fixed):
        raise ValueError(f"model size {size!r} is unknown for {name!r}; choose one of "
                         f"{', '.join(MODEL_SIZES) if not fixed else 'base'}")
    large = size == "large"
    generative = {"vlm_layers": vlm_layers, "max_new_tokens": max_new_tokens,
                  "dtype": getattr(torch, dtype), "quantization": quantization,
                  "gradient_checkpointing": gradient_checkpointing, "device": device}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if name == "minilm-effnet":
            from tasks.models.minilm_effnet import MiniLMEffNet

            model: FederatedVLM = MiniLMEffNet(num_outputs, task, image_tower="lite2" if large else "lite0")
        elif name == "tiny-vilt":
            from tasks.models.hf import build_tiny_vilt

            model = build_tiny_vilt(num_outputs, task, large)
        elif name == "tiny-llava":
            from tasks.models.generative import GenerativeVLM, finish
            from tasks.models.tiny_llava import tiny_llava

            backbone, processor = tiny_llava()
            model = finish(GenerativeVLM(backbone.to(generative["dtype"]), processor, vlm_layers,
                                         max_new_tokens), gradient_checkpointing)
        elif name == "smol-llava":  # issue 37; registry entry: "tasks.models.smol_llava:build_smol_llava"
            from tasks.models.smol_llava import build_smol_llava

            model = build_smol_llava(vlm_layers, max_new_tokens, generative["dtype"], gradient_checkpointing)
        else:
            from tasks.models.hf import build_hf

            model = build_hf(name[3:], num_outputs, task, base_weights or adapter == "layer" or large,
                             **generative)
        if model.generative and task != "vqa":
            raise ValueError(f"model {name!r} generates answers: it takes VQA data sets, not task {task!r}")
        check_model_settings(name, model, quantization, shared_head)
        model.lora_targets = tuple(lora_targets)
        model.shared_head = shared_head
        torch.manual_seed(seed + 1)  # adapter init independent of the head's size
        apply_adapter(model, adapter, lora_rank, gated=gated, num_blocks=num_blocks, seed=seed)
    if large and adapter == "pq-lora":
        from tasks.mosaic.align import align_to_pivot

        pivot = build_model(name, num_outputs, task, adapter, lora_rank, seed, num_blocks=num_blocks,
                            lora_targets=lora_targets, shared_head=shared_head)
        align_to_pivot(model, pivot, seed=seed)
    model.eval()
    return model


__all__ = ["MODELS", "MODEL_SIZES", "TASKS", "FederatedVLM", "build_model", "check_model_settings"]
