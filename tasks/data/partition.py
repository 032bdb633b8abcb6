"""Partitioners: split a pooled data set into disjoint, seeded client shares.

Specs (paper §6.1; label shift as in its multi-label Tasks 4-5, "Dirichlet coefficient γ = 0.5"):

* ``iid`` — a seeded permutation of the samples, cut into near-equal parts.
* ``dirichlet:<gamma>`` — label skew: for every answer class c, client shares p_c ~ Dir(γ·1_K) are
  drawn once from the seed, and the class's train samples *and* its test samples are cut by the same
  p_c, so a client is evaluated on its own label distribution. Multi-hot targets are stratified by
  their rarest positive label (frequency over the train split), or a "no finding" class.
* ``by-question-type[:<gamma>]`` — task heterogeneity: question types (sorted by name) go to clients
  round-robin, client j gets type j mod T (when there are fewer clients than types, type t goes to
  client t mod K, so no type is dropped); the clients sharing a type split its samples iid, or by
  Dirichlet(γ) over answers when γ is given. Test samples follow the same rule.

Grouped data sets (medmnist-vqa: one group per modality file, F groups) are first split by
group: with K >= F clients, client j belongs to group j mod F and the clients of one group split it
with the partitioner; with K < F, group f goes whole to client f mod K.

Every client receives at least one train and one test sample when its group (and type) has enough
samples: a client left empty by a Dirichlet draw takes one sample from the largest client of the
same cut. Deviation: that repair is not in the paper; without it, small test sets would leave
clients with nothing to evaluate on.

flwr-datasets vs hand-written code. Every iid cut (``iid``, and the clients sharing a question type
under ``by-question-type``) is flwr-datasets' `IidPartitioner` on the seeded order
``rng.permutation(idx)``; it shards like ``np.array_split``, so the splits are the ones of the
hand-written version before it (same seed, same indices). Hand-written, because no flwr-datasets
partitioner expresses it:

* the Dirichlet cut. `DirichletPartitioner` draws p_c for one `datasets.Dataset`; the test split
  must be cut by the *same* p_c as the train split (a second partitioner draws its own, and its
  resampling until ``min_partition_size`` holds redraws all of them), it floors class shares where
  this code rounds, cuts each class in index order instead of a seeded permutation, and redraws
  instead of moving one sample to an empty client (`_repair`). `DistributionPartitioner` takes fixed
  shares, but only with a client count divisible by the class count.
* the assignment of groups and question types to clients (round robin, several clients per type,
  test types included): `NaturalIdPartitioner` gives one partition per id, and
  `GroupedNaturalIdPartitioner` groups consecutive ids; here it is a boolean mask per type.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tasks.data.types import Source

PARTITIONERS: tuple[str, ...] = ("iid", "dirichlet:<gamma>", "by-question-type[:<gamma>]")

Cut = list[np.ndarray]  # one index array per client


@dataclass(frozen=True)
class PartitionerSpec:
    kind: str  # "iid" | "dirichlet" | "by-question-type"
    gamma: float | None  # Dirichlet concentration, None for an iid split


def parse_partitioner(spec: str) -> PartitionerSpec:
    """Parse a partitioner name; ValueError names the bad spec or gamma."""
    if not isinstance(spec, str):
        raise ValueError(f"partitioner must be a string, got {spec!r}")
    kind, sep, arg = spec.partition(":")
    if kind == "iid" and not sep:
        return PartitionerSpec("iid", None)
    if kind == "dirichlet" and sep:
        return PartitionerSpec("dirichlet", _parse_gamma(arg, spec))
    if kind == "by-question-type":
        return PartitionerSpec(kind, _parse_gamma(arg, spec) if sep else None)
    raise ValueError(f"unknown partitioner {spec!r}; choose one of {', '.join(PARTITIONERS)}")


def _parse_gamma(text: str, spec: str) -> float:
    try:
        gamma = float(text)
    except ValueError:
        gamma = math.nan
    if not (math.isfinite(gamma) and gamma > 0):
        raise ValueError(f"gamma must be a positive number, got {text!r} in partitioner {spec!r}")
    return gamma


def split_indices(
    source: Source, num_partitions: int, spec: PartitionerSpec, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train indices, test indices) of every client; disjoint, deterministic for the seed."""
    train, test = source.train, source.test
    train_y, test_y = _strata(train.targets, test.targets)
    out_train: list[list[np.ndarray]] = [[] for _ in range(num_partitions)]
    out_test: list[list[np.ndarray]] = [[] for _ in range(num_partitions)]
    for group, clients in enumerate(_group_clients(source.num_groups, num_partitions)):
        tr = np.flatnonzero(train.groups == group)
        te = np.flatnonzero(test.groups == group)
        if spec.kind == "by-question-type":
            types = sorted(set(train.qtypes[tr].tolist()) | set(test.qtypes[te].tolist()))
            cuts = [
                (members, tr[train.qtypes[tr] == t], te[test.qtypes[te] == t], t_index)
                for t_index, (t, members) in enumerate(
                    zip(types, _round_robin(types, clients), strict=True)
                )
            ]
        else:
            cuts = [(clients, tr, te, 0)]
        gamma = None if spec.kind == "iid" else spec.gamma
        for members, tr_cut, te_cut, t_index in cuts:
            rng = np.random.default_rng([seed, group, t_index])
            train_parts, test_parts = _split(
                tr_cut, te_cut, train_y, test_y, len(members), gamma, rng
            )
            for client, tr_part, te_part in zip(members, train_parts, test_parts, strict=True):
                out_train[client].append(tr_part)
                out_test[client].append(te_part)
    return [(np.sort(_cat(a)), np.sort(_cat(b))) for a, b in zip(out_train, out_test, strict=True)]


def _group_clients(num_groups: int, num_partitions: int) -> list[list[int]]:
    """Clients of each group: j -> group j mod F when K >= F, else group f -> client f mod K."""
    if num_partitions >= num_groups:
        return [list(range(g, num_partitions, num_groups)) for g in range(num_groups)]
    return [[g % num_partitions] for g in range(num_groups)]


def _round_robin(types: list[str], clients: list[int]) -> list[list[int]]:
    """Members of each question type: clients[j] gets type j mod T (type t -> clients[t mod K])."""
    if len(clients) >= len(types):
        return [clients[t :: len(types)] for t in range(len(types))]
    return [[clients[t % len(clients)]] for t in range(len(types))]


def _strata(train_targets: np.ndarray, test_targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Answer index per sample; multi-hot: rarest positive label (train frequency) or C if none."""
    if train_targets.ndim == 1:
        return train_targets.astype(np.int64), test_targets.astype(np.int64)
    frequency = (train_targets > 0.5).sum(axis=0)
    never = np.iinfo(np.int64).max

    def rarest(targets: np.ndarray) -> np.ndarray:
        positive = targets > 0.5
        label = np.argmin(np.where(positive, frequency[None, :], never), axis=1)
        return np.where(positive.any(axis=1), label, targets.shape[1]).astype(np.int64)

    return rarest(train_targets), rarest(test_targets)


def _split(
    train_idx: np.ndarray,
    test_idx: np.ndarray,
    train_y: np.ndarray,
    test_y: np.ndarray,
    k: int,
    gamma: float | None,
    rng: np.random.Generator,
) -> tuple[Cut, Cut]:
    """Cut train and test indices among k clients: iid, or Dirichlet(γ) shares per class."""
    if gamma is None:
        return _iid(train_idx, k, rng), _iid(test_idx, k, rng)
    classes = np.union1d(train_y[train_idx], test_y[test_idx])
    shares = rng.dirichlet(np.full(k, gamma), size=len(classes))  # (classes, k), drawn once
    train_parts = _cut_by_class(train_idx, train_y[train_idx], classes, shares, rng)
    test_parts = _cut_by_class(test_idx, test_y[test_idx], classes, shares, rng)
    return _repair(train_parts), _repair(test_parts)


def _iid(idx: np.ndarray, k: int, rng: np.random.Generator) -> Cut:
    """`idx` in the seeded order ``rng.permutation(idx)``, cut by flwr-datasets' `IidPartitioner`
    into k contiguous shards (sizes differ by at most one, the larger ones first).

    `IidPartitioner` shards like ``np.array_split``, so this is ``np.array_split(rng.permutation(idx),
    k)``, the split of the hand-written version. With fewer samples than clients the last clients
    get nothing (`IidPartitioner` needs at least one sample per shard).
    """
    from datasets import Dataset  # imported here: a run that never cuts iid does not load them
    from flwr_datasets.partitioner import IidPartitioner

    order = rng.permutation(idx).astype(np.int64)
    if len(order) == 0:
        return [order[:0] for _ in range(k)]
    partitioner = IidPartitioner(num_partitions=min(k, len(order)))
    partitioner.dataset = Dataset.from_dict({"index": order})
    parts = [
        partitioner.load_partition(i).with_format("numpy")[:]["index"].astype(np.int64)
        for i in range(partitioner.num_partitions)
    ]
    return parts + [order[:0] for _ in range(k - len(parts))]


def _cut_by_class(
    idx: np.ndarray,
    y: np.ndarray,
    classes: np.ndarray,
    shares: np.ndarray,
    rng: np.random.Generator,
) -> Cut:
    parts: list[list[np.ndarray]] = [[] for _ in range(shares.shape[1])]
    for c, share in zip(classes, shares, strict=True):
        members = rng.permutation(idx[y == c])
        bounds = np.round(np.cumsum(share)[:-1] * len(members)).astype(np.int64)
        for client, piece in enumerate(np.split(members, bounds)):
            parts[client].append(piece)
    return [_cat(p) for p in parts]


def _cat(pieces: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([np.empty(0, np.int64), *pieces]).astype(np.int64)


def _repair(parts: Cut) -> Cut:
    """Give each empty client one sample of the currently largest client (when it has two)."""
    parts = list(parts)
    for client, part in enumerate(parts):
        if len(part) == 0:
            donor = int(np.argmax([len(p) for p in parts]))
            if len(parts[donor]) < 2:
                break
            parts[client] = parts[donor][-1:]
            parts[donor] = parts[donor][:-1]
    return parts


def group_of(partition_id: int, groups: Sequence[int]) -> int:
    """The group of a partition: run config ``client-groups`` (one group id per partition id, parsed
    by `settings.config.parse_groups`) cycled like ``budgets``; 0 where none is set."""
    return int(groups[partition_id % len(groups)]) if groups else 0
