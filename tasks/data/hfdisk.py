"""``hf-disk:<dir>[?<option>=<value>&...]``: a VQA data set of your own, saved with Hugging Face
``datasets`` (``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``), loaded offline.

One row is one (image, question, answer) triplet. Options, written as a URL query after the
directory (``hf-disk:/data/vqa?image=img&question=q&answer=a``; %-escapes allowed):

* ``image`` / ``question`` / ``answer`` (defaults: ``image``, ``question``, ``answer``) — column
  names. The image column must be a ``datasets.Image`` feature (embedded bytes or file paths); the
  question column strings; the answer column strings, numbers or a ``ClassLabel`` (its names).
* ``qtype`` — a column with each question's type, for the ``by-question-type`` partitioner. Without
  it the type follows the answer, as medical VQA sets label closed and open questions: ``yes/no``
  for a yes/no answer (any case), otherwise ``open``.
* ``test-size`` (default 0.2, the 80:20 train:test ratio of supplement §C.1) — the share of images
  held out when the data has no test split.
* ``size`` — images of differing sizes are resized (bilinear) to ``size`` x ``size`` pixels
  (default 224); images that all share one size are kept as they are unless ``size`` is given.

Splits: a ``DatasetDict`` with ``train`` and ``test`` uses them (``validation``, when present, is
merged into train, as for medmnist-vqa); a ``DatasetDict`` with ``train`` but no ``test``, or a
single ``Dataset``, is split by image with the run's seed: a seeded ``test-size`` share of the
distinct images goes to test with all their questions, so no test image is seen in training.
Rows showing the same image (same bytes or path) share one decoded copy.

The answer vocabulary is the sorted union of all answers of train and test, the same for every
client, as for the other VQA sets. A missing column, a column of the wrong kind or a missing split
raises one ValueError line naming the data set, the directory and the column or split.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from urllib.parse import parse_qsl

import numpy as np

from tasks.data.types import Source, Split

PREFIX = "hf-disk:"
DEFAULT_SIZE = 224
YES_NO = frozenset({"yes", "no"})
_BATCH = 256  # rows read at a time; only the distinct decoded images stay in memory


@dataclass(frozen=True)
class HfDiskSpec:
    """A parsed ``hf-disk:`` data set name."""

    directory: str
    image: str = "image"
    question: str = "question"
    answer: str = "answer"
    qtype: str | None = None
    test_size: float = 0.2
    size: int | None = None


def parse_hf_disk(dataset: str) -> HfDiskSpec:
    """``"hf-disk:/d?image=img"`` -> HfDiskSpec("/d", image="img"); ValueError naming the bad part."""
    directory, _, query = dataset.removeprefix(PREFIX).partition("?")
    form = "'hf-disk:<dir>[?image=<column>&question=<column>&answer=<column>&...]'"
    if not directory:
        raise ValueError(f"dataset {dataset!r} needs a directory: {form}")
    names = {f.name.replace("_", "-"): f.name for f in fields(HfDiskSpec) if f.name != "directory"}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ValueError(f"dataset {dataset!r}: options must read <option>=<value>&..., "
                         f"got {query!r}") from None  # fmt: skip
    options: dict[str, object] = {}
    for key, value in pairs:
        if key not in names:
            raise ValueError(f"dataset {dataset!r}: unknown option {key!r}; "
                             f"choose from {', '.join(names)}")  # fmt: skip
        if names[key] in options or not value:
            what = "is given twice" if names[key] in options else "is empty"
            raise ValueError(f"dataset {dataset!r}: option {key!r} {what}")
        options[names[key]] = _option(dataset, key, value)
    return HfDiskSpec(directory, **options)


def _option(dataset: str, key: str, value: str) -> object:
    if key == "test-size":
        try:
            share = float(value)
        except ValueError:
            share = math.nan
        if not 0 < share < 1:
            raise ValueError(f"dataset {dataset!r}: test-size must be in (0, 1), got {value!r}")
        return share
    if key == "size":
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"dataset {dataset!r}: size must be a positive integer, got {value!r}")
        return int(value)
    return value


def load_hf_disk(dataset: str, seed: int) -> Source:
    """The data set saved under the directory of `dataset` as one VQA source (cached per process).

    FileNotFoundError when the directory does not exist; ValueError for anything else wrong.
    """
    spec = parse_hf_disk(dataset)
    root = Path(spec.directory)
    if not root.is_dir():
        raise FileNotFoundError(f"hf-disk directory not found: {root} (dataset {dataset!r})")
    stamp = tuple(
        (str(p.relative_to(root)), p.stat().st_mtime_ns, p.stat().st_size)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    )
    return _load(spec, str(root.resolve()), stamp, seed)


@lru_cache(maxsize=2)
def _load(spec: HfDiskSpec, root: str, stamp: tuple, seed: int) -> Source:
    from datasets import Dataset, DatasetDict, load_from_disk  # only runs that use hf-disk pay

    where = f"hf-disk dataset {root}"
    try:
        data = load_from_disk(root)
    except FileNotFoundError as e:
        message = " ".join(str(e).split())
        raise ValueError(f"{where}: not saved with datasets' save_to_disk ({message})") from None
    if isinstance(data, DatasetDict):
        if "train" not in data:
            raise ValueError(f"{where}: no 'train' split (splits: {', '.join(data)})")
        parts = [("train", data["train"])]
        parts += [(name, data[name]) for name in ("validation", "test") if name in data]
    elif isinstance(data, Dataset):
        parts = [("train", data)]
    else:  # pragma: no cover - load_from_disk returns one of the two
        raise ValueError(f"{where}: load_from_disk returned {type(data).__name__}")
    table = _Reader(spec, where)
    rows = {name: table.read(name, split) for name, split in parts}
    images = table.images(spec.size)
    train = rows["train"] if "validation" not in rows else _concat(rows["train"], rows["validation"])
    if "test" in rows:
        test = rows["test"]
    else:
        train, test = _split_by_image(train, len(images), spec.test_size, seed, where)
    labels = tuple(sorted(set(train.answers) | set(test.answers)))
    index = {a: k for k, a in enumerate(labels)}
    return Source(train.split(images, index), test.split(images, index), labels, "vqa")


@dataclass(frozen=True)
class _Rows:
    """Rows of one split: image index into the shared image list, question, answer, type."""

    image: np.ndarray
    questions: tuple[str, ...]
    answers: tuple[str, ...]
    qtypes: tuple[str, ...]

    def take(self, keep: np.ndarray) -> _Rows:
        return _Rows(self.image[keep], *(tuple(col[i] for i in keep)
                                         for col in (self.questions, self.answers, self.qtypes)))

    def split(self, images: np.ndarray, index: dict[str, int]) -> Split:
        return Split(
            blocks=(images,),
            groups=np.zeros(len(self.questions), np.int64),
            rows=self.image,
            questions=self.questions,
            targets=np.array([index[a] for a in self.answers], np.int64),
            qtypes=np.array(self.qtypes),
        )


def _concat(a: _Rows, b: _Rows) -> _Rows:
    return _Rows(np.concatenate([a.image, b.image]), a.questions + b.questions,
                 a.answers + b.answers, a.qtypes + b.qtypes)  # fmt: skip


def _split_by_image(rows: _Rows, num_images: int, test_size: float, seed: int,
                    where: str) -> tuple[_Rows, _Rows]:  # fmt: skip
    """A seeded ``test_size`` share of the distinct images (at least one, never all) and their
    rows go to test."""
    shown = np.unique(rows.image)
    if len(shown) < 2:
        raise ValueError(f"{where}: has no test split and {len(shown)} distinct image(s); "
                         "a seeded train/test split needs at least 2")  # fmt: skip
    count = min(max(round(test_size * len(shown)), 1), len(shown) - 1)
    held_out = np.zeros(num_images, bool)
    held_out[np.random.default_rng([seed, 7]).permutation(shown)[:count]] = True
    is_test = held_out[rows.image]
    return rows.take(np.flatnonzero(~is_test)), rows.take(np.flatnonzero(is_test))


class _Reader:
    """Reads splits column by column, checking each, and decodes every distinct image once."""

    def __init__(self, spec: HfDiskSpec, where: str) -> None:
        self.spec, self.where = spec, where
        self._key_to_image: dict[bytes, int] = {}
        self._decoded: list[np.ndarray] = []

    def read(self, name: str, data) -> _Rows:
        from datasets import ClassLabel, Image, Value

        spec, where = self.spec, f"{self.where}, split {name!r}"
        roles = {"image": spec.image, "question": spec.question, "answer": spec.answer}
        if spec.qtype is not None:
            roles["qtype"] = spec.qtype
        for role, column in roles.items():
            if column not in data.column_names:
                raise ValueError(f"{where}: no {role} column {column!r} (columns: "
                                 f"{', '.join(data.column_names)}); name it with ?{role}=<column>")
        if not isinstance(data.features[spec.image], Image):
            raise ValueError(f"{where}: image column {spec.image!r} is "
                             f"{data.features[spec.image]!r}, not a datasets.Image feature")
        for role, column in roles.items():
            feature = data.features[column]
            if role != "image" and not isinstance(feature, Value | ClassLabel):
                raise ValueError(f"{where}: {role} column {column!r} is {feature!r}; "
                                 "expected one string, number or class label per row")
        if len(data) == 0:
            raise ValueError(f"{where}: has no rows")
        data = data.select_columns(list(dict.fromkeys(roles.values())))
        data = data.cast_column(spec.image, Image(decode=False))
        image: list[int] = []
        text: dict[str, list[str]] = {role: [] for role in roles if role != "image"}
        for batch in data.iter(batch_size=_BATCH):
            image += [self._image_index(item, where) for item in batch[spec.image]]
            for role in text:
                text[role] += self._strings(data.features[roles[role]], batch[roles[role]],
                                            where, role, roles[role])
        qtypes = text.get("qtype") or [
            "yes/no" if a.strip().lower() in YES_NO else "open" for a in text["answer"]
        ]
        return _Rows(np.array(image, np.int64), tuple(text["question"]), tuple(text["answer"]),
                     tuple(qtypes))

    @staticmethod
    def _strings(feature, values: list, where: str, role: str, column: str) -> list[str]:
        if any(v is None for v in values):
            raise ValueError(f"{where}: {role} column {column!r} has empty (None) rows")
        names = getattr(feature, "names", None)
        return [names[v] for v in values] if names else [str(v) for v in values]

    def _image_index(self, item: dict | None, where: str) -> int:
        from datasets import Image

        if item is None or (item.get("bytes") is None and item.get("path") is None):
            raise ValueError(f"{where}: image column {self.spec.image!r} has empty rows")
        key = (hashlib.blake2b(item["bytes"]).digest() if item.get("bytes") is not None
               else b"path:" + str(item["path"]).encode())  # fmt: skip
        if key not in self._key_to_image:
            self._key_to_image[key] = len(self._decoded)
            picture = Image().decode_example(item).convert("RGB")
            self._decoded.append(np.asarray(picture))
        return self._key_to_image[key]

    def images(self, size: int | None) -> np.ndarray:
        """(M, H, W, 3) uint8 read-only: every distinct image, resized when sizes differ."""
        from PIL import Image as PILImage

        shapes = {x.shape for x in self._decoded}
        if size is None and len(shapes) == 1:
            out = np.stack(self._decoded)
        else:
            side = size or DEFAULT_SIZE
            out = np.stack([
                x if x.shape[:2] == (side, side)
                else np.asarray(PILImage.fromarray(x).resize((side, side), PILImage.BILINEAR))
                for x in self._decoded
            ])  # fmt: skip
        out.flags.writeable = False
        return out


def source(argument: str, seed: int) -> Source:
    """Registry loader of ``hf-disk:<dir>[?options]``: ``argument`` is the text after the prefix."""
    return load_hf_disk(PREFIX + argument, seed)
