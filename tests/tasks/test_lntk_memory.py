"""LNTK scoring within a training step's memory (`tasks.lntk_pieces`): the bytes autograd keeps are
counted right on a planted case, scoring's pieces keep no more than a training step of the client's
batch and budget does, with and without gradient checkpointing, and the client sizes its pieces so.

Memory here is the bytes autograd keeps for the backward pass (`kept_bytes`: saved tensors and the
inputs checkpointed blocks keep), the part of a pass's peak that grows with its samples."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tasks.lntk as lntk
from tasks import ModelSpec, build_model, layer_parameter_names, layer_scores, load_partition
from tasks.lntk_hooks import forward_kept, hook_sites
from tasks.lntk_pieces import TrainingStep, checkpointed, kept_bytes, memory_piece, training_kept

FLOAT = 4


def test_kept_bytes_counts_what_the_backward_pass_needs_and_not_the_weights():
    """Linear(8, 16) -> tanh -> Linear(16, 4) on 5 samples. Training the first weight keeps its
    input (5 × 8 floats) and tanh's output (5 × 16); training only the last keeps tanh's output,
    its input; the weights, which the input gradients read, are the model's own and not counted."""
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    x = torch.randn(5, 8)
    for trained, expected in ((0, 5 * 8 + 5 * 16), (2, 5 * 16)):
        for i, p in enumerate(model.parameters()):
            p.requires_grad_(i == trained)
        with kept_bytes(model) as kept:
            model(x).sum()
        assert kept[0] == expected * FLOAT


def test_memory_piece_is_the_batch_times_the_ratio_at_least_one():
    step = TrainingStep(batch_size=8, budget=2)
    assert memory_piece(step, scoring_bytes=300, training_bytes=100, n=16) == 2  # 8 · 100 · 0.99 // 300
    assert memory_piece(step, scoring_bytes=100, training_bytes=1, n=16) == 1
    assert memory_piece(step, scoring_bytes=100, training_bytes=100, n=16) == 7  # 1 % below the step
    assert memory_piece(step, scoring_bytes=100, training_bytes=1000, n=4) == 4
    assert step.reference_mask(5).tolist() == [False, False, False, True, True]


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "checkpointed"])
def llava(request):
    """tiny-llava with its projector frozen (``head = "frozen"``, as the generative benchmark runs),
    so a training step of the last block keeps the least; 16 samples."""
    part = load_partition("synthetic", 0, 1, "iid", max_train=16, max_test=1)
    spec = ModelSpec("tiny-llava", gradient_checkpointing=request.param, frozen_head=True)
    model = build_model(spec, len(part.labels), part.task)
    model.answers = tuple(part.labels)
    model.eval()
    return model, part.train


def kept(model, samples, size: int, budget: int) -> tuple[int, int]:
    """What scoring ``size`` samples in one pass keeps, and what a training step of all ``samples``
    with ``budget`` layers (the reference mask) keeps."""
    groups = [layer_parameter_names(model, layer) for layer in range(len(model.layer_names))]
    batch = model.collate(samples)
    labels = batch.pop("labels")
    emb = model.embed(batch)
    with checkpointed(model):
        scoring = forward_kept(hook_sites(model, groups),
                               next(lntk._pieces(model, emb, labels, "loss", [(0, size)])), model)
    mask = TrainingStep(len(samples), budget).reference_mask(len(groups))
    return scoring, training_kept(model, emb, labels, mask)


@pytest.mark.parametrize("scored", [8, 16], ids=["score-batch=batch", "score-batch=2x-batch"])
def test_scoring_keeps_no_more_than_a_training_step_of_the_same_batch(llava, scored):
    """Training batch 8, budget 1: scoring every one of 8 (or 16) samples' blocks at once would keep
    more than the step does; the pieces scoring chooses keep no more."""
    model, samples = llava
    step = TrainingStep(batch_size=8, budget=1)
    piece = layer_scores(model, samples[:scored], step=step).piece_size
    pieced, training = kept(model, samples[:8], piece, step.budget)
    whole, _ = kept(model, samples[:8], 8, step.budget)
    assert pieced <= training
    if not model.get_submodule(model.layer_names[0]).gradient_checkpointing:
        assert whole > training and piece < 8  # where it matters: all at once would pass the step


def test_the_client_sizes_its_pieces_by_its_training_step(monkeypatch, tmp_path):
    """The ClientApp's scoring (tiny-llava, batch 4, budget 1, 8 scored samples) runs in the pieces
    its training step allows, not all 8 at once."""
    from tests.tasks.test_generative import simulate

    seen = []
    real = lntk.layer_scores

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        seen.append((kwargs.get("step"), result.piece_size))
        return result

    monkeypatch.setattr("tasks.scores.layer_scores", spy)
    code, out, err = simulate("--num-clients", "1", "--run-config",
                              "model='tiny-llava' dtype='float32' head='frozen' strategy='lntk' budgets='1' "
                              "num-server-rounds=1 local-steps=1 batch-size=4 score-batch-size=8 "
                              "max-train-samples=8 max-test-samples=2 "
                              f"results-dir='{tmp_path}' run-name='run'")
    assert code == 0, out[-2000:] + err[-2000:]
    assert seen and all(step == TrainingStep(4, 1) and 1 <= piece < 8 for step, piece in seen), seen



def test_the_training_step_is_measured_as_training_runs_it_with_lora_in_the_bases_dtype():
    """A bfloat16 base: training computes its LoRA products in bfloat16 from float32 masters
    (`tasks.train.MasterWeights`), so its step keeps fewer bytes than with float32 adapters; the
    measure trains as training does, and leaves the adapters float32 and the flags as they were."""
    part = load_partition("synthetic", 0, 1, "iid", max_train=4, max_test=1)
    spec = ModelSpec("tiny-llava", dtype="bfloat16", frozen_head=True)
    model = build_model(spec, len(part.labels), part.task)
    model.answers = tuple(part.labels)
    batch = model.collate(part.train)
    labels = batch.pop("labels")
    emb = model.embed(batch)
    mask = TrainingStep(4, 2).reference_mask(len(model.layer_names))
    before = {name: (p.dtype, p.requires_grad) for name, p in model.named_parameters()}
    masters, plain = (training_kept(model, emb, labels, mask, on) for on in (True, False))
    assert masters < 0.9 * plain
    assert {name: (p.dtype, p.requires_grad) for name, p in model.named_parameters()} == before
