"""experiments.bench_master_weights on tiny-llava: both paths' per-step losses and times are recorded
and their loss curves agree to a small share of what training lowered them by."""

import json

from experiments.bench_master_weights import main


def test_both_paths_are_recorded_with_their_loss_curves(tmp_path):
    out = tmp_path / "master.json"
    main(["--model", "tiny-llava", "--steps", "4", "--batch-size", "4", "--budget", "1", "--lr", "3e-3",
          "--repeats", "2", "--out", str(out)])
    record = json.loads(out.read_text())
    assert set(record["runs"]) == {"float32-adapters", "master-weights"}
    assert all(len(runs) == 2 and len(run["losses"]) == len(run["step_cpu_s"]) == 4
               for runs in record["runs"].values() for run in runs)
    again = record["runs"]["master-weights"]
    assert again[0]["losses"] == again[1]["losses"]  # a repeat trains the same steps
    assert record["loss_drop"] > 0 and record["largest_loss_difference"] <= 0.1 * record["loss_drop"]
