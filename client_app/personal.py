"""The client's personal parameters (task head, projection): kept on the client, never averaged.

With node config ``state-dir`` they live in ``<state-dir>/personal.safetensors`` (survives a
SuperNode restart, never leaves the site). In simulation, where nodes carry no such setting, the
default is ``<run dir>/clients/partition-<id>/`` (the server names its run folder in every
message's config as ``run-dir``), so a resumed simulation finds every client's head again; with
neither, the node's ``context.state`` holds them for the life of the process.
Writes go to a temporary file first and are then renamed, so a crash never leaves a torn file.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from flwr.app import Context
from safetensors.numpy import load_file, save_file

from strategies.records import from_record, to_record

STATE_KEY = "personal"
FILE_NAME = "personal.safetensors"


def _state_file(context: Context, run_dir: str) -> Path | None:
    state_dir = context.node_config.get("state-dir")
    if state_dir:
        return Path(str(state_dir)) / FILE_NAME
    if run_dir:
        pid = context.node_config.get("partition-id", context.node_id)
        return Path(run_dir) / "clients" / f"partition-{pid}" / FILE_NAME
    return None


def load_personal(context: Context, run_dir: str = "") -> dict[str, np.ndarray] | None:
    """The stored personal state, or None before this client's first training round."""
    path = _state_file(context, run_dir)
    if path is not None:
        return load_file(path) if path.exists() else None
    if STATE_KEY in context.state.array_records:
        return from_record(context.state[STATE_KEY])
    return None


def save_personal(context: Context, state: dict[str, np.ndarray], run_dir: str = "") -> None:
    """Store the personal state where :func:`load_personal` finds it."""
    path = _state_file(context, run_dir)
    if path is None:
        context.state[STATE_KEY] = to_record(state)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    save_file({k: np.ascontiguousarray(v) for k, v in state.items()}, tmp)
    os.replace(tmp, path)
