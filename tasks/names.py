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

ADAPTERS: tuple[str, ...] = ("lora", "layer", "pq-lora")
"""Run setting ``adapter`` (`tasks.adapters.apply_adapter`)."""
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
