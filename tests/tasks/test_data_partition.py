"""Partitioners of tasks.data: determinism, disjointness, coverage, question types, label skew."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from tasks.data import PARTITIONERS, load_partition
from tasks.data.easyvqa import load_easy_vqa
from tasks.data.partition import _iid, parse_partitioner, split_indices
from tasks.data.synthetic import load_synthetic, load_synthetic_multilabel

ALL = ["iid", "dirichlet:0.5", "by-question-type", "by-question-type:0.5"]


def _keys(samples) -> list[tuple]:
    return [(s.image.tobytes(), s.question, s.target) for s in samples]


def _label_hist(targets: np.ndarray, num_labels: int) -> np.ndarray:
    hist = np.bincount(targets, minlength=num_labels).astype(float)
    return hist / hist.sum()


def test_partitioners_constant():
    assert PARTITIONERS == ("iid", "dirichlet:<gamma>", "by-question-type[:<gamma>]")


@pytest.mark.parametrize("partitioner", ALL)
def test_same_seed_same_partition_other_seed_other(partitioner):
    a = load_partition("easy-vqa", 0, 4, partitioner, seed=0)  # shares its type with client 3
    b = load_partition("easy-vqa", 0, 4, partitioner, seed=0)
    c = load_partition("easy-vqa", 0, 4, partitioner, seed=1)
    assert _keys(a.train) == _keys(b.train) and _keys(a.test) == _keys(b.test)
    assert sorted(_keys(a.train)) != sorted(_keys(c.train))


@pytest.mark.parametrize("partitioner", ALL)
@pytest.mark.parametrize("num_partitions", [1, 2, 5, 7])
def test_partitions_are_disjoint_and_cover_everything(partitioner, num_partitions):
    source = load_easy_vqa()
    parts = split_indices(source, num_partitions, parse_partitioner(partitioner), seed=0)
    assert len(parts) == num_partitions
    for split, n, k in (("train", len(source.train), 0), ("test", len(source.test), 1)):
        joined = np.concatenate([p[k] for p in parts])
        assert len(joined) == n and np.array_equal(np.sort(joined), np.arange(n)), split
        assert all(len(p[k]) > 0 for p in parts)


def test_union_of_iid_partitions_is_the_data_set():
    whole = load_partition("synthetic", 0, 1, seed=2)
    parts = [load_partition("synthetic", i, 3, seed=2) for i in range(3)]
    for split in ("train", "test"):
        joined = [k for p in parts for k in _keys(getattr(p, split))]
        assert len(joined) == len(set(joined))  # disjoint
        assert sorted(joined) == sorted(_keys(getattr(whole, split)))  # covering
    sizes = [len(p.train) for p in parts]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("partitioner", ["by-question-type", "by-question-type:0.5"])
def test_by_question_type_gives_each_client_only_its_types(partitioner):
    types = ["color", "shape", "yes/no"]  # sorted; client i gets type i mod 3
    for i in range(5):
        p = load_partition("easy-vqa", i, 5, partitioner, seed=0)
        assert {s.qtype for s in p.train} == {types[i % 3]}
        assert {s.qtype for s in p.test} == {types[i % 3]}
    # fewer clients than types: type t goes to client t mod 2
    assert {s.qtype for s in load_partition("easy-vqa", 0, 2, partitioner).train} == {
        "color",
        "yes/no",
    }
    assert {s.qtype for s in load_partition("easy-vqa", 1, 2, partitioner).train} == {"shape"}


def test_dirichlet_skews_label_distributions_and_test_follows_train():
    source = load_easy_vqa()
    labels = len(source.labels)
    overall = _label_hist(source.train.targets, labels)

    def spread(partitioner: str) -> tuple[float, float]:
        parts = split_indices(source, 5, parse_partitioner(partitioner), seed=0)
        train = [_label_hist(source.train.targets[tr], labels) for tr, _ in parts]
        test = [_label_hist(source.test.targets[te], labels) for _, te in parts]
        skew = np.mean([0.5 * np.abs(h - overall).sum() for h in train])
        gap = np.mean([0.5 * np.abs(a - b).sum() for a, b in zip(train, test, strict=True)])
        return float(skew), float(gap)

    iid_skew, _ = spread("iid")
    skew, gap = spread("dirichlet:0.5")
    strong, _ = spread("dirichlet:0.05")
    mild, _ = spread("dirichlet:100")
    assert iid_skew < 0.03 and skew > 0.15
    assert strong > skew > mild
    assert gap < 0.05  # a client's test labels follow its own train labels


def test_by_question_type_with_gamma_skews_answers_within_a_type():
    iid = [load_partition("easy-vqa", i, 6, "by-question-type") for i in (0, 3)]
    skewed = [load_partition("easy-vqa", i, 6, "by-question-type:0.1") for i in (0, 3)]

    def gap(pair) -> float:
        a, b = (_label_hist(np.array([s.target for s in p.train]), 13) for p in pair)
        return 0.5 * float(np.abs(a - b).sum())

    assert {s.qtype for p in iid + skewed for s in p.train} == {"color"}
    assert gap(iid) < 0.05 and gap(skewed) > 0.3


def test_every_client_gets_train_and_test_samples_under_heavy_skew():
    for i in range(40):
        p = load_partition("synthetic", i, 40, "dirichlet:0.05", seed=0)
        assert p.train and p.test
    for i in range(20):
        p = load_partition("synthetic-multilabel", i, 20, "by-question-type:0.1", seed=0)
        assert p.train and p.test


def test_too_many_partitions_raise_naming_the_partition():
    with pytest.raises(ValueError, match=r"partition synthetic\[iid\] 199/200 gets no test"):
        load_partition("synthetic", 199, 200)


def test_max_train_and_max_test_subsample_the_partition():
    full = load_partition("synthetic", 1, 3, "dirichlet:0.5", seed=0)
    a = load_partition("synthetic", 1, 3, "dirichlet:0.5", seed=0, max_train=20, max_test=7)
    b = load_partition("synthetic", 1, 3, "dirichlet:0.5", seed=0, max_train=20, max_test=7)
    assert (len(a.train), len(a.test)) == (20, 7)
    assert _keys(a.train) == _keys(b.train) and _keys(a.test) == _keys(b.test)
    assert set(_keys(a.train)) <= set(_keys(full.train))
    assert set(_keys(a.test)) <= set(_keys(full.test))
    big = load_partition("synthetic", 1, 3, "dirichlet:0.5", seed=0, max_train=10**6)
    assert sorted(_keys(big.train)) == sorted(_keys(full.train))


def test_multilabel_dirichlet_skews_label_frequencies():
    def spread(partitioner: str) -> float:  # mean TV distance of client label mix from the mean
        freq = []
        for i in range(4):
            t = np.stack(
                [s.target for s in load_partition("synthetic-multilabel", i, 4, partitioner).train]
            )
            freq.append(t.sum(axis=0) / t.sum())
        freq = np.array(freq)
        return float(np.mean(0.5 * np.abs(freq - freq.mean(axis=0)).sum(axis=1)))

    iid, half, tenth = spread("iid"), spread("dirichlet:0.5"), spread("dirichlet:0.1")
    assert tenth > half > iid and tenth > 2 * iid


def _digest(parts) -> str:
    flat = [np.concatenate([tr, [-1], te, [-2]]).astype("<i8").tobytes() for tr, te in parts]
    return hashlib.sha256(b"".join(flat)).hexdigest()[:16]


@pytest.mark.parametrize(
    ("dataset", "partitioner", "digest"),
    [
        ("synthetic", "iid", "6c2ca293dd7d3a97"),
        ("synthetic", "dirichlet:0.5", "3579845e5e815a3c"),
        ("synthetic", "by-question-type", "3c2b28863ce2ba03"),
        ("synthetic", "by-question-type:0.5", "315216f551246c8f"),
        ("synthetic-multilabel", "iid", "03fe546c18c178e6"),
        ("synthetic-multilabel", "dirichlet:0.5", "1c5bb7554509fd9f"),
    ],
)
def test_splits_are_those_of_the_hand_written_partitioners(dataset, partitioner, digest):
    """Digests of the hand-written splits (commit ef5f067) for seed 0 and 4 clients: moving the iid
    cut onto flwr-datasets' IidPartitioner left every index where it was. A failure here means a
    run with the same seed trains on other data (README figures need re-measuring)."""
    source = {"synthetic": load_synthetic, "synthetic-multilabel": load_synthetic_multilabel}[
        dataset
    ](0)
    assert _digest(split_indices(source, 4, parse_partitioner(partitioner), seed=0)) == digest


@pytest.mark.parametrize(("n", "k"), [(38_575, 5), (450, 7), (10, 10), (3, 5), (0, 2)])
def test_iid_cut_is_array_split_of_the_seeded_permutation(n, k):
    idx = np.arange(n, dtype=np.int64) * 2 + 1
    got = _iid(idx, k, np.random.default_rng([4, 0, 1]))
    want = np.array_split(np.random.default_rng([4, 0, 1]).permutation(idx), k)
    assert len(got) == k
    assert all(a.dtype == np.int64 and np.array_equal(a, b) for a, b in zip(got, want, strict=True))


def test_the_split_is_computed_once_for_all_the_clients_of_a_process(monkeypatch):
    """Hundreds of in-process sites each load their partition every round: each load must reuse the
    one seeded split of the federation, not recompute every client's share (O(N²) a round)."""
    import tasks.data.load as load

    calls = []
    real = load.split_indices
    monkeypatch.setattr(load, "split_indices", lambda *a, **k: calls.append(a[1:]) or real(*a, **k))
    load._cut.cache_clear()
    parts = [load_partition("synthetic", i, 7, "dirichlet:0.5", seed=3) for i in range(7)]
    parts.append(load_partition("synthetic", 2, 7, "dirichlet:0.5", seed=3))
    assert len(calls) == 1
    assert _keys(parts[2].train) == _keys(parts[7].train) and _keys(parts[2].test) == _keys(parts[7].test)
    load_partition("synthetic", 0, 7, "dirichlet:0.5", seed=4)
    load_partition("synthetic", 0, 6, "dirichlet:0.5", seed=3)
    assert len(calls) == 3  # another seed or federation size is another split
    train, _ = load._cut("synthetic", 7, "dirichlet:0.5", 3)[0]
    with pytest.raises(ValueError, match="read-only"):
        train[0] = 0  # a client cannot change its neighbours' shares
