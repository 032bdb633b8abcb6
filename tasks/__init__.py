"""F3OCUS client-side tasks: models with selectable layers, adapters, LNTK layer scores, local
training/evaluation, memory budgets and federated data partitions. No Flower here.

The public names below are imported on first use (`lazy_loader`, SPEC 1), so ``import tasks``
costs nothing: a deployed ClientApp process that only forwards a message to its site's warm worker
(`client_app.worker`) never imports torch, transformers or peft.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs={
    "adapters": ["ADAPTERS", "freeze_except", "get_layer_state", "get_personal_state", "layer_of_key",
                 "layer_parameter_names", "personal_parameter_names", "set_layer_state",
                 "set_personal_state"],
    "budget": ["estimate_budget"],
    "build": ["build_model"],
    "data": ["DATASETS", "PARTITIONERS", "Partition", "Sample", "load_partition", "majority_accuracy"],
    "device": ["resolve_device"],
    "lntk": ["LayerScores", "layer_scores"],
    "models": ["MODELS", "FederatedVLM", "ModelSpec"],
    "names": ["SCORE_MODES"],
    "scores": ["score_layers"],
    "train": ["evaluate", "round_lr", "train"],  # `tasks.train`: the function (lazy_loader's guard)
})
