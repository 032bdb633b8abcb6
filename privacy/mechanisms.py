"""Per-sample differential privacy of local training (``dp = "sample"``), with Opacus.

DP-SGD (Abadi et al. 2016, Algorithm 1): every step draws a Poisson batch (each of the client's n
examples independently with probability q = batch-size / n), computes each example's gradient of
every parameter the step trains (the masked layers' adapters AND the personal head / projection:
the head's state shapes the adapters it trains with, so a non-private head would leak through the
released adapters), clips each example's whole gradient to L2 norm ``dp-clip``, sums, adds Gaussian
noise of standard deviation σ · ``dp-clip`` and divides by the expected batch q·n. Opacus does the
per-sample gradients (`GradSampleHooks`, attached to the model in place, removed after training)
and the clip, noise and scaling (`DPOptimizer`); the Poisson batches are drawn here
(`poisson_batches`) because the project's samples are collated by the model, not by a DataLoader,
and an empty batch still takes a noised step (zero per-sample gradients), as Opacus's
``DPDataLoader`` does, so the accounting's Poisson assumption holds.

σ is the smallest whose planned steps = rounds × local steps at rate q spend the target (ε, δ) by
privacy loss distributions (`calibrate`, dp-accounting's PLD: tight, where RDP overstates ε and so
over-noises); the ε spent is the same accountant over the steps actually taken (`epsilon_spent`),
so a client that trained fewer rounds than planned has spent less, and the RDP ε is recorded
beside it. δ = 0 means 1/(10 n).

The noise and the Poisson batches are drawn from generators seeded with fresh operating-system
entropy on every call (`fresh_rng`, `fresh_generator`), never from the run seed: the server knows
the seed, the round and the partition id, and noise it could regenerate it could subtract. So a DP
run does not repeat itself; runs without DP still do. Opacus's ``secure_mode`` (a
cryptographically safe noise source, torchcsprng, which does not install here) is off: torch's
Mersenne Twister seeded with 63 bits of entropy is unpredictable to the server, not a CSPRNG.
The release is the client's adapters after its local steps and, for a rule that scores layers by
LNTK, its per-layer λ₁ once a round through the Gaussian mechanism (`noise_scores`), both composed
into one ε; the server's layer assignment, the budget and the example count the client reports are
not privatised here.
"""

from __future__ import annotations

import secrets
import warnings
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch and Opacus load where training starts: a site's ClientApp process stays light
    import torch
    from opacus.grad_sample import GradSampleHooks
    from torch import nn

HISTORY_COLUMNS = ("noise-multiplier", "sample-rate", "count")
"""The columns of a client's privacy history (one row per release: a round's DP-SGD steps, or a
release of its layer scores), what the accountant composes."""


def resolve_delta(delta: float, n: int, units: str = "training examples on this client") -> float:
    """δ of a mechanism that protects one of n ``units``: ``dp-delta``, or 1/(10 n) for 0; ValueError
    for δ ≥ 1/n (a δ that large allows releasing one unit outright). The one home of the rule for
    both modes: a client's examples (``dp = "sample"``) and the sites (``dp = "client"``)."""
    if n < 1:
        raise ValueError(f"dp-delta needs at least one of the {units}, got n = {n}")
    if delta == 0:
        return 1.0 / (10 * n)
    if delta >= 1.0 / n:
        raise ValueError(f"dp-delta = {delta!r} is not below 1/n = {1.0 / n:.3g} (n = {n} {units}): "
                         "such a δ permits leaking one of them; use 0 for 1/(10 n)")
    return float(delta)


@dataclass(frozen=True)
class SamplePlan:
    """A client's plan: σ (DP-SGD's noise multiplier), clip C, Poisson rate q, its δ and target ε,
    and the noise multiplier and Poisson rate of its layer scores' releases (`noise_scores`; noise
    0: it releases none)."""

    noise_multiplier: float
    clip: float
    sample_rate: float
    delta: float
    epsilon: float
    score_noise: float = 0.0
    score_rate: float = 1.0

    def score_row(self) -> np.ndarray:
        """One score release as a history row (σ, q, count): the Poisson-sampled Gaussian mechanism."""
        return np.array([[self.score_noise, self.score_rate, 1.0]])

    def expected_batch(self, n: int) -> int:
        """q · n, the divisor of the noised sum (Opacus's ``expected_batch_size``)."""
        return max(1, round(self.sample_rate * n))

    def batches(self, n: int, steps: int) -> list[np.ndarray]:
        """``steps`` Poisson batches of ``n`` examples at rate q, drawn from the operating system's
        entropy: batches the server could redraw from the seed would reveal who was in them."""
        return poisson_batches(n, steps, self.sample_rate, fresh_rng())

    def optimizer(self, model: nn.Module, optimizer: torch.optim.Optimizer, n: int
                  ) -> AbstractContextManager[torch.optim.Optimizer]:
        """``optimizer`` made DP-SGD under this plan (`private_optimizer`)."""
        return private_optimizer(model, optimizer, self, n)

    @staticmethod
    def empty_step(optimizer: torch.optim.Optimizer) -> None:
        """A step of noise alone, for an empty Poisson batch (`empty_step`)."""
        empty_step(optimizer)


ACCOUNTANTS = ("pld", "rdp", "prv")
"""``pld``: privacy loss distributions (Meiser and Mohammadi 2018; Koskela et al. 2020; Google's
dp-accounting), tight up to its discretisation, which plans the noise and is the ε a run records;
``rdp``: Rényi DP (Mironov 2017; Mironov et al. 2019 for Poisson sampling; Opacus), looser,
recorded beside it; ``prv``: Opacus's privacy random variables (Gopi et al. 2021), an independent
tight accountant the lab's tables show beside both. Tests check PLD against Opacus's PRV accountant
and the exact Gaussian."""


def _event(history: np.ndarray):
    """The dp-accounting event of ``history``'s rows (σ, q, count): per row ``count`` compositions of
    the Gaussian mechanism with multiplier σ, Poisson-subsampled at rate q (none at q = 1)."""
    import dp_accounting

    events = []
    for sigma, q, count in np.asarray(history, dtype=np.float64).reshape(-1, 3):
        if count > 0:
            gaussian = dp_accounting.GaussianDpEvent(float(sigma))
            single = gaussian if q >= 1 else dp_accounting.PoissonSampledDpEvent(float(q), gaussian)
            events.append(dp_accounting.SelfComposedDpEvent(single, int(count)))
    return dp_accounting.ComposedDpEvent(events) if events else None


PLD_INTERVAL = 1e-3
"""dp-accounting's discretisation of the privacy loss: pessimistic, so ε is an upper bound; 1e-3
is about 5 times faster than its default 1e-4 and moves ε by under 0.1 % here."""


def epsilon_spent(history: np.ndarray, delta: float, accountant: str = "pld") -> float:
    """ε at δ after the mechanisms of ``history`` (rows σ, q, count; `HISTORY_COLUMNS`), composed
    by ``accountant`` (`ACCOUNTANTS`); 0 for none."""
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant {accountant!r} is not one of {ACCOUNTANTS}")
    rows = tuple((float(s), float(q), int(k))
                 for s, q, k in np.asarray(history, dtype=np.float64).reshape(-1, 3) if k > 0)
    return _epsilon(rows, float(delta), accountant) if rows else 0.0


@lru_cache(maxsize=256)
def _epsilon(rows: tuple[tuple[float, float, int], ...], delta: float, accountant: str) -> float:
    """`epsilon_spent` of non-empty rows; cached, since a client's sit-out check and its record
    account the same history in one message."""
    if accountant == "prv":
        from opacus.accountants import PRVAccountant

        prv = PRVAccountant()
        prv.history = list(rows)
        return float(prv.get_epsilon(delta))
    if accountant == "rdp":
        from opacus.accountants import RDPAccountant

        rdp = RDPAccountant()
        rdp.history = list(rows)
        return float(rdp.get_epsilon(delta))
    from dp_accounting.pld import PLDAccountant

    pld = PLDAccountant(value_discretization_interval=PLD_INTERVAL)
    return float(pld.compose(_event(np.array(rows))).get_epsilon(delta))


def calibrate(epsilon: float, delta: float, sample_rate: float, count: int,
              fixed: tuple[tuple[float, float, int], ...] = ()) -> float:
    """The smallest noise multiplier (to 1e-4) whose ``count`` compositions at ``sample_rate``,
    composed with the ``fixed`` history rows (σ, q, count), spend at most ``epsilon`` at ``delta``
    by PLD. Searched from half the RDP multiplier of the ``count`` compositions alone (RDP never
    understates ε, and the fixed rows only add to it), where PLD's discretisation stays small: a
    tiny multiplier's distribution over many compositions would take gigabytes."""
    import dp_accounting
    from dp_accounting.pld import PLDAccountant
    from opacus.accountants.utils import get_noise_multiplier

    def event(sigma: float):
        return _event(np.array([[sigma, sample_rate, count], *fixed]))

    def spent(sigma: float) -> float:
        return float(PLDAccountant(value_discretization_interval=PLD_INTERVAL).compose(event(sigma))
                     .get_epsilon(delta))

    rdp_sigma = get_noise_multiplier(target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate,
                                     steps=count, accountant="rdp")
    high = rdp_sigma + 1e-3
    for _ in range(30):
        if spent(high) <= epsilon:
            break
        high *= 1.5
    else:
        raise ValueError(f"dp-epsilon = {epsilon!r}: no noise multiplier fits the fixed releases {fixed}")
    return float(dp_accounting.calibrate_dp_mechanism(
        lambda: PLDAccountant(value_discretization_interval=PLD_INTERVAL), event, epsilon, delta,
        dp_accounting.ExplicitBracketInterval(0.5 * rdp_sigma, high), tol=1e-4))


@lru_cache(maxsize=64)
def plan(epsilon: float, delta: float, clip: float, n: int, batch_size: int, steps: int,
         score_releases: int = 0, score_share: float = 0.0, score_batch: int = 1) -> SamplePlan:
    """σ for (ε, δ) after ``steps`` DP-SGD steps at q = min(1, batch_size / n) (`calibrate`, PLD),
    composed with ``score_releases`` Gaussian releases of the layer scores on Poisson batches at
    rate min(1, score_batch / n) (`noise_scores`), whose noise multiplier alone would spend
    ``score_share`` of ε: the split only chooses the two multipliers, the composition of both is
    what spends ε."""
    delta = resolve_delta(delta, n)
    q = min(1.0, batch_size / n)
    if score_releases == 0:
        return SamplePlan(calibrate(epsilon, delta, q, steps), float(clip), q, delta, float(epsilon))
    rate = min(1.0, score_batch / n)
    score_noise = calibrate(score_share * epsilon, delta, rate, score_releases)
    sigma = calibrate(epsilon, delta, q, steps, fixed=((score_noise, rate, score_releases),))
    return SamplePlan(sigma, float(clip), q, delta, float(epsilon), score_noise, rate)


def noise_scores(eigenvalues: np.ndarray, plan: SamplePlan, rng: np.random.Generator) -> np.ndarray:
    """The Gaussian mechanism on a client's per-layer λ₁ (F3OCUS §4.1) computed on a Poisson batch
    (each example with probability ``plan.score_rate``, drawn from OS entropy, so the accountant
    composes the subsampled Gaussian) with every example's Jacobian clipped to ``plan.clip``
    (`tasks.lntk.clip_grams`): adding or removing one example
    moves layer l's λ₁ by at most that example's squared row norm in layer l (Weyl: Θˡ changes by a
    PSD rank-one term of that trace), and those norms sum to at most C² over the layers, so the
    vector's L2 sensitivity is C² (clipping per layer instead would give C²·√L). Noise
    N(0, (z·C²)²) per layer, z = ``plan.score_noise``; negative results are set to 0 (post-processing)."""
    scale = plan.score_noise * plan.clip ** 2
    values = np.nan_to_num(np.asarray(eigenvalues, np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    return np.clip(values + rng.normal(0.0, scale, len(values)), 0.0, None)


def fresh_rng() -> np.random.Generator:
    """A numpy generator seeded from the operating system's entropy (not the run seed)."""
    return np.random.default_rng(np.random.SeedSequence())


def fresh_generator(device: torch.device) -> torch.Generator:
    """A torch generator on ``device`` seeded with 63 bits of the operating system's entropy."""
    import torch

    return torch.Generator(device=device).manual_seed(secrets.randbits(63))


def poisson_batches(n: int, steps: int, rate: float, rng: np.random.Generator) -> list[np.ndarray]:
    """``steps`` index batches, each example in each independently with probability ``rate``."""
    return [np.flatnonzero(rng.random(n) < rate) for _ in range(steps)]


def refusal(model: nn.Module) -> str:
    """Why Opacus cannot privatise ``model`` as it is trained (every parameter that requires grad),
    or "" if it can: Opacus's own check (`GradSampleModule.validate`) refuses a trainable module
    with buffers, e.g. minilm-effnet's BatchNorm under adapter = "layer"."""
    from opacus.grad_sample import GradSampleModule

    errors = GradSampleModule.validate(model, strict=False)
    if not errors:
        return ""
    bad = [name for name, m in model.named_modules()
           if any(p.requires_grad for p in m.parameters(recurse=False)) and any(True for _ in m.buffers())]
    return (f"Opacus computes no per-example gradient for a trainable module with buffers, such as "
            f"{bad[0] if bad else 'the model'} ({len(bad)} of them here; BatchNorm: its statistics can mix "
            "the examples of a batch)")


@lru_cache(maxsize=1)
def _contiguous_conv_samples() -> None:
    """Register (Opacus's `register_grad_sampler`) its own Conv2d per-example gradient on a contiguous
    copy of the activations. Opacus 1.6's (`opacus.grad_sample.conv`, via ``unfold2d``) reads them
    with ``as_strided`` strides that assume a contiguous NCHW layout, so a channels-last activation
    (what a conv gives for images made from (H, W, 3) arrays, e.g. minilm-effnet's EfficientNet)
    silently yields wrong LoRA gradients, the trap of opacus/opacus#820 by another route; the oracle
    test (tests/tasks/test_privacy.py) found it on the default model's image LoRA."""
    from opacus.grad_sample import register_grad_sampler
    from opacus.grad_sample.conv import compute_conv_grad_sample
    from torch import nn

    @register_grad_sampler(nn.Conv2d)
    def contiguous_conv(layer: nn.Conv2d, activations: list[torch.Tensor], backprops: torch.Tensor
                        ) -> dict[nn.Parameter, torch.Tensor]:
        return compute_conv_grad_sample(layer, [a.contiguous() for a in activations], backprops.contiguous())


@contextmanager
def _hooks(model: nn.Module) -> Iterator[GradSampleHooks]:
    """Opacus's per-example gradient hooks on ``model`` in place (mean loss, batch first), removed
    on exit with every attribute Opacus set on the parameters. torch's warning that a full backward
    hook fires on a module whose inputs need no gradient (the first adapted module: its input comes
    from the frozen backbone) is expected there and silenced."""
    from opacus.grad_sample import GradSampleHooks

    _contiguous_conv_samples()
    hooks = GradSampleHooks(model, batch_first=True, loss_reduction="mean", strict=True)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing when gradients are "
                                    "computed with respect to module outputs")
            yield hooks
    finally:
        hooks.cleanup()


@contextmanager
def private_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer, dp: SamplePlan, n: int
                      ) -> Iterator[torch.optim.Optimizer]:
    """``optimizer`` made DP-SGD for the parameters of ``model`` that require grad: Opacus's
    per-sample gradient hooks on the model, its `DPOptimizer` (clip, noise from `fresh_generator`,
    divide by q·n) around ``optimizer``, which also sums the squared norm of the noise it adds
    (``noise_sq``, for the client's own log); the hooks and Opacus's attributes are removed on exit
    (the model is reused)."""
    reason = refusal(model)
    if reason:
        raise ValueError(f"dp = 'sample': {reason}")
    device = next(p.device for group in optimizer.param_groups for p in group["params"])
    private = _noise_meter()(optimizer, noise_multiplier=dp.noise_multiplier, max_grad_norm=dp.clip,
                             expected_batch_size=dp.expected_batch(n), loss_reduction="mean",
                             generator=fresh_generator(device))
    with _hooks(model):
        try:
            yield private
        finally:
            private.zero_grad(set_to_none=True)
            for p in private.params:
                if hasattr(p, "summed_grad"):
                    del p.summed_grad


@lru_cache(maxsize=1)
def _noise_meter() -> type:
    """Opacus's `DPOptimizer`, also summing the squared norm of the noise each step adds."""
    from opacus.optimizers import DPOptimizer

    class NoiseMeter(DPOptimizer):
        noise_sq = 0.0

        def add_noise(self) -> None:
            super().add_noise()
            self.noise_sq += sum(float(((p.grad - p.summed_grad.view_as(p)) ** 2).sum())
                                 for p in self.params)

    return NoiseMeter


def empty_step(optimizer: torch.optim.Optimizer) -> None:
    """A DP-SGD step on an empty Poisson batch: zero per-sample gradients, so the step is pure noise
    (as Opacus's ``DPDataLoader`` gives for an empty batch); skipping it would reveal that the batch
    was empty, which the accounting does not cover."""
    import torch

    optimizer.zero_grad(set_to_none=True)
    for p in optimizer.params:
        p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)
    optimizer.step()


def per_sample_gradients(model: nn.Module, batch: dict[str, torch.Tensor], names: Sequence[str]
                         ) -> dict[str, torch.Tensor]:
    """Opacus's per-example gradients (B, *shape) of the parameters ``names`` for the mean of the
    model's per-example losses on ``batch`` (`FederatedVLM.sample_losses`), no clip, no noise: what
    the oracle tests compare with per-example backward passes (opacus/opacus#820)."""
    with _hooks(model):
        model.zero_grad(set_to_none=True)
        model.sample_losses(model(batch), batch["labels"]).mean().backward()
        params = dict(model.named_parameters())
        grads = {name: params[name].grad_sample.detach().clone() for name in names}
    model.zero_grad(set_to_none=True)
    return grads
