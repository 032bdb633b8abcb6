"""hf-disk:<dir>: VQA sets saved with Hugging Face datasets' save_to_disk, written by the tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Image, Value
from PIL import Image as PILImage

from tasks.data import DATASETS, load_partition
from tasks.data.hfdisk import HfDiskSpec, parse_hf_disk

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 220)}
NAMES = {"image": "img", "question": "q", "answer": "a"}
OPTIONS = "?image=img&question=q&answer=a"


def _image(colour: str, k: int, size: tuple[int, int] = (16, 16)) -> PILImage.Image:
    """A solid colour with image number k (< 256) in the top-left pixel: every image is distinct."""
    pixels = np.full((*size, 3), COLOURS[colour], np.uint8)
    pixels[0, 0] = k
    return PILImage.fromarray(pixels)


def _rows(num_images: int, first: int = 0, sizes=((16, 16),)) -> dict[str, list]:
    """Two questions per image: its colour (open) and whether it is red (yes/no)."""
    rows: dict[str, list] = {"img": [], "q": [], "a": [], "kind": []}
    for k in range(first, first + num_images):
        colour = list(COLOURS)[k % 3]
        picture = _image(colour, k, sizes[k % len(sizes)])
        rows["img"] += [picture, picture]
        rows["q"] += [f"what colour is image {k}?", f"is image {k} red?"]
        rows["a"] += [colour, "Yes" if colour == "red" else "no"]
        rows["kind"] += ["colour", "red?"]
    return rows


FEATURES = Features({"img": Image(), "q": Value("string"), "a": Value("string"),
                     "kind": Value("string")})  # fmt: skip


def _save(path: Path, data) -> str:
    data.save_to_disk(str(path))
    return str(path)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, str]:
    """Directories of a DatasetDict (train 15 / test 6 images) and of one Dataset (20 images)."""
    root = tmp_path_factory.mktemp("hf")
    train = Dataset.from_dict(_rows(15), features=FEATURES)
    test = Dataset.from_dict(_rows(6, first=100), features=FEATURES)
    return {
        "dict": _save(root / "dict", DatasetDict({"train": train, "test": test})),
        "single": _save(root / "single", Dataset.from_dict(_rows(20), features=FEATURES)),
        "train-only": _save(root / "train-only", DatasetDict(
            {"train": Dataset.from_dict(_rows(20), features=FEATURES)})),
    }  # fmt: skip


def _truth(sample, labels: list[str]) -> None:
    """The answer the sample's question asks for, read off its image."""
    k = int(sample.question.split("image ")[1].split()[0].rstrip("?"))
    colour = list(COLOURS)[k % 3]
    assert np.array_equal(sample.image[5, 5], COLOURS[colour]) and (sample.image[0, 0] == k).all()
    want = colour if "colour" in sample.question else ("Yes" if colour == "red" else "no")
    assert labels[sample.target] == want


def _image_ids(samples) -> set[int]:
    return {int(s.question.split("image ")[1].split()[0].rstrip("?")) for s in samples}


def test_datasets_lists_hf_disk():
    assert "hf-disk:<dir>[?<option>=<value>&...]" in DATASETS


def test_dataset_dict_train_and_test_load_with_renamed_columns(saved):
    p = load_partition(f"hf-disk:{saved['dict']}{OPTIONS}", 0, 1)
    assert (len(p.train), len(p.test)) == (30, 12) and p.task == "vqa"
    assert p.labels == ["Yes", "blue", "green", "no", "red"]  # sorted union of all answers
    assert _image_ids(p.train) == set(range(15)) and _image_ids(p.test) == set(range(100, 106))
    for s in p.train + p.test:
        _truth(s, p.labels)
        assert s.image.shape == (16, 16, 3) and s.image.dtype == np.uint8
        assert not s.image.flags.writeable
        assert s.qtype == ("yes/no" if "red?" in s.question else "open")  # "Yes" counts too


def test_single_dataset_is_split_by_image_with_the_seed(saved):
    name = f"hf-disk:{saved['single']}{OPTIONS}"
    a, b, c = (load_partition(name, 0, 1, seed=s) for s in (0, 0, 1))
    assert len(_image_ids(a.test)) == 4 and len(a.test) == 8  # 20 % of 20 images, 2 rows each
    assert _image_ids(a.train) | _image_ids(a.test) == set(range(20))
    assert not _image_ids(a.train) & _image_ids(a.test)  # no test image is seen in training
    assert _image_ids(a.test) == _image_ids(b.test) != _image_ids(c.test)
    for s in a.train + a.test:
        _truth(s, a.labels)
    only_train = load_partition(f"hf-disk:{saved['train-only']}{OPTIONS}", 0, 1, seed=0)
    assert _image_ids(only_train.test) == _image_ids(a.test)  # a DatasetDict without test: same


def test_options_qtype_test_size_and_size(tmp_path):
    rows = _rows(10, sizes=((16, 16), (20, 12)))
    path = _save(tmp_path / "mixed-sizes", Dataset.from_dict(rows, features=FEATURES))
    p = load_partition(f"hf-disk:{path}{OPTIONS}&qtype=kind&test-size=0.5", 0, 1)
    assert {s.qtype for s in p.train} == {"colour", "red?"}
    assert len(_image_ids(p.test)) == 5
    assert {s.image.shape for s in p.train + p.test} == {(224, 224, 3)}  # sizes differ: resized
    small = load_partition(f"hf-disk:{path}{OPTIONS}&size=8", 0, 1)
    assert {s.image.shape for s in small.train} == {(8, 8, 3)}


def test_class_label_answers_use_their_names(tmp_path):
    rows = _rows(6)
    names = sorted(set(rows["a"]))
    rows["a"] = [names.index(a) for a in rows["a"]]
    features = Features({**FEATURES, "a": ClassLabel(names=names)})
    path = _save(tmp_path / "classlabel", Dataset.from_dict(rows, features=features))
    p = load_partition(f"hf-disk:{path}{OPTIONS}", 0, 1)
    for s in p.train + p.test:
        _truth(s, p.labels)


def test_partitioners_split_hf_disk_data(saved):
    name = f"hf-disk:{saved['dict']}{OPTIONS}"
    by_type = [load_partition(name, i, 2, "by-question-type") for i in range(2)]
    assert [{s.qtype for s in p.train + p.test} for p in by_type] == [{"open"}, {"yes/no"}]
    iid = [load_partition(name, i, 3, "iid", seed=0) for i in range(3)]
    questions = [s.question for p in iid for s in p.train]
    assert len(questions) == len(set(questions)) == 30
    skewed = [load_partition(name, i, 2, "dirichlet:0.5", seed=0) for i in range(2)]
    assert sum(len(p.train) for p in skewed) == 30 and all(p.test for p in skewed)


@pytest.mark.parametrize(
    ("names", "message"),
    [
        ("", r"split 'train': no image column 'image' \(columns: img, q, a, kind\); "
             r"name it with \?image=<column>"),
        ("?image=img&question=q", r"no answer column 'answer'"),
        ("?image=img&answer=a&question=text", r"no question column 'text'"),
        (OPTIONS + "&qtype=type", r"no qtype column 'type'"),
        ("?image=q&question=q&answer=a", r"image column 'q' is Value\('string'\).*not a datasets.Image"),
    ],
)  # fmt: skip
def test_missing_or_wrong_column_is_one_line_naming_it_and_the_directory(saved, names, message):
    with pytest.raises(ValueError, match=message) as info:
        load_partition(f"hf-disk:{saved['dict']}{names}", 0, 1)
    assert "\n" not in str(info.value) and saved["dict"] in str(info.value)


@pytest.mark.parametrize(
    ("dataset", "message"),
    [
        ("hf-disk:", r"'hf-disk:' needs a directory"),
        ("hf-disk:?image=x", r"needs a directory"),
        ("hf-disk:/d?colour=x", r"unknown option 'colour'; choose from image, question, answer"),
        ("hf-disk:/d?image=", r"option 'image' is empty"),
        ("hf-disk:/d?image", r"options must read <option>=<value>&..., got 'image'"),
        ("hf-disk:/d?image=a&image=b", r"option 'image' is given twice"),
        ("hf-disk:/d?test-size=1", r"test-size must be in \(0, 1\), got '1'"),
        ("hf-disk:/d?test-size=abc", r"test-size must be in \(0, 1\), got 'abc'"),
        ("hf-disk:/d?size=0", r"size must be a positive integer, got '0'"),
    ],
)
def test_bad_hf_disk_names_raise_one_line(dataset, message):
    with pytest.raises(ValueError, match=message) as info:
        load_partition(dataset, 0, 1)
    assert "\n" not in str(info.value)


def test_parse_reads_percent_escapes():
    spec = parse_hf_disk("hf-disk:/data/my set?image=scan%20image&answer=gold&test-size=0.25")
    assert spec == HfDiskSpec("/data/my set", image="scan image", answer="gold", test_size=0.25)


def test_missing_or_foreign_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="hf-disk directory not found: .*nowhere"):
        load_partition(f"hf-disk:{tmp_path / 'nowhere'}", 0, 1)
    (tmp_path / "notes.txt").write_text("not a dataset")
    with pytest.raises(ValueError, match=r"hf-disk dataset .*: not saved with datasets' save_to_disk"):
        load_partition(f"hf-disk:{tmp_path}", 0, 1)


def test_answer_lists_are_refused_naming_the_column(tmp_path):
    rows = _rows(4)
    rows["a"] = [[a, a.lower()] for a in rows["a"]]  # several answers per row, as in VQAv2
    data = Dataset.from_dict(rows, features=Features({**FEATURES, "a": [Value("string")]}))
    path = _save(tmp_path / "lists", data)
    with pytest.raises(ValueError, match=r"answer column 'a' is .*expected one string") as info:
        load_partition(f"hf-disk:{path}{OPTIONS}", 0, 1)
    assert path in str(info.value) and "\n" not in str(info.value)
