"""``mixed:<a>+<b>[+...]``: one federation whose clients hold different data sets (paper Task 6,
task heterogeneity: VQA clients and multi-label clients side by side).

Client ``i`` of ``N`` belongs to component ``i mod n`` (n components, in the order written) and is
client ``i // n`` of that component's own ``len(range(c, N, n))`` clients, split by the run's
partitioner; so ``mixed:easy-vqa+synthetic-multilabel`` with 5 clients gives VQA clients 0, 2, 4
and multi-label clients 1, 3. Each client keeps its component's task and output vocabulary (its
head is personal, supplement §C.3); only the selectable layers are shared.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tasks.data.types import Partition

PREFIX = "mixed:"


def parse_mixed(dataset: str) -> tuple[str, ...]:
    """``"mixed:a+b"`` -> ``("a", "b")``; ValueError for fewer than two or a nested mix."""
    parts = tuple(p.strip() for p in dataset.removeprefix(PREFIX).split("+"))
    if len(parts) < 2 or not all(parts) or any(p.startswith(PREFIX) for p in parts):
        raise ValueError(f"dataset = {dataset!r}: write 'mixed:<dataset>+<dataset>[+...]' "
                         "with at least two plain data sets")
    return parts


def load_mixed(dataset: str, partition_id: int, num_partitions: int,
               load_component: Callable[[str, int, int], Partition]) -> Partition:
    """Client ``partition_id``'s share of its component (see the module doc).

    ``load_component(name, client, count)`` loads client ``client`` of ``count`` of the plain data
    set ``name`` with the run's partitioner, seed and sample caps (`tasks.data.load` passes its own
    ``load_partition``, so this module does not import the dispatcher that imports it).
    """
    parts = parse_mixed(dataset)
    if not 0 <= partition_id < num_partitions:
        raise ValueError(f"partition_id must be in [0, {num_partitions}), got {partition_id!r}")
    component = partition_id % len(parts)
    count = len(range(component, num_partitions, len(parts)))
    part = load_component(parts[component], partition_id // len(parts), count)
    return dataclasses.replace(part, name=f"{dataset} {partition_id}/{num_partitions} ({part.name})")
