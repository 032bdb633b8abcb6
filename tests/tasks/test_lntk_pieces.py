"""LNTK in pieces (tasks/lntk_pieces.py, tasks/lntk_hooks.py): the same Θˡ whatever the piece size,
with and without the model's gradient checkpointing, which scoring keeps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tasks.lntk as lntk
from tasks import ModelSpec, build_model, layer_parameter_names, layer_scores, load_partition
from tasks.lntk import principal_eigenvalue
from tasks.lntk_pieces import piece_bounds, piece_inputs
from tests.tasks.test_lntk import brute_force_eigenvalues, relative_error, trained_lora

N = 4


def grams(model, samples, size):
    """Every layer's Θˡ from the hook path, the samples in pieces of ``size`` (None: one pass)."""
    model.eval()
    groups = [layer_parameter_names(model, layer) for layer in range(len(model.layer_names))]
    return lntk._grams(model, model.collate(samples), groups, "loss", size, None)[0]


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "checkpointed"])
def llava(request):
    """tiny-llava (float64, LoRA B away from zero) with or without gradient checkpointing, N samples,
    its one-pass Gram matrices and its brute-force λ₁."""
    part = load_partition("synthetic", 0, 1, "iid", max_train=N, max_test=1)
    spec = ModelSpec("tiny-llava", gradient_checkpointing=request.param)
    model = trained_lora(build_model(spec, len(part.labels), part.task).double())
    model.answers = tuple(part.labels)
    samples = part.train
    return model, samples, grams(model, samples, None), brute_force_eigenvalues(model, samples, "loss")


@pytest.mark.parametrize("size", range(1, N + 1))
def test_pieces_equal_one_pass_and_brute_force(size, llava):
    model, samples, one_pass, expected = llava
    pieced = grams(model, samples, size)
    for gram, whole in zip(pieced, one_pass, strict=True):
        assert gram.shape == whole.shape == (N, N) and float(whole.abs().max()) > 0
        torch.testing.assert_close(gram, whole, rtol=1e-9, atol=1e-12 * float(whole.abs().max()))
    eigenvalues = np.array([principal_eigenvalue(gram) for gram in pieced])
    assert (expected > 0).all() and relative_error(eigenvalues, expected) <= 1e-6


@pytest.mark.parametrize("checkpointing", [False, True])
def test_scoring_recomputes_the_blocks_the_model_checkpoints(checkpointing):
    """With gradient checkpointing, every LoRA matrix of a block runs twice per piece (the forward
    pass and its recomputation in the backward pass), in eval mode as in training; after scoring
    the blocks are the model's own again."""
    part = load_partition("synthetic", 0, 1, "iid", max_train=N, max_test=1)
    model = build_model(ModelSpec("tiny-llava", gradient_checkpointing=checkpointing), len(part.labels),
                        part.task)
    model.answers = tuple(part.labels)
    lora = next(m for n, m in model.named_modules() if n.startswith(model.layer_names[0]) and "lora_A" in n
                and isinstance(m, torch.nn.Linear))
    calls = []
    lora.register_forward_hook(lambda *args: calls.append(torch.is_grad_enabled()))
    layer_scores(model, part.train, piece_size=2)
    assert len(calls) == len(piece_bounds(N, 2)) * (2 if checkpointing else 1)
    assert all("forward" not in m.__dict__ for m in model.modules())


@pytest.mark.parametrize("size", [0, -1, 1.5, True, "4"])
def test_piece_size_must_be_a_positive_int(size):
    with pytest.raises(ValueError, match=f"^LNTK piece size must be a positive int, got {size!r}$"):
        piece_bounds(4, size)


def test_piece_bounds_cover_the_samples_in_order():
    assert piece_bounds(5, 2) == [(0, 2), (2, 4), (4, 5)]
    assert piece_bounds(5, 8) == piece_bounds(5, None) == [(0, 5)]


def test_piece_inputs_of_packed_patches_follow_the_grid():
    """Qwen2-VL packs every image's patches in one tensor, image i owning t·h·w rows of it."""
    grid = torch.tensor([[1, 1, 2], [1, 1, 3], [1, 2, 2]])
    emb = {"pixel_values": torch.arange(18).reshape(9, 2), "image_grid_thw": grid,
           "input_ids": torch.arange(12).reshape(3, 4)}
    part = piece_inputs(emb, 3, 1, 3)
    torch.testing.assert_close(part["pixel_values"], emb["pixel_values"][2:])
    torch.testing.assert_close(part["image_grid_thw"], grid[1:])
    torch.testing.assert_close(part["input_ids"], emb["input_ids"][1:])
    assert piece_inputs(emb, 3, 0, 3) is emb


def test_the_per_sample_fallback_in_pieces_equals_one_pass(llava):
    """The path for what hooks cannot score (per-sample gradients) holds the samples of one piece at a
    time too, with the same Θˡ as all of them at once."""
    model, samples, _, _ = llava
    groups = [layer_parameter_names(model, layer) for layer in range(len(model.layer_names))]
    batch = model.collate(samples)
    labels = batch.pop("labels")
    emb = model.embed(batch)
    whole = lntk.per_sample_grams(model, emb, labels, groups, "loss")
    pieced = lntk.per_sample_grams(model, emb, labels, groups, "loss", piece_bounds(N, 3))
    for gram, one in zip(pieced, whole, strict=True):
        assert float(one.abs().max()) > 0
        torch.testing.assert_close(gram, one, rtol=1e-9, atol=1e-12 * float(one.abs().max()))
