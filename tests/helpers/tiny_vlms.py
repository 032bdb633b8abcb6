"""Tiny random image-text-to-text checkpoints of several families, saved with their processors.

Built from configs (as transformers' own tests do), with the byte-level tokenizer of
`tasks.models.tiny_llava` (nothing downloaded), and saved to a folder for ``model = "hf:<dir>"``:
LLaVA (CLIP vision tower, Llama decoder, chat template), LLaVA-NeXT (the same with any-resolution
tiles), Idefics3/SmolVLM (SigLIP-style vision,
pixel-shuffle connector, Llama decoder, chat template) and BLIP-2 (vision, Q-Former, OPT decoder,
no chat template: the model's "Question: ... Answer:" prompt). Qwen2-VL's processor needs
torchvision (transformers checks its video part's class even when it is unused), which CPU machines
here lack, so `save_qwen2vl` writes its model and the processor's files by hand: loading it must
fail with one line. `qwen2vl_processor` builds the same processor in memory without that class
check, so the Qwen2-VL model path (packed patches, ``image_grid_thw``, M-RoPE) is still exercised.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tasks.models.tiny_llava import LLAVA_TEMPLATE, TINY_TEXT, byte_tokenizer, llava_processor, tiny_llava

IDEFICS_TEMPLATE = "".join([  # Idefics3's chat template, cut to what the tests' conversations use
    "{% for m in messages %}{% if m['role'] == 'user' %}User:{% for c in m['content'] %}",
    "{% if c['type'] == 'image' %}<image>{% else %} {{ c['text'] }}{% endif %}{% endfor %}",
    "<end_of_utterance>\n",
    "{% else %}Assistant: {% for c in m['content'] %}{{ c['text'] }}{% endfor %}<end_of_utterance>\n",
    "{% endif %}{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}",
])
VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
          "image_size": 32, "patch_size": 8}


def _ids(tok) -> dict:
    return {"vocab_size": len(tok), "pad_token_id": tok.pad_token_id, "bos_token_id": tok.bos_token_id,
            "eos_token_id": tok.eos_token_id}


def save_llava(path: Path) -> Path:
    torch.manual_seed(0)
    model, processor = tiny_llava(llava_processor())
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


def save_llava_next(path: Path) -> Path:
    """A tiny LLaVA-NeXT (CLIP vision, any-resolution tiles over ``image_grid_pinpoints``, an
    ``image_newline`` row end, Llama decoder, LLaVA's chat template): each image is its base view plus
    the tiles of its best-fitting grid, so ``pixel_values`` is (images, tiles, 3, H, W)."""
    import transformers
    from transformers import LlavaNextConfig, LlavaNextForConditionalGeneration, LlavaNextProcessor

    torch.manual_seed(0)
    tok = byte_tokenizer()
    pins = [[32, 32], [32, 64], [64, 32]]
    # the PIL image processor (transformers >= 5 names it apart; the default one wants torchvision)
    images = getattr(transformers, "LlavaNextImageProcessorPil", transformers.LlavaNextImageProcessor)(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}, image_grid_pinpoints=pins)
    processor = LlavaNextProcessor(image_processor=images, tokenizer=tok, patch_size=8,
                                   vision_feature_select_strategy="default", chat_template=LLAVA_TEMPLATE,
                                   num_additional_image_tokens=1)
    text = {"model_type": "llama", **TINY_TEXT, **_ids(tok)}
    vision = {**VISION, "model_type": "clip_vision_model", "projection_dim": 32}
    config = LlavaNextConfig(vision_config=vision, text_config=text, image_grid_pinpoints=pins,
                             image_token_index=tok.convert_tokens_to_ids("<image>"),
                             vision_feature_select_strategy="default", vision_feature_layer=-1)
    LlavaNextForConditionalGeneration(config).save_pretrained(path)
    processor.save_pretrained(path)
    return path


def save_idefics3(path: Path) -> Path:
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessor,
        Idefics3Processor,
    )

    torch.manual_seed(0)
    tok = byte_tokenizer(extra=("<fake_token_around_image>", "<end_of_utterance>", "<global-img>"))
    images = Idefics3ImageProcessor(size={"longest_edge": 32}, max_image_size={"longest_edge": 32},
                                    do_image_splitting=False)
    processor = Idefics3Processor(image_processor=images, tokenizer=tok, image_seq_len=4,
                                  chat_template=IDEFICS_TEMPLATE)
    text = {"model_type": "llama", **TINY_TEXT, **_ids(tok)}
    config = Idefics3Config(vision_config=VISION, text_config=text,
                            image_token_id=tok.convert_tokens_to_ids("<image>"), scale_factor=2,
                            pad_token_id=tok.pad_token_id)
    Idefics3ForConditionalGeneration(config).save_pretrained(path)
    processor.save_pretrained(path)
    return path


def save_blip2(path: Path) -> Path:
    from transformers import Blip2Config, Blip2ForConditionalGeneration, Blip2Processor, BlipImageProcessor

    torch.manual_seed(0)
    tok = byte_tokenizer()
    processor = Blip2Processor(image_processor=BlipImageProcessor(size={"height": 32, "width": 32}),
                               tokenizer=tok, num_query_tokens=4)
    text = {"model_type": "opt", "hidden_size": 32, "ffn_dim": 64, "num_hidden_layers": 4,
            "num_attention_heads": 2, "max_position_embeddings": 512, "word_embed_proj_dim": 32, **_ids(tok)}
    config = Blip2Config(vision_config=VISION, text_config=text, num_query_tokens=4,
                         qformer_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                                         "num_attention_heads": 2, "encoder_hidden_size": 32},
                         image_token_index=tok.convert_tokens_to_ids("<image>"))
    Blip2ForConditionalGeneration(config).save_pretrained(path)
    processor.save_pretrained(path)
    return path


def save_qwen2vl(path: Path) -> Path:
    """A tiny Qwen2-VL model with its processor's files written by hand (see the module doc)."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    torch.manual_seed(0)
    tok = byte_tokenizer(extra=("<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|video_pad|>"))
    config = Qwen2VLConfig(
        text_config={**TINY_TEXT, **_ids(tok), "rope_parameters": {
            "rope_type": "default", "mrope_section": [2, 2, 4], "rope_theta": 1e4}},
        vision_config={"depth": 2, "embed_dim": 32, "hidden_size": 32, "num_heads": 2, "mlp_ratio": 2,
                       "patch_size": 8, "spatial_merge_size": 2, "temporal_patch_size": 2},
        image_token_id=tok.convert_tokens_to_ids("<|image_pad|>"),
        video_token_id=tok.convert_tokens_to_ids("<|video_pad|>"),
        vision_start_token_id=tok.convert_tokens_to_ids("<|vision_start|>"),
        vision_end_token_id=tok.convert_tokens_to_ids("<|vision_end|>"))
    Qwen2VLForConditionalGeneration(config).save_pretrained(path)
    tok.save_pretrained(path)
    (path / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2VLProcessor",
        "min_pixels": 1024, "max_pixels": 1024, "patch_size": 8, "merge_size": 2, "temporal_patch_size": 2}))
    (path / "processor_config.json").write_text(json.dumps({"processor_class": "Qwen2VLProcessor"}))
    return path


def save_paligemma(path: Path) -> Path:
    """A tiny PaliGemma (SigLIP vision, Gemma decoder): image and prompt form a bidirectional prefix
    (token type 0), the answer is causal (token type 1)."""
    from transformers import (
        PaliGemmaConfig,
        PaliGemmaForConditionalGeneration,
        PaliGemmaProcessor,
        SiglipImageProcessor,
    )

    torch.manual_seed(0)
    tok = byte_tokenizer()
    images = SiglipImageProcessor(size={"height": 32, "width": 32})
    images.image_seq_length = 16
    processor = PaliGemmaProcessor(image_processor=images, tokenizer=tok)  # adds its loc/seg tokens
    text = {"model_type": "gemma", **TINY_TEXT, "head_dim": 16, **_ids(tok)}
    config = PaliGemmaConfig(vision_config={**VISION, "model_type": "siglip_vision_model",
                                            "projection_dim": 32},
                             text_config=text, image_token_index=tok.convert_tokens_to_ids("<image>"),
                             projection_dim=32)
    PaliGemmaForConditionalGeneration(config).save_pretrained(path)
    processor.save_pretrained(path)
    return path


GEMMA3_TEMPLATE = (
    "{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n"
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}<start_of_image>{% else %}{{ c['text'] }}"
    "{% endif %}{% endfor %}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n"
    "{% endif %}"
)


def save_gemma3(path: Path) -> Path:
    """A tiny Gemma 3 (SigLIP vision, pooled to 4 image tokens, Gemma 3 decoder): its image tokens
    have token type 1 and attend each other bidirectionally; its turns end with <end_of_turn>. Its
    projection weight is drawn at random (transformers initialises it to zeros), so the logits
    depend on the image."""
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3ImageProcessor,
        Gemma3Processor,
        PreTrainedTokenizerFast,
    )

    torch.manual_seed(0)
    named = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
             "image_token": "<image_soft_token>"}
    core = byte_tokenizer(extra=(*named.values(), "<start_of_turn>", "<end_of_turn>"))._tokenizer
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                  unk_token="<unk>", extra_special_tokens=named)
    processor = Gemma3Processor(image_processor=Gemma3ImageProcessor(size={"height": 32, "width": 32}),
                                tokenizer=tok, image_seq_length=4, chat_template=GEMMA3_TEMPLATE)
    text = {**TINY_TEXT, "head_dim": 16, "sliding_window": 64, **_ids(tok)}
    config = Gemma3Config(vision_config={**VISION, "model_type": "siglip_vision_model"}, text_config=text,
                          mm_tokens_per_image=4, image_token_id=tok.image_token_id,
                          boi_token_id=tok.boi_token_id,
                          eoi_token_id=tok.convert_tokens_to_ids("<end_of_image>"))
    model = Gemma3ForConditionalGeneration(config)
    with torch.no_grad():  # initialised to zeros: the image would reach the decoder as zeros
        model.model.multi_modal_projector.mm_input_projection_weight.normal_(0, 0.2)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


QWEN_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def qwen2vl_processor(path: Path):
    """`Qwen2VLProcessor` for `save_qwen2vl`'s checkpoint, assembled without `ProcessorMixin`'s
    class check of the (unused) video processor, the one step that needs torchvision."""
    from transformers import AutoTokenizer, Qwen2VLImageProcessor, Qwen2VLProcessor

    tok = AutoTokenizer.from_pretrained(path)
    processor = Qwen2VLProcessor.__new__(Qwen2VLProcessor)
    processor.image_processor = Qwen2VLImageProcessor(min_pixels=1024, max_pixels=1024, patch_size=8,
                                                      merge_size=2, temporal_patch_size=2)
    processor.tokenizer, processor.chat_template = tok, QWEN_TEMPLATE
    processor.image_token, processor.video_token = "<|image_pad|>", "<|video_pad|>"
    processor.image_token_id = tok.convert_tokens_to_ids("<|image_pad|>")
    processor.video_token_id = tok.convert_tokens_to_ids("<|video_pad|>")
    return processor


__all__ = ["LLAVA_TEMPLATE", "qwen2vl_processor", "save_blip2", "save_gemma3", "save_idefics3", "save_llava",
           "save_llava_next", "save_paligemma", "save_qwen2vl"]
