"""A planted task conflict between client groups: one group's answers rotated.

For the aggregation benchmark, clients of one group see every question type's answers rotated by
one place (in the vocabulary's order: for easy-VQA, circle -> rectangle -> triangle -> circle,
each colour to the next, yes <-> no), so the same image and question have different right answers
in the two groups. A shared head averaged over both groups must compromise, while averaging
within each group (the group oracle) need not: the gap is what a personalised aggregator can win.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from tasks.data.types import Partition


def rotation(partition: Partition, answers: Mapping[str, Sequence[int]]) -> np.ndarray:
    """Answer index -> rotated index: each question type's answers (`answers`: the data set's,
    `tasks.data.load.answers_by_type`, in the vocabulary's order) moved one place on, cyclically,
    so every client of a group sees the same rotation whichever answers its own samples use."""
    mapping = np.arange(len(partition.labels))
    for ordered in answers.values():
        ordered = sorted(ordered)
        mapping[ordered] = np.roll(ordered, -1)
    return mapping


def rotate_answers(partition: Partition, answers: Mapping[str, Sequence[int]]) -> Partition:
    """The partition with every VQA target rotated (`rotation`); images and questions unchanged."""
    if partition.task != "vqa":
        raise ValueError(f"group-conflict rotates VQA answers; {partition.name} is {partition.task!r}")
    mapping = rotation(partition, answers)

    def moved(samples):
        return [replace(s, target=int(mapping[s.target])) for s in samples]

    return replace(partition, train=moved(partition.train), test=moved(partition.test),
                   name=f"{partition.name} (answers rotated)")
