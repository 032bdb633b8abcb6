"""What every aggregation step shares: its signature and what it receives and returns (`types`). The
steps themselves live in their method packages (`methods`); DP-FedAvg, which wraps a per-array mean
step for ``dp = "client"``, in `methods.privacy.dp_fedavg`."""

from __future__ import annotations

from strategies.aggregation.types import Aggregate, Aggregator, ClientUpdate

__all__ = ["Aggregate", "Aggregator", "ClientUpdate"]
