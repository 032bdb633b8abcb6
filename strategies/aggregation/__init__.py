"""What every aggregation step shares: its signature and what it receives and returns (`types`), and
masked FedAvg (`masked`), the round's default step. The other steps live in their method packages
(`methods`); DP-FedAvg, which wraps a per-array mean step for ``dp = "client"``, with privacy."""

from __future__ import annotations

from strategies.aggregation.masked import masked_fedavg
from strategies.aggregation.types import Aggregate, Aggregator, ClientUpdate

__all__ = ["Aggregate", "Aggregator", "ClientUpdate", "masked_fedavg"]
