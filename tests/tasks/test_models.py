"""Model registry: shapes, determinism, hf:<dir> layer discovery, bad input (tasks.models)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from transformers import GitConfig, GitModel, ViltModel

from tasks import MODELS, ModelSpec, Sample, build_model, get_layer_state, get_personal_state
from tasks.models.base import find_blocks
from tasks.models.hf import tiny_vilt_config
from tasks.models.registry import REGISTRY, parse_model

ROOT = Path(__file__).resolve().parents[2]


def make_samples(n: int, size: int = 48, seed: int = 0, classes: int = 5) -> list[Sample]:
    rng = np.random.default_rng(seed)
    questions = ["what color is the shape?", "is there a red circle?", "what shape is in the image?"]
    return [
        Sample(
            rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
            questions[i % 3],
            int(i % classes),
            "color",
        )
        for i in range(n)
    ]


def test_registry_names():
    assert MODELS == ("minilm-effnet", "tiny-vilt", "tiny-llava", "smol-llava", "smol-llava-aligned",
                      "hf:<local dir>")


def test_parse_model_reads_every_name_and_is_the_only_reader_of_hf():
    """`parse_model` gives a name's entry and argument; a pattern needs its argument; a size the
    entry does not build is refused by the spec. No other module spells the ``hf:`` prefix."""
    assert parse_model("tiny-vilt") == (REGISTRY["tiny-vilt"], "")
    assert parse_model("hf:~/ckpt:v2") == (REGISTRY["hf:<local dir>"], "~/ckpt:v2")
    assert ModelSpec("hf:/x", lora_targets=["q"]).argument == "/x"  # a list becomes a (hashable) tuple
    for bad in ("hf:", "hf", "tiny-vilt ", None):
        with pytest.raises(ValueError, match=f"unknown model {bad!r}; choose one of minilm-effnet"):
            parse_model(bad)
    with pytest.raises(ValueError, match="size 'large' is unknown for 'tiny-llava'; choose one of base$"):
        ModelSpec("tiny-llava", size="large")
    spelled = [str(path.relative_to(ROOT)) for path in ROOT.rglob("*.py")
               if not path.is_relative_to(ROOT / "tests") and ".venv" not in path.parts
               and any(isinstance(node, ast.Constant) and node.value == "hf:"
                       for node in ast.walk(ast.parse(path.read_text())))]
    assert spelled == []


def test_tiny_vilt_shapes_and_layers():
    model = build_model(ModelSpec("tiny-vilt"), 7)
    batch = model.collate(make_samples(5))
    assert batch["pixel_values"].shape == (5, 3, 32, 32)
    assert batch["labels"].dtype == torch.int64 and batch["labels"].shape == (5,)
    logits = model(batch)
    assert logits.shape == (5, 7)
    assert model.layer_names == [f"backbone.encoder.layer.{i}" for i in range(4)]
    assert torch.isfinite(model.loss(logits, batch["labels"]))


def test_build_is_deterministic_for_a_seed():
    samples = make_samples(4)
    a, b = build_model(ModelSpec("tiny-vilt", seed=3), 5), build_model(ModelSpec("tiny-vilt", seed=3), 5)
    c = build_model(ModelSpec("tiny-vilt", seed=4), 5)
    sa, sb, sc = (m.state_dict() for m in (a, b, c))
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)
    torch.testing.assert_close(a(a.collate(samples)), b(b.collate(samples)))


def test_adapter_init_is_independent_of_head_size():
    a, b = build_model(ModelSpec("tiny-vilt"), 5), build_model(ModelSpec("tiny-vilt"), 11)
    sa, sb = get_layer_state(a, range(4)), get_layer_state(b, range(4))
    assert sa.keys() == sb.keys() and all(np.array_equal(sa[k], sb[k]) for k in sa)
    assert get_personal_state(a)["head.weight"].shape == (5, 32)


def test_build_leaves_global_rng_untouched():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_model(ModelSpec("tiny-vilt"), 3)
    assert torch.equal(torch.rand(3), expected)


def test_multilabel_collate_and_bce():
    model = build_model(ModelSpec("tiny-vilt"), 4, "multilabel")
    samples = [
        Sample(s.image, s.question, np.array([1, 0, 1, 0], np.float32), "multilabel") for s in make_samples(3)
    ]
    batch = model.collate(samples)
    assert batch["labels"].dtype == torch.float32 and batch["labels"].shape == (3, 4)
    loss = model.loss(model(batch), batch["labels"])
    expected = nn.functional.binary_cross_entropy_with_logits(model(batch), batch["labels"])
    torch.testing.assert_close(loss, expected)


def test_hf_directory_discovers_vilt_blocks(tmp_path):
    torch.manual_seed(0)
    ViltModel(tiny_vilt_config()).save_pretrained(tmp_path)
    model = build_model(ModelSpec(f"hf:{tmp_path}"), 3)
    assert model.layer_names == [f"backbone.encoder.layer.{i}" for i in range(4)]
    assert model(model.collate(make_samples(2))).shape == (2, 3)
    # loaded weights are the saved ones
    saved = ViltModel.from_pretrained(tmp_path).state_dict()
    own = {k: v for k, v in model.backbone.state_dict().items() if "lora_" not in k}
    key = "encoder.layer.0.attention.attention.query.base_layer.weight"
    assert torch.equal(own[key], saved["encoder.layer.0.attention.attention.query.weight"])


def save_tiny_git(path) -> None:
    """A tiny random GIT checkpoint (text blocks: 3, vision blocks: 2) saved to `path`."""
    torch.manual_seed(0)
    vision = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "image_size": 32,
        "patch_size": 8,
    }
    config = GitConfig(
        vision_config=vision,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    GitModel(config).save_pretrained(path)


def test_hf_directory_generic_checkpoint(tmp_path):
    """A non-ViLT checkpoint (tiny GIT) runs its own forward; the longest block list is chosen."""
    save_tiny_git(tmp_path)
    model = build_model(ModelSpec(f"hf:{tmp_path}"), 3)
    assert type(model).__name__ == "GenericHFVLM"
    assert model.layer_names == [f"backbone.encoder.layer.{i}" for i in range(3)]
    assert model(model.collate(make_samples(2, classes=3))).shape == (2, 3)


def test_find_blocks_picks_longest_identical_modulelist_and_fails_without_one():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.short = nn.ModuleList([nn.Linear(2, 2) for _ in range(2)])
            self.mixed = nn.ModuleList([nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2), nn.Tanh()])
            self.blocks = nn.ModuleList([nn.GELU() for _ in range(3)])

    assert find_blocks(Net()) == "blocks"
    with pytest.raises(ValueError, match="cannot find repeated transformer blocks"):
        find_blocks(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))


def test_bad_inputs_raise_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown model 'vilt-xxl'"):
        build_model(ModelSpec("vilt-xxl"), 3)
    with pytest.raises(ValueError, match="unknown adapter 'ia3'"):
        build_model(ModelSpec("tiny-vilt", adapter="ia3"), 3)
    with pytest.raises(ValueError, match="unknown task"):
        build_model(ModelSpec("tiny-vilt"), 3, "captioning")
    with pytest.raises(ValueError, match="num_outputs"):
        build_model(ModelSpec("tiny-vilt"), 0)
    with pytest.raises(ValueError, match="lora_rank"):
        build_model(ModelSpec("tiny-vilt", lora_rank=0), 3)
    with pytest.raises(FileNotFoundError, match="hf model directory not found"):
        build_model(ModelSpec(f"hf:{tmp_path / 'missing'}"), 3)
    with pytest.raises(FileNotFoundError, match="no config.json"):
        build_model(ModelSpec(f"hf:{tmp_path}"), 3)
    model = build_model(ModelSpec("tiny-vilt"), 3)
    with pytest.raises(ValueError, match="samples is empty"):
        model.collate([])
    with pytest.raises(ValueError, match="outside the head's 3 outputs"):
        model.collate(make_samples(5))
    gray = Sample(np.zeros((8, 8), np.uint8), "q", 0, "color")
    with pytest.raises(ValueError, match=r"\(H, W, 3\) uint8"):
        model.collate([gray])
