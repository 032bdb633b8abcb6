"""Bad input to load_partition: one clear ValueError line naming the argument and value."""

from __future__ import annotations

import pytest

from tasks.data import load_partition

CASES = [
    ({"dataset": "cifar"}, r"unknown dataset 'cifar'"),
    ({"dataset": "medmnist-vqa"}, r"unknown dataset 'medmnist-vqa'"),
    ({"dataset": "medmnist-vqa:"}, r"'medmnist-vqa:' needs a directory"),
    ({"dataset": 3}, r"dataset must be a string, got 3"),
    ({"partitioner": "shards"}, r"unknown partitioner 'shards'"),
    ({"partitioner": "iid:0.5"}, r"unknown partitioner 'iid:0.5'"),
    ({"partitioner": "dirichlet"}, r"unknown partitioner 'dirichlet'"),
    ({"partitioner": "dirichlet:"}, r"gamma must be a positive number, got ''"),
    ({"partitioner": "dirichlet:0"}, r"gamma must be a positive number, got '0'"),
    ({"partitioner": "dirichlet:-1"}, r"got '-1' in partitioner 'dirichlet:-1'"),
    ({"partitioner": "dirichlet:abc"}, r"got 'abc'"),
    ({"partitioner": "dirichlet:nan"}, r"got 'nan'"),
    ({"partitioner": "by-question-type:inf"}, r"got 'inf' in partitioner 'by-question-type:inf'"),
    ({"partition_id": 3}, r"partition_id must be an integer in \[0, 3\), got 3"),
    ({"partition_id": -1}, r"partition_id must be an integer in \[0, 3\), got -1"),
    ({"partition_id": 1.0}, r"partition_id must be an integer in \[0, 3\), got 1.0"),
    ({"partition_id": True}, r"partition_id must be an integer in \[0, 3\), got True"),
    ({"num_partitions": 0, "partition_id": 0}, r"num_partitions must be an integer >= 1, got 0"),
    ({"seed": -1}, r"seed must be an integer >= 0, got -1"),
    ({"max_train": 0}, r"max_train must be an integer >= 1, got 0"),
    ({"max_test": 2.5}, r"max_test must be an integer >= 1, got 2.5"),
]


@pytest.mark.parametrize(("edit", "message"), CASES, ids=[str(c[0]) for c in CASES])
def test_bad_input_raises_one_clear_line(edit, message):
    args = {"dataset": "synthetic", "partition_id": 0, "num_partitions": 3} | edit
    with pytest.raises(ValueError, match=message) as info:
        load_partition(**args)
    assert "\n" not in str(info.value)


def test_missing_medmnist_dir_names_the_path(tmp_path):
    missing = tmp_path / "no-such-dir"
    with pytest.raises(FileNotFoundError, match="no-such-dir"):
        load_partition(f"medmnist-vqa:{missing}", 0, 1)
