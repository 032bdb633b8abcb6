"""experiments.coverage on hand-made runs (tests/experiments/test_report.py's `write_run`)."""

from __future__ import annotations

import csv

from experiments import coverage
from tests.experiments.test_report import write_run


def test_each_runs_selections_per_layer_and_the_layers_it_never_trained(tmp_path, capsys):
    """Planted: client 0 (k=2) trains layers 0 and 3, client 1 (k=1) layer 1, in rounds 1 and 2,
    so seed 0's run selects layers 0, 1, 3 twice and layer 2 never; seed 1's run has lost its
    round-2 client 1 row: layer 1 once (each run counted alone, not the runs' mean)."""
    for seed in (0, 1):
        write_run(tmp_path / "exp", f"f3ocus-nsga2-s{seed}", "f3ocus", seed, (0.5, 0.5))
    clients = tmp_path / "exp" / "runs" / "f3ocus-nsga2-s1" / "clients.jsonl"
    lines = clients.read_text().splitlines()
    clients.write_text("\n".join(line for line in lines
                                  if not ('"round": 2' in line and '"partition-id": 1' in line)) + "\n")
    out = tmp_path / "coverage.csv"
    assert coverage.main([str(tmp_path / "exp"), "--csv", str(out)]) == 0
    assert capsys.readouterr().out.strip().splitlines() == [
        f"exp/f3ocus-nsga2-s{seed}: 1 layers never trained [2], selections of a layer 0-{top}"
        for seed, top in ((0, 2), (1, 2))]
    rows = list(csv.DictReader(out.open()))
    assert [(r["run"], r["layer"], r["selections"]) for r in rows] == [
        (f"f3ocus-nsga2-s{seed}", str(layer), str(count))
        for seed, counts in ((0, (2, 2, 0, 2)), (1, (2, 1, 0, 2))) for layer, count in enumerate(counts)]


def test_a_folder_without_runs_is_one_line(tmp_path, capsys):
    assert coverage.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: experiment ") and "no runs/ directory" in err and err.count("\n") == 1
