"""The LNTK scores a ``dp = "sample"`` site releases: clipped per example (against brute-force
per-example gradients), of L2 sensitivity C² (a planted worst case reaches it), noised with std
z·C² from fresh entropy, and composed with DP-SGD into the one planned ε (PRV agrees to 1 %)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tasks
from privacy.mechanisms import SamplePlan, epsilon_spent, fresh_rng, noise_scores, plan
from settings import ConfigError, RunConfig, default_config
from tasks.adapters import layer_parameter_names
from tasks.lntk import clip_grams, layer_scores
from tasks.names import BASELINE_SCORERS, DP_SAT_OUT


def _model_and_samples(n: int = 4):
    """tiny-vilt with every LoRA B drawn at random (at its zero init, A has no gradient)."""
    partition = tasks.load_partition("synthetic", 0, 1, "iid", seed=0, max_train=8, max_test=2)
    model = tasks.build_model(tasks.ModelSpec("tiny-vilt", seed=0), len(partition.labels))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    return model, partition.train[:n]


def _rows(model, samples) -> list[list[torch.Tensor]]:
    """Per example, per layer: the flattened gradient of that example's loss (eval mode), one
    backward pass per example: the Jacobian rows of mode "loss" computed without the hooks."""
    model.eval()
    params = dict(model.named_parameters())
    groups = [[params[n] for n in layer_parameter_names(model, layer)]
              for layer in range(len(model.layer_names))]
    flags = {n: p.requires_grad for n, p in params.items()}
    for group in groups:
        for p in group:
            p.requires_grad_(True)
    rows = []
    for sample in samples:
        one = model.collate([sample])
        loss = model.loss(model(one), one["labels"])
        grads = iter(torch.autograd.grad(loss, [p for group in groups for p in group]))
        rows.append([torch.cat([next(grads).flatten() for _ in group]).double() for group in groups])
    for n, p in params.items():
        p.requires_grad_(flags[n])
    return rows


def _brute_eigenvalues(rows: list[list[torch.Tensor]], clip: float) -> np.ndarray:
    norms = [float(torch.sqrt(sum((r ** 2).sum() for r in example))) for example in rows]
    scaled = [[r * min(1.0, clip / norm) for r in example] for example, norm in zip(rows, norms, strict=True)]
    out = []
    for layer in range(len(rows[0])):
        j = torch.stack([example[layer] for example in scaled])
        out.append(float(torch.linalg.eigvalsh(j @ j.T)[-1]))
    return np.array(out)


def test_clipped_scores_are_the_eigenvalues_of_the_clipped_per_example_jacobians():
    model, samples = _model_and_samples()
    rows = _rows(model, samples)
    norms = sorted(float(torch.sqrt(sum((r ** 2).sum() for r in example))) for example in rows)
    clip = (norms[1] + norms[2]) / 2  # two examples clipped, two not: both branches
    assert norms[1] < 0.98 * clip and norms[2] > 1.02 * clip
    got = layer_scores(model, samples, clip=clip).eigenvalues
    want = _brute_eigenvalues(rows, clip)
    assert want.min() > 0 and np.allclose(got, want, rtol=1e-5, atol=0)
    unclipped = layer_scores(model, samples).eigenvalues
    assert np.allclose(unclipped, _brute_eigenvalues(rows, 1e9), rtol=1e-5)
    assert (unclipped - got).max() > 0.01 * unclipped.max()  # the clip changed them


def test_one_example_moves_the_clipped_eigenvalues_by_at_most_clip_squared_in_l2():
    """Planted worst case: a copy of the batch's only example makes every layer's rows parallel, so
    every layer's λ₁ doubles. With the whole example clipped to C the increments sum to C² exactly
    (L2 ≤ C²); clipping each layer to C instead would move each by C², C²·√L in L2."""
    model, samples = _model_and_samples(1)
    norm = float(torch.sqrt(sum((r ** 2).sum() for r in _rows(model, samples)[0])))
    clip = 0.01 * norm  # the example is clipped
    one = layer_scores(model, samples, clip=clip).eigenvalues
    two = layer_scores(model, samples * 2, clip=clip).eigenvalues
    moved = two - one
    assert moved.sum() == pytest.approx(clip ** 2, rel=1e-6) and (moved > 0).sum() >= 2
    assert np.linalg.norm(moved) <= clip ** 2 * (1 + 1e-9)


def test_a_score_release_has_noise_of_std_z_clip_squared_from_fresh_entropy():
    dp = SamplePlan(noise_multiplier=1.0, clip=0.5, sample_rate=0.1, delta=1e-5, epsilon=1.0, score_noise=2.0)
    level = np.full(20_000, 100.0)  # far above 0, so the clamp at 0 never acts
    first, second = noise_scores(level, dp, fresh_rng()), noise_scores(level, dp, fresh_rng())
    assert float((first - level).std()) == pytest.approx(2.0 * 0.5 ** 2, rel=0.03)
    assert abs(float((first - level).mean())) < 4 * 0.5 / np.sqrt(20_000)
    assert not np.array_equal(first, second)
    assert noise_scores(np.zeros(5), dp, fresh_rng()).min() >= 0  # post-processing keeps them valid


def test_the_score_releases_and_the_steps_spend_the_target_together():
    from opacus.accountants import PRVAccountant

    target = plan(3.0, 0.0, 1.0, 150, 16, 60, score_releases=3, score_share=0.2, score_batch=8)
    alone = plan(3.0, 0.0, 1.0, 150, 16, 60)
    rate = 8 / 150
    assert target.score_rate == pytest.approx(rate) and target.score_noise > 0
    rows = [(target.noise_multiplier, target.sample_rate, 60), (target.score_noise, rate, 3)]
    spent = epsilon_spent(np.array(rows), target.delta)
    assert 2.97 <= spent <= 3.0
    assert 0.59 <= epsilon_spent(np.array(rows[1:]), target.delta) <= 0.6  # the scores' share
    prv = PRVAccountant()
    prv.history = rows
    assert spent == pytest.approx(prv.get_epsilon(target.delta), rel=0.01)
    assert target.noise_multiplier > alone.noise_multiplier  # the scores cost the training noise


def _config(**values) -> RunConfig:
    return RunConfig.from_mapping({**default_config(), "dp": "sample", **values})


def test_a_site_withholds_the_score_release_that_would_pass_its_budget():
    config = _config(**{"num-server-rounds": 2, "local-steps": 5, "batch-size": 4, "dp-epsilon": 2.0,
                        "strategy": "lntk", "score-batch-size": 4})
    privacy = config.privacy.component
    history = np.zeros((0, 3))
    for _ in range(2):  # the planned releases: a score vector, then a round, twice
        budget = privacy.budget(config, 40, history)
        assert budget.scores_refused() is None and budget.score_clip == 1.0
        scores, rows = budget.release_scores(np.ones(4))
        assert not np.array_equal(scores, budget.release_scores(np.ones(4))[0])  # fresh noise each time
        budget = privacy.budget(config, 40, np.vstack([history, rows]))
        assert budget.sit_out(5) is None
        history = np.vstack([budget.history, budget.record(5)])
    refused = privacy.budget(config, 40, history).scores_refused()
    assert refused[DP_SAT_OUT] == 1 and refused["dp-epsilon"] <= 2.0 < refused["dp-epsilon-next"]


@pytest.mark.parametrize(("values", "message"), [
    ({"strategy": BASELINE_SCORERS[3]}, rf"^strategy = '{BASELINE_SCORERS[3]}' is not supported with "
                                        r"dp = 'sample': its \w+ scores have no bounded sensitivity"),
    ({"strategy": "lntk", "score-mode": "paper"},
     r"^score-mode = 'paper' is not supported with dp = 'sample'"),
])
def test_scores_without_a_bounded_sensitivity_are_refused_in_one_line(values, message):
    with pytest.raises(ConfigError, match=message):
        _config(**values)
    RunConfig.from_mapping({**default_config(), **values})  # fine without dp


def test_a_non_finite_gradient_is_left_out_of_the_clipped_scores_not_sent_as_nan():
    grams = [torch.tensor([[1.0, 0.5, float("nan")], [0.5, 2.0, float("nan")], [float("nan")] * 3],
                          dtype=torch.float64) for _ in range(2)]
    clipped = clip_grams(grams, 1.0)
    assert all(torch.isfinite(g).all() and not g[2].any() and not g[:, 2].any() for g in clipped)
    dp = SamplePlan(noise_multiplier=1.0, clip=1.0, sample_rate=0.1, delta=1e-5, epsilon=1.0, score_noise=1.0)
    assert np.isfinite(noise_scores(np.array([np.nan, np.inf, 1.0]), dp, fresh_rng())).all()
