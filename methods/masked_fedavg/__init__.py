"""Masked FedAvg (paper Eq. 1 and 5), the default aggregation: each layer averaged over the clients
that trained it. It is a per-array mean, so ``dp = "client"`` can wrap it."""

from __future__ import annotations

from methods.base import Aggregation, register

register(Aggregation("masked-fedavg", "strategies.aggregation.masked:masked_fedavg", client_dp_refusal=None))
