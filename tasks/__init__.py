"""F3OCUS client-side tasks: models with selectable layers, adapters, LNTK layer scores, local
training/evaluation, memory budgets and federated data partitions. No Flower here.

The public names below are imported on first use (PEP 562), so ``import tasks`` costs nothing: a
deployed ClientApp process that only forwards a message to its site's warm worker
(`client_app.worker`) never imports torch, transformers or peft.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the lazy names resolve to, for type checkers and readers
    from tasks.adapters import (
        ADAPTERS,
        freeze_except,
        get_layer_state,
        get_personal_state,
        layer_of_key,
        layer_parameter_names,
        set_layer_state,
        set_personal_state,
    )
    from tasks.budget import estimate_budget
    from tasks.data import (
        DATASETS,
        PARTITIONERS,
        Partition,
        Sample,
        load_partition,
        majority_accuracy,
    )
    from tasks.device import resolve_device
    from tasks.lntk import MODES, LayerScores, layer_scores
    from tasks.models import MODELS, FederatedVLM, build_model
    from tasks.scores import score_layers
    from tasks.train import evaluate, round_lr, train

_SOURCES = {
    "tasks.adapters": ("ADAPTERS", "freeze_except", "get_layer_state", "get_personal_state",
                       "layer_of_key", "layer_parameter_names", "set_layer_state", "set_personal_state"),
    "tasks.budget": ("estimate_budget",),
    "tasks.data": ("DATASETS", "PARTITIONERS", "Partition", "Sample", "load_partition",
                   "majority_accuracy"),
    "tasks.device": ("resolve_device",),
    "tasks.lntk": ("MODES", "LayerScores", "layer_scores"),
    "tasks.models": ("MODELS", "FederatedVLM", "build_model"),
    "tasks.scores": ("score_layers",),
    "tasks.train": ("evaluate", "round_lr", "train"),
}
_WHERE = {name: module for module, names in _SOURCES.items() for name in names}

__all__ = [
    "ADAPTERS",
    "DATASETS",
    "MODELS",
    "MODES",
    "PARTITIONERS",
    "FederatedVLM",
    "LayerScores",
    "Partition",
    "Sample",
    "build_model",
    "estimate_budget",
    "evaluate",
    "freeze_except",
    "get_layer_state",
    "get_personal_state",
    "layer_of_key",
    "layer_parameter_names",
    "layer_scores",
    "load_partition",
    "majority_accuracy",
    "resolve_device",
    "round_lr",
    "score_layers",
    "set_layer_state",
    "set_personal_state",
    "train",
]


class _LazyPackage(types.ModuleType):
    """The package module: public names load on first access and then stay bound."""

    def __getattr__(self, name: str) -> object:
        if name not in _WHERE:
            raise AttributeError(f"module 'tasks' has no attribute {name!r}")
        value = getattr(importlib.import_module(_WHERE[name]), name)
        self.__dict__[name] = value
        return value

    def __setattr__(self, name: str, value: object) -> None:
        # importing the submodule `tasks.train` binds it as the package's `train` attribute;
        # `tasks.train` is the training function (as with the former eager imports)
        if name in _WHERE and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(_WHERE))


sys.modules[__name__].__class__ = _LazyPackage
