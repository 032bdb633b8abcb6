"""easy-VQA (PyPI package ``easy-vqa``): 4,000 train / 1,000 test 64x64 PNG images of one coloured
shape, 38,575 / 9,673 questions, 13 answers.

Stands in for the paper's medical VQA data (which cannot be shipped) as a real, small VQA data set.
Question type from the answer: yes/no -> "yes/no", a shape -> "shape", otherwise "color".
The answer vocabulary is `easy_vqa.get_answers()` in its own order, the same for every client.

``easy-vqa-yes-no`` keeps only the yes/no questions ("Is there a red shape?", "Does the image not
contain a circle?"; 28,407 train / 7,136 test), with the same vocabulary. Their answer is a
conjunction of the question and the image: frozen image features and a linear head cannot answer
it, so the layers that fuse question and image have to learn.
"""

from __future__ import annotations

from functools import lru_cache

import easy_vqa
import numpy as np
from PIL import Image

from tasks.data.types import Source, Split

SHAPES = frozenset({"circle", "rectangle", "triangle"})


def qtype_of(answer: str) -> str:
    if answer in ("yes", "no"):
        return "yes/no"
    return "shape" if answer in SHAPES else "color"


def _split(questions_answers_ids: tuple, paths: dict[int, str], labels: tuple[str, ...]) -> Split:
    questions, answers, image_ids = questions_answers_ids
    ids = sorted(paths)
    row_of = {image_id: row for row, image_id in enumerate(ids)}
    images = np.stack([np.asarray(Image.open(paths[i]).convert("RGB")) for i in ids])
    images.flags.writeable = False
    index = {a: k for k, a in enumerate(labels)}
    return Split(
        blocks=(images,),
        groups=np.zeros(len(questions), np.int64),
        rows=np.array([row_of[i] for i in image_ids], np.int64),
        questions=tuple(questions),
        targets=np.array([index[a] for a in answers], np.int64),
        qtypes=np.array([qtype_of(a) for a in answers]),
    )


def _only(split: Split, qtype: str) -> Split:
    keep = np.flatnonzero(split.qtypes == qtype)
    return Split(blocks=split.blocks, groups=split.groups[keep], rows=split.rows[keep],
                 questions=tuple(split.questions[i] for i in keep), targets=split.targets[keep],
                 qtypes=split.qtypes[keep])


@lru_cache(maxsize=1)
def load_easy_vqa_yes_no() -> Source:
    """easy-VQA's yes/no questions only (module doc), sharing the images of `load_easy_vqa`."""
    whole = load_easy_vqa()
    return Source(train=_only(whole.train, "yes/no"), test=_only(whole.test, "yes/no"),
                  labels=whole.labels, task=whole.task)


@lru_cache(maxsize=1)
def load_easy_vqa() -> Source:
    """The whole data set, images decoded once per process (about 1-2 s)."""
    labels = tuple(easy_vqa.get_answers())
    return Source(
        train=_split(easy_vqa.get_train_questions(), easy_vqa.get_train_image_paths(), labels),
        test=_split(easy_vqa.get_test_questions(), easy_vqa.get_test_image_paths(), labels),
        labels=labels,
        task="vqa",
    )


def source(argument: str, seed: int) -> Source:
    """Registry loader of ``easy-vqa`` and ``easy-vqa-modalities``: one fixed data set (no argument,
    no seed)."""
    return load_easy_vqa()


def yes_no_source(argument: str, seed: int) -> Source:
    """Registry loader of ``easy-vqa-yes-no``."""
    return load_easy_vqa_yes_no()
