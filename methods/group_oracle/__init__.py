"""The group oracle: FedAvg within client groups known in advance (``client-groups``), the upper
reference for personalised aggregation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from methods.base import Aggregation, MethodSettings, register

NO_DP = ("its per-group means are released beside the global mean, and each would need its own noise and "
         "accounting (not implemented)")


@dataclass(frozen=True)
class GroupOracleSettings(MethodSettings):
    """The group oracle owns no key; its server step reads the run's ``client-groups``."""

    def server_keywords(self, config: Any) -> dict[str, object]:
        return {"groups": config.groups}


register(Aggregation("group-oracle", "methods.group_oracle.server:group_oracle", GroupOracleSettings,
                     needs_groups=True, client_dp_refusal=NO_DP))
