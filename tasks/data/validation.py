"""A validation split of a client's training data: settings (learning rate, clip, ...) are chosen
on questions the client owns and does not train on, never on its test questions."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tasks.data.types import Partition


def hold_out(partition: Partition, share: float, seed: int, max_samples: int = 0) -> Partition:
    """``partition`` with ``share`` of its training samples (at least one, seeded by ``seed``), at
    most ``max_samples`` of them (0 = no cap), held out as its evaluation split in place of the test
    questions; every other sample trains. ValueError names ``validation-share`` when it is outside
    [0, 1) or leaves no sample on either side."""
    if not 0.0 <= share < 1.0:
        raise ValueError(f"validation-share = {share!r} is not in [0, 1)")
    if share == 0.0:
        return partition
    n = len(partition.train)
    held = max(1, round(share * n))
    if held >= n:
        raise ValueError(f"validation-share = {share!r} leaves no training sample of {n} in {partition.name}")
    order = np.random.default_rng(seed).permutation(n)
    cut = min(held, max_samples) if max_samples else held
    return replace(partition, train=[partition.train[i] for i in np.sort(order[cut:])],
                   test=[partition.train[i] for i in np.sort(order[:cut])],
                   name=f"{partition.name} (validation {share:g})")
