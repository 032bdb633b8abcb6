"""Generative vision-language models: image-text-to-text checkpoints fine-tuned as generators.

The F3OCUS paper fine-tunes LLaVA-1.5-7B and BLIP-2 (§6, supplement Table 1) and FedMosaic
LLaVA-style models; a site brings such a checkpoint from its own disk as ``hf:<dir>``. A folder
whose ``config.json`` names an architecture that `transformers.AutoModelForImageTextToText` maps
(LLaVA, Idefics3/SmolVLM, BLIP-2, PaliGemma, Gemma 3, Qwen2-VL, ...) runs as a `GenerativeVLM`:

* inputs come from the checkpoint's own processor: its chat template turns the question and the
  image into the prompt (checkpoints without one, e.g. BLIP-2, get BLIP-2's VQA prompt
  ``"Question: {q} Answer:"``); the answer's tokens and the stop token follow the prompt, and the
  labels are -100 everywhere else, so the loss is the cross-entropy of the answer tokens only. The
  stop token is the chat template's turn-end token (found by rendering an assistant turn, e.g.
  Idefics3's ``<end_of_utterance>``), else EOS, so training teaches the token generation stops on;
  the answer's tokens are those that prompt + answer add to the prompt, so a SentencePiece
  tokenizer adds no stray "▁" token. The answer's token types are those of text after the prompt
  (`ANSWER_TOKEN_TYPE`: PaliGemma's causal suffix 1, not its bidirectional prefix 0);
* evaluation generates greedily by construction (an explicit `GenerationConfig` with
  ``num_beams=1``, ``do_sample=False`` and neutral penalties, so the checkpoint's
  ``generation_config`` cannot switch on sampling, beams or penalties; ``max-new-tokens``, default
  the longest answer of the data set in tokens, plus the stop token) and scores normalised exact
  match (lower case, punctuation and the articles a/an/the removed, as VQA accuracy normalises
  answers), overall and per question type;
* there is no private head: every trained array is an adapter and is aggregated, so
  ``strategy = "none"`` trains nothing and evaluates the checkpoint zero-shot;
* selectable layers (``vlm-layers``): the language model's decoder blocks (``language``,
  default), the vision tower's blocks plus the multimodal projector (``vision``), or all of them
  in forward order (``both``). LoRA goes on the Linear modules of the chosen blocks, i.e. their
  attention and MLP projections (``lora-targets`` keeps only the named ones). BLIP-2's Q-Former
  (Li et al. 2023, §3: the trainable bridge between the frozen image encoder and the frozen LLM)
  sits in forward order between the vision blocks and ``language_projection``, so ``vision`` and
  ``both`` select its blocks too (LoRA on its self- and cross-attention and feed-forward Linears);
  ``language``, the default, adapts the LLM's decoder blocks as F3OCUS fine-tunes the LLM layers
  (§6, supplement Table 1). A projector without Linear modules (Gemma 3's bare
  ``mm_input_projection_weight``) has nothing for LoRA to adapt and is not a selectable layer, so
  no budget is spent on a layer that trains nothing.

`embed` hands the processor's tensors through and `forward_embedded` runs the whole model to
token logits, so training, LNTK scoring (per-sample answer-token losses, tasks/lntk.py) and the
layer budget run the same code as for the classifiers. Padding is on the right for training and
scoring (each sample's tokens then never see another sample's) and on the left for generation.
"""

from __future__ import annotations

import inspect
import re
import string
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tasks.models.base import FederatedVLM, find_blocks
from tasks.names import VLM_LAYERS

if TYPE_CHECKING:
    from tasks.data import Sample
    from tasks.models.registry import ModelSpec

IGNORE = -100  # label of every token that is not part of an answer
# Token type of the answer where a processor gives token types: PaliGemma's suffix type 1 keeps the
# answer out of its bidirectional prefix (type 0: image + prompt), which would let an answer token
# see later ones; elsewhere text is type 0 (Gemma 3 marks its image tokens 1, attended bidirectionally).
ANSWER_TOKEN_TYPE = {"paligemma": 1}
PROJECTORS = ("multi_modal_projector", "connector", "language_projection", "mm_projector", "merger")
VISION_TOWERS = ("vision_tower", "vision_model", "visual", "vision_encoder")
BRIDGES = ("qformer",)
"""Blocks between the vision tower and the projector (BLIP-2's Q-Former): selectable after the
vision blocks under vlm-layers vision/both, in forward order."""
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """VQA-style answer normalisation: lower case, no punctuation or articles, single spaces."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def generative_architecture(config) -> str | None:
    """The config's architecture if `AutoModelForImageTextToText` maps it (a generator), else None
    (encoders such as ``GitModel`` keep the classifier path of `tasks.models.hf`)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    known = {n for v in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.values()
             for n in (v if isinstance(v, tuple) else (v,))}
    return next((a for a in getattr(config, "architectures", None) or () if a in known), None)


def _blocks_under(root: nn.Module, prefix: str) -> list[str]:
    path = find_blocks(root)
    return [f"{prefix}.{path}.{i}" for i in range(len(root.get_submodule(path)))]


def _first_named(model: nn.Module, names: Sequence[str]) -> tuple[str, nn.Module] | None:
    """The first module (in registration order) whose own name is one of ``names``."""
    return next(((n, m) for n, m in model.named_modules() if n.rpartition(".")[2] in names), None)


class GenerativeVLM(FederatedVLM):
    """An image-text-to-text model with its processor; see the module doc."""

    generative = True

    def __init__(self, backbone: nn.Module, processor, vlm_layers: str = "language",
                 max_new_tokens: int = 0) -> None:
        refuse_encoder_decoder(backbone)
        if vlm_layers not in VLM_LAYERS:
            raise ValueError(f"vlm-layers {vlm_layers!r} is unknown; choose one of {', '.join(VLM_LAYERS)}")
        super().__init__(1, "vqa", 1, head=False)
        self.backbone = backbone
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.max_new_tokens = max_new_tokens
        self.has_template = bool(getattr(processor, "chat_template", None))
        language = backbone.get_decoder() if hasattr(backbone, "get_decoder") else None
        if language is None:
            raise ValueError(f"{type(backbone).__name__} exposes no language model (get_decoder)")
        names = {id(m): n for n, m in backbone.named_modules()}
        layers = _blocks_under(language, f"backbone.{names[id(language)]}".rstrip("."))
        if vlm_layers != "language":
            vision = _first_named(backbone, VISION_TOWERS)
            if vision is None:
                raise ValueError(f"vlm-layers {vlm_layers!r}: {type(backbone).__name__} has no vision "
                                 f"tower named one of {', '.join(VISION_TOWERS)}")
            projector = _first_named(backbone, PROJECTORS)
            bridge = _first_named(backbone, BRIDGES)
            front = _blocks_under(vision[1], f"backbone.{vision[0]}")
            front += _blocks_under(bridge[1], f"backbone.{bridge[0]}") if bridge is not None else []
            if projector is not None and any(isinstance(m, nn.Linear) for m in projector[1].modules()):
                front.append(f"backbone.{projector[0]}")  # Gemma 3's bare projection weight has no Linear
            layers = front + (layers if vlm_layers == "both" else [])
        self.layer_names = layers
        self.layer_prefixes = [(name,) for name in layers]

    # -- inputs ---------------------------------------------------------------------------------
    def prompt(self, question: str) -> str:
        """The checkpoint's chat-template prompt for an image and a question (or BLIP-2's)."""
        if not self.has_template:
            return f"Question: {question} Answer:"
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
        return self.processor.apply_chat_template(messages, add_generation_prompt=True)

    def _tokens(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def answer_ids(self, answer: str) -> list[int]:
        """The tokens that ``" " + answer`` adds after a prompt, then the stop token.

        Tokenised together with a prompt and taken as the difference, so a SentencePiece tokenizer
        (whose lone ``" yes"`` would start with a stray "▁") gives the answer's tokens in context."""
        text, anchor = self._anchor
        ids = self._tokens(text + " " + answer)
        if ids[:len(anchor)] != anchor:  # a merge across the boundary: tokenise the answer alone
            return [*self._tokens(" " + answer), self.stop_ids[0]]
        return [*ids[len(anchor):], self.stop_ids[0]]

    @cached_property
    def _anchor(self) -> tuple[str, list[int]]:
        """A prompt and its tokens, the context `answer_ids` tokenises answers in."""
        return self.prompt(""), self._tokens(self.prompt(""))

    @cached_property
    def stop_ids(self) -> list[int]:
        """The tokens generation stops on: the chat template's turn-end token (the first special token
        that the template writes after an assistant message), then EOS. Training ends answers with
        the first of them."""
        eos = self.tokenizer.eos_token_id
        if not self.has_template:
            return [eos]
        messages = [{"role": "user", "content": [{"type": "text", "text": "q"}]},
                    {"role": "assistant", "content": [{"type": "text", "text": "\x00"}]}]
        tail = self.processor.apply_chat_template(messages).split("\x00", 1)[-1]
        special = set(self.tokenizer.all_special_ids)
        end = next((t for t in self._tokens(tail) if t in special), eos)
        return list(dict.fromkeys((end, eos)))

    def answer_of(self, sample: Sample) -> str:
        if not self.answers:
            raise ValueError("a generative model needs the data set's answers (model.answers) to train "
                             "or evaluate")
        return self.answers[int(sample.target)]

    @contextmanager
    def _padding(self, side: str):
        before, self.tokenizer.padding_side = self.tokenizer.padding_side, side
        try:
            yield
        finally:
            self.tokenizer.padding_side = before

    def _process(self, samples: Sequence[Sample], side: str) -> dict[str, torch.Tensor]:
        from PIL import Image

        for s in samples:
            if np.asarray(s.image).ndim != 3 or np.asarray(s.image).shape[2] != 3:
                raise ValueError(f"sample image must be an (H, W, 3) uint8 array, got {np.shape(s.image)}")
        images = [[Image.fromarray(np.asarray(s.image))] for s in samples]  # one list per prompt
        with self._padding(side):
            return dict(self.processor(images=images, text=[self.prompt(s.question) for s in samples],
                                       return_tensors="pt", padding=True))

    def collate(self, samples: Sequence[Sample]) -> dict[str, torch.Tensor]:
        """Prompt tokens (from the processor), then each answer's tokens and the stop token,
        right-padded; ``labels`` are the answer tokens and -100 elsewhere; ``token_type_ids`` (where
        the processor gives them) are `ANSWER_TOKEN_TYPE` after the prompt."""
        if len(samples) == 0:
            raise ValueError("samples is empty: need at least one Sample to build a batch")
        batch = self._process(samples, "right")
        ids, mask = batch["input_ids"], batch["attention_mask"]
        answers = [self.answer_ids(self.answer_of(s)) for s in samples]
        lengths = mask.sum(1).tolist()
        width = max(n + len(a) for n, a in zip(lengths, answers, strict=True))
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        per_token = [k for k, v in batch.items() if v.shape == ids.shape]
        out = {k: torch.zeros(len(samples), width, dtype=batch[k].dtype) for k in per_token}
        out["input_ids"].fill_(pad)
        labels = torch.full((len(samples), width), IGNORE, dtype=torch.long)
        for i, (n, answer) in enumerate(zip(lengths, answers, strict=True)):
            tail = torch.tensor(answer, dtype=torch.long)
            for key in per_token:
                out[key][i, :n] = batch[key][i, :n]
            out["input_ids"][i, n:n + len(answer)] = tail
            out["attention_mask"][i, :n + len(answer)] = 1
            if "token_type_ids" in out:
                out["token_type_ids"][i, n:] = ANSWER_TOKEN_TYPE.get(self.backbone.config.model_type, 0)
            labels[i, n:n + len(answer)] = tail
        return {**batch, **out, "labels": labels}

    # -- forward --------------------------------------------------------------------------------
    def embed(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The processor's tensors on the model's device (pixels in its dtype), and ``first``:
        each sample's position that predicts its answer's first token."""
        out = {k: v.to(self.device) for k, v in batch.items() if k != "labels"}
        if "pixel_values" in out and out["pixel_values"].is_floating_point():
            out["pixel_values"] = out["pixel_values"].to(self.dtype)
        if "labels" in batch:
            out["first"] = ((batch["labels"] != IGNORE).int().argmax(1) - 1).to(self.device)
        return out

    def _run(self, emb: dict[str, torch.Tensor], **options):
        return self.backbone(**{k: v for k, v in emb.items() if k != "first"}, use_cache=False, **options)

    def forward_embedded(self, emb: dict[str, torch.Tensor]) -> torch.Tensor:
        """Token logits (B, T, V)."""
        return self._run(emb).logits

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of the answer tokens (next-token prediction; -100 labels ignored)."""
        return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(),
                               ignore_index=IGNORE)

    def sample_losses(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """(B,): each example's mean cross-entropy over its own answer tokens. `loss` averages over
        all answer tokens of the batch, which weights an example by its share of the batch's
        tokens, so the per-example gradients of DP-SGD (`privacy.mechanisms`) use this instead."""
        token = F.cross_entropy(logits[:, :-1].transpose(1, 2).float(), labels[:, 1:], ignore_index=IGNORE,
                                reduction="none")
        counted = (labels[:, 1:] != IGNORE).sum(1).clamp(min=1)
        return token.sum(1) / counted

    def features(self, emb: dict[str, torch.Tensor]) -> torch.Tensor:
        """(B, d): the last hidden state at the position that predicts the answer's first token
        (FedMosaic's last-layer features, `methods.sima.tracker`)."""
        hidden = self._run(emb, output_hidden_states=True).hidden_states[-1]
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), emb["first"]]

    # -- generation -----------------------------------------------------------------------------
    def new_tokens(self) -> int:
        """``max-new-tokens``, else the longest answer of the data set in tokens (with the stop token)."""
        if self.max_new_tokens:
            return self.max_new_tokens
        return max(len(self.answer_ids(a)) for a in self.answers) if self.answers else 16

    @torch.no_grad()
    def generate_answers(self, samples: Sequence[Sample]) -> list[str]:
        """Greedy answers to the samples' questions (left-padded prompts); see the module doc."""
        from transformers import GenerationConfig

        batch = {k: v.to(self.device) for k, v in self._process(samples, "left").items()}
        if "pixel_values" in batch:
            batch["pixel_values"] = batch["pixel_values"].to(self.dtype)
        greedy = GenerationConfig(max_new_tokens=self.new_tokens(), min_new_tokens=0, do_sample=False,
                                  num_beams=1, repetition_penalty=1.0, no_repeat_ngram_size=0,
                                  length_penalty=1.0, eos_token_id=self.stop_ids,
                                  pad_token_id=self.tokenizer.pad_token_id)
        out = self.backbone.generate(**batch, generation_config=greedy)
        return self.tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)

    @torch.no_grad()
    def answer_scores(self, samples: Sequence[Sample]) -> torch.Tensor:
        """(B, A) float32: the log-likelihood of each answer of the data set's vocabulary
        (``self.answers``) after each sample's prompt, summed over the answer's tokens (not the
        stop token: the closed-set score of lm-evaluation-harness's multiple choice).

        One forward pass scores every answer: each sample's row is its prompt followed by one
        answer of several tokens (the first such answer; the shortest answer when all are one
        token), so the logits where the prompt ends give every answer's first token and the row's
        own answer its later tokens. A vocabulary with M answers of several tokens takes M rows a
        sample. Rows share the template's opening tokens (system turn, user header): they run once
        (`_shared_prefix`) and the rows continue from their cache."""
        if not self.answers:
            raise ValueError("closed-set scoring needs the data set's answers (model.answers)")
        tokens = [self.answer_ids(a)[:-1] for a in self.answers]  # without the stop token
        longer = [k for k, t in enumerate(tokens) if len(t) > 1] or [int(np.argmin([len(t) for t in tokens]))]
        firsts = torch.tensor([t[0] for t in tokens], device=self.device)
        rows = [replace(s, target=k) for s in samples for k in longer]
        batch = self.embed(self.collate(rows))
        first = batch.pop("first")  # the position that predicts each row's first answer token
        offset, logits = self._forward_with_prefix(batch, first, max(len(tokens[k]) for k in longer))
        logp = logits.float().log_softmax(-1)
        start = first - offset
        ar = torch.arange(len(rows), device=self.device)
        scores = logp[ar, start][:, firsts].view(len(samples), len(longer), -1)[:, 0].clone()
        for j, k in enumerate(longer):
            own = ar.view(len(samples), len(longer))[:, j]
            total = torch.zeros(len(samples), device=self.device)
            for i, token in enumerate(tokens[k]):
                total += logp[own, start[own] + i, token]
            scores[:, k] = total
        return scores.cpu()

    def _forward_with_prefix(self, emb: dict[str, torch.Tensor], first: torch.Tensor, width: int
                             ) -> tuple[int, torch.Tensor]:
        """``(P, logits)``: logits from position P on, of the rows whose answers start at ``first``
        and are at most ``width`` tokens long. The first P tokens (`_shared_prefix`) run once through
        the language model and are repeated from its cache (P = 0 runs the rows whole); where the
        model's forward takes ``logits_to_keep``, the output layer runs only from the earliest
        answer start on (it is a large share of a short row's cost), and P counts the skipped
        positions too."""
        size = self._shared_prefix(emb, first)
        keep: dict[str, torch.Tensor] = {}
        low = int(first.min()) - size
        if "logits_to_keep" in inspect.signature(self.backbone.forward).parameters:
            keep["logits_to_keep"] = torch.arange(low, low + int(first.max() - first.min()) + width,
                                                  device=self.device)
        else:
            low = 0
        if size == 0:
            return low, self.backbone(**{k: v for k, v in emb.items() if k != "first"}, use_cache=False,
                                      **keep).logits
        ids = emb["input_ids"]
        language = self.backbone.get_decoder()
        keyword = _cache_keyword(self.backbone)
        cache = getattr(language(input_ids=ids[:1, :size], use_cache=True), keyword)
        cache.batch_repeat_interleave(ids.shape[0])
        rest = {k: (v[:, size:] if k == "input_ids" else v) for k, v in emb.items() if k != "first"}
        rest[keyword] = cache
        return size + low, self.backbone(**rest, use_cache=True, **keep).logits

    def _shared_prefix(self, emb: dict[str, torch.Tensor], first: torch.Tensor) -> int:
        """How many leading tokens every row shares before its image and question (0 where the
        inputs carry more than token ids, mask and pixels: positions or token types of their own)."""
        if set(emb) - {"input_ids", "attention_mask", "pixel_values", "first"}:
            return 0
        ids, mask = emb["input_ids"], emb["attention_mask"]
        image = getattr(self.backbone.config, "image_token_id", None)
        same = (ids == ids[:1]).all(0) & mask.bool().all(0)
        if image is not None:
            same &= ids[0] != image
        size = int(same.int().cumprod(0).sum())
        return min(size, int(mask.sum(1).min()) - 1, int(first.min()))

    @property
    def dtype(self) -> torch.dtype:
        return next(p.dtype for p in self.backbone.parameters() if p.is_floating_point())

    @property
    def device(self) -> torch.device:
        return next(self.backbone.parameters()).device


def _cache_keyword(model: nn.Module) -> str:
    """The name of a key-value cache, as the forward's keyword and its output's attribute:
    ``cache`` in newer transformers, else ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


PACKED = {"pixel_values": "image_grid_thw", "pixel_values_videos": "video_grid_thw"}  # patches: grid rows


def split_inputs(emb: dict[str, torch.Tensor], n: int) -> list[dict[str, torch.Tensor]]:
    """The batch's ``n`` samples as ``n`` single-sample inputs (batch axis of 1), each what the
    processor gives for that sample alone up to the batch's right padding (masked, and after every
    label, so no loss changes).

    Batch-first tensors are sliced along axis 0. Qwen2-VL-style processors pack every image's patches
    into one (Σ patches, d) ``pixel_values`` (`PACKED`) with one ``image_grid_thw`` row (t, h, w) per
    image: image i owns the next t·h·w rows, so the split follows the grid, not the batch axis.
    `GenerativeVLM.collate` gives one image per sample; a packed batch whose grid has another
    number of rows is refused. Used by per-sample LNTK (tasks.lntk), where vmap cannot map the
    packed axis."""
    out: list[dict[str, torch.Tensor]] = [{} for _ in range(n)]
    for key, value in emb.items():
        grid = emb.get(PACKED.get(key, ""))
        if grid is not None:
            if grid.shape[0] != n:
                raise ValueError(f"{key}: {grid.shape[0]} images packed for {n} samples; per-sample "
                                 "inputs need one image per sample")
            sizes = grid.prod(1).tolist()
            if sum(sizes) != value.shape[0]:
                raise ValueError(f"{key} has {value.shape[0]} patches but {PACKED[key]} counts {sum(sizes)}")
            parts = value.split(sizes)
        elif value.dim() and value.shape[0] == n:
            parts = value.split(1)
        else:
            raise ValueError(f"input {key!r} of shape {tuple(value.shape)} is neither batch-first with {n} "
                             "samples nor packed patches with a grid; cannot split it per sample")
        for sample, part in zip(out, parts, strict=True):
            sample[key] = part
    return out


def refuse_encoder_decoder(backbone: nn.Module) -> None:
    """One line for an encoder-decoder language model (BLIP-2 Flan-T5, ...): this path appends the
    answer to the decoder-only input and slices generation after the prompt, both wrong there."""
    text = backbone.config.get_text_config()
    if getattr(text, "is_encoder_decoder", False):
        raise ValueError(f"{type(backbone).__name__} has an encoder-decoder language model "
                         f"({type(text).__name__}); generative fine-tuning supports decoder-only ones "
                         "(LLaVA, Idefics3, BLIP-2 OPT, PaliGemma, Qwen2-VL, ...)")


def load_processor(path: Path, architecture: str):
    """The checkpoint's own processor, or one line saying why it cannot be loaded."""
    from transformers import AutoProcessor

    if not any((path / f).is_file() for f in ("processor_config.json", "preprocessor_config.json")):
        raise ValueError(f"hf model directory {str(path)!r} ({architecture}) has no processor "
                         "(processor_config.json or preprocessor_config.json); save the checkpoint's "
                         "processor beside it (processor.save_pretrained)")
    try:
        return AutoProcessor.from_pretrained(str(path))
    except (AttributeError, ImportError, ValueError, OSError, TypeError) as err:
        import importlib.util

        hint = ("; processors with a video part (Qwen2-VL, ...) need torchvision: pip install the "
                "torchvision that matches your torch" if importlib.util.find_spec("torchvision") is None
                and isinstance(err, ImportError | AttributeError) else "")
        raise ValueError(f"hf model directory {str(path)!r} ({architecture}): its processor cannot be "
                         f"loaded ({type(err).__name__}: {str(err).splitlines()[0][:160]}){hint}") from None


# The coordinator's stand-in processor (``base_weights=False``): it names layers and injects
# adapters but never tokenises, so it reads no tokenizer or processor files.
NO_PROCESSOR = SimpleNamespace(tokenizer=None, chat_template=None)


def build_generative(path: Path, architecture: str, spec: ModelSpec) -> GenerativeVLM:
    """Load an image-text-to-text checkpoint and its processor from ``path`` with ``spec``'s
    generative settings; with ``spec.base_weights=False`` (the coordinator) no weight is
    read: the backbone is a weightless `tasks.models.skeleton` of ``config.json`` with
    `NO_PROCESSOR`, and the processor is only checked where the folder holds the weights too."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    from tasks.models.hf_common import quiet_transformers

    dtype = getattr(torch, spec.dtype)
    vlm_layers, max_new_tokens = spec.vlm_layers, spec.max_new_tokens
    if not spec.base_weights:
        from tasks.models.skeleton import skeleton

        if holds_weights(path):  # a site's complete folder (e.g. a simulation's): refuse a missing or
            load_processor(path, architecture)  # unloadable processor before round 1, not on the sites

        backbone = skeleton(AutoModelForImageTextToText, AutoConfig.from_pretrained(str(path)), dtype)
        return finish(GenerativeVLM(backbone, NO_PROCESSOR, vlm_layers, max_new_tokens), False)
    processor = load_processor(path, architecture)
    kwargs: dict = {"dtype": dtype}
    if spec.quantization == "4bit":
        kwargs.update(quantization_config=four_bit_config(dtype, spec.device), device_map={"": spec.device})
    with quiet_transformers():
        backbone = AutoModelForImageTextToText.from_pretrained(str(path), **kwargs)
    return finish(GenerativeVLM(backbone, processor, vlm_layers, max_new_tokens), spec.gradient_checkpointing)


def holds_weights(path: Path) -> bool:
    """Whether ``path`` holds a checkpoint's weight files, not only the coordinator's config.json."""
    return any(any(path.glob(pattern)) for pattern in ("*.safetensors", "pytorch_model*.bin"))


def finish(model: GenerativeVLM, gradient_checkpointing: bool) -> GenerativeVLM:
    """Freeze the checkpoint; optionally recompute block activations in the backward pass."""
    model.backbone.requires_grad_(False)
    if gradient_checkpointing:
        model.backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def four_bit_config(dtype: torch.dtype, device: str):
    """QLoRA's base: NF4 weights computing in ``dtype``; one line where it cannot run."""
    if not device.startswith("cuda"):
        raise ValueError(f"quantization = '4bit' needs a CUDA device (this client runs on {device!r})")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise ValueError("quantization = '4bit' needs bitsandbytes: pip install -e '.[qlora]'") from None
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype)
