"""F3OCUS client-side tasks: models with selectable layers, adapters, LNTK layer scores, local
training/evaluation, memory budgets and federated data partitions. No Flower here."""

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
from tasks.train import evaluate, round_lr, train

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
    "set_layer_state",
    "set_personal_state",
    "train",
]
