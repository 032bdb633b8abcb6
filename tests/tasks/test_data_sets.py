"""Data sets of tasks.data: counts, shapes, dtypes, determinism, modality transforms."""

from __future__ import annotations

import easy_vqa
import numpy as np
import pytest

from tasks.data import DATASETS, Sample, load_partition, majority_accuracy
from tasks.data.easyvqa import load_easy_vqa, qtype_of
from tasks.data.synthetic import FINDINGS


def _check_samples(samples: list[Sample], labels: list[str], task: str) -> None:
    assert samples
    for s in samples:
        assert s.image.dtype == np.uint8 and s.image.ndim == 3 and s.image.shape[2] == 3
        assert not s.image.flags.writeable
        assert isinstance(s.question, str) and s.question
        assert isinstance(s.qtype, str) and s.qtype
        if task == "vqa":
            assert isinstance(s.target, int) and 0 <= s.target < len(labels)
        else:
            assert s.target.dtype == np.float32 and s.target.shape == (len(labels),)
            assert set(np.unique(s.target)) <= {0.0, 1.0}


def test_every_registry_entry_names_a_loader_and_unknown_names_fail():
    """`DATASETS` are the registry's keys: each plain or pattern entry points at a loader that
    imports (mixtures compose other entries), and a name outside it fails in one line."""
    from tasks.data.registry import REGISTRY, parse_dataset

    assert tuple(REGISTRY) == DATASETS
    for name, entry in REGISTRY.items():
        prefix = name.partition("<")[0]
        assert parse_dataset(prefix + "x" if "<" in name else name) == (entry, "x" if "<" in name else "")
        assert callable(entry.load()) if entry.source else prefix == "mixed:", name
    with pytest.raises(ValueError, match="unknown dataset 'imagenet'"):
        parse_dataset("imagenet")


@pytest.mark.parametrize(
    ("dataset", "task", "num_labels", "size"),
    [
        ("easy-vqa", "vqa", 13, 64),
        ("easy-vqa-modalities", "vqa", 13, 64),
        ("easy-vqa-yes-no", "vqa", 13, 64),
        ("synthetic", "vqa", 13, 32),
        ("synthetic-multilabel", "multilabel", 15, 32),
    ],
)
def test_partition_shapes_and_dtypes(dataset, task, num_labels, size):
    p = load_partition(dataset, 1, 3, "iid", seed=0, max_train=100, max_test=30)
    assert p.task == task and len(p.labels) == num_labels
    assert all(isinstance(label, str) for label in p.labels)
    assert len(p.train) == 100 and len(p.test) == 30
    assert p.name == f"{dataset}[iid] 1/3"
    _check_samples(p.train, p.labels, task)
    _check_samples(p.test, p.labels, task)
    assert {s.image.shape for s in p.train} == {(size, size, 3)}


def test_easy_vqa_counts_and_answers():
    source = load_easy_vqa()
    assert (len(source.train), len(source.test)) == (38_575, 9_673)
    assert source.train.blocks[0].shape == (4_000, 64, 64, 3)
    assert source.test.blocks[0].shape == (1_000, 64, 64, 3)
    assert list(source.labels) == easy_vqa.get_answers() and len(source.labels) == 13
    whole = load_partition("easy-vqa", 0, 1)
    assert (len(whole.train), len(whole.test)) == (38_575, 9_673)
    assert whole.labels == easy_vqa.get_answers()


def test_easy_vqa_yes_no_is_every_yes_no_question_and_nothing_else():
    whole = load_easy_vqa()
    part = load_partition("easy-vqa-yes-no", 0, 1)
    for split, samples in ((whole.train, part.train), (whole.test, part.test)):
        expected = sorted(q for q, t in zip(split.questions, split.qtypes, strict=True) if t == "yes/no")
        assert sorted(s.question for s in samples) == expected
        assert {part.labels[s.target] for s in samples} == {"yes", "no"}
    assert (len(part.train), len(part.test)) == (28_407, 7_136)


def test_easy_vqa_samples_match_the_package():
    questions, answers, image_ids = easy_vqa.get_train_questions()
    source = load_easy_vqa()
    labels = source.labels
    ids = sorted(easy_vqa.get_train_image_paths())
    for j in (0, 1, 17_000, 38_574):
        assert source.train.questions[j] == questions[j]
        assert labels[source.train.targets[j]] == answers[j]
        assert ids[source.train.rows[j]] == image_ids[j]
        assert source.train.qtypes[j] == qtype_of(answers[j])
    counts = {t: int((source.train.qtypes == t).sum()) for t in ("yes/no", "shape", "color")}
    assert counts == {"yes/no": 28_407, "shape": 5_002, "color": 5_166}


def test_qtype_rule():
    assert [qtype_of(a) for a in ("yes", "no", "circle", "rectangle", "triangle", "teal")] == [
        "yes/no", "yes/no", "shape", "shape", "shape", "color",
    ]  # fmt: skip


def test_modalities_transform_images_but_keep_questions():
    for client in range(8):
        plain = load_partition("easy-vqa", client, 8, seed=0, max_train=20, max_test=5)
        moved = load_partition("easy-vqa-modalities", client, 8, seed=0, max_train=20, max_test=5)
        assert [(s.question, s.target) for s in plain.train] == [
            (s.question, s.target) for s in moved.train
        ]
        x = np.stack([s.image for s in plain.train]).astype(int)
        y = np.stack([s.image for s in moved.train]).astype(int)
        assert not np.array_equal(x, y), client
        if client == 0:  # grayscale
            assert np.array_equal(y[..., 0], y[..., 1]) and np.array_equal(y[..., 1], y[..., 2])
        if client == 1:  # inverted
            assert np.array_equal(y, 255 - x)
        if client == 4:  # rotated
            assert np.array_equal(y, np.rot90(x, axes=(1, 2)))
    x = np.stack([s.image for s in plain.test]).astype(int)
    y = np.stack([s.image for s in moved.test]).astype(int)
    assert abs((y - 128).std() / (x - 128).std() - 0.4) < 0.05  # client 7: contrast, on test too


def test_modalities_are_deterministic_per_seed():
    kwargs = {"seed": 0, "max_train": 10, "max_test": 1}
    a = load_partition("easy-vqa-modalities", 11, 16, **kwargs)  # 11 mod 8 = 3: noisy
    b = load_partition("easy-vqa-modalities", 11, 16, **kwargs)
    plain = load_partition("easy-vqa", 11, 16, **kwargs)
    assert all(np.array_equal(s.image, t.image) for s, t in zip(a.train, b.train, strict=True))
    noise = np.stack([s.image for s in a.train]).astype(float)
    noise -= np.stack([s.image for s in plain.train])
    assert 15 < noise.std() < 30  # sigma 25, less where clipped at 0/255


@pytest.mark.parametrize("dataset", ["synthetic", "synthetic-multilabel"])
def test_synthetic_is_generated_from_the_seed(dataset):
    a = load_partition(dataset, 0, 1, seed=3)
    b = load_partition(dataset, 0, 1, seed=3)
    c = load_partition(dataset, 0, 1, seed=4)
    for s, t in zip(a.train + a.test, b.train + b.test, strict=True):
        assert np.array_equal(s.image, t.image) and s.question == t.question
        assert np.array_equal(s.target, t.target)
    assert not np.array_equal(a.train[0].image, c.train[0].image)


def test_synthetic_vqa_has_the_easy_vqa_question_types():
    p = load_partition("synthetic", 0, 1)
    assert (len(p.train), len(p.test)) == (450, 150)
    assert {s.qtype for s in p.train} == {"shape", "color", "yes/no"}
    assert set(p.labels) == set(easy_vqa.get_answers())
    for s in p.train:
        assert qtype_of(p.labels[s.target]) == s.qtype


def test_synthetic_with_a_size_has_that_many_train_images_and_a_third_as_many_test_images():
    p = load_partition("synthetic:300", 0, 1)
    assert (len(p.train), len(p.test)) == (900, 300)
    default, same = load_partition("synthetic", 0, 1), load_partition("synthetic:150", 0, 1)
    assert all(np.array_equal(s.image, t.image) for s, t in zip(default.train, same.train, strict=True))
    with pytest.raises(ValueError, match="dataset = 'synthetic:0': the number of train images must be"):
        load_partition("synthetic:0", 0, 1)


def test_synthetic_multilabel_reports_mention_findings():
    p = load_partition("synthetic-multilabel", 0, 1)
    assert p.labels == list(FINDINGS) and len(p.labels) == 15 and p.task == "multilabel"
    assert (len(p.train), len(p.test)) == (400, 100)
    targets = np.stack([s.target for s in p.train])
    assert (targets.sum(axis=1) >= 2).mean() > 0.2  # genuinely multi-label
    assert (targets.sum(axis=1) == 0).any()
    assert targets.sum(axis=0).min() > 0  # every class occurs
    hits = mentions = 0
    for s in p.train:
        for k, finding in enumerate(FINDINGS):
            if finding in s.question:
                mentions += 1
                hits += int(s.target[k] == 1.0)
    assert mentions > 300 and hits / mentions > 0.85  # noisy, but informative


def test_majority_accuracy():
    img = np.zeros((2, 2, 3), np.uint8)
    samples = [Sample(img, "q", t, "color") for t in (1, 1, 2, 1)]
    assert majority_accuracy(samples) == 0.75
    hot = [np.array(v, np.float32) for v in ([1, 0], [1, 0], [0, 1], [1, 1], [1, 0])]
    assert majority_accuracy([Sample(img, "r", h, "multilabel") for h in hot]) == 0.6
    with pytest.raises(ValueError, match="at least one sample"):
        majority_accuracy([])
