"""The client's personal parameters (task head, projection): kept on the client, never averaged.

With node config ``state-dir`` they live in ``<state-dir>/run-<hash>/personal-<round>.safetensors``
(survives a SuperNode restart, never leaves the site), one folder per server run directory, so a
later run on the same site neither starts from nor prunes an earlier run's heads, and a resumed
run (same run directory) finds its own. In simulation, where nodes carry no such setting, the
default is ``<run dir>/clients/partition-<id>/`` (the server names its run folder in every
message's config as ``run-dir``), so a resumed simulation finds every client's head again; with
neither, the node's ``context.state`` holds them for the life of the process.

One file per round, named by the round whose training wrote it, the newest KEEP kept: scoring and
training in round r start from the newest head of a round before r, evaluation in round r uses the
newest up to r. A run killed after a client trained round r but before the server checkpointed it
therefore repeats round r from the round r-1 head, exactly as the first time, instead of training
an already-trained head again. Writes go to a temporary file first and are then renamed, so a crash
never leaves a torn file.

A ``dp = "sample"`` site's ledger of privacy releases (`privacy.sample`) is one file that only
grows: a release that happened is never taken back, so a repeated round or a re-scored round counts
again. A site keeps it where its node config says (``privacy-dir``, else ``state-dir``/privacy, one
file per data set: `client_app.node.ledger_file`), so every run on its data adds to the same ε,
whatever run folder the server names; a simulation without either keeps it beside the heads
(``dp-ledger.safetensors``, or a ``context.state`` entry).

The same file may carry the client's own LoRA adapters (FedPIA's client-level PIA, `methods.fedpia.client`)
under keys prefixed ``LOCAL``: `load_personal` leaves them out, `load_local_adapters` returns them.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
from flwr.app import Context
from safetensors.numpy import load_file, save_file

from strategies.records import from_record, to_record

PREFIX = "personal-"
LEDGER = "dp-ledger"
LEGACY_HISTORY = "dp-history"  # where the personal state kept a site's privacy history before the ledger
KEEP = 2  # the head being repeated after a crash (round r-1) and the one it replaces (round r)
LOCAL = "local-adapter/"  # key prefix of the client's own adapters in a stored state
_NAME = re.compile(rf"{PREFIX}(\d+)(?:\.safetensors)?")  # a file name, or a context.state key


def _state_dir(context: Context, run_dir: str) -> Path | None:
    state_dir = context.node_config.get("state-dir")
    if state_dir:
        return Path(str(state_dir)) / f"run-{hashlib.sha256(run_dir.encode()).hexdigest()[:12]}"
    if run_dir:
        pid = context.node_config.get("partition-id", context.node_id)
        return Path(run_dir) / "clients" / f"partition-{pid}"
    return None


def _stored(context: Context, folder: Path | None) -> dict[int, str]:
    """Round -> file name in `folder` (or key in ``context.state``), for every stored state."""
    names = context.state.array_records if folder is None else [p.name for p in folder.glob(f"{PREFIX}*")]
    return {int(m.group(1)): name for name in names if (m := _NAME.fullmatch(name))}


def load_personal(context: Context, run_dir: str = "", *, before: int) -> dict[str, np.ndarray] | None:
    """The newest stored personal state written in a round < `before`, or None if there is none."""
    stored = _load(context, run_dir, before)
    return None if stored is None else {k: v for k, v in stored.items() if not k.startswith(LOCAL)}


def load_local_adapters(context: Context, run_dir: str = "", *, before: int) -> dict[str, np.ndarray]:
    """The client's own adapters stored with the newest personal state of a round < `before`
    ({} if none), keyed as the shared state."""
    stored = _load(context, run_dir, before) or {}
    return {k.removeprefix(LOCAL): v for k, v in stored.items() if k.startswith(LOCAL)}


def _load(context: Context, run_dir: str, before: int) -> dict[str, np.ndarray] | None:
    folder = _state_dir(context, run_dir)
    stored = {r: name for r, name in _stored(context, folder).items() if r < before}
    if not stored:
        return None
    name = stored[max(stored)]
    return load_file(folder / name) if folder is not None else from_record(context.state[name])


def save_personal(
    context: Context, state: dict[str, np.ndarray], server_round: int, run_dir: str = "",
    local: dict[str, np.ndarray] | None = None,
) -> None:
    """Store the personal state trained in `server_round` (and the client's own adapters `local`,
    if given); drop later rounds' (a repeated round supersedes them) and all but the newest KEEP of
    the rest."""
    state = {**state, **{f"{LOCAL}{k}": v for k, v in (local or {}).items()}}
    folder = _state_dir(context, run_dir)
    if folder is None:
        context.state[f"{PREFIX}{server_round}"] = to_record(state)
        for key in _stale(_stored(context, folder), server_round):
            del context.state[key]
        return
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{PREFIX}{server_round}.safetensors"
    tmp = path.with_suffix(".tmp")
    save_file({k: np.ascontiguousarray(v) for k, v in state.items()}, tmp)
    os.replace(tmp, path)
    for name in _stale(_stored(context, folder), server_round):
        (folder / name).unlink(missing_ok=True)


def _stale(stored: dict[int, str], server_round: int) -> list[str]:
    kept = sorted(r for r in stored if r <= server_round)[-KEEP:]
    return [name for r, name in stored.items() if r not in kept]


def load_ledger(context: Context, run_dir: str = "", ledger: Path | None = None) -> np.ndarray:
    """The site's privacy ledger (rows σ, q, count; `privacy.mechanisms.HISTORY_COLUMNS`), empty if none:
    the file ``ledger`` where the site's node config says where (`client_app.node.ledger_file`), else
    the one of this run (simulation). A run checkpointed before the ledger existed kept its history
    in the personal state (``dp-history``); that history is read instead, so a resumed run goes on
    counting from it."""
    if ledger is not None:
        return _read_ledger(ledger) if ledger.exists() else np.zeros((0, 3))
    folder = _state_dir(context, run_dir)
    if folder is None:
        stored = from_record(context.state[LEDGER]) if LEDGER in context.state.array_records else None
    else:
        path = folder / f"{LEDGER}.safetensors"
        stored = load_file(path) if path.exists() else None
    if stored is None:
        stored = {"history": (_load(context, run_dir, 1 << 62) or {}).get(LEGACY_HISTORY, np.zeros((0, 3)))}
    return np.asarray(stored["history"], np.float64).reshape(-1, 3)


def _read_ledger(path: Path) -> np.ndarray:
    return np.asarray(load_file(path)["history"], np.float64).reshape(-1, 3)


def append_ledger(context: Context, rows: np.ndarray, run_dir: str = "", ledger: Path | None = None,
                  within: Callable[[np.ndarray], bool] | None = None) -> np.ndarray | None:
    """Append ``rows`` to the site's ledger (`load_ledger`: ``ledger``, else this run's) and return the
    whole ledger; None, and nothing written, where ``within`` says the ledger with the rows would pass
    the site's budget. The file is re-read and judged under an exclusive lock, so two messages of one
    site that overlap (one process per message, two runs at once) cannot both pass the budget, and
    the release they record leaves the site only afterwards; written to a temporary file, then
    renamed."""
    path = ledger
    if path is None:
        folder = _state_dir(context, run_dir)
        if folder is None:
            history = np.vstack([load_ledger(context, run_dir), rows])
            if within is not None and not within(history):
                return None
            context.state[LEDGER] = to_record({"history": history})
            return history
        path = folder / f"{LEDGER}.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = load_ledger(context, run_dir, ledger)
        history = np.ascontiguousarray(np.vstack([before, rows]), dtype=np.float64)
        if within is not None and not within(history):
            return None
        tmp = path.with_suffix(".tmp")
        save_file({"history": history}, tmp)
        os.replace(tmp, path)
    return history
