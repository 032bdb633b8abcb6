"""Synthetic data generated in memory from a seed, for fast tests and smoke runs.

* ``synthetic`` — easy-VQA in miniature: 32x32 images with one coloured shape, three questions per
  image (shape, colour, yes/no), the same 13-answer vocabulary and question types as easy-vqa.
  150 train / 50 test images -> 450 / 150 samples; ``synthetic:<images>`` has that many train
  images and a third as many test images (e.g. to give each of 1,000 sites as much data as 50 have).
* ``synthetic-multilabel`` — stands in for the paper's image+report multi-label disease detection
  (Tasks 4-5, 15 classes, F1): 0-3 shapes per image, 15 findings = 3 shapes x 5 colours with a
  long-tailed frequency, a short noisy "report" (each finding mentioned with probability 0.8, a
  spurious one with probability 0.15) and a float32 multi-hot target. 400 train / 100 test samples.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from tasks.data.types import Source, Split

SIZE = 32
SHAPES = ("circle", "rectangle", "triangle")
COLOURS = {
    "red": (220, 40, 40),
    "green": (40, 160, 60),
    "blue": (40, 70, 220),
    "yellow": (230, 210, 40),
    "teal": (30, 160, 160),
    "brown": (130, 80, 30),
    "black": (20, 20, 20),
    "gray": (128, 128, 128),
}
VQA_LABELS = (*SHAPES, *COLOURS, "yes", "no")
FINDING_COLOURS = ("red", "green", "blue", "yellow", "black")
FINDINGS = tuple(f"{c} {s}" for c in FINDING_COLOURS for s in SHAPES)  # 15 classes

_YY, _XX = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)


def _masks(shape: np.ndarray, cy: np.ndarray, cx: np.ndarray, r: np.ndarray) -> np.ndarray:
    """(N, SIZE, SIZE) bool masks of shapes given by index into SHAPES, centre and half-size."""
    cy, cx, r = (v[:, None, None].astype(np.float32) for v in (cy, cx, r))
    dy, dx = _YY[None] - cy, _XX[None] - cx
    circle = dy**2 + dx**2 <= r**2
    rectangle = (np.abs(dy) <= 0.7 * r) & (np.abs(dx) <= r)
    triangle = (np.abs(dy) <= r) & (np.abs(dx) <= (dy + r) / 2)
    return np.choose(shape[:, None, None], [circle, rectangle, triangle])


def _canvas(rng: np.random.Generator, n: int) -> np.ndarray:
    return (245 + rng.integers(-8, 9, size=(n, SIZE, SIZE, 3))).astype(np.float32)


def _paint(images: np.ndarray, masks: np.ndarray, colours: np.ndarray) -> None:
    images[:] = np.where(masks[..., None], colours[:, None, None, :], images)


def _finish(images: np.ndarray) -> np.ndarray:
    out = np.clip(images, 0, 255).astype(np.uint8)
    out.flags.writeable = False
    return out


def _vqa_split(rng: np.random.Generator, n_images: int) -> Split:
    shape = rng.integers(0, len(SHAPES), n_images)
    colour = rng.integers(0, len(COLOURS), n_images)
    rgb = np.array(list(COLOURS.values()), np.float32)
    images = _canvas(rng, n_images)
    r = rng.uniform(6, 11, n_images)
    cy, cx = (rng.uniform(r + 1, SIZE - r - 1) for _ in range(2))
    _paint(images, _masks(shape, cy, cx, r), rgb[colour])
    colour_names = list(COLOURS)
    questions, answers, qtypes, rows = [], [], [], []
    for i in range(n_images):
        s, c = SHAPES[shape[i]], colour_names[colour[i]]
        if rng.random() < 0.5:
            asked = s if rng.random() < 0.5 else SHAPES[rng.integers(len(SHAPES))]
            yes_no = (f"is there a {asked} in the image?", asked == s)
        else:
            asked = c if rng.random() < 0.5 else colour_names[rng.integers(len(colour_names))]
            yes_no = (f"is the shape {asked}?", asked == c)
        for q, a, t in (
            ("what shape is in the image?", s, "shape"),
            ("what color is the shape?", c, "color"),
            (yes_no[0], "yes" if yes_no[1] else "no", "yes/no"),
        ):
            questions.append(q)
            answers.append(VQA_LABELS.index(a))
            qtypes.append(t)
            rows.append(i)
    return Split(
        blocks=(_finish(images),),
        groups=np.zeros(len(questions), np.int64),
        rows=np.array(rows, np.int64),
        questions=tuple(questions),
        targets=np.array(answers, np.int64),
        qtypes=np.array(qtypes),
    )


@lru_cache(maxsize=4)
def load_synthetic(seed: int, images: int = 150) -> Source:
    """``images`` train images and a third as many test images (at least one), three questions each."""
    rng = np.random.default_rng([seed, 1])
    return Source(_vqa_split(rng, images), _vqa_split(rng, max(1, images // 3)), VQA_LABELS, "vqa")


_CELLS = np.array([(8, 8), (8, 24), (24, 8), (24, 24)], np.float32)
_FINDING_P = 1.0 / np.arange(1, len(FINDINGS) + 1)  # long tail, as disease labels are
_FINDING_P /= _FINDING_P.sum()
_PHRASES = ("there is a {}.", "{} noted.", "possible {}.", "findings consistent with {}.")


def _multilabel_split(rng: np.random.Generator, n: int, order: np.ndarray) -> Split:
    counts = rng.choice(4, size=n, p=[0.1, 0.4, 0.3, 0.2])
    first_cell = rng.integers(0, 4, size=n)  # shapes of one image sit in distinct grid cells
    targets = np.zeros((n, len(FINDINGS)), np.float32)
    images = _canvas(rng, n)
    rgb = np.array([COLOURS[c] for c in FINDING_COLOURS], np.float32)
    for layer in range(3):
        present = np.flatnonzero(counts > layer)
        findings = order[rng.choice(len(FINDINGS), size=n, p=_FINDING_P)][present]
        targets[present, findings] = 1.0
        cells = _CELLS[(first_cell[present] + layer) % 4]
        r = rng.uniform(4, 6.5, len(present))
        cy, cx = (cells[:, k] + rng.uniform(-1.5, 1.5, len(present)) for k in (0, 1))
        layer_images = images[present]
        _paint(
            layer_images, _masks(findings % len(SHAPES), cy, cx, r), rgb[findings // len(SHAPES)]
        )
        images[present] = layer_images
    reports = []
    for target in targets:
        mentioned = [f for f in np.flatnonzero(target) if rng.random() < 0.8]
        if rng.random() < 0.15:
            mentioned.append(int(rng.integers(len(FINDINGS))))
        rng.shuffle(mentioned)
        text = " ".join(
            _PHRASES[rng.integers(len(_PHRASES))].format(FINDINGS[f]) for f in mentioned
        )
        reports.append(text or "no acute findings.")
    return Split(
        blocks=(_finish(images),),
        groups=np.zeros(n, np.int64),
        rows=np.arange(n, dtype=np.int64),
        questions=tuple(reports),
        targets=targets,
        qtypes=np.full(n, "multilabel"),
    )


@lru_cache(maxsize=4)
def load_synthetic_multilabel(seed: int) -> Source:
    rng = np.random.default_rng([seed, 2])
    order = rng.permutation(len(FINDINGS))  # which findings are common differs per seed
    train, test = _multilabel_split(rng, 400, order), _multilabel_split(rng, 100, order)
    return Source(train, test, FINDINGS, "multilabel")


def source(argument: str, seed: int) -> Source:
    """Registry loader of ``synthetic`` and ``synthetic:<images>``: generated from the run's seed."""
    if not argument:
        return load_synthetic(seed)
    if not argument.isdigit() or int(argument) < 1:
        raise ValueError(f"dataset = 'synthetic:{argument}': the number of train images must be a "
                         "positive integer")
    return load_synthetic(seed, int(argument))


def multilabel_source(argument: str, seed: int) -> Source:
    """Registry loader of ``synthetic-multilabel``: generated from the run's seed."""
    return load_synthetic_multilabel(seed)
