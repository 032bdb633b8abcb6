"""Every model setting acts or is refused : `check_model_settings`.

A run-config key that a model (or the chosen adapter) would ignore stops the run before round 1
with one line ``<key> = <value> is not supported by model <name>: <why>; use ...`` instead of being
dropped. `tasks.build.build_model` runs `check_build` on every build; the server's `plan_run` runs
`check_model_settings` on the run's model section after building the model, so a ConfigError names
the key before round 1.
"""

from __future__ import annotations

from torch import nn

from tasks.models.base import FederatedVLM, is_under
from tasks.models.registry import LORA_RANK, NUM_BLOCKS, ModelSpec
from tasks.names import adapter_of

_WRAPPERS = ("base_layer", "base")  # peft LoRA / FedMosaic modules keep the adapted Linear under these


def linear_names(model: FederatedVLM) -> list[str]:
    """The module names (last name part) ``lora-targets`` can name: Linear / groups=1 Conv2d modules
    of the selectable layers, seen through the adapter wrappers that replaced them."""
    prefixes = [p for layer in model.layer_prefixes for p in layer]
    names = set()
    for name, module in model.named_modules():
        if not is_under(name, prefixes) or ".lora_" in name:
            continue
        if isinstance(module, nn.Linear) or (isinstance(module, nn.Conv2d) and module.groups == 1):
            parent, _, leaf = name.rpartition(".")
            names.add(parent.rpartition(".")[2] if leaf in _WRAPPERS else leaf)
    return sorted(names)


def check_model_settings(spec: ModelSpec, model: FederatedVLM, score_mode: str = "loss") -> None:
    """Refuse a setting of ``spec`` that ``model`` cannot honour instead of dropping it, one line each.
    ``spec`` is the run's model section as a client builds it (its ``dtype`` resolved for the
    device); ``score_mode`` is the scoring section's LNTK mode.

    * ``quantization``, ``head``: `check_build`;
    * ``score-mode = "logit"``: a generator's logits are (n, T, vocabulary), the "logit" NTK of
      Eq. 8 (`tasks.lntk`) takes one row per class of an (n, C) head;
    * ``vlm-layers``, ``max-new-tokens``, ``dtype``, ``gradient-checkpointing``: only generators
      (`GenerativeVLM`) split vision / language blocks, generate, cast the frozen base and
      recompute activations; an encoder + head keeps float32 weights and its own forward;
    * ``lora-targets``: every name must match a Linear of the selectable layers (a partial match
      silently adapted fewer modules), and only adapter = "lora" without SIMA's gate honours it
      (`tasks.mosaic.attach` adapts every Linear);
    * ``num-blocks`` places PQ-LoRA only; ``lora-rank`` has no meaning for adapter = "layer"."""
    check_build(spec, model)
    name = spec.name
    generative = model.generative
    if score_mode == "logit" and generative:
        raise ValueError(f"score-mode = 'logit' is not supported by model {name!r}: a generator's logits are "
                         "per token over its vocabulary; use score-mode = 'loss' or 'paper'")
    if not generative:
        encoder = f"is not supported by model {name!r}: an encoder + answer head"
        if spec.vlm_layers != "language":
            raise ValueError(f"vlm-layers = {spec.vlm_layers!r} {encoder}'s selectable layers are its "
                             "blocks, with no vision/language choice; use vlm-layers = 'language'")
        if spec.max_new_tokens != 0:
            raise ValueError(f"max-new-tokens = {spec.max_new_tokens!r} {encoder} generates no tokens; "
                             "use max-new-tokens = 0")
        if spec.dtype not in ("auto", "float32"):
            raise ValueError(f"dtype = {spec.dtype!r} {encoder} keeps float32 weights; use dtype = 'auto' "
                             "or 'float32'")
        if spec.gradient_checkpointing:
            raise ValueError(f"gradient-checkpointing = True {encoder} runs its own forward without "
                             "recomputation; use gradient-checkpointing = false")
    _check_adapter_settings(name, model, spec.adapter, spec.lora_targets, spec.num_blocks, spec.lora_rank)


def check_build(spec: ModelSpec, model: FederatedVLM) -> None:
    """What every build of ``spec`` refuses (`tasks.build.build_model`), one line each:

    * ``quantization``: only a generator loaded from a checkpoint (an image-text-to-text
      ``hf:<dir>``, `tasks.models.generative`) loads a 4-bit base, and a 4-bit base cannot be
      trained as adapter = "layer";
    * ``head = "shared"``: a generator answers with its language head, it has no answer head;
      ``head = "frozen"``: only a generator's projector can stay as loaded, a drawn head must train."""
    name, quantization = spec.name, spec.quantization
    if quantization != "none" and not adapter_of(spec.adapter).low_rank:
        raise ValueError(f"quantization = {quantization!r} is not supported by model {name!r} with adapter = "
                         "'layer': 4-bit weights cannot be trained; use adapter = 'lora' or "
                         "quantization = 'none'")
    if quantization != "none" and not (spec.entry.checkpoint and model.generative):
        raise ValueError(f"quantization = {quantization!r} is not supported by model {name!r}: only "
                         "image-text-to-text hf:<dir> checkpoints load a 4-bit base; "
                         "use quantization = 'none'")
    if spec.shared_head and not model.personal_prefixes:  # smol-llava's projector is its head
        raise ValueError(f"head = 'shared' is not supported by model {name!r}: a generator has no answer "
                         "head to share; use head = 'private'")
    if spec.frozen_head and not model.generative:
        raise ValueError(f"head = 'frozen' is not supported by model {name!r}: its answer head is drawn at "
                         "random and must train; use head = 'private' or 'shared'")


def _check_adapter_settings(name: str, model: FederatedVLM, adapter: str, lora_targets: tuple[str, ...],
                            num_blocks: int, lora_rank: int) -> None:
    targets, entry = ",".join(lora_targets), adapter_of(adapter)
    if lora_targets and (not entry.peft or model.gated):
        why = "SIMA's gated modules" if entry.peft else f"adapter = {adapter!r}"
        raise ValueError(f"lora-targets = {targets!r} is not supported by model {name!r} with {why}: it "
                         "adapts every Linear of the selectable layers; use lora-targets = ''")
    known = linear_names(model)
    unknown = [t for t in lora_targets if t not in known]
    if unknown:
        raise ValueError(f"lora-targets = {targets!r} is not supported by model {name!r}: no Linear named "
                         f"{', '.join(unknown)} in its selectable layers; use names among {', '.join(known)}")
    if num_blocks != NUM_BLOCKS and not entry.blocks:
        raise ValueError(f"num-blocks = {num_blocks!r} is not supported by model {name!r} with adapter = "
                         f"{adapter!r}: only pq-lora places blocks (FedMosaic Eq. 7); use num-blocks = "
                         f"{NUM_BLOCKS}")
    if lora_rank != LORA_RANK and not entry.low_rank:
        raise ValueError(f"lora-rank = {lora_rank!r} is not supported by model {name!r} with adapter = "
                         f"'layer': it trains the layers' own weights; use lora-rank = {LORA_RANK}")
