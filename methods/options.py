"""The methods' own settings: one frozen dataclass per method that has any, its fields the run-config
keys it owns (defaults as in ``pyproject.toml [tool.flwr.app.config]``, where Flower reads them;
tests/methods/test_methods.py keeps the two equal) and how they bind the method's server step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from methods.base import MethodSettings, setting


@dataclass(frozen=True)
class FedPiaSettings(MethodSettings):
    """FedPIA (`strategies.aggregation.fedpia`, `client_app.pia`): γ of the integration weights
    exp(−γ d_k) and their form, which levels align (paper Table 5), the client's OT cost and its
    batch of m samples, and the server's alignment passes (1 = the paper)."""

    gamma: float = setting(1.0, "fedpia-gamma", low=0.0)
    integration: str = setting("normalised", "fedpia-integration", choices=("normalised", "paper"))
    level: str = setting("both", "fedpia-level", choices=("both", "server", "client"))
    client_cost: str = setting("activation", "fedpia-client-cost", choices=("activation", "weight"))
    samples: int = setting(16, "fedpia-samples", low=1)
    iterations: int = setting(5, "fedpia-iterations", low=1)

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


@dataclass(frozen=True)
class SimaSettings(MethodSettings):
    """FedMosaic's SIMA (`strategies.aggregation.sima`, `client_app.mosaic`): the softmax temperature
    of the client similarities (Eq. 5), the EMA ratio of the decayed gradient (Eq. 4) and how often
    (every f local steps) the gradient is taken; paper appendix and official code defaults."""

    tau: float = setting(0.5, "sima-tau", low=0.0, strict_low=True)
    ema: float = setting(0.5, "sima-ema", low=0.0, high=1.0, strict_low=True)
    freq: int = setting(10, "sima-freq", low=1)

    def server_keywords(self, config: Any) -> dict[str, object]:
        return {"tau": self.tau}

    def extra_release(self) -> str:
        """Each client sends its decayed gradient vector (FedMosaic Eq. 4) beside its adapters."""
        return ("SIMA sends each client's decayed gradient vector of its local data (sima-grad) beside "
                "its adapters, a release its ε does not cover; use another aggregation")


@dataclass(frozen=True)
class GroupOracleSettings(MethodSettings):
    """The group oracle owns no key; its server step reads the run's ``client-groups``."""

    def server_keywords(self, config: Any) -> dict[str, object]:
        return {"groups": config.groups}


@dataclass(frozen=True)
class F3ocusSettings(MethodSettings):
    """F3OCUS's server optimiser (supplement §C.3): population, generations and the solution picked
    from the Pareto front. The optimiser itself (``optimizer``) is a run-wide key: run names and
    sweeps carry it whatever the strategy."""

    pop_size: int = setting(50, "optimizer-pop-size", low=2)
    generations: int = setting(20, "optimizer-generations", low=1)
    pick: str = setting("weighted", "optimizer-pick", choices=("weighted", "knee", "least-diversity"))
    importance_weight: float = setting(0.5, "optimizer-importance-weight", low=0.0, high=1.0)

    def server_keywords(self, config: Any) -> dict[str, object]:
        """The optimiser's parameters (`metaheuristics.optimize` keywords)."""
        return {"pop_size": self.pop_size, "n_gen": self.generations, "pick": self.pick,
                "weight": self.importance_weight}
