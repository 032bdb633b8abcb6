"""What every aggregation step shares: its signature and what it receives and returns (`types`), and
DP-FedAvg, which wraps a per-array mean step for ``dp = "client"`` (`dp`). The steps themselves live
in their method packages (`methods`)."""

from __future__ import annotations

from strategies.aggregation.types import Aggregate, Aggregator, ClientUpdate

__all__ = ["Aggregate", "Aggregator", "ClientUpdate"]
