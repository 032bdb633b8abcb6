"""Baseline layer scorers (tasks.scores) on tiny-vilt: shape, sign, and each criterion's definition."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tasks
from tasks.scores import BASELINE_SCORERS, SCORERS, score_layers


@pytest.fixture(scope="module")
def data():
    return tasks.load_partition("synthetic", 0, 1, "iid", max_train=8, max_test=4)


def build(data, adapter="lora", double=False):
    spec = tasks.ModelSpec("tiny-vilt", adapter=adapter, seed=0)
    model = tasks.build_model(spec, len(data.labels), data.task)
    return model.double() if double else model


def dense(model, layer):
    """A layer's own (non-LoRA) parameters, the weights every baseline scores."""
    prefixes = model.layer_prefixes[layer]
    return [(n, p) for n, p in model.named_parameters()
            if "lora_" not in n and any(n == q or n.startswith(q + ".") for q in prefixes)]


def mean_over_layer(model, saliency):
    return np.array([sum(float(saliency[n].detach().sum()) for n, _ in dense(model, layer))
                     / sum(p.numel() for _, p in dense(model, layer))
                     for layer in range(len(model.layer_names))])


def loss_grads(model, samples):
    """Reference ∂L/∂θ of every dense layer weight with a plain backward pass."""
    model.eval()
    params = dict(model.named_parameters())
    names = [n for layer in range(len(model.layer_names)) for n, _ in dense(model, layer)]
    for p in model.parameters():
        p.requires_grad_(False)
    for n in names:
        params[n].requires_grad_(True)
    batch = model.collate(samples)
    labels = batch.pop("labels")
    grads = torch.autograd.grad(model.loss(model(batch), labels), [params[n] for n in names])
    return dict(zip(names, grads, strict=True))


@pytest.mark.parametrize("scorer", BASELINE_SCORERS)
def test_every_baseline_gives_finite_nonnegative_per_layer_scores(data, scorer):
    model = build(data)
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    model.train()
    scores = score_layers(model, data.train[:4], scorer)
    assert scores.shape == (len(model.layer_names),)
    assert np.isfinite(scores).all() and (scores >= 0).all() and scores.sum() > 0
    assert model.training, "the scorer must restore train mode"
    assert flags == {n: p.requires_grad for n, p in model.named_parameters()}


def test_magnitude_ranks_a_scaled_up_layer_first(data):
    model = build(data)
    before = score_layers(model, data.train[:2], "magnitude")
    target = int(np.argmin(before))
    with torch.no_grad():
        for _, p in dense(model, target):
            p.mul_(10.0)
    after = score_layers(model, data.train[:2], "magnitude")
    assert int(np.argmax(after)) == target
    np.testing.assert_allclose(np.delete(after, target), np.delete(before, target))


def test_snip_and_rgn_follow_their_definitions(data):
    model = build(data, adapter="layer")
    samples = data.train[:6]
    snip = score_layers(model, samples, "snip")
    rgn = score_layers(model, samples, "rgn")
    grads = loss_grads(model, samples)
    params = dict(model.named_parameters())
    expected = mean_over_layer(model, {n: (params[n] * g).abs() for n, g in grads.items()})
    np.testing.assert_allclose(snip, expected, rtol=1e-4)
    expected_rgn = [np.mean([float(grads[n].norm() / p.norm()) for n, p in dense(model, layer)
                             if float(p.norm()) > 0]) for layer in range(len(model.layer_names))]
    np.testing.assert_allclose(rgn, expected_rgn, rtol=1e-4)


def test_fishmask_is_the_sum_of_per_sample_squared_gradients(data):
    model = build(data, adapter="layer")
    samples = data.train[:3]
    total = {}
    for sample in samples:
        for n, g in loss_grads(model, [sample]).items():
            total[n] = total.get(n, 0) + g.double() ** 2
    np.testing.assert_allclose(score_layers(model, samples, "fishmask"), mean_over_layer(model, total),
                               rtol=1e-4)


def test_grasp_and_gradflow_use_the_hessian_gradient_product(data):
    """Hg against central finite differences of the gradient along g (float64 model)."""
    model = build(data, adapter="layer", double=True)
    samples = data.train[:4]
    grads = loss_grads(model, samples)
    params = dict(model.named_parameters())
    eps = 1e-4
    with torch.no_grad():
        for n, g in grads.items():
            params[n].add_(eps * g)
    plus = loss_grads(model, samples)
    with torch.no_grad():
        for n, g in grads.items():
            params[n].sub_(2 * eps * g)
    minus = loss_grads(model, samples)
    with torch.no_grad():
        for n, g in grads.items():
            params[n].add_(eps * g)
    hg = {n: (plus[n] - minus[n]) / (2 * eps) for n in grads}
    raw = mean_over_layer(model, {n: params[n].detach() * h for n, h in hg.items()})
    flow = mean_over_layer(model, {n: (params[n].detach() * h).abs() for n, h in hg.items()})
    grasp = score_layers(model, samples, "grasp")
    np.testing.assert_allclose(grasp, raw - raw.min(), rtol=1e-3, atol=1e-9 * np.abs(raw).max())
    assert grasp.min() == 0.0
    np.testing.assert_allclose(score_layers(model, samples, "gradflow"), flow, rtol=1e-3)


def test_synflow_is_data_free(data):
    model = build(data)
    question = data.train[0].question
    same_shape = [s for s in data.train if s.question == question]
    assert len(same_shape) >= 2
    a = score_layers(model, same_shape[:1], "synflow")
    b = score_layers(model, same_shape[1:2], "synflow")
    np.testing.assert_array_equal(a, b)
    assert (a > 0).all()


def test_baselines_are_valid_strategy_names_and_unknown_scorer_fails(data):
    from methods import SELECTIONS

    assert set(BASELINE_SCORERS) <= set(SELECTIONS)
    assert SCORERS[0] == "lntk" and len(SCORERS) == 8
    with pytest.raises(ValueError, match="score = 'nope' is unknown"):
        score_layers(build(data), data.train[:2], "nope")
