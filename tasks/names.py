"""Names `tasks` accepts, importable without building anything (no torch, transformers, PIL): the
run settings (`settings.config`) check them in every process, also in a deployed ClientApp that
only forwards messages to its site's worker. One tuple per kind; the modules that act on a name
import its tuple from here, so no list is kept equal to another.

The model and data set names are the keys of their registries (`tasks.models.registry`,
`tasks.data.registry`); `parse_name` reads a registry key's ``prefix:<argument>`` pattern.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Adapter:
    """One ``adapter`` of the registry: what a layer's trainable unit is, as every room asks it.

    ``low_rank``: factors of rank ``lora-rank`` beside frozen weights (not the layer's own weights);
    ``peft``: peft's LoRA modules, whose Linear targets ``lora-targets`` can narrow and whose
    products can run in the base's dtype from float32 masters (`tasks.train.MasterWeights`);
    ``blocks``: placed on ``num-blocks`` block layers, shared across model sizes by P and Q alone
    (FedMosaic's PQ-LoRA, `tasks.mosaic`), so only it mixes client sizes; ``per_example``: Opacus
    computes its per-example gradients (``dp = "sample"``)."""

    name: str
    low_rank: bool = True
    peft: bool = False
    blocks: bool = False
    per_example: bool = True


ADAPTER_REGISTRY: dict[str, Adapter] = {entry.name: entry for entry in (
    Adapter("lora", peft=True),
    Adapter("layer", low_rank=False),
    Adapter("pq-lora", blocks=True, per_example=False),
)}
ADAPTERS: tuple[str, ...] = tuple(ADAPTER_REGISTRY)
"""Run setting ``adapter`` (`tasks.adapters.apply_adapter`)."""


@dataclass(frozen=True)
class Head:
    """One ``head``: whether the answer head is shared state (aggregated with the adapters) or a
    generator's projector kept as loaded (neither trained nor sent); neither: each client's own."""

    name: str
    shared: bool = False
    frozen: bool = False


HEAD_REGISTRY: dict[str, Head] = {entry.name: entry for entry in (
    Head("private"), Head("shared", shared=True), Head("frozen", frozen=True))}
HEADS: tuple[str, ...] = tuple(HEAD_REGISTRY)
"""Run setting ``head``: what becomes of a model's answer head (`tasks.models.registry.ModelSpec`)."""


def adapter_of(name: str) -> Adapter:
    """The registry entry of ``adapter = name``; ValueError naming it and the choices if unknown."""
    if name not in ADAPTER_REGISTRY:
        raise ValueError(f"unknown adapter {name!r}; choose one of {', '.join(ADAPTERS)}")
    return ADAPTER_REGISTRY[name]


def head_of(name: str) -> Head:
    """The registry entry of ``head = name``; ValueError naming it and the choices if unknown."""
    if name not in HEAD_REGISTRY:
        raise ValueError(f"unknown head {name!r}; choose one of {', '.join(HEADS)}")
    return HEAD_REGISTRY[name]
VLM_LAYERS: tuple[str, ...] = ("language", "vision", "both")
"""Run setting ``vlm-layers``: a generator's selectable blocks (`tasks.models.generative`)."""
LNTK: str = "lntk"
"""The score of F3OCUS (paper §4.1): each layer's principal LNTK eigenvalue (`tasks.lntk`)."""
BASELINE_SCORERS: tuple[str, ...] = ("magnitude", "fishmask", "gradflow", "snip", "grasp", "synflow", "rgn")
"""The pruning scores of `tasks.scores` (one function each, of the same name); each is also a top-k
selection rule of that name (`methods.reference`)."""
NO_SCORE: str = "none"
"""The ``score`` of an evaluate message that asks a client for no layer scores this round."""
SCORE_MODES: tuple[str, ...] = ("loss", "logit", "paper")
"""Run setting ``score-mode``: the LNTK of a layer (`tasks.lntk.layer_scores`)."""
DTYPES: tuple[str, ...] = ("auto", "float32", "bfloat16", "float16")
"""Run setting ``dtype`` of a generative model's frozen weights (``auto``: bfloat16 on a CUDA device
that supports it, else float32); adapters are float32 whatever it is."""
MODEL_SIZES: tuple[str, ...] = ("base", "large")
"""FedMosaic's two client sizes of one family (run setting ``model-sizes``); a registry entry lists
the ones it builds (`tasks.models.registry.ModelEntry.sizes`)."""
CLIENT_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
"""A client id: a site's name (node config ``site``) or ``partition-<id>``; safe in a file name."""
DP_SAT_OUT: str = "dp-sat-out"
"""Train- or scores-reply metric (1) of a ``dp = "sample"`` site that sits a round out or withholds
its scores: one more release would pass its ``dp-epsilon`` (`privacy.sample`)."""


def parse_name(value: object, names: Iterable[str], kind: str, empty: bool = False) -> tuple[str, str]:
    """``(registry key, argument)`` of ``value`` among ``names``: a plain key matches itself (argument
    ""), a pattern key ``"<prefix><...>"`` (e.g. ``"hf:<local dir>"``) matches ``prefix`` followed by a
    non-empty argument (any argument with ``empty``, so that the entry's loader can say what is
    missing). ValueError ``unknown <kind> <value>; choose one of ...`` otherwise."""
    names = tuple(names)
    if isinstance(value, str):
        for name in names:
            prefix, pattern, _ = name.partition("<")
            if not pattern and value == name:
                return name, ""
            if pattern and value.startswith(prefix) and (empty or len(value) > len(prefix)):
                return name, value[len(prefix):]
    raise ValueError(f"unknown {kind} {value!r}; choose one of {', '.join(names)}")



def load_attr(target: str) -> Callable:
    """The object a registry names as ``"module:attr"``, its module imported here, on first use."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)
