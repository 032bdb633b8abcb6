"""A LLaVA-1.5-shaped checkpoint with random weights, saved for ``model = "hf:<dir>"``: benchmarks of
memory and time at a real model's size without downloading one.

    python -m experiments.random_llava /tmp/llava-1b --shape 1b                  # 1.0 B parameters
    python -m experiments.random_llava /tmp/llava-7b --shape 7b --device cuda    # LLaVA-1.5-7B's shape

Shapes (`SHAPES`): "7b" is LLaVA-1.5-7B (CLIP ViT-L/14-336 vision tower, Llama-7B language model,
vocabulary 32064, two-layer GELU projector; 576 image tokens); "1b" keeps the vocabulary and halves
the language model's width and depth (hidden 2048, 16 blocks, TinyLlama's MLP width) under a
ViT-B-sized tower on 224-pixel images in 32-pixel patches (49 image tokens), so that a CPU trains it.
The weights are drawn in ``--dtype`` on ``--device`` (seeded), the tokenizer is
`tasks.models.tiny_llava`'s byte-level one with LLaVA-1.5's chat template.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

SHAPES = {
    "7b": {"vision": {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
                      "num_attention_heads": 16, "image_size": 336, "patch_size": 14, "projection_dim": 768},
           "text": {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                    "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 4096}},
    "1b": {"vision": {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                      "num_attention_heads": 12, "image_size": 224, "patch_size": 32, "projection_dim": 512},
           "text": {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 16,
                    "num_attention_heads": 16, "num_key_value_heads": 16, "max_position_embeddings": 2048}},
}
VOCABULARY = 32064  # LLaVA-1.5's (Vicuna's 32000 plus padding); the byte tokenizer uses its first 261


def build(shape: str, device: str = "cpu", dtype: str = "bfloat16", seed: int = 0):
    """The random `LlavaForConditionalGeneration` of ``shape`` and its processor."""
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    from tasks.models.hf_common import quiet_transformers
    from tasks.models.tiny_llava import LLAVA_TEMPLATE, byte_tokenizer

    vision, text = SHAPES[shape]["vision"], SHAPES[shape]["text"]
    tok = byte_tokenizer()
    side = vision["image_size"]
    with quiet_transformers():
        images = CLIPImageProcessor(size={"shortest_edge": side}, crop_size={"height": side, "width": side})
    processor = LlavaProcessor(image_processor=images, tokenizer=tok, patch_size=vision["patch_size"],
                               vision_feature_select_strategy="default", num_additional_image_tokens=1,
                               chat_template=LLAVA_TEMPLATE)
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(**vision),
        text_config=LlamaConfig(**text, vocab_size=VOCABULARY, pad_token_id=tok.pad_token_id,
                                bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id),
        image_token_index=tok.convert_tokens_to_ids("<image>"), vision_feature_select_strategy="default",
        vision_feature_layer=-2)
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlavaForConditionalGeneration._from_config(config, dtype=getattr(torch, dtype))
    return model, processor


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to save the checkpoint and its processor in")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    parser.add_argument("--device", default="cpu", help="where the weights are drawn (cuda: much faster)")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    model, processor = build(args.shape, args.device, args.dtype, args.seed)
    built = time.perf_counter()
    model.save_pretrained(args.out)
    processor.save_pretrained(args.out)
    saved = time.perf_counter()
    size = sum(f.stat().st_size for f in args.out.glob("*.safetensors"))
    print(json.dumps({"shape": args.shape, "parameters": sum(p.numel() for p in model.parameters()),
                      "dtype": args.dtype, "device": args.device, "build_s": round(built - start, 1),
                      "save_s": round(saved - built, 1), "weights_gb": round(size / 1e9, 2),
                      "out": str(args.out)}))


if __name__ == "__main__":
    main()
