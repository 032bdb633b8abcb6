"""A site's privacy ledger only grows: appends from messages that overlap all land, and a run
checkpointed before the ledger existed goes on from the history its personal state kept."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from flwr.app import Context, RecordDict

from client_app.personal import LEGACY_HISTORY, append_ledger, load_ledger, save_personal


def _context(**node) -> Context:
    return Context(run_id=1, node_id=7, node_config={"partition-id": 0, **node}, state=RecordDict(),
                   run_config={})


def test_overlapping_appends_all_land_in_the_ledger(tmp_path):
    """The mistake this guards: each message writing back the ledger it read at its start, so one of
    two overlapping releases disappears (and ε is under-counted)."""
    context, run_dir = _context(), str(tmp_path)
    rows = [np.array([[1.0, 0.1, float(i + 1)]]) for i in range(16)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda r: append_ledger(context, r, run_dir), rows))
    assert sorted(load_ledger(context, run_dir)[:, 2]) == list(range(1, 17))


def test_overlapping_releases_cannot_together_pass_the_budget(tmp_path):
    """Sixteen messages, each within the budget alone, judged against the ledger under its lock: only
    as many land as the budget allows (here 5 steps in all), the rest get None and write nothing."""
    context, ledger = _context(), tmp_path / "site" / "dp-ledger.safetensors"
    within = lambda history: history[:, 2].sum() <= 5  # noqa: E731
    with ThreadPoolExecutor(8) as pool:
        landed = list(pool.map(lambda _: append_ledger(context, np.array([[1.0, 0.1, 1.0]]), ledger=ledger,
                                                       within=within), range(16)))
    assert sum(h is not None for h in landed) == 5
    assert load_ledger(context, ledger=ledger)[:, 2].sum() == 5
    assert append_ledger(_context(), np.array([[1.0, 0.1, 9.0]]), within=within) is None


def test_the_ledger_lives_in_the_context_without_a_run_folder():
    context = _context()
    append_ledger(context, np.array([[1.0, 0.1, 5.0]]))
    assert append_ledger(context, np.array([[2.0, 1.0, 1.0]])).tolist() == [[1.0, 0.1, 5.0], [2.0, 1.0, 1.0]]


def test_a_resumed_run_goes_on_from_the_history_its_personal_state_kept(tmp_path):
    context, run_dir = _context(), str(tmp_path)
    old = np.array([[1.2, 0.1, 20.0], [1.2, 0.1, 20.0]])
    save_personal(context, {"head.weight": np.zeros(3, np.float32), LEGACY_HISTORY: old}, 2, run_dir)
    assert load_ledger(context, run_dir).tolist() == old.tolist()
    assert append_ledger(context, np.array([[1.2, 0.1, 20.0]]), run_dir).shape == (3, 3)
