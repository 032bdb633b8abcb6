"""What one round decided and measured (`RoundLog`), and the example-weighted means of the
clients' metrics."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from logging import DEBUG, INFO, WARNING, getLogger

import numpy as np

from metaheuristics import Assignment
from strategies.validation import LayerReport

log = getLogger("flwr").log  # Flower's logger: its handlers reach the console and `flwr run --stream`

PHASES = ("identifying", "scoring", "optimising", "training", "aggregating", "evaluating")
"""``RoundLog.seconds``: "identifying" asks newly connected nodes who they are (`client_ids`);
"evaluating" is the exchange that closes a round (its evaluation and the next round's scores, one
message); "scoring" an exchange that only scores (a resumed run's first)."""


@dataclass
class RoundLog:
    """Everything one round decided and measured; handed to ``on_round_end``."""

    server_round: int
    reports: dict[int, LayerReport] = field(default_factory=dict)
    masks: dict[int, np.ndarray] = field(default_factory=dict)
    assignment: Assignment | None = None
    rejected: list[dict] = field(default_factory=list)
    bytes_down: dict[int, int] = field(default_factory=dict)
    bytes_up: dict[int, int] = field(default_factory=dict)
    train_metrics: dict[int, dict] = field(default_factory=dict)
    eval_metrics: dict[int, dict] = field(default_factory=dict)
    sat_out: dict[int, dict] = field(default_factory=dict)  # node -> its reply metrics (`sit_out`)
    clients: dict[int, str] = field(default_factory=dict)  # node -> its client id
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    exchanges: int = 0  # message exchanges sent in this round (each one phase)
    messages: int = 0  # messages sent in them
    aggregated: bool = False
    epsilon: float | None = None  # dp = "client": the ε every site has spent after this round (PLD)
    epsilon_rdp: float | None = None  # the same by RDP, recorded beside it
    logged: set[tuple[int, str]] = field(default_factory=set, repr=False)  # shared across rounds

    def reject(self, node_id: int, stage: str, reason: str) -> None:
        """Record a rejected reply; log it unless this node gave the same reason before."""
        self.rejected.append({"node": node_id, "stage": stage, "reason": reason})
        if (node_id, reason) in self.logged:
            log(DEBUG, "round %d: %s reply from node %d rejected again: %s",
                self.server_round, stage, node_id, reason)
            return
        self.logged.add((node_id, reason))
        log(WARNING, "round %d: %s reply from node %d rejected: %s (shown once per node and reason)",
            self.server_round, stage, node_id, reason)

    def sit_out(self, node_id: int, metrics: dict) -> None:
        """Record a client that sat the round out to stay within its privacy budget (``dp =
        "sample"``, `privacy.sample`); one log line, not a rejection."""
        self.sat_out[node_id] = metrics
        log(INFO, "round %d: node %d sits out: one more round would spend ε %.3f, over its dp-epsilon %.3f "
            "(spent %.3f)", self.server_round, node_id, metrics.get("dp-epsilon-next", float("nan")),
            metrics.get("dp-budget", float("nan")), metrics.get("dp-epsilon", float("nan")))

    def add_bytes(self, direction: dict[int, int], node_id: int, count: int) -> None:
        direction[node_id] = direction.get(node_id, 0) + count


NOT_METRICS = ("num-examples", "partition-id", "model-size")


def weighted_means(per_client: dict[int, dict]) -> dict[str, float]:
    """Example-weighted mean of every numeric metric the clients reported; exactly rounded sums
    (`math.fsum`), so the mean does not depend on the order the replies came in."""
    weights = {node: m.get("num-examples", 0) for node, m in per_client.items()}
    total = math.fsum(weights.values())
    if total <= 0:
        return {}
    keys = {k for m in per_client.values() for k, v in m.items()
            if isinstance(v, int | float) and k not in NOT_METRICS}
    return {k: math.fsum(weights[n] * m[k] for n, m in per_client.items() if k in m) / total
            for k in sorted(keys)}
