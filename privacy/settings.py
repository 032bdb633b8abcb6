"""Differential privacy settings, read by both apps: which unit a run protects and its budget.

``dp = "sample"``: DP-SGD on each client (one training example is the unit; Opacus), its noise set
from ``dp-epsilon``/``dp-delta`` over the planned rounds × local steps. ``dp = "client"``: DP-FedAvg
(a whole site is the unit): each client clips its update to ``dp-clip``, the server adds Gaussian noise
of standard deviation z × ``dp-clip`` to each array's sum, z = ``dp-noise`` or, when that is 0, the z
whose planned rounds spend ``dp-epsilon``; the run stops before a round whose ε would pass
``dp-max-epsilon`` (0: ``dp-epsilon``), see `privacy.client`. A privacy setting is not a method:
it pairs with every selection rule and aggregation that can honour it, so it has its own settings
class beside the methods' (`RunConfig.owners`); each mode is one component, `privacy`."""

from __future__ import annotations

from dataclasses import dataclass

from methods.base import MethodSettings, setting
from privacy import MODES, Privacy
from privacy import mode as privacy_mode


@dataclass(frozen=True)
class PrivacySettings(MethodSettings):
    """Differential privacy: the unit a run protects and its budget (the ``dp-*`` keys).
    ``dp-delta = 0`` means δ = 1/(10 n), n the protected units (a client's
    examples for ``sample``, the sites for ``client``); ``dp-noise = 0`` means z from ``dp-epsilon``,
    ``dp-max-epsilon = 0`` means the cap is ``dp-epsilon`` (``client``), and ``dp-rounds = 0`` plans the
    per-sample noise over every round."""

    mode: str = setting("none", "dp", choices=tuple(MODES),
                        help="the unit protected: none, sample (DP-SGD) or client (DP-FedAvg)")
    epsilon: float = setting(8.0, "dp-epsilon", low=0.0, strict_low=True,
                             help="ε, each client's (sample) or site's (client) budget")
    delta: float = setting(0.0, "dp-delta", low=0.0, high=1.0,
                           help="δ; 0 = 1/(10 n), n the protected units")
    clip: float = setting(1.0, "dp-clip", low=0.0, strict_low=True,
                          help="clip norm of an example's gradient (sample) or a site's update")
    noise: float = setting(0.0, "dp-noise", low=0.0,
                           help="client: noise multiplier z; 0 = the z that spends dp-epsilon")
    max_epsilon: float = setting(0.0, "dp-max-epsilon", low=0.0,
                                 help="client: stop before a round whose ε passes this; 0 = dp-epsilon")
    score_share: float = setting(0.2, "dp-score-share", low=0.0, high=0.99, strict_low=True,
                                 help="sample: share of dp-epsilon whose noise the LNTK scores' releases get")
    """``sample`` with a rule that scores by LNTK: the multiplier of the scores' Gaussian noise is the
    one whose releases alone would spend this share of ``dp-epsilon``; DP-SGD's σ is then planned so
    that both together spend ``dp-epsilon`` (`privacy.mechanisms.plan`)."""
    rounds: int = setting(0, "dp-rounds", low=0,
                          help="sample: rounds the noise is planned for (0 = num-server-rounds)")
    """``sample``: the rounds each client's noise is planned for (0 = ``num-server-rounds``); a client
    whose next round would pass ``dp-epsilon`` sits it out, so fewer planned rounds mean less noise
    per round and a budget spent before the run ends."""

    @property
    def component(self) -> Privacy:
        """The mode's component (`privacy`): what the apps call instead of testing ``mode``."""
        return privacy_mode(self.mode)
