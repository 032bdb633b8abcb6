"""`load_partition`: one client's train/test share of a named data set under a named partitioner.

Every client computes the same seeded split of the whole data set and keeps its own part, so the
partitions are disjoint without any coordination. Samples come in a seeded random order;
``max_train`` / ``max_test`` keep a prefix of that order, i.e. a seeded subsample taken after
partitioning.
"""

from __future__ import annotations

import functools

import numpy as np

from tasks.data.mixed import load_mixed
from tasks.data.partition import parse_partitioner, split_indices
from tasks.data.registry import parse_dataset
from tasks.data.transforms import apply_modality
from tasks.data.types import Partition, Sample, Split


def _check_int(name: str, value: object, low: int, high: int | None = None) -> None:
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if not ok or value < low or (high is not None and value >= high):
        bound = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high})"
        raise ValueError(f"{name} must be {bound}, got {value!r}")


def load_partition(
    dataset: str,
    partition_id: int,
    num_partitions: int,
    partitioner: str = "iid",
    seed: int = 0,
    max_train: int | None = None,
    max_test: int | None = None,
) -> Partition:
    """Train/test samples of client `partition_id` (0-based) out of `num_partitions`.

    The data set is a `tasks.data.registry` entry, whose loader gives the whole source.
    Raises ValueError for an unknown dataset or partitioner, a bad gamma, id or count, or a
    partition left without train or test samples; FileNotFoundError for a missing medmnist-vqa or
    hf-disk directory.
    A ``mixed:<a>+<b>`` data set gives client i a share of component i mod 2 (`tasks.data.mixed`).
    """
    entry, argument = parse_dataset(dataset)
    if not entry.source:  # a mixture of registry entries
        _check_int("num_partitions", num_partitions, 1)
        _check_int("partition_id", partition_id, 0, num_partitions)
        component = functools.partial(load_partition, partitioner=partitioner, seed=seed,
                                      max_train=max_train, max_test=max_test)
        return load_mixed(dataset, int(partition_id), int(num_partitions), component)
    parse_partitioner(partitioner)  # a bad spec fails before anything is loaded
    _check_int("num_partitions", num_partitions, 1)
    _check_int("partition_id", partition_id, 0, num_partitions)
    _check_int("seed", seed, 0)
    for name, value in (("max_train", max_train), ("max_test", max_test)):
        if value is not None:
            _check_int(name, value, 1)
    partition_id, num_partitions, seed = int(partition_id), int(num_partitions), int(seed)
    name = f"{dataset}[{partitioner}] {partition_id}/{num_partitions}"

    source = entry.load()(argument, seed)
    train_idx, test_idx = _cut(dataset, num_partitions, partitioner, seed)[partition_id]
    for split, idx in (("train", train_idx), ("test", test_idx)):
        if len(idx) == 0:
            raise ValueError(
                f"partition {name} gets no {split} samples; "
                "use fewer partitions or another partitioner"
            )
    rng = np.random.default_rng([seed, partition_id])
    train_idx = rng.permutation(train_idx)[:max_train]
    test_idx = rng.permutation(test_idx)[:max_test]
    modality = partition_id if entry.modalities else None
    return Partition(
        train=_samples(source.train, train_idx, modality, seed),
        test=_samples(source.test, test_idx, modality, seed),
        labels=list(source.labels),
        task=source.task,
        name=name,
    )


def answers_by_type(dataset: str, seed: int = 0) -> dict[str, list[int]]:
    """Each question type's answer indices over the whole data set (train and test), sorted: what
    a planted conflict rotates (`tasks.data.conflict`), the same for every client whichever
    answers its own samples happen to use."""
    entry, argument = parse_dataset(dataset)
    if not entry.source:
        raise ValueError(f"answers by question type need one data set, not the mixture {dataset!r}")
    source = entry.load()(argument, int(seed))
    qtypes = np.concatenate([source.train.qtypes, source.test.qtypes])
    targets = np.concatenate([source.train.targets, source.test.targets])
    return {str(q): np.unique(targets[qtypes == q]).tolist() for q in np.unique(qtypes)}


@functools.lru_cache(maxsize=4)
def _cut(dataset: str, num_partitions: int, partitioner: str, seed: int
         ) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """Every client's (train, test) indices, read-only: the seeded split is computed once per process
    and shared by every client the process hosts. It costs O(num_partitions) per call, so an
    in-process federation of N sites that redid it for each message would pay O(N²) a round."""
    entry, argument = parse_dataset(dataset)
    cut = split_indices(entry.load()(argument, seed), num_partitions, parse_partitioner(partitioner), seed)
    for part in cut:
        for indices in part:
            indices.flags.writeable = False
    return tuple((train, test) for train, test in cut)


def _samples(split: Split, idx: np.ndarray, modality: int | None, seed: int) -> list[Sample]:
    """Sample objects for split indices; images are read-only views, RGB, modality-transformed."""
    images: list[np.ndarray] = [np.empty(0)] * len(idx)
    for group in np.unique(split.groups[idx]):
        at = np.flatnonzero(split.groups[idx] == group)
        rows = split.rows[idx[at]]
        block = split.blocks[group]
        if block.shape[-1] == 3 and modality is None:
            chosen, position = block, rows
        else:  # copy only this client's images: grayscale -> RGB, then its modality
            unique, position = np.unique(rows, return_inverse=True)
            chosen = np.repeat(block[unique], 3, axis=-1) if block.shape[-1] == 1 else block[unique]
            if modality is not None:
                chosen = apply_modality(chosen, modality, seed)
            chosen.flags.writeable = False
        for k, p in zip(at, position, strict=True):
            images[k] = chosen[p]
    multilabel = split.targets.ndim == 2
    return [
        Sample(
            image=image,
            question=split.questions[j],
            target=split.targets[j].copy() if multilabel else int(split.targets[j]),
            qtype=str(split.qtypes[j]),
        )
        for image, j in zip(images, idx, strict=True)
    ]
