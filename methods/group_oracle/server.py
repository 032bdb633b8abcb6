"""Group oracle: FedAvg within groups of clients known in advance (run config ``client-groups``).

The upper reference for any personalised aggregator (SIMA): where clients fall into
groups whose tasks conflict, averaging only within a group is what a perfect similarity estimate
would do. Client i's group is ``groups[partition id mod len(groups)]`` (cycled like ``budgets``);
the partition id comes with every train reply. Each client receives the masked FedAvg (paper Eq.
1/5) of its own group's updates; the shared ``global_state`` is the masked FedAvg of all updates
(checkpoints, clients that took no part this round).
"""

from __future__ import annotations

from collections.abc import Sequence

from strategies.aggregation.masked import masked_fedavg
from strategies.aggregation.types import Aggregate, ClientUpdate
from strategies.records import State
from tasks.data.partition import group_of


def group_of_update(update: ClientUpdate, groups: Sequence[int]) -> int:
    """The group of the client that sent ``update`` (by the partition id in its metrics)."""
    pid = update.metrics.get("partition-id")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid < 0:
        raise ValueError(f"group-oracle: node {update.node_id} sent no partition id (got {pid!r})")
    return group_of(pid, groups)


def group_oracle(global_state: State, updates: Sequence[ClientUpdate], *,
                 groups: Sequence[int] = (0,)) -> Aggregate:
    """Masked FedAvg per group of clients; each client gets its group's model (module doc)."""
    if not groups:
        raise ValueError("client-groups is empty: give one group id per partition, e.g. '0,0,1,1'")
    members: dict[int, list[ClientUpdate]] = {}
    for update in updates:
        members.setdefault(group_of_update(update, groups), []).append(update)
    personal = {}
    for group in members.values():
        model = masked_fedavg(global_state, group).global_state
        personal.update({u.node_id: model for u in group})
    return Aggregate(global_state=masked_fedavg(global_state, updates).global_state, personal=personal)
