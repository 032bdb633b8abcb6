"""LNTK scores (paper §4.1 Eq. 8-10): exact principal eigenvalues against a brute-force Jacobian."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tasks.lntk as lntk
from tasks import build_model, layer_parameter_names, layer_scores
from tasks.lntk import principal_eigenvalue
from tests.test_models import make_samples, save_tiny_git


def brute_force_eigenvalues(model, samples, mode: str) -> np.ndarray:
    """λ₁ of Jˡ Jˡᵀ with Jˡ built row by row from float64 backward passes, one sample at a time."""
    model.eval()
    named = dict(model.named_parameters())
    rows: list[list[torch.Tensor]] = [[] for _ in model.layer_names]
    for sample in samples:
        batch = model.collate([sample])
        logits = model(batch)
        outputs = [model.loss(logits, batch["labels"])] if mode == "loss" else list(logits[0])
        for out in outputs:
            for layer in range(len(model.layer_names)):
                params = [named[n] for n in layer_parameter_names(model, layer)]
                grads = torch.autograd.grad(out, params, retain_graph=True, allow_unused=True)
                flat = [
                    (torch.zeros_like(p) if g is None else g).reshape(-1)
                    for p, g in zip(params, grads, strict=True)
                ]
                rows[layer].append(torch.cat(flat))
    values = []
    for layer_rows in rows:
        jac = torch.stack(layer_rows).to(torch.float64)
        values.append(float(torch.linalg.eigvalsh(jac @ jac.T)[-1]))
    return np.array(values)


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b) / np.abs(b)))


@pytest.fixture(scope="module")
def samples():
    return make_samples(6, seed=1)


@pytest.mark.parametrize(("adapter", "mode"), [("lora", "loss"), ("lora", "logit"), ("layer", "loss")])
def test_eigenvalues_are_exact(adapter, mode, samples):
    model = build_model("tiny-vilt", 5, adapter=adapter).double()
    result = layer_scores(model, samples, mode)
    expected = brute_force_eigenvalues(model, samples, mode)
    assert result.eigenvalues.shape == (4,) and (expected > 0).all()
    assert relative_error(result.eigenvalues, expected) <= 1e-6
    np.testing.assert_allclose(result.scores, expected / expected.sum(), rtol=1e-6)
    assert result.seconds > 0


def test_generic_hf_checkpoint_eigenvalues_are_exact(tmp_path, samples):
    save_tiny_git(tmp_path)
    model = build_model(f"hf:{tmp_path}", 5).double()
    expected = brute_force_eigenvalues(model, samples[:4], "loss")
    assert relative_error(layer_scores(model, samples[:4]).eigenvalues, expected) <= 1e-6


def test_lora_at_initialisation_only_b_has_gradient(samples):
    """B = 0 at init, so ∂loss/∂A = 0 and the LNTK of a layer is the LNTK of its B matrices."""
    model = build_model("tiny-vilt", 5).double()
    model.eval()
    batch = model.collate(samples)
    model.loss(model(batch), batch["labels"]).backward()
    named = dict(model.named_parameters())
    names = layer_parameter_names(model, 0)
    assert all(torch.count_nonzero(named[n].grad) == 0 for n in names if "lora_A" in n)
    assert all(torch.count_nonzero(named[n].grad) > 0 for n in names if "lora_B" in n)
    expected = brute_force_eigenvalues(model, samples, "loss")
    assert relative_error(layer_scores(model, samples).eigenvalues, expected) <= 1e-6


def test_loop_fallback_matches_vmap_and_warns(monkeypatch, samples):
    model = build_model("tiny-vilt", 5).double()
    reference = layer_scores(model, samples).eigenvalues

    def untraceable(*args, **kwargs):
        raise RuntimeError("vmap: data-dependent control flow")

    monkeypatch.setattr(lntk, "vmap", untraceable)
    with pytest.warns(RuntimeWarning, match="falls back to a loop"):
        looped = layer_scores(model, samples).eigenvalues
    assert relative_error(looped, reference) <= 1e-9


def test_lanczos_matches_eigvalsh():
    rng = np.random.default_rng(0)
    jac = torch.from_numpy(rng.normal(size=(40, 300)))
    gram = jac @ jac.T
    exact = principal_eigenvalue(gram)
    assert exact == pytest.approx(float(torch.linalg.eigvalsh(gram)[-1]), rel=1e-12)
    assert principal_eigenvalue(gram, lanczos_above=10) == pytest.approx(exact, rel=1e-9)


def test_paper_mode_follows_algorithm_1(samples):
    model = build_model("tiny-vilt", 5, adapter="layer").double()
    result = layer_scores(model, samples, "paper")
    model.eval()
    batch = model.collate(samples)
    logits = model(batch)
    model.zero_grad()
    model.loss(logits, batch["labels"]).backward()
    n, c = logits.shape
    named = dict(model.named_parameters())
    expected = []
    for layer in range(4):
        total = 0.0
        for name in layer_parameter_names(model, layer):
            g2 = n * c * named[name].grad.double() ** 2  # Alg. 1 line 13, n·C times
            jac = g2.view(g2.shape[0], -1)  # line 24
            total += float(torch.linalg.eigvalsh(jac @ jac.T)[-1])  # lines 25-27
        expected.append(total)
    np.testing.assert_allclose(result.eigenvalues, expected, rtol=1e-9)
    assert result.scores.sum() == pytest.approx(1.0)


def test_scores_normalise_restore_mode_and_reject_bad_input(samples):
    model = build_model("tiny-vilt", 5)
    model.train()
    result = layer_scores(model, samples)
    assert model.training
    assert result.scores.sum() == pytest.approx(1.0) and (result.scores >= 0).all()
    with pytest.raises(ValueError, match="unknown LNTK mode 'hessian'"):
        layer_scores(model, samples, "hessian")
    with pytest.raises(ValueError, match="samples is empty"):
        layer_scores(model, [])


def test_scores_are_uniform_when_all_eigenvalues_vanish(samples):
    model = build_model("tiny-vilt", 5)
    with torch.no_grad():  # a zero head makes every loss gradient upstream of it zero
        model.head.weight.zero_()
    result = layer_scores(model, samples)
    assert (result.eigenvalues == 0).all()
    np.testing.assert_array_equal(result.scores, np.full(4, 0.25))
