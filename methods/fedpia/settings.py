"""FedPIA's own run-config keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from methods.base import MethodSettings, setting


@dataclass(frozen=True)
class FedPiaSettings(MethodSettings):
    """FedPIA (`methods.fedpia.server`, `methods.fedpia.client`): γ of the integration weights
    exp(−γ d_k) and their form, which levels align (paper Table 5), the client's OT cost and its
    batch of m samples, and the server's alignment passes (1 = the paper)."""

    gamma: float = setting(1.0, "fedpia-gamma", low=0.0,
                           help="γ of the integration weights exp(−γ d_k); 0: FedAvg of the aligned adapters")
    integration: str = setting("normalised", "fedpia-integration", choices=("normalised", "paper"),
                               help="weights divided by their sum (normalised) or the paper's (1/K) Σ form")
    level: str = setting("both", "fedpia-level", choices=("both", "server", "client"),
                         help="where FedPIA aligns: both, server only, client only (paper Table 5)")
    client_cost: str = setting("activation", "fedpia-client-cost", choices=("activation", "weight"),
                               help="client OT supports: mean activations on m own samples, or weights")
    samples: int = setting(16, "fedpia-samples", low=1,
                           help="m, the client's seeded batch for activation supports")
    iterations: int = setting(5, "fedpia-iterations", low=1,
                              help="server PIA passes (1 = the paper), until the assignment settles")

    @property
    def client_level(self) -> bool:
        """Does the client align and combine adapters (``fedpia-level`` both or client)?"""
        return self.level != "server"

    def server_keywords(self, config: Any) -> dict[str, object]:
        """Server-level PIA is off at ``fedpia-level = "client"`` (masked FedAvg for every array)."""
        return {"gamma": self.gamma, "integration": self.integration, "align": self.level != "client",
                "iterations": self.iterations}

    def extra_release(self) -> str:
        """Client-level PIA aligns and integrates the adapters on local samples outside local
        training; server-level alignment only post-processes the received adapters."""
        if not self.client_level:
            return ""
        return (f"fedpia-level = {self.level!r}: client-level PIA aligns adapters on {self.samples} local "
                "samples outside DP-SGD, a use of the data its ε does not cover; use fedpia-level = 'server' "
                "(server-level alignment post-processes the privatised adapters)")
