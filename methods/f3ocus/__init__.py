"""F3OCUS (paper §4-5): clients report each layer's LNTK importance, and a multi-objective optimiser
(``optimizer``, e.g. NSGA-II) on the server picks every client's mask within its budget, trading
the clients' importance against the diversity of the layers the federation trains."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from methods.base import MethodSettings, Selection, register, setting
from tasks.names import LNTK


@dataclass(frozen=True)
class F3ocusSettings(MethodSettings):
    """F3OCUS's server optimiser (supplement §C.3): population, generations and the solution picked
    from the Pareto front. The optimiser itself (``optimizer``) is a run-wide key: run names and
    sweeps carry it whatever the strategy."""

    pop_size: int = setting(50, "optimizer-pop-size", low=2,
                            help="the optimiser's population (supplement §C.3)")
    generations: int = setting(20, "optimizer-generations", low=1,
                               help="the optimiser's iterations (supplement §C.3)")
    pick: str = setting("weighted", "optimizer-pick", choices=("weighted", "knee", "least-diversity"),
                        help="the Pareto solution used: weighted (Algorithm 34), knee or least-diversity")
    importance_weight: float = setting(0.5, "optimizer-importance-weight", low=0.0, high=1.0,
                                       help="the weighted pick's importance weight w (diversity: 1 - w)")

    def server_keywords(self, config: Any) -> dict[str, object]:
        """The optimiser's parameters (`metaheuristics.optimize` keywords)."""
        return {"pop_size": self.pop_size, "n_gen": self.generations, "pick": self.pick,
                "weight": self.importance_weight}


register(Selection("f3ocus", scorer=LNTK, settings=F3ocusSettings, optimises=True))
