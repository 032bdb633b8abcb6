"""experiments.privacy_sample: the per-ε table, its paired differences and its CSV, on planted runs."""

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from experiments.privacy_sample import main, per_round, read_csv, report, rows
from privacy.mechanisms import epsilon_spent


def _run(root: Path, seed: int, accuracy: float, epsilon: float | None) -> None:
    run = root / "runs" / f"f3ocus-nsga2-s{seed}"
    run.mkdir(parents=True)
    dp = {"dp": "sample", "dp-epsilon": epsilon} if epsilon else {"dp": "none", "dp-epsilon": 8.0}
    config = {"strategy": "f3ocus", "optimizer": "nsga2", "seed": seed, "num-server-rounds": 2, **dp}
    (run / "config.json").write_text(json.dumps(config))
    (run / "rounds.jsonl").write_text("".join(
        json.dumps({"round": r, "seconds": 2.0, "bytes-up": 1e6, "evaluate": {"x": 1},
                    "phase-seconds": {"training": 1.0 + r, "aggregating": 0.1}}) + "\n" for r in (1, 2)))
    ev = {"accuracy": accuracy, "num-examples": 10, "majority-accuracy": 0.5}
    spent = {1: 0.4 * (epsilon or 0), 2: 0.99 * (epsilon or 0)}
    train = {r: {"dp-epsilon": spent[r]} if epsilon else {"train_loss": 1.0} for r in (1, 2)}
    lines = [json.dumps({"round": r, "partition-id": 0, "evaluate": ev, "train": train[r]}) for r in (1, 2)]
    (run / "clients.jsonl").write_text("\n".join(lines) + "\n")
    (run / "adapters.safetensors").write_bytes(b"")


def test_the_table_pairs_each_epsilon_with_no_privacy_by_seed(tmp_path: Path) -> None:
    for seed, acc in enumerate([0.80, 0.84, 0.82]):
        _run(tmp_path / "eps-inf", seed, acc, None)
        _run(tmp_path / "eps-1", seed, acc - 0.10 - 0.01 * seed, 1.0)  # -10, -11, -12 pp
    table = rows([tmp_path / "eps-inf", tmp_path / "eps-1"])
    text = report(table)
    assert ("| eps-inf | inf | 0,1,2 | 82.00 ± 2.00 | 50.0 ± 0.0 | 1.00 ± 0.00 | 2.5 ± 0.0 "
            "| 0.000 / 0.000 / 0.000 |") in text
    # 70, 73, 70 %; the last cell: the largest ε any client spent in any round; PRV and RDP cannot be
    # told without the sites' ledgers
    assert ("| eps-1 | 1 | 0,1,2 | 71.00 ± 1.73 | 50.0 ± 0.0 | 1.00 ± 0.00 | 2.5 ± 0.0 "
            "| 0.990 / nan / nan |") in text
    # differences -10, -11, -12: mean -11, sd 1, t_{0.975,2} 4.302653 / sqrt 3 -> half width 2.484138
    assert ("| eps-1 − eps-inf | overall | 0,1,2 | -10.00, -11.00, -12.00 | -11.00 | [-13.48, -8.52] "
            "| lower |") in text
    main([str(tmp_path / "eps-inf"), str(tmp_path / "eps-1"), "--csv", str(tmp_path / "runs.csv")])
    assert report(read_csv(tmp_path / "runs.csv")) == text


def test_one_seed_gives_the_difference_without_an_interval(tmp_path: Path) -> None:
    _run(tmp_path / "a", 0, 0.8, None)
    _run(tmp_path / "b", 0, 0.6, 3.0)
    text = report(rows([tmp_path / "a", tmp_path / "b"]))
    assert "| b − a | overall | 0 | -20.00 | -20.00 | - | one seed: no interval |" in text
    _run(tmp_path / "c", 1, 0.6, 3.0)
    text = report(rows([tmp_path / "a", tmp_path / "c"]))
    assert "| c − a | overall | - | - | - | - | no common seed |" in text


def test_per_round_lists_each_clients_epsilon_and_sitting_out(tmp_path: Path) -> None:
    _run(tmp_path / "a", 0, 0.8, 2.0)
    run = tmp_path / "a" / "runs" / "f3ocus-nsga2-s0"
    with open(run / "clients.jsonl", "a") as fh:
        sat_out = {"dp-epsilon": 1.98, "dp-sat-out": 1}
        fh.write(json.dumps({"round": 3, "partition-id": 0, "train": sat_out}) + "\n")
    assert [(r["round"], r["dp-epsilon"], r["dp-sat-out"]) for r in per_round(run)] == [
        (1, 0.8, 0), (2, 1.98, 0), (3, 1.98, 1)]


def test_prv_and_rdp_compose_each_sites_own_ledger_and_the_largest_is_shown(tmp_path: Path) -> None:
    """Two sites' ledgers (a round of 500 DP-SGD steps and a score release; the other half as many
    steps): PRV's ε of the larger agrees with the PLD accountant to 2 % and RDP's is above it, so the
    column neither reads the recorded ε nor averages the sites."""
    _run(tmp_path / "a", 0, 0.8, 8.0)
    run = tmp_path / "a" / "runs" / "f3ocus-nsga2-s0"
    lines = [json.loads(line) for line in (run / "clients.jsonl").read_text().splitlines()]
    lines += [{**lines[0], "partition-id": 1}]
    for line in lines:
        line["train"]["dp-delta"] = 1e-5
    (run / "clients.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    big = np.array([[1.0, 0.02, 500], [2.0, 0.01, 1]])
    for pid, history in enumerate([big, big * [1, 1, 0.5]]):
        (run / "clients" / f"partition-{pid}").mkdir(parents=True)
        save_file({"history": history}, run / "clients" / f"partition-{pid}" / "dp-ledger.safetensors")
    (row,) = rows([tmp_path / "a"])
    pld = epsilon_spent(big, 1e-5)
    assert row["epsilon-prv"] == pytest.approx(pld, rel=0.02)
    assert row["epsilon-rdp"] == pytest.approx(epsilon_spent(big, 1e-5, "rdp")) and row["epsilon-rdp"] > pld
    lines[-1]["train"].pop("dp-delta")  # a site that never reported its δ: not guessed
    (run / "clients.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert np.isnan(rows([tmp_path / "a"])[0]["epsilon-prv"])


def test_an_earlier_csv_without_the_ledger_columns_joins_as_the_baseline(tmp_path: Path) -> None:
    """An earlier sweep's CSV (no PRV/RDP columns) first, then run folders: paired by seed against it."""
    old = tmp_path / "old.csv"
    old.write_text("experiment,target-epsilon,seed,overall,majority,uplink_mb,training_s,epsilon-spent\n"
                   "old,inf,0,70.0,50.0,1.0,2.0,0.0\nold,inf,1,72.0,50.0,1.0,2.0,0.0\n")
    for seed, acc in enumerate([0.80, 0.84]):
        _run(tmp_path / "new", seed, acc, 8.0)
    table = [*read_csv(old), *rows([tmp_path / "new"])]
    assert np.isnan(table[0]["epsilon-prv"])
    assert "| new − old | overall | 0,1 | +10.00, +12.00 | +11.00 |" in report(table)
    main(["--from-csv", str(old), str(tmp_path / "new"), "--csv", str(tmp_path / "both.csv")])
    assert report(read_csv(tmp_path / "both.csv")) == report(table)
