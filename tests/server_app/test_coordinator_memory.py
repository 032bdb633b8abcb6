"""The coordinator never materialises the base weights: it holds adapters only, so a checkpoint's
size must not set the server's memory.

The server's build (`RunConfig.model_spec(client=False)`: ``base_weights=False``) reads an
``hf:<dir>`` checkpoint's config.json only (`tasks.models.skeleton`), yet its layer names and
initial shared state (LoRA A/B, PQ-LoRA P/Q, SIMA's local branches, a shared head) must equal a
full build's bit for bit: every client starts from them. The memory test saves a LLaVA whose
checkpoint is ~100x its adapters and measures the server's peak resident memory in a subprocess.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import ViltModel

import tasks
from server_app.app import plan_run
from settings import ConfigError, RunConfig, default_config
from tasks.models.hf import tiny_vilt_config
from tests.helpers import tiny_vlms

GENERATORS = ("llava", "qwen2vl", "idefics3", "blip2", "paligemma", "gemma3")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("coordinator")
    torch.manual_seed(0)
    ViltModel(tiny_vilt_config()).save_pretrained(root / "encoder")
    paths = {"encoder": root / "encoder"}
    for kind in GENERATORS:
        paths[kind] = getattr(tiny_vlms, f"save_{kind}")(root / kind)
    return paths


def _full_and_coordinator(name: str, monkeypatch, **options) -> tuple[tasks.FederatedVLM, tasks.FederatedVLM]:
    """A client's full build and the coordinator's build of the same settings and seed."""
    if "qwen2vl" in name:  # its saved processor needs torchvision (helpers/tiny_vlms.py): the full build
        monkeypatch.setattr("tasks.models.generative.load_processor",  # takes the in-memory one
                            lambda path, _: tiny_vlms.qwen2vl_processor(path))
    full = tasks.build_model(tasks.ModelSpec(name, seed=7, **options), 3)
    return full, tasks.build_model(tasks.ModelSpec(name, seed=7, base_weights=False, **options), 3)


CASES = [  # (model kind, build options)
    ("minilm-effnet", {}), ("tiny-vilt", {"shared_head": True}), ("tiny-llava", {}),
    ("encoder", {}), ("encoder", {"shared_head": True}), ("encoder", {"adapter": "pq-lora"}),
    ("encoder", {"adapter": "lora", "gated": True}), ("encoder", {"adapter": "layer"}),
    ("llava", {}), ("llava", {"adapter": "pq-lora", "gated": True}), ("llava", {"vlm_layers": "both"}),
    ("llava", {"lora_targets": ("q_proj", "v_proj")}),
    *[(kind, {}) for kind in GENERATORS[1:]], ("qwen2vl", {"adapter": "pq-lora"}),
]


@pytest.mark.parametrize(("kind", "options"), CASES, ids=[f"{k}-{'-'.join(map(str, o.values())) or 'lora'}"
                                                           for k, o in CASES])
def test_coordinator_build_equals_a_full_build(kind, options, checkpoints, monkeypatch):
    name = f"hf:{checkpoints[kind]}" if kind in checkpoints else kind
    full, coordinator = _full_and_coordinator(name, monkeypatch, **options)
    assert coordinator.layer_names == full.layer_names
    layers = range(len(full.layer_names))
    want, got = tasks.get_layer_state(full, layers), tasks.get_layer_state(coordinator, layers)
    assert list(got) == list(want) and want
    for key, value in want.items():
        assert got[key].dtype == value.dtype, key
        assert torch.equal(torch.from_numpy(got[key]), torch.from_numpy(value)), key
    if kind in checkpoints and options.get("adapter") != "layer":  # weightless: one element per base tensor
        base = [p for n, p in coordinator.named_parameters() if not p.requires_grad and "lora_" not in n
                and "mosaic_" not in n and not n.startswith("head")]
        assert base and all(p.untyped_storage().nbytes() <= 8 for p in base)


def test_the_coordinator_needs_only_config_json(checkpoints, tmp_path, monkeypatch):
    names = {}
    for kind in ("encoder", "llava", "qwen2vl"):
        bare = tmp_path / kind
        bare.mkdir()
        shutil.copy(checkpoints[kind] / "config.json", bare / "config.json")
        coordinator = tasks.build_model(tasks.ModelSpec(f"hf:{bare}", seed=7, base_weights=False), 3)
        full, _ = _full_and_coordinator(f"hf:{checkpoints[kind]}", monkeypatch)
        assert coordinator.layer_names == full.layer_names
        names[kind] = full.layer_names
        with pytest.raises((OSError, ValueError)):  # a client's build does need the weights
            tasks.build_model(tasks.ModelSpec(f"hf:{bare}", seed=7), 3)
    config = RunConfig.from_mapping({**default_config(), "model": f"hf:{tmp_path / 'llava'}",
                                     "dataset": "synthetic", "results-dir": str(tmp_path / "runs"),
                                     "budgets": "2"})
    assert plan_run(config).layer_names == names["llava"]


def test_a_missing_config_is_one_line_naming_model_and_path(tmp_path):
    model = f"hf:{tmp_path}"
    config = RunConfig.from_mapping({**default_config(), "model": model, "dataset": "synthetic",
                                     "results-dir": str(tmp_path / "runs")})
    with pytest.raises(ConfigError) as err:
        plan_run(config)
    assert f"model = {model!r}" in str(err.value) and "config.json" in str(err.value)
    assert "\n" not in str(err.value)


# A LLaVA whose language model is wide (1024, MLP 4096, 6 blocks): ~100 M parameters, saved in
# float16 as LLaVA-1.5-7B is (200 MB of safetensors, 400 MB as the float32 server model), ~100x its
# rank-8 LoRA adapters (ViT and vocabulary stay tiny). A float32 checkpoint would not show the old
# cost on CPU: transformers maps such a file lazily and LoRA injection never touches the base.
WIDE_TEXT = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 6, "num_attention_heads": 8,
             "num_key_value_heads": 8}
# One process: the peak resident memory (VmHWM) of the coordinator's plan_run, then of a server
# build with the base weights (the whole checkpoint in float32, the cost avoided), each above the
# memory held when it starts; the kernel's peak is reset there (/proc/self/clear_refs "5"), so
# neither the imports' transient peak nor ru_maxrss's inheritance of the forking pytest process's
# peak hides a phase's own.
PEAK = """
import dataclasses, gc, json, re, sys
import peft, torch, transformers
from transformers import LlavaForConditionalGeneration
import tasks, tasks.adapters, tasks.models.generative
from server_app.app import plan_run
from settings import RunConfig, default_config
config = RunConfig.from_mapping({**default_config(), "model": "hf:" + sys.argv[1], "dataset": "synthetic",
                                 "results-dir": sys.argv[2]})
def peak():
    with open("/proc/self/status") as fh:
        return int(re.search(r"VmHWM:\\s+(\\d+) kB", fh.read()).group(1)) / 1024
def reset():
    gc.collect()
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    return peak()
base = reset()
initial = plan_run(config).initial
coordinator = peak() - base
base = reset()
model = tasks.build_model(dataclasses.replace(config.model_spec(client=False), base_weights=True), 1)
full = peak() - base
assert tasks.get_layer_state(model, range(len(model.layer_names))).keys() == initial.keys()
print(json.dumps({"coordinator_mb": coordinator, "full_mb": full,
                  "adapters_mb": sum(a.nbytes for a in initial.values()) / 2**20}))
"""


@pytest.fixture(scope="module")
def wide_llava(tmp_path_factory) -> Path:
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    from tasks.models.tiny_llava import TINY_TEXT, TINY_VISION, llava_processor

    path = tmp_path_factory.mktemp("wide") / "llava"
    processor = llava_processor()
    tok = processor.tokenizer
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(**TINY_VISION),
        text_config=LlamaConfig(**{**TINY_TEXT, **WIDE_TEXT}, vocab_size=len(tok),
                                bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id,
                                eos_token_id=tok.eos_token_id),
        image_token_index=tok.convert_tokens_to_ids("<image>"), vision_feature_select_strategy="default",
        vision_feature_layer=-1)
    with torch.device("meta"):  # one normal draw per weight instead of the slower init pass; not
        model = LlavaForConditionalGeneration(config)  # zeros: pages of zeros need not be resident
    torch.manual_seed(0)
    with torch.no_grad():
        for param in model.to_empty(device="cpu").parameters():
            param.normal_(0, 0.02)
    model.half()
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


def test_the_coordinators_peak_memory_is_far_below_the_checkpoint(wide_llava, tmp_path):
    checkpoint_mb = sum(f.stat().st_size for f in wide_llava.glob("*.safetensors")) / 2**20
    out = subprocess.run([sys.executable, "-c", PEAK, str(wide_llava), str(tmp_path)], capture_output=True,
                         text=True, check=True, cwd=Path(__file__).parents[2])
    peaks = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"checkpoint {checkpoint_mb:.0f} MB float16, adapters {peaks['adapters_mb']:.1f} MB; server peak "
          f"above its start: full float32 build {peaks['full_mb']:.0f} MB, "
          f"coordinator build {peaks['coordinator_mb']:.0f} MB")
    assert peaks["adapters_mb"] < 0.05 * checkpoint_mb
    assert peaks["full_mb"] > 1.5 * checkpoint_mb  # the old path holds it in float32: the probe sees it
    assert peaks["coordinator_mb"] < 0.25 * checkpoint_mb
