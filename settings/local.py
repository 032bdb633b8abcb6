"""Checks of settings that depend on the machine judging them: data folder, model folder, device.

``run_simulation.py`` runs them before Ray starts (its clients share its machine); a SuperNode
runs them against its own files and hardware, and replies with an error naming the key
(`client_app.runtime`), since only the site can tell whether it has the folder or the GPU.
"""

from __future__ import annotations

import os
from pathlib import Path

from settings.config import RunConfig
from settings.errors import ConfigError
from tasks.data.mixed import PREFIX as MIXED_PREFIX
from tasks.data.mixed import parse_mixed
from tasks.data.registry import REGISTRY
from tasks.models.registry import parse_model

# "<name>:<dir>[?options]" data sets read from a local folder, and the file patterns the folder must
# hold: the registry entries with ``files`` (`tasks.data.registry`)
FOLDER_DATASETS = {name.partition(":")[0]: entry.files for name, entry in REGISTRY.items() if entry.files}


def available_cores() -> int:
    """The number of cores this process may run on (its CPU affinity where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def check_data_here(dataset: str, where: str = "") -> None:
    """Every folder the data set reads (``medmnist-vqa:<dir>``, ``hf-disk:<dir>``, also inside
    ``mixed:``) exists here and holds that data set's files; `where` names the setting (default
    ``dataset = <value>``)."""
    where = where or f"dataset = {dataset!r}"
    parts = parse_mixed(dataset) if dataset.startswith(MIXED_PREFIX) else (dataset,)
    for part in parts:
        kind, sep, rest = part.partition(":")
        if kind not in FOLDER_DATASETS or not sep:
            continue
        folder = rest.partition("?")[0]
        path = Path(folder)
        if not path.is_dir():
            raise ConfigError(f"{where}: no folder {folder!r} on this machine")
        patterns = FOLDER_DATASETS[kind]
        if not any(any(path.glob(pattern)) for pattern in patterns):
            raise ConfigError(f"{where}: folder {folder!r} holds no {' or '.join(patterns)}")


def check_model_here(model: str) -> None:
    """A checkpoint model (``hf:<dir>``, `tasks.models.registry.ModelEntry.checkpoint`) is a folder
    here with the checkpoint's ``config.json``."""
    entry, folder = parse_model(model)
    if entry.checkpoint and not (Path(folder).expanduser() / "config.json").is_file():
        raise ConfigError(f"model = {model!r}: no checkpoint folder with a config.json on this machine")


def check_device_here(device: str, key: str = "device") -> str:
    """The torch device `device` resolves to on this machine (``auto`` -> ``cuda`` or ``cpu``)."""
    from tasks.device import resolve_device  # torch: only where a device is resolved

    try:
        return resolve_device(device)
    except ValueError as err:
        raise ConfigError(f"{key} = {device!r} is not usable here: {err}") from None


def check_here(config: RunConfig, device: bool = True) -> None:
    """Everything of `config` that depends on this machine (for clients running on it); without
    ``device`` the clients' device is left to their own machines (a Ray cluster's nodes)."""
    check_data_here(config.dataset)
    check_model_here(config.model)
    if device:
        check_quantization_here(config.quantization, check_device_here(config.device))


def check_quantization_here(quantization: str, device: str) -> None:
    """``quantization = "4bit"`` needs a CUDA device and bitsandbytes on this machine."""
    if quantization != "4bit":
        return
    if not device.startswith("cuda"):
        raise ConfigError(f"quantization = '4bit' needs a CUDA device; device resolves to {device!r} here")
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        raise ConfigError("quantization = '4bit' needs bitsandbytes, which is not installed here: "
                          "pip install -e '.[qlora]'")
