"""Masked FedAvg (paper Eq. 1 and 5), the default aggregation: each layer averaged over the clients
that trained it. It is a per-array mean, so ``dp = "client"`` can wrap it."""

from __future__ import annotations

from collections.abc import Callable

from methods.base import Aggregation, register


def server_step() -> Callable:
    """The server step, imported when a run uses this method."""
    from strategies.aggregation.masked import masked_fedavg

    return masked_fedavg


register(Aggregation("masked-fedavg", server_step, client_dp_refusal=""))
