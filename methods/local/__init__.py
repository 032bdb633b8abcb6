"""Local-only training, FedMosaic's no-collaboration reference: each client keeps its own adapters."""

from __future__ import annotations

from methods.base import Aggregation, register

NO_DP = "it returns each site its own un-noised update and shares nothing, so there is no aggregate to noise"


register(Aggregation("local", "methods.local.server:local_only", client_dp_refusal=NO_DP))
