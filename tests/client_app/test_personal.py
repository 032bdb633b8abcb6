"""Per-round personal state (head, projection): which round a phase loads, what is kept."""

import numpy as np
import pytest
from flwr.app import Context, RecordDict

from client_app.personal import KEEP, load_personal, save_personal


def context(node_config: dict) -> Context:
    return Context(run_id=1, node_id=7, node_config=node_config, state=RecordDict(), run_config={})


def head(value: float) -> dict[str, np.ndarray]:
    return {"head.weight": np.full((3, 2), value, np.float32), "head.bias": np.full(3, value, np.float32)}


@pytest.fixture(params=["run-dir", "state-dir", "context-state"])
def where(request, tmp_path):
    """(context, run_dir, folder the files go to or None) for each place a head can live."""
    if request.param == "run-dir":
        return context({"partition-id": 3}), str(tmp_path), tmp_path / "clients" / "partition-3"
    if request.param == "state-dir":
        return context({"state-dir": str(tmp_path / "site")}), "/results/run-a", tmp_path / "site"
    return context({}), "", None


def test_a_phase_loads_the_newest_head_before_its_round(where):
    ctx, run_dir, _ = where
    assert load_personal(ctx, run_dir, before=1) is None
    save_personal(ctx, head(1.0), 1, run_dir)
    save_personal(ctx, head(2.0), 2, run_dir)
    assert load_personal(ctx, run_dir, before=1) is None
    assert load_personal(ctx, run_dir, before=2)["head.bias"][0] == 1.0  # scoring/training round 2
    assert load_personal(ctx, run_dir, before=3)["head.bias"][0] == 2.0  # evaluation round 2, round 3
    newest = load_personal(ctx, run_dir, before=3)
    np.testing.assert_array_equal(newest["head.weight"], head(2.0)["head.weight"])


def test_a_repeated_round_starts_from_the_previous_head_and_replaces_its_own(where):
    """A crash after round 3's training but before the server's round-3 checkpoint repeats round 3."""
    ctx, run_dir, _ = where
    for r in (1, 2, 3):
        save_personal(ctx, head(float(r)), r, run_dir)
    assert load_personal(ctx, run_dir, before=3)["head.bias"][0] == 2.0  # not the head trained in 3
    save_personal(ctx, head(30.0), 3, run_dir)
    assert load_personal(ctx, run_dir, before=4)["head.bias"][0] == 30.0


def test_only_the_newest_heads_are_kept(where):
    ctx, run_dir, folder = where
    for r in range(1, 6):
        save_personal(ctx, head(float(r)), r, run_dir)
    stored = (sorted(p.name for p in folder.rglob("*") if p.is_file()) if folder is not None
              else sorted(ctx.state.array_records))
    expected = [f"personal-{r}" for r in range(6 - KEEP, 6)]
    assert stored == ([f"{n}.safetensors" for n in expected] if folder is not None else expected)


def test_rounds_a_client_sat_out_are_skipped(where):
    """With fraction-train < 1 a client trains in some rounds only."""
    ctx, run_dir, _ = where
    for r in (1, 4, 7):
        save_personal(ctx, head(float(r)), r, run_dir)
    assert load_personal(ctx, run_dir, before=7)["head.bias"][0] == 4.0
    assert load_personal(ctx, run_dir, before=9)["head.bias"][0] == 7.0
    assert load_personal(ctx, run_dir, before=4) is None  # round 1 was pruned (KEEP = 2)


def test_repeating_an_earlier_round_drops_the_later_heads(where):
    """Resuming from an older checkpoint: heads of rounds after the repeated one are superseded."""
    ctx, run_dir, _ = where
    for r in (1, 2, 3):
        save_personal(ctx, head(float(r)), r, run_dir)
    save_personal(ctx, head(20.0), 2, run_dir)
    assert load_personal(ctx, run_dir, before=9)["head.bias"][0] == 20.0


def test_a_site_keeps_each_runs_heads_apart(tmp_path):
    """A long-lived state-dir: a new run neither loads nor prunes an earlier run's heads."""
    ctx = context({"state-dir": str(tmp_path)})
    for r in (9, 10):
        save_personal(ctx, head(float(r)), r, "/results/old-run")
    assert load_personal(ctx, "/results/new-run", before=2) is None
    save_personal(ctx, head(1.0), 1, "/results/new-run")
    assert load_personal(ctx, "/results/new-run", before=2)["head.bias"][0] == 1.0
    assert load_personal(ctx, "/results/old-run", before=11)["head.bias"][0] == 10.0  # a resume finds it
    assert len(list(tmp_path.rglob("personal-*.safetensors"))) == 3
