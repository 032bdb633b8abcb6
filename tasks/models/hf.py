"""Hugging Face transformers backbones: `tiny-vilt` and `hf:<local dir>`.

* `tiny-vilt`: `transformers.ViltModel` from a small `ViltConfig` (random weights, seeded by
  build_model) for fast tests; its text goes through the MiniLM (BERT-uncased) tokenizer.
* `hf:<dir>`: any checkpoint on local disk that `AutoModel.from_pretrained` loads. Selectable layers
  are discovered as the longest `nn.ModuleList` whose children are all of one class (the repeated
  transformer blocks); a ValueError says so when there is none.
  - ViLT checkpoints (model_type "vilt") run split (embeddings outside, blocks inside) exactly as
    `ViltModel.forward` does, so LNTK scoring can vmap over samples.
  - Any other checkpoint runs its own forward with the inputs it accepts (`input_ids`,
    `attention_mask`, `pixel_values`) and is pooled from `pooler_output`, else the mean of
    `last_hidden_state` (tested with a tiny GIT checkpoint). Where a forward builds masks with
    data-dependent checks that vmap cannot trace, LNTK scoring falls back to a per-sample loop
    (tasks/lntk.py).
  The tokenizer is the checkpoint's own when it ships one, else the MiniLM BERT-uncased tokenizer.
  Images are normalised with `preprocessor_config.json`'s image_mean/std when present, else 0.5/0.5
  (ViLT's), and resized to the config's image_size (vision_config.image_size for composite models).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel, ViltConfig, ViltModel

from tasks.models.base import FederatedVLM, additive_mask, find_blocks, images_to_tensor
from tasks.models.hf_common import minilm_tokenizer, quiet_transformers, tokenize
from tasks.models.skeleton import skeleton

if TYPE_CHECKING:
    from tasks.data import Sample
    from tasks.models.registry import ModelSpec

TINY_VILT = {
    "hidden_size": 32,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "image_size": 32,
    "patch_size": 8,
    "max_position_embeddings": 40,
    "vocab_size": 30522,  # BERT uncased, the MiniLM tokenizer's vocabulary
}
GENERIC_TEXT_TOKENS = 32  # fixed question length for GenericHFVLM
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt")


TINY_VILT_LARGE = {"hidden_size": 48, "intermediate_size": 96}  # model-size "large": wider, same depth


def tiny_vilt_config(large: bool = False) -> ViltConfig:
    return ViltConfig(**{**TINY_VILT, **(TINY_VILT_LARGE if large else {})})


class HFVLM(FederatedVLM):
    """A transformers backbone; the subclass picks how the forward pass is split."""

    def __init__(
        self, backbone: PreTrainedModel, num_outputs: int, task: str, tokenizer, source: Path | None
    ) -> None:
        super().__init__(num_outputs, task, _hidden_size(backbone.config))
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.image_size = _image_size(backbone.config)
        self.max_text_tokens = min(
            getattr(_text_config(backbone.config), "max_position_embeddings", 512), 512
        )
        self.image_mean, self.image_std = _image_norm(source)
        path = find_blocks(backbone)
        blocks = backbone.get_submodule(path)
        self.blocks_path = f"backbone.{path}"
        self.layer_names = [f"{self.blocks_path}.{i}" for i in range(len(blocks))]
        self.layer_prefixes = [(name,) for name in self.layer_names]

    fixed_text_length = False  # pad questions to max_text_tokens instead of the batch's longest

    def encode_inputs(self, samples: Sequence[Sample]) -> dict[str, torch.Tensor]:
        batch = tokenize(self.tokenizer, samples, self.max_text_tokens, self.fixed_text_length)
        batch["pixel_values"] = images_to_tensor(samples, self.image_size, self.image_mean, self.image_std)
        return batch


class ViltVLM(HFVLM):
    """ViLT: patch + text embeddings in `embed`, encoder blocks, final LayerNorm and pooler after."""

    def embed(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        vilt = self.backbone
        pixels = batch["pixel_values"].to(self.device, self.dtype)
        pixel_mask = torch.ones(pixels.shape[0], *pixels.shape[-2:], dtype=torch.long, device=pixels.device)
        image_embeds, image_mask, _ = vilt.embeddings.visual_embed(
            pixels, pixel_mask, max_image_length=vilt.config.max_image_length
        )
        hidden, mask = vilt.embeddings(
            batch["input_ids"].to(self.device),
            batch["attention_mask"].to(self.device),
            None,
            None,
            image_mask,
            None,
            image_embeds,
        )
        return {"hidden": hidden, "mask": mask}

    def features(self, emb: dict[str, torch.Tensor]) -> torch.Tensor:
        vilt = self.backbone
        h = emb["hidden"]
        bias = additive_mask(emb["mask"], h.dtype)
        for layer in vilt.encoder.layer:
            h = layer(h, bias)[0]
        h = vilt.layernorm(h)
        return vilt.pooler(h) if vilt.pooler is not None else h[:, 0]


class GenericHFVLM(HFVLM):
    """Any other checkpoint: its own forward (inputs it accepts), pooled output -> head.

    The token layout of an unknown model is not known, so the mean pooling cannot mask padding;
    questions are therefore always padded to GENERIC_TEXT_TOKENS, which makes each sample's
    output independent of the other samples in its batch (needed for exact per-sample LNTK).
    """

    fixed_text_length = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.max_text_tokens = min(self.max_text_tokens, GENERIC_TEXT_TOKENS)
        accepted = inspect.signature(self.backbone.forward).parameters
        self.input_names = tuple(k for k in ("input_ids", "attention_mask", "pixel_values") if k in accepted)

    def embed(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = {k: batch[k].to(self.device) for k in self.input_names}
        if "pixel_values" in out:
            out["pixel_values"] = out["pixel_values"].to(self.dtype)
        return out

    def features(self, emb: dict[str, torch.Tensor]) -> torch.Tensor:
        out = self.backbone(**emb)
        pooled = getattr(out, "pooler_output", None)
        if pooled is not None:
            return pooled
        hidden = getattr(out, "last_hidden_state", None)
        if hidden is None:
            raise ValueError(
                f"{type(self.backbone).__name__} returns neither pooler_output nor last_hidden_state"
            )
        return hidden.mean(1)


def build_tiny_vilt(spec: ModelSpec, num_outputs: int, task: str) -> ViltVLM:
    """Registry builder of ``tiny-vilt`` (random weights from the caller's seed; ``large``: 48 wide)."""
    return ViltVLM(ViltModel(tiny_vilt_config(spec.size == "large")), num_outputs, task, minilm_tokenizer(),
                   None)


def build_hf(spec: ModelSpec, num_outputs: int, task: str) -> FederatedVLM:
    """Registry builder of ``hf:<dir>``: the checkpoint in the folder ``spec.argument``, a generator
    (`tasks.models.generative`, with the spec's generative settings) if its architecture is
    image-text-to-text, else an encoder + head.

    ``spec.base_weights=False`` is the coordinator's build: the backbone comes from
    ``config.json`` alone (`tasks.models.skeleton`), no weight file, tokenizer or processor is read, so only
    the adapters and the head injected afterwards hold memory."""
    directory = spec.argument
    path = Path(directory).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"hf model directory not found: {directory!r}")
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"hf model directory {directory!r} has no config.json")
    from tasks.models.generative import build_generative, generative_architecture

    config = AutoConfig.from_pretrained(str(path))
    architecture = generative_architecture(config)
    if architecture is not None:
        return build_generative(path, architecture, spec)
    if not spec.base_weights:
        return (ViltVLM if config.model_type == "vilt" else GenericHFVLM)(
            skeleton(AutoModel, config), num_outputs, task, None, path)
    with quiet_transformers():
        backbone = AutoModel.from_pretrained(str(path))
    if any((path / f).is_file() for f in _TOKENIZER_FILES):
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    else:
        tokenizer = minilm_tokenizer()
    vocab = getattr(_text_config(backbone.config), "vocab_size", None)
    if vocab is not None and len(tokenizer) > vocab:
        raise ValueError(
            f"hf model {directory!r} has vocab_size {vocab} but its tokenizer has {len(tokenizer)} "
            "tokens; save a matching tokenizer in the directory"
        )
    cls = ViltVLM if backbone.config.model_type == "vilt" else GenericHFVLM
    return cls(backbone, num_outputs, task, tokenizer, path)


def _text_config(config):
    return getattr(config, "text_config", None) or config


def _hidden_size(config) -> int:
    size = getattr(config, "hidden_size", None) or getattr(_text_config(config), "hidden_size", None)
    if not isinstance(size, int):
        raise ValueError(f"cannot read hidden_size from the {config.model_type!r} config")
    return size


def _image_size(config) -> int:
    vision = getattr(config, "vision_config", None) or config
    size = getattr(vision, "image_size", None)
    if isinstance(size, (list, tuple)):
        size = size[0]
    return int(size) if size else 224


def _image_norm(source: Path | None) -> tuple[list[float], list[float]]:
    if source is not None and (source / "preprocessor_config.json").is_file():
        cfg = json.loads((source / "preprocessor_config.json").read_text())
        if "image_mean" in cfg and "image_std" in cfg:
            return list(cfg["image_mean"]), list(cfg["image_std"])
    return [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]
