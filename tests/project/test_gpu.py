"""The CUDA path, skipped where no GPU is: local training, evaluation and LNTK scores on the GPU
agree with the CPU, shared state leaves the GPU as numpy and enters it from numpy, and a whole
federated run (the real ServerApp and ClientApp on the in-process grid) trains there.

CI has no GPU; run these on a GPU machine with ``python -m pytest tests/project/test_gpu.py``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tasks import (
    ModelSpec,
    build_model,
    evaluate,
    get_layer_state,
    layer_parameter_names,
    score_layers,
    set_layer_state,
    train,
)
from tests.experiments.test_harness import SETTINGS, sweep
from tests.tasks.test_models import make_samples

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _without_dropout(model):
    """Dropout masks come from different generators on CPU and GPU; parity needs none."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model


def _pair():
    spec = ModelSpec("tiny-vilt")
    return _without_dropout(build_model(spec, 5)), _without_dropout(build_model(spec, 5))


def test_training_on_cuda_matches_cpu_and_changes_only_the_masked_layers():
    cpu, gpu = _pair()
    before = {k: v.clone() for k, v in cpu.state_dict().items()}
    samples, mask = make_samples(16), np.array([False, True, False, True])
    kwargs = dict(steps=4, batch_size=8, lr=1e-2, head_lr=1e-1, seed=3)
    out_cpu = train(cpu, samples, mask, device="cpu", **kwargs)
    out_gpu = train(gpu, samples, mask, device="cuda", **kwargs)
    assert gpu.device.type == "cuda" and all(p.is_cuda for p in gpu.parameters())
    assert out_gpu["train_loss"] == pytest.approx(out_cpu["train_loss"], rel=1e-3)
    trained = {"head.weight", "head.bias"}
    trained |= set(layer_parameter_names(gpu, 1)) | set(layer_parameter_names(gpu, 3))
    for name, value in gpu.state_dict().items():
        if name in trained:
            torch.testing.assert_close(value.cpu(), cpu.state_dict()[name], rtol=1e-3, atol=1e-4, msg=name)
        else:
            assert torch.equal(value.cpu(), before[name]), f"{name} changed on the GPU"


def test_evaluation_on_cuda_matches_cpu():
    cpu, gpu = _pair()
    samples = make_samples(24)
    on_cpu, on_gpu = evaluate(cpu, samples, device="cpu"), evaluate(gpu, samples, device="cuda")
    assert on_gpu["accuracy"] == on_cpu["accuracy"]
    assert on_gpu["loss"] == pytest.approx(on_cpu["loss"], rel=1e-4)


def test_lntk_scores_on_cuda_match_cpu():
    cpu, gpu = _pair()
    gpu.to("cuda")
    batch = make_samples(6)
    np.testing.assert_allclose(score_layers(gpu, batch), score_layers(cpu, batch), rtol=1e-3)


def test_layer_state_crosses_the_gpu_as_numpy():
    source, target = _pair()
    train(source, make_samples(8), np.ones(4, bool), steps=2, batch_size=4, lr=1e-2, device="cuda")
    state = get_layer_state(source, [0, 2])
    assert state and all(isinstance(v, np.ndarray) for v in state.values())
    target.to("cuda")
    set_layer_state(target, state)
    assert all(p.is_cuda for p in target.parameters())
    for key, value in get_layer_state(target, [0, 2]).items():
        np.testing.assert_array_equal(value, state[key], err_msg=key)


def test_a_federated_run_trains_on_the_gpu(tmp_path):
    config = tmp_path / "gpu.toml"
    config.write_text(SETTINGS + f'results-dir = "{tmp_path}"\ndevice = "cuda"\n')
    torch.cuda.reset_peak_memory_stats()
    proc = sweep(config, "--strategies", "f3ocus", "--seeds", "0", "--client-gpus", "1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert torch.cuda.max_memory_allocated() > 0
    (run,) = (tmp_path / "exp" / "runs").iterdir()
    rounds = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    assert rounds[-1]["aggregated"] and 0.0 <= rounds[-1]["evaluate"]["accuracy"] <= 1.0
