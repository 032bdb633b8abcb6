"""dp = "sample": Opacus's per-example gradients against per-example
backward passes by hand (the pytorch/opacus#820 trap), the ε recorded against independent
accountants, the noise-only step of an empty Poisson batch, and the refusals before round 1."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math

import numpy as np
import pytest
import torch
from torch import nn

import run_simulation
import tasks
from privacy import mechanisms
from privacy.mechanisms import (
    SamplePlan,
    empty_step,
    epsilon_spent,
    per_sample_gradients,
    plan,
    poisson_batches,
    private_optimizer,
    refusal,
    resolve_delta,
)
from settings import ConfigError, RunConfig, default_config
from tasks.adapters import freeze_except, personal_parameter_names
from tasks.names import DP_SAT_OUT
from tests.helpers.gaussian_dp import exact_gaussian_epsilon
from tests.helpers.inprocess import Simulator
from tests.helpers.prepared import prepared_model


@pytest.mark.parametrize(("name", "layers"), [
    ("minilm-effnet", [0, 1, 12]),  # the default: EfficientNet stages (conv LoRA), a MiniLM block, head
    ("tiny-llava", [0, 1]),  # a generator: its language blocks and projector
])
def test_opacus_per_example_gradients_equal_per_example_backward_passes(name, layers):
    model, samples = prepared_model(name, layers)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert any(".lora_A." in n for n in names) and any(".lora_B." in n for n in names)
    batch = model.collate(samples[:2])
    opacus = per_sample_gradients(model, batch, names)
    params = dict(model.named_parameters())
    for i in range(2):
        model.zero_grad(set_to_none=True)
        one = model.collate(samples[i:i + 1])
        model.sample_losses(model(one), one["labels"]).sum().backward()
        scale = max(float(params[n].grad.abs().max()) for n in names)
        assert scale > 1e-4  # the oracle compares real gradients, not zeros
        for n in names:
            assert torch.allclose(opacus[n][i], params[n].grad, atol=1e-4 * scale, rtol=0), \
                f"example {i}: Opacus's per-example gradient of {n} differs from its own backward pass"
    assert not any(hasattr(p, "grad_sample") for p in model.parameters())  # hooks removed


def test_a_generators_example_loss_is_its_own_mean_over_its_answer_tokens():
    model, samples = prepared_model("tiny-llava", [0])
    batch = model.collate(samples[:3])
    together = model.sample_losses(model(batch), batch["labels"])
    for i in range(3):
        one = model.collate(samples[i:i + 1])
        alone = model.loss(model(one), one["labels"])
        assert float(together[i]) == pytest.approx(float(alone), rel=1e-5)


def _gaussian_epsilon(sigma: float, steps: int, delta: float) -> float:
    """ε of ``steps`` Gaussian mechanisms (q = 1) by hand: RDP α·steps/(2σ²) (Mironov 2017, Prop. 7)
    converted at δ as Opacus does (Balle et al. 2020, Thm. 21), over Opacus's orders."""
    orders = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))
    return min(steps * a / (2 * sigma**2) + math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1)
               for a in orders)


def test_epsilon_spent_equals_the_gaussian_formulas_without_sampling():
    """RDP: its closed form; PLD: the exact privacy curve, to 1 %, and below RDP's."""
    history = np.array([[1.5, 1.0, 4], [1.5, 1.0, 6]])
    assert epsilon_spent(history, 1e-3, "rdp") == pytest.approx(_gaussian_epsilon(1.5, 10, 1e-3), rel=1e-9)
    exact = exact_gaussian_epsilon(1.5, 10, 1e-3)
    assert epsilon_spent(history, 1e-3) == pytest.approx(exact, rel=0.01)
    assert epsilon_spent(history, 1e-3) < 0.95 * epsilon_spent(history, 1e-3, "rdp")


@pytest.mark.parametrize(("sigma", "q", "steps", "delta"), [(1.3, 0.1, 40, 7e-4), (0.8, 0.05, 200, 1e-5)])
def test_epsilon_spent_agrees_with_independent_accountants(sigma, q, steps, delta):
    """PLD (dp-accounting) against Opacus's PRV accountant to 1 %; RDP (Opacus) against
    dp-accounting's RDP to 1 %."""
    import dp_accounting
    from dp_accounting import rdp
    from opacus.accountants import PRVAccountant

    history = np.array([[sigma, q, steps]])
    prv = PRVAccountant()
    prv.history = [(sigma, q, steps)]
    assert epsilon_spent(history, delta) == pytest.approx(prv.get_epsilon(delta), rel=0.01)
    accountant = rdp.RdpAccountant()
    accountant.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    assert epsilon_spent(history, delta, "rdp") == pytest.approx(accountant.get_epsilon(delta), rel=0.01)


def test_the_plans_noise_spends_the_target_epsilon_over_the_planned_steps():
    target = plan(3.0, 0.0, 1.0, 150, 16, 60)
    assert target.delta == pytest.approx(1 / 1500) and target.sample_rate == pytest.approx(16 / 150)
    spent = epsilon_spent(np.array([[target.noise_multiplier, target.sample_rate, 60]]), target.delta)
    assert 2.97 <= spent <= 3.0  # the search stops within its tolerance, never above
    more = epsilon_spent(np.array([[target.noise_multiplier, target.sample_rate, 80]]), target.delta)
    assert more > 3.0


def test_a_delta_of_1_over_n_or_more_is_refused_in_one_line():
    assert resolve_delta(0.0, 40) == pytest.approx(1 / 400)
    with pytest.raises(ValueError, match=r"^dp-delta = 0.025 is not below 1/n = 0.025 \(n = 40 training"):
        resolve_delta(0.025, 40)


def test_poisson_batches_draw_each_example_with_the_sampling_rate():
    batches = poisson_batches(200, 400, 0.1, np.random.default_rng(0))
    sizes = np.array([len(b) for b in batches])
    assert abs(sizes.mean() - 20) < 4 * math.sqrt(200 * 0.1 * 0.9 / 400)  # 4 standard errors
    assert sizes.std() == pytest.approx(math.sqrt(200 * 0.1 * 0.9), rel=0.15)  # binomial, not fixed


@pytest.mark.parametrize(("sigma", "moves"), [(0.0, False), (1.0, True)])
def test_an_empty_poisson_batch_takes_a_step_of_noise_alone(sigma, moves):
    model = tasks.build_model(tasks.ModelSpec("tiny-vilt", seed=0), 3)
    mask = np.zeros(len(model.layer_names), dtype=bool)
    mask[0] = True
    samples = tasks.load_partition("synthetic", 0, 1, "iid", seed=0, max_train=6, max_test=2).train
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    dp = SamplePlan(noise_multiplier=sigma, clip=1.0, sample_rate=1e-9, delta=1e-3, epsilon=1.0)  # q -> 0
    out = tasks.train(model, samples, mask, steps=2, batch_size=1, lr=1e-2, weight_decay=0.0, privacy=dp)
    assert (out.pop("dp-noise-norm") > 0) is moves
    assert out == {"samples_seen": 0.0, "steps": 2.0}  # no loss to report (a NaN would be rejected)
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert bool(changed) is moves
    trainable = set(tasks.layer_parameter_names(model, 0)) | set(personal_parameter_names(model))
    assert changed <= trainable  # only what the client trains, as without privacy


def test_private_training_clips_each_example_and_leaves_no_opacus_state_behind():
    partition = tasks.load_partition("synthetic", 0, 1, "iid", seed=0, max_train=6, max_test=2)
    model = tasks.build_model(tasks.ModelSpec("tiny-vilt", seed=0), len(partition.labels))
    freeze_except(model, np.array([True, False, False, False]))
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    batch = model.collate(partition.train)
    dp = SamplePlan(noise_multiplier=0.0, clip=1e-3, sample_rate=1.0, delta=1e-3, epsilon=1.0)
    with private_optimizer(model, optimizer, dp, n=6) as private:
        model.train()
        model.sample_losses(model(batch), batch["labels"]).mean().backward()
        per_param = [p.grad_sample.flatten(1).norm(dim=1) for p in private.params]
        example_norms = torch.stack(per_param).norm(dim=0)
        private.pre_step()
        norm = torch.cat([p.grad.flatten() for p in private.params]).norm()
    assert float(example_norms.min()) > 1e-2  # every example is clipped
    assert float(norm) <= 1e-3 * 6 / 6 + 1e-9  # the sum of 6 examples clipped to 1e-3 / expected batch 6
    assert not any(hasattr(p, "grad_sample") or hasattr(p, "summed_grad") for p in model.parameters())
    assert not any(m._forward_hooks or m._backward_hooks for m in model.modules())


def _config(**values) -> RunConfig:
    return RunConfig.from_mapping({**default_config(), "dp": "sample", **values})


@pytest.mark.parametrize(("values", "message"), [
    ({"aggregation": "sima"}, r"^dp = 'sample' does not cover aggregation = 'sima': SIMA sends each"),
    ({"aggregation": "fedpia"}, r"^dp = 'sample' does not cover aggregation = 'fedpia': fedpia-level"),
    ({"aggregation": "fedpia", "fedpia-level": "client"}, r"fedpia-level = 'client': client-level PIA"),
    ({"adapter": "pq-lora"}, r"^adapter = 'pq-lora' is not supported with dp = 'sample': Opacus has no"),
    ({"model": "tiny-llava", "gradient-checkpointing": True},
     r"^gradient-checkpointing = true is not supported with dp = 'sample'"),
    ({"quantization": "4bit"}, r"^quantization = '4bit' is not supported with dp = 'sample'"),
])
def test_what_per_sample_dp_cannot_cover_is_refused_in_one_line(values, message):
    with pytest.raises(ConfigError, match=message):
        _config(**values)


def test_server_level_fedpia_is_post_processing_and_allowed():
    assert _config(aggregation="fedpia", **{"fedpia-level": "server"}).privacy.mode == "sample"


def test_gradient_checkpointing_really_leaves_opacus_without_per_example_gradients():
    model, samples = prepared_model("tiny-llava", [0])
    model.backbone.gradient_checkpointing_enable()
    names = [n for n, p in model.named_parameters() if p.requires_grad and ".lora_" in n]
    with pytest.raises(AttributeError):  # grad_sample stays None: the refusal above is needed
        per_sample_gradients(model, model.collate(samples[:2]), names)


def test_a_trainable_batchnorm_is_refused_by_opacuss_check():
    model = tasks.build_model(tasks.ModelSpec("minilm-effnet", adapter="layer", seed=0), 3)
    assert refusal(model).startswith("Opacus computes no per-example gradient for a trainable module "
                                     "with buffers, such as image.")
    assert refusal(tasks.build_model(tasks.ModelSpec("minilm-effnet", seed=0), 3)) == ""  # LoRA: BN frozen


def test_a_client_sits_out_the_round_that_would_pass_its_budget():
    config = _config(**{"num-server-rounds": 3, "dp-rounds": 2, "local-steps": 5, "batch-size": 4,
                        "dp-epsilon": 2.0, "strategy": "random"})
    history = np.zeros((0, 3))
    for round_ in (1, 2):
        budget = config.privacy.component.budget(config, 40, history)
        assert budget.sit_out(5) is None
        reply: dict = {}
        history = np.vstack([history, budget.record(5)])
        budget.report(history, reply)
        assert history.shape == (round_, 3) and reply["dp-epsilon"] <= 2.0
    reply = config.privacy.component.budget(config, 40, history).sit_out(5)
    assert reply[DP_SAT_OUT] == 1 and reply["dp-epsilon"] <= 2.0 < reply["dp-epsilon-next"]


def test_a_private_run_records_epsilon_per_round_and_sits_out_once_spent(tmp_path):
    code = _simulate("--num-clients", "2", "--run-config",
                     f"model='tiny-vilt' dataset='synthetic' strategy='all' budgets='4' num-server-rounds=2 "
                     f"local-steps=2 "
                     f"batch-size=4 max-train-samples=16 max-test-samples=4 score-batch-size=2 dp='sample' "
                     f"dp-epsilon=2.0 dp-rounds=1 results-dir='{tmp_path}' run-name='dp'")
    assert code == 0
    run = tmp_path / "dp"
    rows = [json.loads(line) for line in (run / "clients.jsonl").read_text().splitlines()]
    first = [r["train"] for r in rows if r["round"] == 1]
    second = [r["train"] for r in rows if r["round"] == 2]
    assert len(first) == len(second) == 2
    for train in first:  # the ε recorded is the accountant's for the plan it reports, 2 steps
        history = np.array([[train["dp-noise-multiplier"], train["dp-sample-rate"], 2]])
        assert train["dp-epsilon"] == pytest.approx(epsilon_spent(history, train["dp-delta"]), rel=1e-12)
        assert train["dp-sample-rate"] == 0.25 and train["dp-delta"] == pytest.approx(1 / 160)
    for train in second:
        assert train[DP_SAT_OUT] == 1 and train["dp-epsilon-next"] > 2.0 >= train["dp-epsilon"]
    rounds = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    rounds = [r for r in rounds if r["round"] > 0]  # round 0: the initial evaluation, nothing trained
    assert [len(r["sat-out"]) for r in rounds] == [0, 2] and rounds[1]["failures"] == 0
    assert (run / "adapters.safetensors").exists()  # the run kept its results


def _simulate(*args: str) -> int:
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        patch.setattr(run_simulation, "simulate", Simulator())
        return run_simulation.main(list(args))


def test_the_noise_of_a_step_has_std_sigma_clip_over_the_expected_batch():
    """q = 0.25 of n = 8: the noised sum is divided by q·n = 2, so a step of noise alone (SGD, lr 1)
    moves each of 10,000 weights by N(0, (σ·C / 2)²) = N(0, 0.5²); the sample std of 10,000 draws is
    within 3 % of it (its standard error is 0.7 %). Dividing by the drawn batch or by n would miss."""
    model = nn.Linear(100, 100, bias=False)
    before = model.weight.detach().clone()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    dp = SamplePlan(noise_multiplier=2.0, clip=0.5, sample_rate=0.25, delta=1e-3, epsilon=1.0)
    with private_optimizer(model, optimizer, dp, n=8) as private:
        empty_step(private)
        noise_norm = math.sqrt(private.noise_sq)
    moved = (model.weight.detach() - before).flatten()
    assert float(moved.std()) == pytest.approx(0.5, rel=0.03)
    assert abs(float(moved.mean())) < 4 * 0.5 / 100  # 4 standard errors of the mean
    assert noise_norm == pytest.approx(2 * float(moved.norm()), rel=1e-5)  # the noise before the division


def test_two_private_runs_with_the_same_seed_differ_and_draw_different_batches():
    """The server knows the seed, the round and the partition id: noise or Poisson batches drawn
    from them could be regenerated and subtracted. Two DP-SGD runs from the same model, data and
    seed must differ; the same two runs without DP are equal (so the seed still fixes those). The
    runs' Poisson batches alone could make them differ: the noise itself is checked on a fixed batch
    (`test_one_private_step_on_a_fixed_batch_adds_fresh_noise_of_std_sigma_clip`,
    `test_private_training_on_fixed_batches_adds_fresh_noise_to_the_same_clipped_sum`)."""
    partition = tasks.load_partition("synthetic", 0, 1, "iid", seed=0, max_train=12, max_test=2)
    samples, mask = partition.train, np.array([True, False, False, False])
    dp = SamplePlan(noise_multiplier=1.0, clip=1.0, sample_rate=0.5, delta=1e-3, epsilon=1.0)

    def run(privacy):
        model = tasks.build_model(tasks.ModelSpec("tiny-vilt", seed=0), len(partition.labels))
        out = tasks.train(model, samples, mask, steps=4, batch_size=6, lr=1e-2, weight_decay=0.0, seed=7,
                          privacy=privacy)
        return out, np.concatenate([p.detach().numpy().ravel() for _, p in sorted(model.named_parameters())])

    (a, first), (b, second) = run(dp), run(dp)
    assert not np.array_equal(first, second)
    assert a["dp-noise-norm"] != b["dp-noise-norm"]
    batches = [poisson_batches(12, 20, 0.5, mechanisms.fresh_rng()) for _ in range(2)]
    assert any(not np.array_equal(x, y) for x, y in zip(*batches, strict=True))
    (_, plain), (_, again) = run(None), run(None)
    np.testing.assert_array_equal(plain, again)


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.dot(a, b) / (a.norm() * b.norm()))


def test_one_private_step_on_a_fixed_batch_adds_fresh_noise_of_std_sigma_clip():
    """The noise itself, with nothing else left to differ: the same linear model, the same fixed batch
    of 8 (no Poisson draw) and the same torch seed take one DP-SGD step (SGD, lr 1, q = 1, so the
    expected batch is 8) through `private_optimizer`, once with σ = 0 (the clipped gradient's part
    alone) and twice with σ = 2. A noisy step minus the noiseless one, times 8, is the noise that step
    added: N(0, (σ·C)²) on each of 10,000 weights, so its norm is σ·C·100 = 100 within 10 % (its
    standard error is 0.7 %), and two draws are unrelated (|cosine| < 0.1; its standard error is
    0.01). Noise from a generator the run config seeds would repeat: the server could subtract it."""
    torch.manual_seed(0)
    start = nn.Linear(100, 100, bias=False)
    inputs, targets = torch.randn(8, 100), 10 * torch.randn(8, 100)
    clip = 0.5

    def step(sigma: float) -> torch.Tensor:
        model = copy.deepcopy(start)
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        dp = SamplePlan(noise_multiplier=sigma, clip=clip, sample_rate=1.0, delta=1e-3, epsilon=1.0)
        torch.manual_seed(0)
        with private_optimizer(model, optimizer, dp, n=8) as private:
            ((model(inputs) - targets) ** 2).sum(dim=1).mean().backward()
            private.step()
        return (model.weight.detach() - start.weight.detach()).flatten()

    signal = step(0.0)
    assert 0.1 * clip < float(signal.norm()) <= clip * (1 + 1e-5)  # 8 gradients clipped to C, / 8
    first, second = (-8 * (step(2.0) - signal) for _ in range(2))
    for noise in (first, second):
        assert float(noise.norm()) == pytest.approx(2.0 * clip * 100, rel=0.1)
    assert abs(_cosine(first, second)) < 0.1, (
        f"two DP-SGD steps on the same batch and seed added the same noise (cosine "
        f"{_cosine(first, second):.6f}): it does not come from fresh entropy")


def test_private_training_on_fixed_batches_adds_fresh_noise_to_the_same_clipped_sum(monkeypatch):
    """The training path (`tasks.train`, its `private_optimizer` and `_step`) twice with the same
    model, data and seed, its Poisson draw replaced by the whole partition in every step so that the
    batches cannot differ: each step's clipped sum (Opacus's ``summed_grad``, captured around the
    optimizer's ``add_noise``) is the same in both runs, and the noise added to it (``grad`` minus
    ``summed_grad``) differs: unrelated draws (|cosine| < 0.15 over 4,013 parameters, standard
    error 0.016), each of norm σ·C·√4013 within 10 % (standard error 1.1 %), what the run reports
    as its ``dp-noise-norm``."""
    partition = tasks.load_partition("synthetic", 0, 1, "iid", seed=0, max_train=6, max_test=2)
    samples, mask = partition.train, np.array([True, False, False, False])
    dp = SamplePlan(noise_multiplier=1.5, clip=0.2, sample_rate=1.0, delta=1e-3, epsilon=1.0)
    monkeypatch.setattr(mechanisms, "poisson_batches",
                        lambda n, steps, rate, rng: [np.arange(n) for _ in range(steps)])
    meter = mechanisms._noise_meter()
    add_noise = meter.add_noise
    captured: list[tuple[torch.Tensor, torch.Tensor]] = []

    def capturing(optimizer) -> None:
        add_noise(optimizer)
        summed = torch.cat([p.summed_grad.flatten() for p in optimizer.params]).detach().clone()
        noised = torch.cat([p.grad.flatten() for p in optimizer.params]).detach().clone()
        captured.append((summed, noised - summed))

    monkeypatch.setattr(meter, "add_noise", capturing)

    def run() -> tuple[float, tuple[torch.Tensor, torch.Tensor]]:
        model = tasks.build_model(tasks.ModelSpec("tiny-vilt", seed=0), len(partition.labels))
        out = tasks.train(model, samples, mask, steps=1, batch_size=6, lr=1e-2, weight_decay=0.0, seed=7,
                          privacy=dp)
        return out["dp-noise-norm"], captured[-1]

    (reported_a, (signal_a, noise_a)), (reported_b, (signal_b, noise_b)) = run(), run()
    assert len(captured) == 2 and noise_a.numel() == 4013
    assert float(signal_a.norm()) > 0.1 * dp.clip  # a real clipped gradient, not zeros
    torch.testing.assert_close(signal_a, signal_b, rtol=1e-5, atol=1e-8)  # the same batch, model and seed
    for noise, reported in ((noise_a, reported_a), (noise_b, reported_b)):
        assert float(noise.norm()) == pytest.approx(dp.noise_multiplier * dp.clip * math.sqrt(4013), rel=0.1)
        assert reported == pytest.approx(float(noise.norm()), rel=1e-4)
    assert abs(_cosine(noise_a, noise_b)) < 0.15, (
        f"two private trainings on the same batches and seed added the same noise (cosine "
        f"{_cosine(noise_a, noise_b):.6f}): it does not come from fresh entropy")
