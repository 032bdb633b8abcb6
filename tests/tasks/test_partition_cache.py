"""tasks.data.cache: a cached partition is the fresh one, bit for bit; its key follows every setting."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tasks.data import cache
from tasks.data.load import load_partition
from tasks.models.base import images_to_tensor

ARGS = ("synthetic", 1, 3, "dirichlet:0.5", 0, None, 40)


def assert_same(fresh, cached) -> None:
    assert (cached.labels, cached.task, cached.name) == (fresh.labels, fresh.task, fresh.name)
    assert len(cached.train) == len(fresh.train) and len(cached.test) == len(fresh.test)
    for a, b in zip(fresh.train + fresh.test, cached.train + cached.test, strict=True):
        assert a.image.dtype == b.image.dtype and a.image.shape == b.image.shape
        assert np.array_equal(a.image, b.image) and not b.image.flags.writeable
        assert type(b.question) is str and b.question == a.question and b.qtype == a.qtype
        assert type(b.target) is type(a.target) and np.array_equal(a.target, b.target)
        assert np.asarray(b.target).dtype == np.asarray(a.target).dtype


@pytest.mark.parametrize("dataset", ["synthetic", "synthetic-multilabel"])
def test_a_cached_partition_equals_a_fresh_build_and_gives_identical_tensors(tmp_path, dataset):
    args = (dataset, *ARGS[1:])
    written = cache.cached_partition(tmp_path, *args)
    (entry,) = [p for p in tmp_path.iterdir()]
    read = cache.cached_partition(tmp_path, *args)  # now from the memory-mapped files
    assert isinstance(read.train[0].image.base, np.memmap)
    fresh = load_partition(dataset, 1, 3, "dirichlet:0.5", seed=0, max_test=40)
    assert_same(fresh, written)
    assert_same(fresh, read)
    batch = slice(0, 16)
    for f, r in ((fresh.train[batch], read.train[batch]), (fresh.test, read.test)):
        assert torch.equal(images_to_tensor(f, 64, 0.5, 0.5), images_to_tensor(r, 64, 0.5, 0.5))
    assert [p.name for p in tmp_path.iterdir()] == [entry.name]  # read, not written again


def test_a_modality_transformed_partition_round_trips(tmp_path):
    """easy-vqa-modalities: the client's own transformed copies, capped to keep the test fast."""
    args = ("easy-vqa-modalities", 3, 8, "iid", 0, 64, 32)
    cache.cached_partition(tmp_path, *args)
    fresh = load_partition("easy-vqa-modalities", 3, 8, "iid", seed=0, max_train=64, max_test=32)
    assert_same(fresh, cache.cached_partition(tmp_path, *args))


@pytest.mark.parametrize("change", [
    {1: 2}, {2: 4}, {3: "iid"}, {4: 1}, {5: 10}, {6: 20}, {0: "synthetic-multilabel"},
])
def test_every_setting_is_part_of_the_key(change):
    changed = list(ARGS)
    for position, value in change.items():
        changed[position] = value
    assert cache.partition_key(*changed) != cache.partition_key(*ARGS)
    assert cache.partition_key(*ARGS) == cache.partition_key(*ARGS)


def test_the_key_follows_the_data_files_and_the_data_code(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.npz").write_bytes(b"12345")
    key = cache.partition_key(f"medmnist-vqa:{data}", 0, 1, "iid", 0, None, None)
    (data / "a.npz").write_bytes(b"123456")
    assert cache.partition_key(f"medmnist-vqa:{data}", 0, 1, "iid", 0, None, None) != key
    code = tmp_path / "code"
    code.mkdir()
    (code / "load.py").write_text("x = 1\n")
    monkeypatch.setattr(cache, "_DATA_SOURCES", code)
    before = cache.partition_key(*ARGS)
    (code / "load.py").write_text("x = 2\n")
    assert cache.partition_key(*ARGS) != before


def test_a_write_that_fails_midway_leaves_no_entry_and_the_next_call_builds_it(tmp_path, monkeypatch):
    real_save, calls = np.save, []

    def failing_save(path, array):
        calls.append(path)
        if len(calls) == 3:
            raise OSError("disk full")
        real_save(path, array)

    monkeypatch.setattr(cache.np, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        cache.cached_partition(tmp_path, *ARGS)
    assert list(tmp_path.iterdir()) == []  # neither a partial entry nor its temporary folder
    monkeypatch.setattr(cache.np, "save", real_save)
    fresh = load_partition("synthetic", 1, 3, "dirichlet:0.5", seed=0, max_test=40)
    assert_same(fresh, cache.cached_partition(tmp_path, *ARGS))
    assert_same(fresh, cache.cached_partition(tmp_path, *ARGS))


def test_an_entry_another_process_wrote_first_is_kept_and_a_torn_one_is_rebuilt(tmp_path):
    key = cache.partition_key(*ARGS)
    part = load_partition("synthetic", 1, 3, "dirichlet:0.5", seed=0, max_test=40)
    entry = tmp_path / key[:32]
    cache.write_partition(entry, key, part)
    stamp = (entry / "meta.json").stat().st_mtime_ns
    cache.write_partition(entry, key, part)  # the race's loser: no error, the winner's files stay
    assert (entry / "meta.json").stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [entry.name]
    (entry / "train-where.npy").write_bytes(b"torn")
    assert_same(part, cache.cached_partition(tmp_path, *ARGS))
    assert_same(part, cache.read_partition(entry, key))  # rebuilt in place
    with pytest.raises(ValueError, match="holds key"):
        cache.read_partition(entry, "another key")


def test_only_the_newest_entries_are_kept(tmp_path):
    for seed in range(cache.KEEP + 2):
        cache.cached_partition(tmp_path, "synthetic", 0, 2, "iid", seed, 8, 8)
    assert len(list(tmp_path.iterdir())) == cache.KEEP
