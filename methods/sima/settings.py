"""SIMA's own run-config keys, and the name of the vector its clients send."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from methods.base import MethodSettings, setting

VECTOR = "sima-grad"
"""Key of a client's gradient vector ĝ_i in its train reply and its stored personal state."""


@dataclass(frozen=True)
class SimaSettings(MethodSettings):
    """FedMosaic's SIMA (`methods.sima.server`, `methods.sima.client`): the softmax temperature
    of the client similarities (Eq. 5), the EMA ratio of the decayed gradient (Eq. 4) and how often
    (every f local steps) the gradient is taken; paper appendix and official code defaults."""

    tau: float = setting(0.5, "sima-tau", low=0.0, strict_low=True,
                         help="softmax temperature τ of the client similarities (Eq. 5)")
    ema: float = setting(0.5, "sima-ema", low=0.0, high=1.0, strict_low=True,
                         help="EMA ratio of the decayed gradient (Eq. 4)")
    freq: int = setting(10, "sima-freq", low=1,
                        help="the gradient is taken every f local steps")

    def server_keywords(self, config: Any) -> dict[str, object]:
        return {"tau": self.tau}

    def extra_release(self) -> str:
        """Each client sends its decayed gradient vector (FedMosaic Eq. 4) beside its adapters."""
        return ("SIMA sends each client's decayed gradient vector of its local data (sima-grad) beside "
                "its adapters, a release its ε does not cover; use another aggregation")
