"""medmnist-vqa:<dir> on small MedMNIST-format .npz files written by the tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tasks.data import load_partition
from tasks.data.medmnist import MEDMNIST_INFO, NO_FINDING


def write_npz(path: Path, n=(12, 3, 6), shape=(28, 28), classes=4, multilabel=0, seed=0, **edit):
    """A MedMNIST-format file: (train, val, test) sizes, grayscale (H, W) or RGB (H, W, 3)."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for split, count in zip(("train", "val", "test"), n, strict=True):
        if count is None:
            continue
        arrays[f"{split}_images"] = rng.integers(0, 256, (count, *shape), dtype=np.uint8)
        if multilabel:
            labels = (rng.random((count, multilabel)) < 0.08).astype(np.uint8)
        else:
            labels = rng.integers(0, classes, (count, 1), dtype=np.uint8)
        arrays[f"{split}_labels"] = labels
    for key, value in edit.items():
        if value is None:
            del arrays[key]
        else:
            arrays[key] = value
    np.savez(path, **arrays)
    return arrays


@pytest.fixture
def med_dir(tmp_path: Path) -> Path:
    write_npz(tmp_path / "bloodmnist.npz", shape=(28, 28, 3), classes=8, seed=1)
    write_npz(tmp_path / "chestmnist.npz", multilabel=14, n=(40, 5, 20), seed=2)
    write_npz(tmp_path / "organamnist.npz", classes=11, seed=3)
    write_npz(tmp_path / "zeta_scan.npz", shape=(16, 16), classes=3, seed=4)
    return tmp_path


def test_one_partition_per_file(med_dir):
    parts = [load_partition(f"medmnist-vqa:{med_dir}", i, 4) for i in range(4)]
    modalities = ["blood cell microscope", "chest x-ray", "abdominal ct", "zeta_scan"]
    sizes = [(28, 28, 3), (28, 28, 3), (28, 28, 3), (16, 16, 3)]
    for p, modality, size in zip(parts, modalities, sizes, strict=True):
        answers = {p.labels[s.target] for s in p.train + p.test if s.qtype == "modality"}
        assert answers == {modality}
        assert {s.image.shape for s in p.train} == {size}
        assert all(s.image.dtype == np.uint8 and not s.image.flags.writeable for s in p.train)
        assert p.task == "vqa" and p.labels == parts[0].labels
    blood = parts[0]  # 15 train+val images, 6 test images, 3 questions each
    assert (len(blood.train), len(blood.test)) == (45, 18)
    assert {s.qtype for s in blood.train} == {"modality", "anatomy", "tissue"}
    organ = parts[2]  # the class is the organ: modality + anatomy questions
    assert (len(organ.train), len(organ.test)) == (30, 12)
    assert {organ.labels[s.target] for s in organ.train if s.qtype == "anatomy"} <= set(
        MEDMNIST_INFO["organamnist"].labels
    )
    unknown = parts[3]  # fallback: stem as modality, "class k", no anatomy question
    assert {s.qtype for s in unknown.train} == {"modality", "diagnosis"}
    assert {unknown.labels[s.target] for s in unknown.train if s.qtype == "diagnosis"} <= {
        "class 0",
        "class 1",
        "class 2",
    }
    gray = unknown.train[0].image
    assert np.array_equal(gray[..., 0], gray[..., 2])


def test_vocabulary_is_the_sorted_union(med_dir):
    labels = load_partition(f"medmnist-vqa:{med_dir}", 0, 4).labels
    assert labels == sorted(set(labels))
    expected = {"blood cell microscope", "blood", "lung", "chest x-ray", "abdominal ct", NO_FINDING}
    expected |= {"zeta_scan", "class 0", "class 1", "class 2"} | set(
        MEDMNIST_INFO["bloodmnist"].labels
    )
    expected |= set(MEDMNIST_INFO["chestmnist"].labels) | set(MEDMNIST_INFO["organamnist"].labels)
    assert set(labels) == expected


def test_multilabel_file_diagnosis_questions(med_dir):
    arrays = np.load(med_dir / "chestmnist.npz")
    y = np.concatenate([arrays["train_labels"], arrays["val_labels"]])
    p = load_partition(f"medmnist-vqa:{med_dir}", 1, 4)
    diagnoses = [p.labels[s.target] for s in p.train if s.qtype == "diagnosis"]
    assert len(diagnoses) == int((y.sum(axis=1) <= 1).sum())  # ambiguous images are not asked
    assert diagnoses.count(NO_FINDING) == int((y.sum(axis=1) == 0).sum())
    assert sum(s.qtype == "modality" for s in p.train) == len(y)


def test_more_partitions_than_files_split_each_file(med_dir):
    parts = [load_partition(f"medmnist-vqa:{med_dir}", i, 8, seed=0) for i in range(8)]
    whole = load_partition(f"medmnist-vqa:{med_dir}", 0, 4, seed=0)
    for i in (0, 4):  # clients 0 and 4 share file 0, disjointly, and together hold it
        modality = {parts[i].labels[s.target] for s in parts[i].train if s.qtype == "modality"}
        assert modality == {"blood cell microscope"}
    keys = [[(s.image.tobytes(), s.question, s.target) for s in parts[i].train] for i in (0, 4)]
    assert not set(keys[0]) & set(keys[1])
    assert sorted(keys[0] + keys[1]) == sorted(
        (s.image.tobytes(), s.question, s.target) for s in whole.train
    )


def test_fewer_partitions_than_files_merge_files(med_dir):
    p = load_partition(f"medmnist-vqa:{med_dir}", 0, 2)  # files 0 and 2
    modalities = {p.labels[s.target] for s in p.train if s.qtype == "modality"}
    assert modalities == {"blood cell microscope", "abdominal ct"}


def test_by_question_type_within_a_file(med_dir):
    parts = [
        load_partition(f"medmnist-vqa:{med_dir}", i, 12, "by-question-type") for i in (0, 4, 8)
    ]
    # clients 0, 4, 8 share bloodmnist; its types sorted: anatomy, modality, tissue
    assert [{s.qtype for s in p.train} for p in parts] == [{"anatomy"}, {"modality"}, {"tissue"}]


def test_medmnist_plus_names_are_recognised(tmp_path):
    write_npz(tmp_path / "pathmnist_64.npz", shape=(64, 64, 3), classes=9)
    p = load_partition(f"medmnist-vqa:{tmp_path}", 0, 1)
    assert "colon pathology" in p.labels and "adipose" in p.labels
    assert p.train[0].image.shape == (64, 64, 3)


def test_missing_val_split_is_fine(tmp_path):
    write_npz(tmp_path / "octmnist.npz", n=(10, None, 4))
    p = load_partition(f"medmnist-vqa:{tmp_path}", 0, 1)
    assert (len(p.train), len(p.test)) == (30, 12)


def test_missing_dir_or_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_partition(f"medmnist-vqa:{tmp_path / 'nowhere'}", 0, 1)
    with pytest.raises(FileNotFoundError, match=r"no \.npz files"):
        load_partition(f"medmnist-vqa:{tmp_path}", 0, 1)


BAD = {
    "missing train_labels": ({"train_labels": None}, "train_labels"),
    "missing test_images": ({"test_images": None}, "test_images"),
    "val images without labels": ({"val_labels": None}, "val_labels"),
    "2-D images": ({"train_images": np.zeros((12, 28), np.uint8)}, "train_images"),
    "two channels": ({"test_images": np.zeros((6, 28, 28, 2), np.uint8)}, "test_images"),
    "float images": ({"train_images": np.zeros((12, 28, 28), np.float32)}, "train_images"),
    "label count": ({"train_labels": np.zeros((11, 1), np.uint8)}, "train_labels"),
    "empty split": (
        {"test_images": np.zeros((0, 28, 28), np.uint8), "test_labels": np.zeros((0, 1), np.uint8)},
        "test_images",
    ),
    "float labels": ({"train_labels": np.full((12, 1), 0.5)}, "train_labels"),
    "label out of range": ({"test_labels": np.full((6, 1), 9, np.uint8)}, "test_labels"),
    "image size differs": ({"test_images": np.zeros((6, 32, 32), np.uint8)}, "test_images"),
    "multi-hot not 0/1": ({"train_labels": np.full((12, 4), 2, np.uint8)}, "train_labels"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_files_raise_naming_file_and_key(tmp_path, case):
    edit, key = BAD[case]
    write_npz(tmp_path / "octmnist.npz", classes=4, **edit)
    with pytest.raises(ValueError) as info:
        load_partition(f"medmnist-vqa:{tmp_path}", 0, 1)
    message = str(info.value)
    assert "octmnist.npz" in message and key in message and "\n" not in message


def test_multilabel_width_must_match_the_table(tmp_path):
    write_npz(tmp_path / "chestmnist.npz", multilabel=5)
    with pytest.raises(ValueError, match=r"chestmnist\.npz: key 'train_labels' has 5 labels"):
        load_partition(f"medmnist-vqa:{tmp_path}", 0, 1)


def test_unreadable_file(tmp_path):
    (tmp_path / "broken.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match=r"broken\.npz: not a readable \.npz"):
        load_partition(f"medmnist-vqa:{tmp_path}", 0, 1)
