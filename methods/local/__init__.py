"""Local-only training, FedMosaic's no-collaboration reference: each client keeps its own adapters."""

from __future__ import annotations

from collections.abc import Callable

from methods.base import Aggregation, register

NO_DP = "it returns each site its own un-noised update and shares nothing, so there is no aggregate to noise"


def server_step() -> Callable:
    """The server step, imported when a run uses this method."""
    from methods.local.server import local_only

    return local_only


register(Aggregation("local", server_step, client_dp_refusal=NO_DP))
