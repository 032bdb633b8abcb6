"""``dp = "client"``: DP-FedAvg on the server (`privacy.dp_fedavg`), one whole site the unit.

The ε of such a run is accounted by privacy loss distributions (Google's dp-accounting,
`privacy.mechanisms.epsilon_spent`: tight for the Gaussian mechanism, where Rényi DP overstated ε by 12 %
at ε = 8), the RDP ε recorded beside it; the unit is a whole site's update, replaced by zeros.

Each round is one Gaussian mechanism with noise multiplier z on the vector of the sent arrays' sums
(sensitivity ``dp-clip``). Clients are sampled with a fixed fraction (``fraction-train``), not
Poisson-style, so no sampling amplification is claimed: every site is counted in every round, which
is what a site that is always sampled spends. The budget settings (`privacy.settings`):

- δ = ``dp-delta``, or 1/(10 n) when it is 0, n the sites connected when round 1 starts; δ ≥ 1/n is
  refused (a mechanism that may publish one site's update whole would satisfy it);
- z = ``dp-noise``, or when that is 0 the smallest z whose ``num-server-rounds`` rounds spend at most
  ``dp-epsilon`` (`privacy.mechanisms.calibrate`);
- the cap = ``dp-max-epsilon``, or ``dp-epsilon`` when that is 0: the run stops before a round whose ε
  would pass it (`ClientAccountant.allows`), and a cap that round 1 already passes is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from privacy.base import Privacy
from privacy.mechanisms import calibrate, epsilon_spent, resolve_delta


def run_epsilon(noise: float, rounds: int, delta: float, accountant: str = "pld") -> float:
    """ε after ``rounds`` rounds of the Gaussian mechanism with multiplier ``noise`` at ``delta``
    (no sampling amplification: q = 1)."""
    return epsilon_spent(np.array([[noise, 1.0, rounds]]), delta, accountant)


@dataclass(frozen=True)
class ClientAccountant:
    """The settled budget of a run: noise multiplier, δ, cap, and ε after each round."""

    noise: float
    delta: float
    cap: float

    @classmethod
    def plan(cls, privacy: Any, num_sites: int, num_rounds: int) -> ClientAccountant:
        """δ, z and the cap from the settings (`privacy.settings.PrivacySettings`, module doc);
        ValueError in one line for a δ of 1/n or more and for a cap that round 1 already passes."""
        delta = resolve_delta(privacy.delta, num_sites, "sites")
        noise = privacy.noise or calibrate(privacy.epsilon, delta, 1.0, num_rounds)
        accountant = cls(noise, delta, privacy.max_epsilon or privacy.epsilon)
        if not accountant.allows(1):
            key = "dp-max-epsilon" if privacy.max_epsilon else "dp-epsilon"
            raise ValueError(f"{key} = {accountant.cap!r} is below the ε = {accountant.epsilon(1):.4g} "
                             f"that one round with dp-noise = {noise:.4g} spends (δ = {delta:.3g})")
        return accountant

    def epsilon(self, rounds: int, accountant: str = "pld") -> float:
        """ε spent by every site once ``rounds`` rounds have run (`privacy.mechanisms.ACCOUNTANTS`)."""
        return run_epsilon(self.noise, rounds, self.delta, accountant)

    def allows(self, server_round: int) -> bool:
        """Does running round ``server_round`` keep ε within the cap?"""
        return self.epsilon(server_round) <= self.cap


class ClientPrivacy(Privacy):
    """``dp = "client"`` (module doc): the aggregations it refuses, the accountant, DP-FedAvg, the
    site's own clip."""

    name = "client"
    released = frozenset({"num-examples", "partition-id", "budget", "eigenvalues"})
    """A site's train reply: its clipped arrays, example count and id; its scores reply: budget and
    λ₁, sent un-noised (outside ε, `warning`). Losses and timings stay on the site."""

    def check(self, config: Any) -> None:
        if config.method.client_dp_refusal is not None:
            raise ValueError(f"dp = 'client' does not work with aggregation = {config.aggregation!r}: "
                             f"{config.method.client_dp_refusal}")

    def accountant(self, config: Any, sites: int) -> ClientAccountant:
        return ClientAccountant.plan(config.privacy, sites, config.num_server_rounds)

    def aggregator(self, step: Callable[..., Any], config: Any, accountant: ClientAccountant
                   ) -> Callable[..., Any]:
        """DP-FedAvg around ``step`` with the accountant's multiplier, its noise from OS entropy."""
        from privacy.dp_fedavg import with_client_dp

        return with_client_dp(step, clip=config.privacy.clip, noise=accountant.noise,
                              rng=np.random.default_rng())

    def warning(self, config: Any) -> str:
        scorer = config.selection.scorer
        if scorer is None:
            return ""
        return (f"dp = 'client' with strategy = {config.strategy!r}: the ε covers the adapter updates given "
                f"the masks, not the {scorer} layer scores the sites send un-noised to choose them")

    def clip(self, upload: dict, received: dict, config: Any) -> dict:
        """The site clips its own update to ``dp-clip`` (the server clips again)."""
        from privacy.dp_fedavg import clip_update

        return clip_update(upload, received, config.privacy.clip)

