"""A site's prepared partition on disk, so a fresh process memory-maps it instead of rebuilding it.

`load_partition` decodes the whole data set (easy-VQA: 5,000 PNGs), partitions it and builds the
client's samples: 1-2 s of CPU in every process that needs it. `cached_partition` stores the result
once under ``<root>/<key>/`` as ``.npy`` files (the distinct images of each split, which sample
shows which image, questions, targets, question types) plus ``meta.json``, and later loads it with
``np.load(mmap_mode="r")``: the samples' images are read-only views of the mapped file, exactly as
`load_partition` returns read-only views of its decoded blocks.

The key is a SHA-256 over everything that determines the partition: the data set name, partition
id and count, partitioner, seed and caps, the source of every module of ``tasks.data`` (the
loaders, partitioners and transforms), and the data itself (the installed ``easy-vqa`` version, or
name, size and mtime of every file under a data directory). Change any of them and the key changes,
so a stale entry is never read; the newest KEEP entries are kept. An entry is written into a
temporary folder and renamed into place, so a crash or a concurrent writer never leaves a partial
entry under a key; an entry that fails to load is removed and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np

from tasks.data.types import Partition, Sample

FORMAT = 1  # bump when the on-disk layout changes
KEEP = 4  # entries kept per cache folder (newest used first)
_DATA_SOURCES = Path(__file__).resolve().parent


def _data_fingerprint(dataset: str) -> list:
    """What the raw data of `dataset` is: package versions or the files of its directory."""
    from tasks.data.mixed import PREFIX, parse_mixed

    if dataset.startswith(PREFIX):
        return [_data_fingerprint(part) for part in parse_mixed(dataset)]
    kind, sep, directory = dataset.partition(":")
    if sep and directory:
        root = Path(directory).expanduser().resolve()
        files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
        return [kind, str(root), [(str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
                                  for p in files]]
    if kind.startswith("easy-vqa"):
        return [kind, metadata.version("easy-vqa")]
    return [kind]


def partition_key(dataset: str, partition_id: int, num_partitions: int, partitioner: str, seed: int,
                  max_train: int | None, max_test: int | None) -> str:
    """Hex SHA-256 of the settings, the ``tasks.data`` source code and the raw data's fingerprint."""
    code = hashlib.sha256()
    for path in sorted(_DATA_SOURCES.glob("*.py")):
        code.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    settings = {"format": FORMAT, "dataset": dataset, "partition-id": int(partition_id),
                "num-partitions": int(num_partitions), "partitioner": partitioner, "seed": int(seed),
                "max-train": max_train, "max-test": max_test, "code": code.hexdigest(),
                "data": _data_fingerprint(dataset)}
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def cached_partition(root: str | Path, dataset: str, partition_id: int, num_partitions: int,
                     partitioner: str = "iid", seed: int = 0, max_train: int | None = None,
                     max_test: int | None = None) -> Partition:
    """`tasks.data.load_partition` with the same arguments, read from (or first written to) `root`."""
    from tasks.data.load import load_partition

    root = Path(root)
    key = partition_key(dataset, partition_id, num_partitions, partitioner, seed, max_train, max_test)
    entry = root / key[:32]
    if entry.is_dir():
        try:
            partition = read_partition(entry, key)
            os.utime(entry)  # most recently used
            return partition
        except (OSError, ValueError, KeyError, EOFError, pickle.UnpicklingError):  # torn, or stale
            shutil.rmtree(entry, ignore_errors=True)
    partition = load_partition(dataset, partition_id, num_partitions, partitioner, seed=seed,
                               max_train=max_train, max_test=max_test)
    write_partition(entry, key, partition)
    _prune(root)
    return partition


def write_partition(entry: Path, key: str, partition: Partition) -> None:
    """Write `partition` as folder `entry` atomically (temporary folder, then one rename)."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=entry.parent))
    try:
        meta = {"key": key, "labels": list(partition.labels), "task": partition.task,
                "name": partition.name, "splits": {}}
        for split in ("train", "test"):
            meta["splits"][split] = _write_split(tmp, split, getattr(partition, split))
        (tmp / "meta.json").write_text(json.dumps(meta))
        for path in tmp.iterdir():  # on disk before the entry becomes visible
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
        try:
            os.rename(tmp, entry)
        except OSError:  # another process wrote the same entry first: keep theirs
            if not entry.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write_split(folder: Path, split: str, samples: list[Sample]) -> list[int]:
    """The split's distinct images (one array per image shape) and per-sample columns."""
    blocks: dict[tuple, list[np.ndarray]] = {}
    seen: dict[tuple, tuple[int, int]] = {}
    where = np.empty((len(samples), 2), np.int64)  # (block, row) of each sample's image
    for i, sample in enumerate(samples):
        image = sample.image
        identity = (image.__array_interface__["data"][0], image.shape, image.strides)
        if identity not in seen:  # samples of one image share its view: store it once
            rows = blocks.setdefault(image.shape, [])
            seen[identity] = (list(blocks).index(image.shape), len(rows))
            rows.append(image)
        where[i] = seen[identity]
    for b, images in enumerate(blocks.values()):
        np.save(folder / f"{split}-images-{b}.npy", np.stack(images))
    np.save(folder / f"{split}-where.npy", where)
    np.save(folder / f"{split}-questions.npy", np.array([s.question for s in samples], dtype=str))
    np.save(folder / f"{split}-qtypes.npy", np.array([s.qtype for s in samples], dtype=str))
    np.save(folder / f"{split}-targets.npy", np.stack([np.asarray(s.target) for s in samples]))
    return [len(blocks), len(samples)]


def read_partition(entry: Path, key: str) -> Partition:
    """The partition stored in `entry`; ValueError if it was written under another key."""
    meta = json.loads((entry / "meta.json").read_text())
    if meta["key"] != key:
        raise ValueError(f"partition cache {entry} holds key {meta['key']!r}, not {key!r}")
    splits = {split: _read_split(entry, split, *meta["splits"][split]) for split in ("train", "test")}
    return Partition(train=splits["train"], test=splits["test"], labels=list(meta["labels"]),
                     task=meta["task"], name=meta["name"])


def _read_split(entry: Path, split: str, num_blocks: int, num_samples: int) -> list[Sample]:
    blocks = [np.load(entry / f"{split}-images-{b}.npy", mmap_mode="r") for b in range(num_blocks)]
    where = np.load(entry / f"{split}-where.npy")
    questions = np.load(entry / f"{split}-questions.npy").tolist()
    qtypes = np.load(entry / f"{split}-qtypes.npy").tolist()
    targets = np.load(entry / f"{split}-targets.npy")
    if not len(where) == len(questions) == len(qtypes) == len(targets) == num_samples:
        raise ValueError(f"partition cache {entry}: {split} columns disagree in length")
    vqa = targets.ndim == 1
    return [Sample(image=np.asarray(blocks[b][r]), question=q,
                   target=int(t) if vqa else np.array(t), qtype=qt)
            for (b, r), q, t, qt in zip(where.tolist(), questions, targets, qtypes, strict=True)]


def _prune(root: Path) -> None:
    """Keep the KEEP most recently used entries."""
    entries = sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")),
                     key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in entries[KEEP:]:
        shutil.rmtree(stale, ignore_errors=True)
