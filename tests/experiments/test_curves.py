"""experiments.rows and experiments.curves on planted runs whose answer is known: the raw rows carry
each run's commit, command and start, a run without a ledger line is refused, and the paired
intervals of the last round and of the mean over rounds recompute from the rows alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments import curves
from experiments import rows as raw


def write_run(root: Path, rule: str, seed: int, curve: tuple[float, ...], up: int = 100) -> None:
    """A finished run of two clients (10 questions each, accuracies curve[r] ± 0.1), its ledger line."""
    name = f"{rule}-s{seed}"
    run = root / "runs" / name
    run.mkdir(parents=True)
    config = {"strategy": rule, "optimizer": "nsga2", "seed": seed, "num-server-rounds": len(curve) - 1,
              "lr": 0.001, "provenance": {"stage1-projector-sha256": "abc"}}
    (run / "config.json").write_text(json.dumps(config))
    (run / "rounds.jsonl").write_text("".join(json.dumps({"round": r, "evaluate": {"x": 1}}) + "\n"
                                              for r in range(len(curve))))
    clients = [{"round": r, "client": f"partition-{p}", "partition-id": p, "bytes-up": up if r else 0,
                "evaluate": {"accuracy": a + (0.1 if p else -0.1), "num-examples": 10, "loss": 1.0}}
               for r, a in enumerate(curve) for p in (0, 1)]
    (run / "clients.jsonl").write_text("".join(json.dumps(c) + "\n" for c in clients))
    (run / "adapters.safetensors").write_bytes(b"")
    with open(root / "ledger.jsonl", "a") as fh:
        line = {"run": name, "status": "done", "commit": "c0ffee", "command": f"run {name}"}
        fh.write(json.dumps(line) + "\n")


@pytest.fixture
def table(tmp_path) -> Path:
    """f3ocus above all by 4, 5, 6 points at the end on seeds 0-2 and by 2, 2.5, 3 over rounds 1-2
    (its round 1 level with all's); random only on seed 0."""
    exp = tmp_path / "exp"
    for seed in range(3):
        gain = 0.01 * (seed + 4)
        write_run(exp, "all", seed, (0.3, 0.5, 0.6), up=500)
        write_run(exp, "f3ocus", seed, (0.3, 0.5, 0.6 + gain), up=100)
    write_run(exp, "random", 0, (0.3, 0.4, 0.5), up=100)
    out = tmp_path / "runs.csv"
    assert raw.main([str(exp), "--csv", str(out)]) == 0
    return out


def test_raw_rows_carry_provenance_and_every_evaluated_round(table):
    found = curves.read(table)
    assert len(found) == 7 * 3 * 2  # 7 runs, rounds 0-2, 2 clients
    assert {(r["commit"], r["projector_sha256"]) for r in found} == {("c0ffee", "abc")}
    assert {r["command"] for r in found if r["run"] == "all-s1"} == {"run all-s1"}


def test_the_paired_readings_recompute_from_the_rows(table, capsys):
    data = curves.overall(curves.read(table))
    assert data["f3ocus-nsga2"][2][2] == pytest.approx(66.0)  # 60 + 6; its clients 56 and 76
    found = curves.pairs(data, "f3ocus-nsga2", ["all", "random"])
    got = {(p["comparison"], p["reading of"]): p for p in found}
    end = got[("f3ocus-nsga2 − all", "last round")]
    assert end["diffs"] == pytest.approx([4, 5, 6]) and end["mean"] == pytest.approx(5)
    assert end["width"] == pytest.approx(4.302653 / 3 ** 0.5, rel=1e-5) and end["reading"] == "higher"
    area = got[("f3ocus-nsga2 − all", "mean over rounds")]
    assert area["diffs"] == pytest.approx([2, 2.5, 3]) and area["reading"] == "higher"
    single = got[("f3ocus-nsga2 − random", "last round")]
    assert single["seeds"] == [0] and "low" not in single and single["mean"] == pytest.approx(14)
    assert curves.main([str(table), "--reference", "f3ocus-nsga2", "--against", "all,random"]) == 0
    out = capsys.readouterr().out
    assert "| f3ocus-nsga2 | 3 | 65.00 ± 1.00 | 57.50 ± 0.50 | 0.00 | 20.0 % |" in out
    assert "one seed: no interval" in out


def test_the_last_round_difference_is_shown_per_client(table, capsys):
    """Each client of the planted runs gains 4, 5, 6 points under f3ocus: its pair says +5."""
    found = curves.per_client(curves.read(table), "f3ocus-nsga2", ["all", "random"])
    by = {(r["comparison"], r["client"]): r for r in found}
    first = by[("f3ocus-nsga2 − all", "partition-0")]
    assert (first["reference"], first["other"], first["mean"]) == pytest.approx((55.0, 50.0, 5.0))
    assert first["low"] > 0 and by[("f3ocus-nsga2 − all", "partition-1")]["mean"] == pytest.approx(5.0)
    assert by[("f3ocus-nsga2 − random", "partition-1")]["seeds"] == 1
    assert curves.main([str(table), "--reference", "f3ocus-nsga2", "--against", "all"]) == 0
    assert "| f3ocus-nsga2 − all | partition-1 | 3 | 75.00 | 70.00 | +5.00 |" in capsys.readouterr().out


def test_a_run_without_a_ledger_line_is_refused(tmp_path, capsys):
    exp = tmp_path / "exp"
    write_run(exp, "all", 0, (0.3, 0.5))
    (exp / "ledger.jsonl").unlink()
    assert raw.main([str(exp), "--csv", str(tmp_path / "x.csv")]) == 2
    assert "has no finished line in ledger.jsonl" in capsys.readouterr().err


def test_the_paired_difference_of_every_round_shows_where_the_rules_separate(table, capsys):
    """The planted f3ocus is level with all in rounds 0 and 1 and 4, 5, 6 points above in round 2:
    only round 2 reads "higher"; random, on one seed (0: 0, 10, 10 points under f3ocus's 0, 10, 14),
    has each round's difference and no interval."""
    found = curves.paired_rounds(curves.overall(curves.read(table)), "f3ocus-nsga2", ["all", "random"])
    assert [(r["comparison"], r["round"]) for r in found] == [
        *(("f3ocus-nsga2 − all", n) for n in (0, 1, 2)), *(("f3ocus-nsga2 − random", n) for n in (0, 1, 2))]
    assert [r["mean"] for r in found] == pytest.approx([0, 0, 5, 0, 10, 14])
    assert [r["reading"] for r in found] == (["not distinguishable"] * 2 + ["higher"]
                                             + ["one seed: no interval"] * 3)
    assert curves.main([str(table), "--reference", "f3ocus-nsga2", "--against", "all,random"]) == 0
    out = capsys.readouterr().out
    assert "| f3ocus-nsga2 − all | 2 | 3 | +5.00 | [+2.52, +7.48] | higher |" in out
    assert "| f3ocus-nsga2 − random | 2 | 1 | +14.00 | - | one seed: no interval |" in out
    assert "| random | 2 | 1 | 50.00 | - |" in out
