"""LNTK (paper §4.1 Eq. 8) on every generator family × ``vlm-layers`` × ``score-mode``.

Every combination either scores or is refused in one line; what is accepted is checked against a
brute-force oracle. Matrix (``python -m pytest -q -n 0 tests/tasks/test_generative_lntk.py -rA``):

* "loss": scores for tiny-llava, LLaVA, Idefics3, BLIP-2, PaliGemma, Gemma 3 and Qwen2-VL with
  ``vlm-layers`` = language, vision and both (Qwen2-VL's packed patches per sample by image_grid_thw);
* "paper" (supplement Algorithm 1): scores for the same 21 combinations;
* "logit": refused for every generator (one line, by check_model_settings before round 1 and by
  `tasks.lntk.check_mode`): a generator's logits are per token over its vocabulary.

Oracle for "loss": Jˡ's rows are the gradients of each sample's loss from one backward pass per
sample on the model's own single-sample inputs (for Qwen2-VL its own patches and grid row), Θˡ =
Jˡ Jˡᵀ and λ₁ by numpy's eigvalsh, in float64. For "paper": Algorithm 1's quantities recomputed from
one plain backward pass of the batch loss.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import tasks
from tasks.data import load_partition
from tasks.models import check_model_settings
from tasks.models.generative import split_inputs
from tests.helpers.tiny_vlms import qwen2vl_processor, save_qwen2vl
from tests.tasks.test_generative import TINY, with_processor

SAVE = {**TINY, "qwen2-vl": save_qwen2vl}  # test_generative's families, Qwen2-VL's packed patches too
FAMILIES = ["tiny-llava", *SAVE]
VLM_LAYERS = ["language", "vision", "both"]


@pytest.fixture(scope="module")
def partition():
    return load_partition("synthetic", 0, 2, "iid", seed=0, max_train=8, max_test=4)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("vlms")
    return {family: save(root / family) for family, save in SAVE.items()}


@pytest.fixture(scope="module")
def build(checkpoints, partition):
    """(family, vlm-layers) -> the float64 generator, built once per module, LoRA B drawn at random
    (at initialisation B = 0 and every LoRA A gradient vanishes), and the tiny Gemma 3's image
    projection too (initialised to zero: its image would not reach the logits, nor any gradient
    the vision tower)."""
    cache: dict[tuple[str, str], tasks.FederatedVLM] = {}
    qwen = checkpoints["qwen2-vl"]
    processor = qwen2vl_processor(qwen)

    def get(family: str, vlm_layers: str) -> tasks.FederatedVLM:
        if (family, vlm_layers) not in cache:
            name = "tiny-llava" if family == "tiny-llava" else f"hf:{checkpoints[family]}"
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr("tasks.models.generative.load_processor", with_processor(qwen, processor))
                model = tasks.build_model(tasks.ModelSpec(name, seed=0, vlm_layers=vlm_layers),
                                          len(partition.labels))
            model.answers = tuple(partition.labels)
            model.double().eval()
            gen = torch.Generator().manual_seed(0)
            with torch.no_grad():
                for n, p in model.named_parameters():
                    if "lora_B" in n:
                        p.copy_(0.2 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
            cache[family, vlm_layers] = model
        return cache[family, vlm_layers]

    return get


def layer_params(model) -> list[list[torch.Tensor]]:
    named = dict(model.named_parameters())
    return [[named[n] for n in tasks.layer_parameter_names(model, layer)]
            for layer in range(len(model.layer_names))]


def gradients(loss: torch.Tensor, params: list[torch.Tensor]) -> dict[int, np.ndarray]:
    """id(parameter) -> its gradient (zeros where the loss does not reach it), one backward pass."""
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return {id(p): np.zeros(p.shape) if g is None else g.numpy() for p, g in zip(params, grads, strict=True)}


def oracle_loss(model, samples) -> np.ndarray:
    """λ₁ of Jˡ Jˡᵀ, Jˡ stacked from one backward pass per sample on its own single-sample inputs."""
    groups = layer_params(model)
    flat = [p for params in groups for p in params]
    rows: list[list[np.ndarray]] = [[] for _ in groups]
    for sample in samples:
        batch = model.collate([sample])
        by_param = gradients(model.loss(model(batch), batch["labels"]), flat)
        for layer, params in enumerate(groups):
            rows[layer].append(np.concatenate([np.zeros(0), *(by_param[id(p)].reshape(-1) for p in params)]))
    return np.array([np.linalg.eigvalsh(np.stack(r) @ np.stack(r).T)[-1] for r in rows])


def oracle_paper(model, samples) -> np.ndarray:
    """Supplement Algorithm 1: G = n·C·(∇θ L)² per tensor, rows G.view(G.shape[0], -1), λ₁ of G Gᵀ,
    summed over a layer's tensors (one plain backward pass of the batch-mean loss)."""
    batch = model.collate(samples)
    logits = model(batch)
    scale = logits.shape[0] * logits.shape[-1]
    groups = layer_params(model)
    flat = [p for params in groups for p in params]
    by_param = gradients(model.loss(logits, batch["labels"]), flat)
    values = []
    for params in groups:
        total = 0.0
        for p in params:
            sq = scale * by_param[id(p)] ** 2
            j = sq.reshape(sq.shape[0], -1)
            total += np.linalg.eigvalsh(j @ j.T if j.shape[0] <= j.shape[1] else j.T @ j)[-1]
        values.append(total)
    return np.array(values)


ORACLES = {"loss": oracle_loss, "paper": oracle_paper}


@pytest.mark.parametrize("mode", list(ORACLES))
@pytest.mark.parametrize("vlm_layers", VLM_LAYERS)
@pytest.mark.parametrize("family", FAMILIES)
def test_lntk_equals_brute_force(family, vlm_layers, mode, build, partition):
    model = build(family, vlm_layers)
    samples = partition.train[:3]
    with pytest.MonkeyPatch.context() as patch:  # not a warning test: hook/vmap fallbacks may warn
        patch.setattr("warnings.warn", lambda *a, **k: None)
        scored = tasks.layer_scores(model, samples, mode).eigenvalues
    expected = ORACLES[mode](model, samples)
    assert scored.shape == (len(model.layer_names),)
    assert all(tasks.layer_parameter_names(model, layer) for layer in range(len(expected)))
    assert (expected > 0).all()  # every selectable layer trains something, so every score is positive
    np.testing.assert_allclose(scored, expected, rtol=1e-4, atol=1e-12 * expected.max())


@pytest.mark.parametrize("family", FAMILIES)
def test_logit_mode_is_refused_for_every_generator_in_one_line(family, build, partition):
    model = build(family, "language")
    refusal = r"^score-mode = 'logit' is not supported by model 'tiny-llava'[^\n]*$"
    with pytest.raises(ValueError, match=refusal):
        check_model_settings(tasks.ModelSpec("tiny-llava"), model, "logit")
    with pytest.raises(ValueError, match=r"^score-mode = 'logit' cannot score generator [^\n]*'paper'$"):
        tasks.layer_scores(model, partition.train[:2], "logit")


def test_split_inputs_cuts_packed_patches_by_image_grid():
    grid = torch.tensor([[1, 2, 2], [1, 4, 2], [2, 1, 1]])  # 4, 8 and 2 patches: unequal images
    pixels = torch.arange(14.0)[:, None].expand(14, 5)
    ids = torch.arange(6).reshape(3, 2)
    parts = split_inputs({"input_ids": ids, "pixel_values": pixels, "image_grid_thw": grid}, 3)
    assert [p["pixel_values"][:, 0].tolist() for p in parts] == [[0, 1, 2, 3], list(range(4, 12)), [12, 13]]
    assert [p["image_grid_thw"].tolist() for p in parts] == [[[1, 2, 2]], [[1, 4, 2]], [[2, 1, 1]]]
    assert [p["input_ids"].tolist() for p in parts] == [[[0, 1]], [[2, 3]], [[4, 5]]]
    with pytest.raises(ValueError, match="pixel_values has 13 patches but image_grid_thw counts 14"):
        split_inputs({"pixel_values": pixels[:13], "image_grid_thw": grid}, 3)
    with pytest.raises(ValueError, match="pixel_values: 3 images packed for 2 samples"):
        split_inputs({"pixel_values": pixels, "image_grid_thw": grid}, 2)
    with pytest.raises(ValueError, match=r"input 'mask' of shape \(4,\) is neither batch-first with 3"):
        split_inputs({"mask": torch.ones(4)}, 3)
