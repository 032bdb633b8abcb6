"""On the device, ``quantization = "4bit"`` acts, i.e. an image-text-to-text hf:<dir>
checkpoint's base is NF4 `Linear4bit` (QLoRA) with float32 LoRA adapters on it; every other model
refuses it before round 1 (tests/settings/test_generative_settings.py). Skipped without CUDA and bitsandbytes;
run on a GPU machine: ``python -m pytest -q -n 0 tests/tasks/test_gpu_quantization.py``."""

from __future__ import annotations

import importlib.util

import pytest
import torch

import tasks
from tests.helpers.tiny_vlms import save_blip2, save_llava

NO_QLORA = not torch.cuda.is_available() or importlib.util.find_spec("bitsandbytes") is None
pytestmark = pytest.mark.skipif(NO_QLORA, reason="needs a CUDA GPU and bitsandbytes (extra qlora)")


@pytest.mark.parametrize("save", [save_llava, save_blip2])
def test_4bit_quantises_the_base_of_an_hf_generator_under_float32_lora(save, tmp_path):
    from bitsandbytes.nn import Linear4bit

    directory = save(tmp_path / "checkpoint")
    spec = tasks.ModelSpec(f"hf:{directory}", seed=0, quantization="4bit", dtype="bfloat16", device="cuda")
    model = tasks.build_model(spec, 3)
    quantised = {n.removesuffix(".base_layer") for n, m in model.named_modules() if isinstance(m, Linear4bit)}
    adapted = {n.rpartition(".lora_A")[0] for n, _ in model.named_parameters() if ".lora_A" in n}
    assert adapted and adapted <= quantised  # every LoRA site sits on a 4-bit base
    lora = [p for n, p in model.named_parameters() if "lora_" in n]
    assert all(p.dtype == torch.float32 and p.requires_grad for p in lora)
    assert not any(p.requires_grad for n, p in model.named_parameters() if "lora_" not in n)
