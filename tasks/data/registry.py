"""The data set registry, importable without the loaders (PIL, easy-vqa, datasets), as `tasks.names`.

A data set is one `REGISTRY` entry: its name (a pattern such as ``"medmnist-vqa:<dir>"`` is its
prefix and an argument) maps to the ``"module:attr"`` of its source loader, imported on first
load (the lazy style of `tasks.models.registry`). A loader is ``source(argument: str, seed: int)
-> Source``: the whole data set (train and test `Split`, answer vocabulary, task), cached by the
loader where reading is slow; `tasks.data.load.load_partition` cuts every client's share of it the
same way for every entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tasks.names import load_attr, parse_name


@dataclass(frozen=True)
class DatasetEntry:
    """One data set of the registry.

    ``source``: ``"module:attr"`` of its loader, or "" for a mixture of other entries, which
    `tasks.data.mixed` composes from their partitions; ``modalities``: client i sees the images
    through modality transform i mod 8 (`tasks.data.transforms`); ``files``: the argument is a folder
    that must hold one of these file patterns, which each site checks before round 1
    (`settings.local`)."""

    source: str
    modalities: bool = False
    files: tuple[str, ...] = ()

    def load(self) -> Callable:
        """The source loader (its module is imported here, on first use)."""
        return load_attr(self.source)


REGISTRY: dict[str, DatasetEntry] = {
    "easy-vqa": DatasetEntry("tasks.data.easyvqa:source"),
    "easy-vqa-modalities": DatasetEntry("tasks.data.easyvqa:source", modalities=True),
    "easy-vqa-yes-no": DatasetEntry("tasks.data.easyvqa:yes_no_source"),
    "synthetic": DatasetEntry("tasks.data.synthetic:source"),
    "synthetic:<images>": DatasetEntry("tasks.data.synthetic:source"),
    "synthetic-multilabel": DatasetEntry("tasks.data.synthetic:multilabel_source"),
    "medmnist-vqa:<dir>": DatasetEntry("tasks.data.medmnist:source", files=("*.npz",)),
    # save_to_disk writes a DatasetDict's dataset_dict.json or a Dataset's state.json
    "hf-disk:<dir>[?<option>=<value>&...]": DatasetEntry("tasks.data.hfdisk:source",
                                                        files=("dataset_dict.json", "state.json")),
    "mixed:<dataset>+<dataset>[+...]": DatasetEntry(""),
}
DATASETS: tuple[str, ...] = tuple(REGISTRY)
"""The data set names (`REGISTRY`'s keys), as the run setting ``dataset`` accepts them."""


def parse_dataset(name: object) -> tuple[DatasetEntry, str]:
    """The registry entry of a data set name and its argument (e.g. the folder of
    ``medmnist-vqa:<dir>``, else ""); ValueError ``unknown dataset ...`` for any other name."""
    if not isinstance(name, str):
        raise ValueError(f"dataset must be a string, got {name!r}")
    key, argument = parse_name(name, REGISTRY, "dataset", empty=True)
    return REGISTRY[key], argument
