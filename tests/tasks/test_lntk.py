"""LNTK scores (paper §4.1 Eq. 8-10): exact principal eigenvalues against a brute-force Jacobian,
and the hook-based Gram matrices (tasks/lntk_hooks.py) against per-sample gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tasks.lntk as lntk
import tasks.lntk_hooks as lntk_hooks
from tasks import ModelSpec, build_model, layer_parameter_names, layer_scores
from tasks.lntk import principal_eigenvalue
from tasks.lntk_pieces import piece_bounds
from tests.tasks.test_models import make_samples, save_tiny_git


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
    model = build_model(ModelSpec("tiny-vilt", adapter=adapter), 5).double()
    result = layer_scores(model, samples, mode)
    expected = brute_force_eigenvalues(model, samples, mode)
    assert result.eigenvalues.shape == (4,) and (expected > 0).all()
    assert relative_error(result.eigenvalues, expected) <= 1e-6
    np.testing.assert_allclose(result.scores, expected / expected.sum(), rtol=1e-6)
    assert result.seconds > 0


def test_generic_hf_checkpoint_eigenvalues_are_exact(tmp_path, samples):
    save_tiny_git(tmp_path)
    model = build_model(ModelSpec(f"hf:{tmp_path}"), 5).double()
    expected = brute_force_eigenvalues(model, samples[:4], "loss")
    assert relative_error(layer_scores(model, samples[:4]).eigenvalues, expected) <= 1e-6


def test_lora_at_initialisation_only_b_has_gradient(samples):
    """B = 0 at init, so ∂loss/∂A = 0 and the LNTK of a layer is the LNTK of its B matrices."""
    model = build_model(ModelSpec("tiny-vilt"), 5).double()
    model.eval()
    batch = model.collate(samples)
    model.loss(model(batch), batch["labels"]).backward()
    named = dict(model.named_parameters())
    names = layer_parameter_names(model, 0)
    assert all(torch.count_nonzero(named[n].grad) == 0 for n in names if "lora_A" in n)
    assert all(torch.count_nonzero(named[n].grad) > 0 for n in names if "lora_B" in n)
    expected = brute_force_eigenvalues(model, samples, "loss")
    assert relative_error(layer_scores(model, samples).eigenvalues, expected) <= 1e-6


@pytest.mark.parametrize("error", [RuntimeError, NotImplementedError, ValueError])
def test_loop_fallback_matches_vmap_and_warns(error, monkeypatch, samples):
    """Every error type vmap raises on a model it cannot map (ValueError: mismatched batch sizes)."""
    model = build_model(ModelSpec("tiny-vilt", adapter="layer"), 5).double()  # LayerNorm: no hooks, vmap
    assert lntk.hook_sites(model, [layer_parameter_names(model, 0)]) is None
    reference = layer_scores(model, samples).eigenvalues

    def untraceable(*args, **kwargs):
        raise error("vmap: data-dependent control flow")

    monkeypatch.setattr(lntk, "vmap", untraceable)
    with pytest.warns(RuntimeWarning, match="falls back to a loop"):
        looped = layer_scores(model, samples).eigenvalues
    assert relative_error(looped, reference) <= 1e-9


def grams_both_ways(model, samples, mode):
    """(hooks, per-sample gradients) Gram matrices of every layer on one embedded batch."""
    model.eval()
    groups = [layer_parameter_names(model, layer) for layer in range(len(model.layer_names))]
    batch = model.collate(samples)
    labels = batch.pop("labels")
    with torch.no_grad():
        emb = model.embed(batch)
    sites = lntk.hook_sites(model, groups)
    assert sites is not None, "every LoRA matrix is a plain Linear / Conv2d"
    pieces = lntk._pieces(model, emb, labels, mode, [(0, len(samples))])
    return lntk.hooked_grams(sites, pieces, groups), lntk.per_sample_grams(model, emb, labels, groups, mode)


def trained_lora(model):
    """LoRA B away from its zero init (as after a round), so that A has a gradient too."""
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.05)
    return model


@pytest.mark.parametrize("mode", ["loss", "logit"])
def test_hooks_equal_per_sample_gradients_on_tiny_vilt(mode, samples):
    model = trained_lora(build_model(ModelSpec("tiny-vilt"), 5).double())
    hooked, reference = grams_both_ways(model, samples, mode)
    rows = len(samples) * (5 if mode == "logit" else 1)
    for fast, exact in zip(hooked, reference, strict=True):
        assert fast.shape == exact.shape == (rows, rows) and fast.dtype == torch.float64
        torch.testing.assert_close(fast, exact, rtol=1e-9, atol=1e-12 * float(exact.abs().max()))
        assert float(exact.abs().max()) > 0


def test_hooks_equal_per_sample_gradients_on_minilm_effnet():
    """The real model: LoRA on EfficientNet 1x1 convolutions and on MiniLM's Linear layers."""
    model = trained_lora(build_model(ModelSpec("minilm-effnet"), 4).double())
    hooked, reference = grams_both_ways(model, make_samples(3, size=64, seed=2, classes=4), "loss")
    assert len(hooked) == 13
    for fast, exact in zip(hooked, reference, strict=True):
        assert float(exact.abs().max()) > 0
        torch.testing.assert_close(fast, exact, rtol=1e-8, atol=1e-10 * float(exact.abs().max()))


def test_hook_failure_warns_and_falls_back_to_per_sample_gradients(monkeypatch, samples):
    model = build_model(ModelSpec("tiny-vilt"), 5).double()
    reference = layer_scores(model, samples).eigenvalues

    def unhookable(*args, **kwargs):
        raise lntk_hooks.NotHookable("Linear input is not batch-first with 6 samples")

    monkeypatch.setattr(lntk, "hooked_grams", unhookable)
    with pytest.warns(RuntimeWarning, match="falling back to per-sample gradients"):
        fallback = layer_scores(model, samples).eigenvalues
    assert relative_error(fallback, reference) <= 1e-9


class Toy(nn.Module):
    """Every case the hooks handle: a 3x3 stride-2 conv (unfold), a 1x1 conv, a Linear called
    twice (shared weights), and a Linear on one vector per sample (misuse "inplace": whose output
    the model then changes in place)."""

    def __init__(self, misuse: str = "") -> None:
        super().__init__()
        self.misuse = misuse
        self.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.point = nn.Conv2d(4, 4, 1, bias=False)
        self.shared = nn.Linear(4, 4)
        self.wide = nn.Linear(16, 16)
        self.out = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.point(torch.tanh(self.conv(x)))  # (n, 4, 4, 4)
        t = h.flatten(2).transpose(1, 2)  # (n, 16, 4)
        if self.misuse == "seq-first":
            t = t.transpose(0, 1)
        t = self.shared(torch.tanh(self.shared(t)))
        if self.misuse == "seq-first":
            t = t.transpose(0, 1)
        v = self.wide(t.mean(-1))
        if self.misuse == "inplace":
            v.mul_(2.0)
        if self.misuse == "functional":
            v = v + F.linear(v, self.wide.weight)
        return self.out(torch.tanh(v))


TOY_GROUPS = [["conv.weight", "conv.bias", "point.weight"], ["shared.weight", "shared.bias"],
              ["wide.weight", "wide.bias", "out.weight"]]


def toy_brute_force(model, x, y, mode):
    named = dict(model.named_parameters())
    grams = []
    for group in TOY_GROUPS:
        rows = []
        for i in range(x.shape[0]):
            logits = model(x[i : i + 1])
            outs = [F.cross_entropy(logits, y[i : i + 1])] if mode == "loss" else list(logits[0])
            for out in outs:
                grads = torch.autograd.grad(out, [named[n] for n in group], retain_graph=True)
                rows.append(torch.cat([g.reshape(-1) for g in grads]))
        jac = torch.stack(rows)
        grams.append(jac @ jac.T)
    return grams


def toy_hooked(model, x, y, mode, size=None):
    """The hooked Gram matrices of the Toy model, its samples in pieces of ``size`` (None: one)."""

    def piece(start, stop):
        def per_sample(logits):
            if mode == "loss":
                return F.cross_entropy(logits, y[start:stop], reduction="none")[:, None]
            return logits

        return lntk_hooks.Piece(stop - start, lambda: model(x[start:stop]), per_sample)

    sites = lntk_hooks.hook_sites(model, TOY_GROUPS)
    pieces = [piece(start, stop) for start, stop in piece_bounds(len(y), size)]
    return lntk_hooks.hooked_grams(sites, pieces, TOY_GROUPS)


@pytest.mark.parametrize(("mode", "misuse"), [("loss", ""), ("logit", ""), ("loss", "inplace")])
def test_hooked_grams_match_brute_force_on_every_module_kind(mode, misuse):
    torch.manual_seed(0)
    model = Toy(misuse).double()
    x, y = torch.randn(5, 3, 8, 8, dtype=torch.float64), torch.tensor([0, 1, 2, 0, 1])
    hooked = toy_hooked(model, x, y, mode)
    for fast, exact in zip(hooked, toy_brute_force(model, x, y, mode), strict=True):
        torch.testing.assert_close(fast, exact, rtol=1e-10, atol=1e-12 * float(exact.abs().max()))
    assert {p.requires_grad for p in model.parameters()} == {True}


@pytest.mark.parametrize(("misuse", "message"), [("functional", "also used outside"),
                                                 ("seq-first", "not batch-first")])
def test_hooked_grams_refuse_what_they_cannot_score(misuse, message):
    torch.manual_seed(0)
    model = Toy(misuse).double().requires_grad_(False)
    x, y = torch.randn(5, 3, 8, 8, dtype=torch.float64), torch.tensor([0, 1, 2, 0, 1])
    with pytest.raises(lntk_hooks.NotHookable, match=message):
        toy_hooked(model, x, y, "loss")
    assert not any(p.requires_grad for p in model.parameters()), "flags restored"
    assert not any(m._forward_hooks for m in model.modules()), "hooks removed"


@pytest.mark.parametrize("others_trainable", [True, False])
def test_hooked_grams_of_a_module_the_forward_never_calls_are_zero(others_trainable):
    model = Toy().double().requires_grad_(others_trainable)
    model.spare = nn.Linear(4, 4).double()
    groups = [["spare.weight", "spare.bias"]]
    x = torch.randn(3, 3, 8, 8, dtype=torch.float64)
    piece = lntk_hooks.Piece(3, lambda: model(x), lambda logits: logits)
    grams = lntk_hooks.hooked_grams(lntk_hooks.hook_sites(model, groups), [piece], groups)
    torch.testing.assert_close(grams[0], torch.zeros(9, 9, dtype=torch.float64))


def test_hook_sites_need_plain_linear_or_conv():
    model = Toy()
    assert lntk_hooks.hook_sites(model, TOY_GROUPS) is not None
    model.conv.groups = 2
    assert lntk_hooks.hook_sites(model, TOY_GROUPS) is None
    assert lntk_hooks.hook_sites(nn.Sequential(nn.LayerNorm(4)), [["0.weight"]]) is None
    assert lntk_hooks.hook_sites(model, [["missing.weight"]]) is None


def test_lanczos_matches_eigvalsh():
    rng = np.random.default_rng(0)
    jac = torch.from_numpy(rng.normal(size=(40, 300)))
    gram = jac @ jac.T
    exact = principal_eigenvalue(gram)
    assert exact == pytest.approx(float(torch.linalg.eigvalsh(gram)[-1]), rel=1e-12)
    assert principal_eigenvalue(gram, lanczos_above=10) == pytest.approx(exact, rel=1e-9)


def test_paper_mode_follows_algorithm_1(samples):
    model = build_model(ModelSpec("tiny-vilt", adapter="layer"), 5).double()
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
    model = build_model(ModelSpec("tiny-vilt"), 5)
    model.train()
    result = layer_scores(model, samples)
    assert model.training
    assert result.scores.sum() == pytest.approx(1.0) and (result.scores >= 0).all()
    with pytest.raises(ValueError, match="unknown LNTK mode 'hessian'"):
        layer_scores(model, samples, "hessian")
    with pytest.raises(ValueError, match="samples is empty"):
        layer_scores(model, [])


def test_scores_are_uniform_when_all_eigenvalues_vanish(samples):
    model = build_model(ModelSpec("tiny-vilt"), 5)
    with torch.no_grad():  # a zero head makes every loss gradient upstream of it zero
        model.head.weight.zero_()
    result = layer_scores(model, samples)
    assert (result.eigenvalues == 0).all()
    np.testing.assert_array_equal(result.scores, np.full(4, 0.25))
