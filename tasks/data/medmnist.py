"""medmnist-vqa:<dir> — the Ultra-MedVQA construction (supplement §C.1, Task 3) on MedMNIST files.

Each ``*.npz`` in <dir> (sorted by name) is one imaging modality, i.e. one group of clients (see
`tasks.data.partition`: with as many partitions as files, partition i gets file i). A file holds
``train_images``, ``train_labels``, ``test_images``, ``test_labels`` and optionally
``val_images``, ``val_labels`` (merged into train, which turns MedMNIST's 7:1:2 split into the
supplement's 80:20 train:test ratio). Images are uint8 (n, H, W) grayscale or (n, H, W, 3) RGB;
labels are (n,) or (n, 1) class indices, or (n, K) 0/1 multi-hot (ChestMNIST).

Every image becomes VQA triplets from question templates (§C.1 step 2): a modality question, an
anatomy question, and a class-label question whose type follows the file (diagnosis, grading,
tissue; for OrganA/C/S-MNIST the class is the organ, so the label question is the anatomy
question). Phrasings are picked per sample from a few templates with a fixed seed, standing in for
the supplement's ChatGPT rephrasing (step 3); step 4 (manual checking) has no counterpart.
Multi-label images get the diagnosis "no finding" when no label is set, the label's name when
exactly one is, and no diagnosis question when several are (a single answer would be ambiguous).
Files not in the table fall back to the file stem as modality, no anatomy question and answers
"class <k>". The answer vocabulary is the sorted union of all answers of all files in <dir>, the
same for every client.

Getting the real files (they cannot be downloaded here): MedMNIST v2/v3 at https://medmnist.com,
archived on Zenodo (https://doi.org/10.5281/zenodo.10519652); or ``pip install medmnist`` and e.g.
``python -c "import medmnist; medmnist.PathMNIST(split='train', download=True, root='DIR')"`` for
each data set, which leaves ``DIR/pathmnist.npz`` etc. Larger MedMNIST+ files (``pathmnist_64.npz``,
``_128``, ``_224``) are recognised by their stem.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from tasks.data.types import Source, Split


@dataclass(frozen=True)
class MedInfo:
    modality: str
    anatomy: str | None  # None: no fixed anatomy answer (unknown file, or the class is the organ)
    label_qtype: str  # question type of the class-label question
    labels: tuple[str, ...]


_ORGANS = ("bladder", "femur-left", "femur-right", "heart", "kidney-left", "kidney-right", "liver",
           "lung-left", "lung-right", "pancreas", "spleen")  # fmt: skip

MEDMNIST_INFO: dict[str, MedInfo] = {
    "pathmnist": MedInfo("colon pathology", "colon", "tissue", (
        "adipose", "background", "debris", "lymphocytes", "mucus", "smooth muscle",
        "normal colon mucosa", "cancer-associated stroma", "colorectal adenocarcinoma epithelium")),
    "chestmnist": MedInfo("chest x-ray", "lung", "diagnosis", (
        "atelectasis", "cardiomegaly", "effusion", "infiltration", "mass", "nodule", "pneumonia",
        "pneumothorax", "consolidation", "edema", "emphysema", "fibrosis", "pleural", "hernia")),
    "dermamnist": MedInfo("dermatoscope", "skin", "diagnosis", (
        "actinic keratoses and intraepithelial carcinoma", "basal cell carcinoma",
        "benign keratosis-like lesions", "dermatofibroma", "melanoma", "melanocytic nevi",
        "vascular lesions")),
    "octmnist": MedInfo("retinal oct", "eye", "diagnosis", (
        "choroidal neovascularization", "diabetic macular edema", "drusen", "normal")),
    "pneumoniamnist": MedInfo("chest x-ray", "lung", "diagnosis", ("normal", "pneumonia")),
    "retinamnist": MedInfo("fundus camera", "eye", "grading",
                           tuple(f"diabetic retinopathy grade {k}" for k in range(5))),
    "breastmnist": MedInfo("ultrasound", "breast", "diagnosis", ("malignant", "normal, benign")),
    "bloodmnist": MedInfo("blood cell microscope", "blood", "tissue", (
        "basophil", "eosinophil", "erythroblast",
        "immature granulocytes(myelocytes, metamyelocytes and promyelocytes)", "lymphocyte",
        "monocyte", "neutrophil", "platelet")),
    "tissuemnist": MedInfo("kidney cortex microscope", "kidney", "tissue", (
        "collecting duct, connecting tubule", "distal convoluted tubule",
        "glomerular endothelial cells", "interstitial endothelial cells", "leukocytes", "podocytes",
        "proximal tubule segments", "thick ascending limb")),
    "organamnist": MedInfo("abdominal ct", None, "anatomy", _ORGANS),
    "organcmnist": MedInfo("abdominal ct", None, "anatomy", _ORGANS),
    "organsmnist": MedInfo("abdominal ct", None, "anatomy", _ORGANS),
}  # fmt: skip

TEMPLATES: dict[str, tuple[str, ...]] = {
    "modality": ("what is the modality of this image?", "what imaging modality is this?",
                 "which kind of imaging produced this picture?"),
    "anatomy": ("which part of the body is shown in this {modality} image?",
                "what anatomy is shown in this image?", "which organ is in the picture?"),
    "diagnosis": ("what is the specific diagnosis in this {modality} image?",
                  "what abnormality is seen in this image?", "what disease does this image show?"),
    "grading": ("what is the disease grade in this {modality} image?",
                "how severe is the disease shown in this image?"),
    "tissue": ("what type of tissue or cell is shown in this {modality} image?",
               "which tissue or cell type is in the picture?"),
}  # fmt: skip

NO_FINDING = "no finding"
REQUIRED = ("train_images", "train_labels", "test_images", "test_labels")


def file_info(path: Path, num_classes: int) -> MedInfo:
    """Table entry of a file by stem (``pathmnist_64`` -> pathmnist), or the documented fallback."""
    stem = path.stem.lower()
    info = MEDMNIST_INFO.get(re.sub(r"_\d+$", "", stem))
    if info is not None:
        return info
    return MedInfo(stem, None, "diagnosis", tuple(f"class {k}" for k in range(num_classes)))


def _read(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Validated (images (n,H,W,C) uint8, labels (n,K) int64) per split; val merged into train."""
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise ValueError(f"{path}: not a readable .npz file ({e})") from None
    keys = list(REQUIRED)
    if "val_images" in arrays or "val_labels" in arrays:
        keys += ["val_images", "val_labels"]
    for key in keys:
        if key not in arrays:
            raise ValueError(f"{path}: missing key {key!r} (MedMNIST format needs {REQUIRED})")
    splits = {}
    for split in ("train", "val", "test"):
        if f"{split}_images" in keys:
            splits[split] = _check_split(path, split, arrays)
    shapes = {split: (x.shape[1:], y.shape[1]) for split, (x, y) in splits.items()}
    for split, shape in shapes.items():
        if shape != shapes["train"]:
            raise ValueError(
                f"{path}: key {split + '_images'!r}/{split + '_labels'!r} have image/label shape "
                f"{shape}, but train has {shapes['train']}"
            )
    if "val" in splits:
        (tx, ty), (vx, vy) = splits.pop("train"), splits.pop("val")
        splits = {"train": (np.concatenate([tx, vx]), np.concatenate([ty, vy])), **splits}
    return splits


def _check_split(path: Path, split: str, arrays: dict) -> tuple[np.ndarray, np.ndarray]:
    ikey, lkey = f"{split}_images", f"{split}_labels"
    x, y = arrays[ikey], arrays[lkey]
    if not (x.ndim == 3 or (x.ndim == 4 and x.shape[-1] in (1, 3))):
        raise ValueError(
            f"{path}: key {ikey!r} has shape {x.shape}, expected (n, H, W) or (n, H, W, 3)"
        )
    if x.dtype != np.uint8:
        raise ValueError(f"{path}: key {ikey!r} has dtype {x.dtype}, expected uint8")
    if len(x) == 0:
        raise ValueError(f"{path}: key {ikey!r} is empty")
    if y.ndim not in (1, 2) or (y.ndim == 2 and y.shape[1] == 0):
        raise ValueError(
            f"{path}: key {lkey!r} has shape {y.shape}, expected (n,), (n, 1) or (n, K)"
        )
    if len(y) != len(x):
        raise ValueError(
            f"{path}: key {lkey!r} has {len(y)} labels but {ikey!r} has {len(x)} images"
        )
    if not (np.issubdtype(y.dtype, np.integer) or y.dtype == np.bool_) or (y < 0).any():
        raise ValueError(f"{path}: key {lkey!r} must hold non-negative integer labels")
    y = y.reshape(len(y), -1).astype(np.int64)
    if y.shape[1] > 1 and (y > 1).any():
        raise ValueError(f"{path}: key {lkey!r} is multi-label (n, {y.shape[1]}) but not 0/1")
    return (x if x.ndim == 4 else x[..., None]), y


def _questions(
    info: MedInfo, y: np.ndarray, vocab: dict[str, int], rng: np.random.Generator
) -> tuple[np.ndarray, list[str], np.ndarray, list[str]]:
    """(image rows, questions, answer indices, qtypes) of one split of one file."""
    label_answer = np.array([vocab[name] for name in info.labels], np.int64)
    if y.shape[1] == 1:
        kinds = [(info.label_qtype, np.arange(len(y)), label_answer[y[:, 0]])]
    else:  # multi-label: "no finding", the single positive label, or no label question
        count = y.sum(axis=1)
        answer = np.where(count == 0, vocab.get(NO_FINDING, -1), label_answer[y.argmax(axis=1)])
        keep = np.flatnonzero(count <= 1)
        kinds = [(info.label_qtype, keep, answer[keep])]
    every = np.arange(len(y))
    kinds.insert(0, ("modality", every, np.full(len(y), vocab[info.modality])))
    if info.anatomy is not None:
        kinds.insert(1, ("anatomy", every, np.full(len(y), vocab[info.anatomy])))
    rows, questions, answers, qtypes = [], [], [], []
    for qtype, kind_rows, kind_answers in kinds:
        phrasings = [t.format(modality=info.modality) for t in TEMPLATES[qtype]]
        questions += [phrasings[i] for i in rng.integers(len(phrasings), size=len(kind_rows))]
        qtypes += [qtype] * len(kind_rows)
        rows.append(kind_rows)
        answers.append(kind_answers)
    return np.concatenate(rows), questions, np.concatenate(answers), qtypes


def _check_labels(path: Path, info: MedInfo, y: np.ndarray, key: str) -> None:
    if y.shape[1] > 1 and y.shape[1] != len(info.labels):
        raise ValueError(f"{path}: key {key!r} has {y.shape[1]} labels per image, "
                         f"{path.stem} has {len(info.labels)}")  # fmt: skip
    if y.shape[1] == 1 and y.max() >= len(info.labels):
        raise ValueError(f"{path}: key {key!r} has label {y.max()}, "
                         f"{path.stem} has {len(info.labels)} classes")  # fmt: skip


@lru_cache(maxsize=2)
def _load(directory: str, stamp: tuple) -> Source:
    paths = [Path(directory) / name for name, *_ in stamp]
    files = [_read(p) for p in paths]
    infos = []
    for path, splits in zip(paths, files, strict=True):
        width = splits["train"][1].shape[1]
        top = max(int(y.max()) for _, y in splits.values()) + 1
        info = file_info(path, width if width > 1 else top)
        for split, (_, y) in splits.items():
            _check_labels(path, info, y, f"{split}_labels")
        infos.append(info)
    answers = {NO_FINDING} if any(s["train"][1].shape[1] > 1 for s in files) else set()
    for info in infos:
        answers |= {info.modality, *info.labels} | ({info.anatomy} - {None})
    labels = tuple(sorted(answers))
    vocab = {a: k for k, a in enumerate(labels)}
    out = {}
    for seed, split in enumerate(("train", "test")):
        rng = np.random.default_rng(seed)  # phrasing choice only: fixed, independent of partitions
        blocks, groups, rows, questions, targets, qtypes = [], [], [], [], [], []
        for group, (info, splits) in enumerate(zip(infos, files, strict=True)):
            x, y = splits[split]
            x.flags.writeable = False
            r, q, a, t = _questions(info, y, vocab, rng)
            blocks.append(x)
            groups.append(np.full(len(r), group, np.int64))
            rows.append(r)
            questions += q
            targets.append(a)
            qtypes += t
        out[split] = Split(
            blocks=tuple(blocks),
            groups=np.concatenate(groups),
            rows=np.concatenate(rows),
            questions=tuple(questions),
            targets=np.concatenate(targets),
            qtypes=np.array(qtypes),
        )
    return Source(out["train"], out["test"], labels, "vqa", num_groups=len(paths))


def load_medmnist_vqa(directory: str) -> Source:
    """All .npz files of `directory` as one VQA source, one group per file (cached per process)."""
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"medmnist-vqa directory not found: {root}")
    paths = sorted(root.glob("*.npz"))
    if not paths:
        raise FileNotFoundError(f"no .npz files in medmnist-vqa directory: {root}")
    stamp = tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in paths)
    return _load(str(root.resolve()), stamp)


def source(argument: str, seed: int) -> Source:
    """Registry loader of ``medmnist-vqa:<dir>``: the files of the folder ``argument`` (no seed)."""
    if not argument:
        raise ValueError("dataset 'medmnist-vqa:' needs a directory: 'medmnist-vqa:<dir>'")
    return load_medmnist_vqa(argument)
