"""Data types: the public `Sample`/`Partition` and the internal pooled `Split`/`Source`.

A data set is first loaded whole into a `Source` (vectorised arrays, cached per process); the
partitioner then picks index sets from it, and only the chosen samples become `Sample` objects.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Sample:
    """One (image, question, answer) VQA triplet or one (image, text, multi-hot) sample."""

    image: np.ndarray  # (H, W, 3) uint8 RGB, read-only
    question: str  # the VQA question, or the report/caption text of a multi-label sample
    target: int | np.ndarray  # VQA: answer index into Partition.labels; multilabel: (C,) float32
    qtype: str  # "shape" | "color" | "yes/no" | "modality" | "anatomy" | "diagnosis" | ...


@dataclass(frozen=True)
class Partition:
    """One client's share of a data set: its train and test samples and the output vocabulary."""

    train: list[Sample]
    test: list[Sample]
    labels: list[str]  # output vocabulary; the client's head has len(labels) outputs
    task: str  # "vqa" (single answer, accuracy) | "multilabel" (multi-hot, F1)
    name: str  # e.g. "easy-vqa[by-question-type:0.5] 2/5" (partition id 2 of 5, 0-based)


@dataclass(frozen=True)
class Split:
    """All samples of one split of a data set, as arrays (internal).

    Images live in per-group blocks (a group is a modality file for medmnist-vqa, else 0) so that
    files of different image sizes can coexist; sample j shows `blocks[groups[j]][rows[j]]`.
    """

    blocks: tuple[np.ndarray, ...]  # per group: (M_g, H_g, W_g, C_g) uint8, C_g in {1, 3}
    groups: np.ndarray  # (N,) int64 group of each sample
    rows: np.ndarray  # (N,) int64 image row inside its group's block
    questions: tuple[str, ...]  # (N,)
    targets: np.ndarray  # (N,) int64 answer index, or (N, C) float32 multi-hot
    qtypes: np.ndarray  # (N,) str

    def __len__(self) -> int:
        return len(self.questions)


@dataclass(frozen=True)
class Source:
    """A whole data set before partitioning (internal)."""

    train: Split
    test: Split
    labels: tuple[str, ...]
    task: str
    num_groups: int = 1


def majority_accuracy(samples: list[Sample]) -> float:
    """Share of the most common target: the accuracy of always giving the majority answer (VQA
    baseline); for multi-hot targets, the share of the most common label set (exact match)."""
    if not samples:
        raise ValueError("majority_accuracy needs at least one sample, got an empty list")
    keys = [s.target if np.ndim(s.target) == 0 else np.asarray(s.target).tobytes() for s in samples]
    return Counter(keys).most_common(1)[0][1] / len(samples)
