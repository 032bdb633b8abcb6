"""`build_model(spec, num_outputs, task)`: a registry model with its adapters injected, the same
for every entry of `tasks.models.registry`.

It sits above the models, the adapters and FedMosaic's alignment (`tasks.adapters`,
`tasks.mosaic.align`), which all read `tasks.models.base`, so no arrow inside `tasks/` points back
up (tests/project/test_import_cycles.py).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from tasks.adapters import apply_adapter
from tasks.models.base import TASKS, FederatedVLM
from tasks.models.checks import check_build
from tasks.models.registry import ModelSpec
from tasks.names import adapter_of


def build_model(spec: ModelSpec, num_outputs: int, task: str = "vqa") -> FederatedVLM:
    """The model of ``spec`` with ``num_outputs`` answers for ``task``, deterministic for
    ``spec.seed``: random backbone parts (tiny-vilt), the adapters and the personal head/projection
    are drawn from seeded generators, so every client and the server hold identical backbone +
    adapter weights. The global torch RNG is left untouched.

    The entry's builder (`tasks.models.registry`) makes the backbone and head under
    ``seed``; the adapters are drawn under ``seed + 1`` (independent of the head's size). A ``large``
    PQ-LoRA model has its A, B aligned to the ``base`` model of the same seed on public data
    (FedMosaic A.4, `tasks.mosaic.align`), the same computation on every client.

    ``spec.base_weights=False`` (the coordinator) reads an ``hf:<dir>`` backbone from its
    ``config.json`` only while the adapters and head are drawn exactly as here. It cannot serve
    ``adapter = "layer"`` (the trainable units are the checkpoint's own weights) or a ``large``
    model (aligned by running the base), which load the weights."""
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"build_model takes a ModelSpec (tasks.models.registry), got {spec!r}")
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    large = spec.size == "large"
    if not adapter_of(spec.adapter).low_rank or large:  # the layers' own weights are the unit
        spec = replace(spec, base_weights=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model: FederatedVLM = spec.entry.load()(spec, num_outputs, task)
        if model.generative and task != "vqa":
            raise ValueError(f"model {spec.name!r} generates answers: it takes VQA data sets, "
                             f"not task {task!r}")
        check_build(spec, model)
        if spec.frozen_head:
            model.personal_prefixes = ()  # the projector joins the frozen base: never trained, never sent
        if spec.frozen_projection:  # only the answer head stays private: fewer parameters to train
            if model.generative or set(model.personal_prefixes) <= {"head"}:
                raise ValueError(f"projection = 'frozen' is not supported by model {spec.name!r}: it trains "
                                 "no projection apart from its answer head (a generator's projector: "
                                 "head = 'frozen'); use projection = 'trained'")
            model.personal_prefixes = tuple(p for p in model.personal_prefixes if p == "head")
        model.lora_targets = spec.lora_targets
        model.shared_head = spec.shared_head
        torch.manual_seed(spec.seed + 1)  # adapter init independent of the head's size
        apply_adapter(model, spec.adapter, spec.lora_rank, gated=spec.gated, num_blocks=spec.num_blocks,
                      seed=spec.seed)
    if large and adapter_of(spec.adapter).blocks:
        from tasks.mosaic.align import align_to_pivot

        pivot = build_model(ModelSpec(spec.name, spec.adapter, spec.lora_rank, spec.seed,
                                      num_blocks=spec.num_blocks, lora_targets=spec.lora_targets,
                                      shared_head=spec.shared_head), num_outputs, task)
        align_to_pivot(model, pivot, seed=spec.seed)
    model.eval()
    return model
