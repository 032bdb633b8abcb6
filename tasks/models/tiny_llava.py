"""`tiny-llava`: a random LLaVA (CLIP vision tower, Llama decoder) built from a config, for quick runs.

No weights or tokenizer are downloaded: the tokenizer is byte-level BPE without merges (every
UTF-8 byte is a token, so any question or answer can be written) plus LLaVA's special tokens, the
processor is `LlavaProcessor` with a CLIP image processor, and the chat template is LLaVA-1.5's
``USER: <image>\\n{question} ASSISTANT:``. The same parts build the tiny checkpoints of the tests
(`byte_tokenizer`, `LLAVA_TEMPLATE`). Weights are drawn from the caller's seeded generator
(`tasks.build.build_model`), so every client and the server build the same model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tasks.models.generative import GenerativeVLM
    from tasks.models.registry import ModelSpec

LLAVA_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'user' %}USER: "
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}<image>\n{% else %}{{ c['text'] }}{% endif %}"
    "{% endfor %} {% else %}ASSISTANT: {% for c in m['content'] %}{{ c['text'] }}{% endfor %}</s>"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)
TINY_TEXT = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 2,
             "num_key_value_heads": 2, "max_position_embeddings": 512}
TINY_VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
               "image_size": 32, "patch_size": 8, "projection_dim": 32}
SPECIAL = ("<pad>", "<s>", "</s>", "<unk>", "<image>")


def byte_tokenizer(extra: tuple[str, ...] = ()):
    """Byte-level tokenizer (256 byte tokens, no merges) with <pad> <s> </s> <unk> <image> first. The
    byte characters are sorted: ``ByteLevel.alphabet()`` lists them in an order that changes from call
    to call, which gave every build (every client process) its own token ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = (*SPECIAL, *extra)
    vocab = {t: i for i, t in enumerate(specials)}
    for char in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab.setdefault(char, len(vocab))
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", unk_token="<unk>",
                                   additional_special_tokens=["<image>", *extra])


def llava_processor(tokenizer=None):
    """`LlavaProcessor` for 32 x 32 images in 8 x 8 patches (16 image tokens)."""
    from transformers import CLIPImageProcessor, LlavaProcessor

    from tasks.models.hf_common import quiet_transformers

    with quiet_transformers():
        images = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    return LlavaProcessor(image_processor=images, tokenizer=tokenizer or byte_tokenizer(), patch_size=8,
                          vision_feature_select_strategy="default", num_additional_image_tokens=1,
                          chat_template=LLAVA_TEMPLATE)


def tiny_llava(processor=None):
    """A random `LlavaForConditionalGeneration` matching `llava_processor`."""
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    processor = processor or llava_processor()
    tok = processor.tokenizer
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(**TINY_VISION),
        text_config=LlamaConfig(**TINY_TEXT, vocab_size=len(tok), pad_token_id=tok.pad_token_id,
                                bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id),
        image_token_index=tok.convert_tokens_to_ids("<image>"), vision_feature_select_strategy="default",
        vision_feature_layer=-1)
    return LlavaForConditionalGeneration(config), processor


def build(spec: ModelSpec, num_outputs: int, task: str) -> GenerativeVLM:
    """Registry builder of ``tiny-llava``: `tiny_llava` in ``spec.dtype`` as a frozen `GenerativeVLM`
    (a generator has no answer head: ``num_outputs`` and ``task`` are the data set's, unused)."""
    import torch

    from tasks.models.generative import GenerativeVLM, finish

    backbone, processor = tiny_llava()
    return finish(GenerativeVLM(backbone.to(getattr(torch, spec.dtype)), processor, spec.vlm_layers,
                                spec.max_new_tokens), spec.gradient_checkpointing)
