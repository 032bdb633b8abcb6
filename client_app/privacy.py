"""A client's side of ``dp = "sample"``: its DP-SGD plan, the ε it has spent, sitting out.

The plan (σ for ``dp-epsilon`` over ``dp-rounds`` (default every round) × ``local-steps`` at
q = ``batch-size`` / n, `tasks.privacy.plan`) depends only on the run config and the client's n, so
every message of the client recomputes the same one. What the client has spent is its history, one
row (σ, q, steps) per round it trained, stored with its personal state (`tasks.names.DP_HISTORY`,
`client_app.personal`: on the site, never sent) and composed by PLD (`tasks.privacy.epsilon_spent`;
the RDP ε recorded beside it). A train message whose steps would take the client past
``dp-epsilon`` is answered without training: no arrays, metrics ``dp-sat-out = 1`` with the ε
spent and the ε the round would have reached; the server logs one line and records it
(`strategies.layer_selection`).
"""

from __future__ import annotations

from dataclasses import dataclass
from logging import INFO, getLogger

import numpy as np

from client_app.runtime import ClientSetup
from settings import ConfigError
from strategies.records import State
from tasks.names import DP_HISTORY, DP_SAT_OUT
from tasks.privacy import SamplePlan, epsilon_spent, plan, resolve_delta

EPSILON = "dp-epsilon"  # reply metric: ε this client has spent after the round (cumulative)
RELEASED = ("num-examples", "partition-id", EPSILON, "dp-epsilon-rdp", "dp-delta", "dp-noise-multiplier",
            "dp-sample-rate", DP_SAT_OUT, "dp-epsilon-next", "dp-budget")
"""What a DP client's train reply may carry besides its (clipped, noised) arrays: its example count
and partition id (public, README "Differential privacy") and the accountant's own figures, which
depend on the plan and the rounds trained, not on the data. Losses and the examples drawn are
computed on private batches outside the mechanism, so they stay on the site."""

log = getLogger("flwr").log


def released(reply: dict, server_round: int) -> dict:
    """The part of a DP client's train reply in `RELEASED`; the rest is logged here, on the site."""
    kept = {k: v for k, v in reply.items() if k in RELEASED}
    held = {k: v for k, v in reply.items() if k not in RELEASED}
    if held:
        log(INFO, "round %d: kept on this site (outside ε): %s", server_round,
            ", ".join(f"{k} {v:.6g}" for k, v in sorted(held.items())))
    return kept


def check_delta(setup: ClientSetup) -> None:
    """ConfigError naming ``dp-delta`` if it is not below 1/n for this client (``dp = "sample"``)."""
    privacy = setup.config.privacy
    if privacy.mode == "sample":
        try:
            resolve_delta(privacy.delta, len(setup.partition.train))
        except ValueError as err:
            raise ConfigError(str(err)) from None


@dataclass(frozen=True)
class SampleBudget:
    """One train step's view of the client's budget: its plan and the history it starts from."""

    plan: SamplePlan
    history: np.ndarray

    @classmethod
    def of(cls, setup: ClientSetup, stored: State) -> SampleBudget | None:
        """The budget of a ``dp = "sample"`` client (None otherwise) with its stored history."""
        privacy, config = setup.config.privacy, setup.config
        if privacy.mode != "sample":
            return None
        check_delta(setup)
        rounds = privacy.rounds or config.num_server_rounds
        sample_plan = plan(privacy.epsilon, privacy.delta, privacy.clip, len(setup.partition.train),
                           config.training.batch_size, rounds * config.training.local_steps)
        history = np.asarray(stored.get(DP_HISTORY, np.zeros((0, 3))), dtype=np.float64).reshape(-1, 3)
        return cls(sample_plan, history)

    def after(self, steps: int) -> np.ndarray:
        """The history once this round's ``steps`` are taken."""
        row = [self.plan.noise_multiplier, self.plan.sample_rate, float(steps)]
        return np.vstack([self.history, row])

    def sit_out(self, steps: int) -> dict[str, float] | None:
        """The reply metrics of sitting this round out if its ``steps`` would pass ``dp-epsilon``."""
        reached = epsilon_spent(self.after(steps), self.plan.delta)
        if reached <= self.plan.epsilon:
            return None
        return {DP_SAT_OUT: 1, EPSILON: epsilon_spent(self.history, self.plan.delta),
                "dp-epsilon-next": reached, "dp-budget": self.plan.epsilon}

    def record(self, steps: int, personal: State, reply: dict) -> None:
        """After training: the new history into the personal state, the ε spent and plan into the reply."""
        history = self.after(steps)
        personal[DP_HISTORY] = history
        reply.update({EPSILON: epsilon_spent(history, self.plan.delta),
                      "dp-epsilon-rdp": epsilon_spent(history, self.plan.delta, "rdp"),
                      "dp-delta": self.plan.delta,
                      "dp-noise-multiplier": self.plan.noise_multiplier,
                      "dp-sample-rate": self.plan.sample_rate})
