"""``dp = "sample"``: DP-SGD on every site (Abadi et al. 2016), one training example the unit.

The site's plan (`privacy.mechanisms.plan`): σ for ``dp-epsilon`` over ``dp-rounds`` (default every
round) × ``local-steps`` at q = ``batch-size`` / n and, when the run's selection rule scores layers
by LNTK, one Gaussian release of the per-layer λ₁ a round (`privacy.mechanisms.noise_scores`: on a
Poisson batch of expected size ``score-batch-size``, each example's Jacobian clipped to
``dp-clip``), whose noise alone would spend ``dp-score-share`` of ε;
both compose into the one ε. The plan depends only on the run config and n, so every message
recomputes the same one. What the site has spent is its history, one row (σ, q, count) per
release (a round's steps, a score vector), kept on the site (`client_app.personal` ledger, never
sent) and composed by PLD (`privacy.mechanisms.epsilon_spent`; RDP's ε recorded beside it). A train
message whose steps would pass ``dp-epsilon`` is answered without training (``dp-sat-out = 1``,
the ε spent and the ε it would have reached), and scores that would pass it are withheld the same
way; the server logs one line and records it.

Refused before round 1 (`SamplePrivacy.check`): an aggregation that uses a site's data outside
its adapters, what Opacus has no correct per-example gradient for, and score-based rules whose
scores have no bounded sensitivity here (the pruning scores, LNTK in a mode other than "loss").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privacy.base import Budget, Privacy
from privacy.mechanisms import (
    SamplePlan,
    epsilon_spent,
    fresh_rng,
    noise_scores,
    plan,
    poisson_batches,
    resolve_delta,
)
from tasks.names import DP_SAT_OUT, LNTK, adapter_of

EPSILON = "dp-epsilon"  # reply metric: ε this client has spent after the round (cumulative)
RELEASED = frozenset({"num-examples", "partition-id", "budget", "eigenvalues", EPSILON, "dp-epsilon-rdp",
                      "dp-delta", "dp-noise-multiplier", "dp-sample-rate", "dp-score-noise", DP_SAT_OUT,
                      "dp-epsilon-next", "dp-budget"})
"""What a site's train and scores replies may carry: its (clipped, noised) arrays aside, the
example count, partition id and budget (public, docs/privacy.md), the noised λ₁, and
the accountant's own figures, which depend on the plan and the releases made, not on the data.
Losses, the examples drawn and the seconds scoring took stay on the site."""

REFUSED = {
    "gradient-checkpointing": (True, "Opacus's per-example hooks get no activations from recomputed "
                               "blocks; use gradient-checkpointing = false"),
    "quantization": ("4bit", "per-example gradients over a 4-bit base are untested here (CUDA only, no "
                     "oracle test); use quantization = 'none'"),
}
"""Settings Opacus 1.6 cannot privatise correctly (tried, tests/tasks/test_privacy.py): value, why."""


@dataclass(frozen=True)
class SampleBudget(Budget):
    """A site's DP-SGD plan and the history of its releases (its ledger), as one message sees them."""

    history: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    cap: float = 0.0
    """The most ε the history may reach: the site's pinned ``dp-epsilon`` over every run on its data,
    else the run's (`SamplePrivacy.budget`)."""
    cap_delta: float = 1.0
    """The δ the cap is judged at: the smaller of the run's and, where the site pins its ε, its pinned
    δ (else 1/(10 n)), so that a larger δ the server sends cannot shrink the ε the ledger counts."""

    @property
    def delta(self) -> float:
        return min(self.plan.delta, self.cap_delta)

    @property
    def score_clip(self) -> float:
        return self.plan.clip

    def _after(self, rows: np.ndarray) -> np.ndarray:
        return np.vstack([self.history, rows])

    def _train_row(self, steps: int) -> np.ndarray:
        return np.array([[self.plan.noise_multiplier, self.plan.sample_rate, float(steps)]])

    def _refusal(self, rows: np.ndarray) -> dict[str, float] | None:
        reached = epsilon_spent(self._after(rows), self.delta)
        if reached <= self.cap:
            return None
        return {DP_SAT_OUT: 1, EPSILON: epsilon_spent(self.history, self.delta),
                "dp-epsilon-next": reached, "dp-budget": self.cap}

    def within(self, history: np.ndarray) -> bool:
        """Does the whole ``history`` (the ledger read under its lock, with a release's rows) keep
        ε within the cap?"""
        return epsilon_spent(history, self.delta) <= self.cap

    def sit_out(self, steps: int) -> dict[str, float] | None:
        return self._refusal(self._train_row(steps))

    def record(self, steps: int) -> np.ndarray:
        return self._train_row(steps)

    def report(self, history: np.ndarray, reply: dict) -> None:
        reply.update({EPSILON: epsilon_spent(history, self.delta),
                      "dp-epsilon-rdp": epsilon_spent(history, self.delta, "rdp"),
                      "dp-delta": self.delta,
                      "dp-noise-multiplier": self.plan.noise_multiplier,
                      "dp-sample-rate": self.plan.sample_rate,
                      "dp-score-noise": self.plan.score_noise})

    def scoring_batch(self, samples: list, size: int, seed: int) -> list:
        """A Poisson batch at the plan's score rate from OS entropy (``seed`` unused: the server knows it)."""
        (chosen,) = poisson_batches(len(samples), 1, self.plan.score_rate, fresh_rng())
        return [samples[i] for i in chosen]

    def scores_refused(self) -> dict[str, float] | None:
        return self._refusal(self.plan.score_row())

    def release_scores(self, eigenvalues: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return noise_scores(eigenvalues, self.plan, fresh_rng()), self.plan.score_row()


class SamplePrivacy(Privacy):
    """``dp = "sample"`` (module doc): the settings it refuses, the model check, each site's plan."""

    name = "sample"
    released = RELEASED
    keeps_ledger = True

    def check(self, config: Any) -> None:
        why = config.method_settings.extra_release()
        if why:
            raise ValueError(f"dp = 'sample' does not cover aggregation = {config.aggregation!r}: {why}")
        if not adapter_of(config.adapter).per_example:
            raise ValueError(f"adapter = {config.adapter!r} is not supported with dp = 'sample': Opacus has "
                             "no per-example gradient for its modules (its functorch fallback cannot call "
                             "them); use adapter = 'lora' or 'layer'")
        for key, (value, why) in REFUSED.items():
            if getattr(config, key.replace("-", "_")) == value:
                shown = str(value).lower() if isinstance(value, bool) else repr(value)
                raise ValueError(f"{key} = {shown} is not supported with dp = 'sample': {why}")
        scorer = config.selection.scorer
        if scorer is not None and scorer != LNTK:
            raise ValueError(f"strategy = {config.strategy!r} is not supported with dp = 'sample': its "
                             f"{scorer} scores have no bounded sensitivity here; use an LNTK rule (lntk, "
                             "f3ocus) or one that does not score (random, last, all)")
        if scorer is not None and config.scoring.mode != "loss":
            raise ValueError(f"score-mode = {config.scoring.mode!r} is not supported with dp = 'sample': "
                             "only 'loss' clips a sample's Jacobian for the scores' private release")

    def check_model(self, model: Any) -> None:
        from privacy.mechanisms import refusal

        why = refusal(model)
        if why:
            raise ValueError(f"dp = 'sample' cannot privatise this model as it trains: {why}")

    def warning(self, config: Any) -> str:
        if config.selection.scorer is None:
            return ""
        return (f"dp = 'sample' with strategy = {config.strategy!r}: the layer scores are released with "
                f"Gaussian noise inside ε (dp-score-share = {config.privacy.score_share:g} of it); "
                "a larger score-batch-size raises their signal against that noise")

    def plan(self, config: Any, n: int) -> SamplePlan:
        """This site's plan (module doc) for ``n`` training examples; ValueError naming ``dp-delta``
        for a δ of 1/n or more."""
        privacy = config.privacy
        rounds = privacy.rounds or config.num_server_rounds
        releases = rounds if config.selection.scorer is not None else 0
        return plan(privacy.epsilon, privacy.delta, privacy.clip, n, config.training.batch_size,
                    rounds * config.training.local_steps, releases, privacy.score_share,
                    config.scoring.batch_size)

    def budget(self, config: Any, n: int, history: np.ndarray, cap: float | None = None,
               cap_delta: float | None = None) -> SampleBudget:
        resolve_delta(config.privacy.delta, n)
        sample_plan = self.plan(config, n)
        return SampleBudget(sample_plan, history, sample_plan.epsilon if cap is None else cap,
                            sample_plan.delta if cap_delta is None else resolve_delta(cap_delta, n))

