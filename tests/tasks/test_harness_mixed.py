"""The mixed federation data set of Task 6 (tasks.data.mixed): client i holds component i mod n."""

from __future__ import annotations

import numpy as np
import pytest

import tasks
from settings import RunConfig, default_config

MIXED = "mixed:synthetic+synthetic-multilabel"


def test_clients_alternate_between_components_and_match_their_own_split():
    for pid, (component, local, count) in enumerate([("synthetic", 0, 3), ("synthetic-multilabel", 0, 2),
                                                     ("synthetic", 1, 3), ("synthetic-multilabel", 1, 2),
                                                     ("synthetic", 2, 3)]):
        mixed = tasks.load_partition(MIXED, pid, 5, "iid", seed=1, max_train=30, max_test=10)
        alone = tasks.load_partition(component, local, count, "iid", seed=1, max_train=30, max_test=10)
        assert mixed.task == alone.task == ("vqa" if component == "synthetic" else "multilabel")
        assert mixed.labels == alone.labels
        assert [s.question for s in mixed.train] == [s.question for s in alone.train]
        assert all(np.array_equal(a.target, b.target) for a, b in zip(mixed.test, alone.test, strict=True))
        assert mixed.name.startswith(f"{MIXED} {pid}/5")


@pytest.mark.parametrize(("dataset", "message"), [
    ("mixed:synthetic", "at least two plain data sets"),
    ("mixed:synthetic+", "at least two plain data sets"),
    ("mixed:synthetic+nope", "unknown dataset 'nope'"),
])
def test_bad_mixes_fail_with_the_dataset_named(dataset, message):
    with pytest.raises(ValueError, match=message):
        tasks.load_partition(dataset, 1, 2)


def test_mixed_is_a_valid_run_config_dataset():
    config = RunConfig.from_mapping({**default_config(), "dataset": "mixed:easy-vqa+synthetic-multilabel"})
    assert config.dataset.startswith("mixed:")
