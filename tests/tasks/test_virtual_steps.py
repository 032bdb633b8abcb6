"""Virtual steps (``physical-batch``): a batch run in chunks takes the step the whole batch takes,
plainly and under DP-SGD (each example clipped, the clipped sum noised once and divided by the
expected batch), and a validation split holds out training questions, never test questions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tasks
from privacy.mechanisms import SamplePlan, _noise_meter
from tasks.data.validation import hold_out
from tests.helpers.prepared import prepared_model

LAYERS = {"tiny-vilt": [0, 2], "tiny-llava": [0, 1]}


def _trained(name: str, physical: int, privacy: SamplePlan | None) -> dict[str, torch.Tensor]:
    model, samples = prepared_model(name, LAYERS[name], samples=10)
    mask = np.zeros(len(model.layer_names), dtype=bool)
    mask[LAYERS[name]] = True
    tasks.train(model, samples, mask, steps=2, batch_size=10, lr=0.01, head_lr=0.01, seed=0,
                privacy=privacy, physical_batch=physical)
    return {n: p.detach().clone() for n, p in model.named_parameters()}


# q = 1: every example in every batch, and σ = 0, so the two runs draw the same batches, no noise
NOISELESS = SamplePlan(noise_multiplier=0.0, clip=1e-3, sample_rate=1.0, delta=1e-3, epsilon=1.0)


@pytest.mark.parametrize(("name", "physical", "privacy"), [
    ("tiny-vilt", 3, None), ("tiny-vilt", 4, None), ("tiny-vilt", 3, NOISELESS), ("tiny-vilt", 4, NOISELESS),
    ("tiny-llava", 3, None),  # token-averaged loss (per-example DP gradients: tests/tasks/test_privacy.py)
], ids=["plain-3", "plain-4", "dp-sgd-3", "dp-sgd-4", "generator-3"])
def test_a_batch_in_chunks_takes_the_whole_batchs_step(name, physical, privacy):
    """Chunks of 3 (3+3+3+1) or 4 of a batch of 10 move every parameter as the batch in one pass
    does: AdamW's first steps move a parameter by about lr whatever its gradient's size, so a chunk
    that stepped on its own, a missing chunk or a chunk's gradient weighed wrongly shows as a
    difference of the order of lr = 0.01, far above the tolerance. A generator's loss averages over
    answer tokens, and the answers differ in length, so weighing its chunks by examples would show;
    under DP-SGD the clip (1e-3) binds on every example, so dividing by a chunk's size instead of the
    expected batch would show."""
    whole = _trained(name, 0, privacy)
    before = {n: p.detach().clone() for n, p in prepared_model(name, LAYERS[name], samples=10)[0]
              .named_parameters()}
    assert any(not torch.equal(whole[n], before[n]) for n in whole)  # the step moved something
    chunked = _trained(name, physical, privacy)
    for n in whole:
        torch.testing.assert_close(chunked[n], whole[n], rtol=1e-4, atol=1e-6, msg=n)


def test_dp_sgd_in_chunks_adds_the_noise_once_a_step(monkeypatch):
    """Two steps of a batch of 10 in chunks of 3: two noise draws, not one per chunk (which would
    add twice the variance the accountant counts)."""
    meter = _noise_meter()
    calls = []
    original = meter.add_noise
    monkeypatch.setattr(meter, "add_noise", lambda self: calls.append(1) or original(self))
    _trained("tiny-vilt", 3, SamplePlan(noise_multiplier=1.0, clip=1e-3, sample_rate=1.0, delta=1e-3,
                                        epsilon=1.0))
    assert len(calls) == 2


def test_a_physical_batch_below_zero_is_refused():
    model, samples = prepared_model("tiny-vilt", LAYERS["tiny-vilt"])
    with pytest.raises(ValueError, match="physical_batch must be a positive int, got -1"):
        tasks.train(model, samples, np.ones(len(model.layer_names), bool), steps=1, batch_size=4, lr=0.1,
                    physical_batch=-1)


def test_the_validation_split_holds_out_training_questions_only():
    partition = tasks.load_partition("synthetic", 0, 2, "iid", seed=0, max_test=5)
    split = hold_out(partition, 0.25, seed=7)
    n = len(partition.train)
    ids = {id(s) for s in partition.train}
    assert len(split.test) == round(0.25 * n) and len(split.train) == n - len(split.test)
    assert {id(s) for s in split.test} | {id(s) for s in split.train} == ids  # a partition of the train set
    assert not {id(s) for s in split.test} & {id(s) for s in split.train}
    assert not {id(s) for s in split.test} & {id(s) for s in partition.test}  # no test question
    again = hold_out(partition, 0.25, seed=7)
    assert [id(s) for s in again.test] == [id(s) for s in split.test]  # seeded
    assert [id(s) for s in hold_out(partition, 0.25, seed=8).test] != [id(s) for s in split.test]
    capped = hold_out(partition, 0.25, seed=7, max_samples=3)  # the held-out rest trains
    assert len(capped.test) == 3 and len(capped.train) == n - 3
    assert hold_out(partition, 0.0, seed=7) is partition


@pytest.mark.parametrize("share", [-0.1, 1.0])
def test_a_validation_share_outside_0_1_is_refused_in_one_line(share):
    partition = tasks.load_partition("synthetic", 0, 2, "iid", seed=0, max_test=5)
    with pytest.raises(ValueError, match=f"validation-share = {share!r} is not in"):
        hold_out(partition, share, seed=0)

