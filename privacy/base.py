"""What every privacy mode declares (`privacy`): the component (`Privacy`, itself ``dp =
"none"``), a site's budget as one message sees it (`Budget`), and the registry of modes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from logging import INFO, getLogger
from typing import Any

import numpy as np

log = getLogger("flwr").log


@dataclass(frozen=True)
class Budget:
    """A client's privacy budget as one round sees it; this base spends nothing and never runs out
    (``dp = "none"``, and ``client``, whose budget the server keeps)."""

    plan: Any = None
    """The DP-SGD plan local training runs under (`privacy.mechanisms.SamplePlan`), None: plain training."""

    @property
    def score_clip(self) -> float | None:
        """The L2 clip of a sample's Jacobian when layer scores are released privately, else None."""
        return None

    def sit_out(self, steps: int) -> dict[str, float] | None:
        """Reply metrics of sitting this round out if its ``steps`` would pass the budget, else None."""
        return None

    def record(self, steps: int) -> np.ndarray | None:
        """The ledger rows of a round's ``steps`` once trained (None: nothing to record)."""
        return None

    def within(self, history: np.ndarray) -> bool:
        """Does ``history`` keep the site within its budget (checked under the ledger's lock)?"""
        return True

    def report(self, history: np.ndarray, reply: dict) -> None:
        """The accountant's figures for the site's whole ``history`` (its ledger) into ``reply``."""

    def scoring_batch(self, samples: list, size: int, seed: int) -> list:
        """This round's scoring batch of the site's training ``samples``: ``size`` of them, drawn
        with ``seed`` (fresh and reproducible each round)."""
        order = np.random.default_rng(seed).permutation(len(samples))[:size]
        return [samples[i] for i in order]

    def scores_refused(self) -> dict[str, float] | None:
        """Reply metrics of withholding this round's scores if releasing them would pass the budget."""
        return None

    def release_scores(self, eigenvalues: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The scores to send and their ledger rows (None: nothing to record)."""
        return eigenvalues, None


EVALUATED = frozenset({"accuracy", "loss", "exact-match", "f1_micro", "f1_macro", "majority-accuracy",
                       "num-examples", "partition-id", "model-size"})
"""What an evaluation on the site's test questions reports (`client_app.app`), released under every
mode: the test questions are not training examples, so no ε covers or needs to cover them (docs/privacy.md,
threat model); a training loss is not among them."""
EVALUATED_PREFIXES = ("accuracy-", "exact-match-", "others-")
"""Evaluation metrics per question type, and on the other sites' test questions (FedMosaic's Others)."""


class Privacy:
    """``dp = "none"``: the component every mode extends; each hook does nothing here."""

    name = "none"
    released: frozenset[str] | None = None
    """Metrics a train or scores reply may carry besides `EVALUATED` (None: all); the rest stays on
    the site. One allow-list for every reply (`client_app.replies.released_only`)."""

    def allows(self, key: str) -> bool:
        """May a reply carry metric ``key``?"""
        return (self.released is None or key in self.released or key in EVALUATED
                or key.startswith(EVALUATED_PREFIXES))
    keeps_ledger = False
    """Does a site account its own releases (its ledger, read for `budget`)?"""

    def check(self, config: Any) -> None:
        """ValueError in one line for a run setting this mode cannot honour (`settings.RunConfig`)."""

    def check_model(self, model: Any) -> None:
        """ValueError in one line if this mode cannot privatise ``model`` as it trains (server, round 0)."""

    def accountant(self, config: Any, sites: int) -> Any:
        """The server's accountant for ``sites`` connected sites (None: the server accounts nothing)."""
        return None

    def aggregator(self, step: Callable[..., Any], config: Any, accountant: Any) -> Callable[..., Any]:
        """The run's aggregator made what this mode needs of it (here: ``step`` itself)."""
        return step

    def warning(self, config: Any) -> str:
        """One line the server logs before round 1 about what this run's ε leaves out ("" = nothing)."""
        return ""

    def budget(self, config: Any, n: int, history: np.ndarray, cap: float | None = None,
               cap_delta: float | None = None) -> Budget:
        """A client's budget with its ``n`` training examples and the ``history`` it has stored;
        ``cap``: the ε the site pins over its whole history (None: the run's ``dp-epsilon``), judged at
        ``cap_delta`` (0: 1/(10 n); None: the run's δ)."""
        return Budget()

    def clip(self, upload: dict[str, np.ndarray], received: dict[str, np.ndarray], config: Any
             ) -> dict[str, np.ndarray]:
        """The arrays a client sends, made what this mode's mechanism needs (here: as they are)."""
        return upload

    def release(self, metrics: dict, server_round: int) -> dict:
        """The part of a client's reply metrics it `allows`; the rest is logged here, on the site."""
        held = {k: v for k, v in metrics.items() if not self.allows(k)}
        if held:
            shown = (f"{k} {v:.6g}" if isinstance(v, float) else f"{k} {v}" for k, v in sorted(held.items()))
            log(INFO, "round %d: kept on this site (outside ε): %s", server_round, ", ".join(shown))
        return {k: v for k, v in metrics.items() if k not in held}


MODES: dict[str, Privacy] = {}
"""``dp``: the privacy modes by name (`privacy` registers them)."""


def register(*components: Privacy) -> None:
    """Add modes, refusing a name given twice."""
    for component in components:
        if MODES.get(component.name, component) is not component:
            raise ValueError(f"dp mode {component.name!r} is given twice")
        MODES[component.name] = component


def mode(name: str) -> Privacy:
    """The component of ``dp = name`` (ValueError naming it if unknown)."""
    if name not in MODES:
        raise ValueError(f"dp = {name!r} is unknown; choose one of {', '.join(MODES)}")
    return MODES[name]
