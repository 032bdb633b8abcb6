"""experiments.validation: a setting is chosen per rule on validation runs only, by their last-round
accuracy, on planted run files whose answer is known."""

import json
from pathlib import Path

import pytest

from experiments.validation import choose, main, records


def _run(root: Path, strategy: str, lr: float, curve: tuple[float, ...], share: float = 0.1) -> None:
    run = root / "runs" / f"{strategy}-s0"
    run.mkdir(parents=True)
    config = {"strategy": strategy, "optimizer": "nsga2", "seed": 0, "num-server-rounds": len(curve),
              "lr": lr, "validation-share": share}
    (run / "config.json").write_text(json.dumps(config))
    (run / "rounds.jsonl").write_text("".join(json.dumps({"round": r, "evaluate": {"x": 1}}) + "\n"
                                              for r in range(1, len(curve) + 1)))
    rows = [{"round": r, "partition-id": p, "evaluate": {"accuracy": a + 0.1 * p, "num-examples": 10}}
            for r, a in enumerate(curve, 1) for p in (0, 1)]  # two clients: their mean is a + 0.05
    (run / "clients.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (run / "adapters.safetensors").write_bytes(b"")


@pytest.fixture
def grid(tmp_path):
    """all: best at 3e-3 (last 0.60 against 0.50 and 0.40); random: best at 1e-3, although 3e-3 has
    the higher mean over rounds (the choice reads the last round)."""
    for lr, all_curve, random_curve in ((1e-3, (0.3, 0.5), (0.2, 0.55)), (3e-3, (0.5, 0.6), (0.6, 0.45)),
                                        (3e-4, (0.1, 0.4), (0.1, 0.2))):
        _run(tmp_path / f"lr{lr:g}", "all", lr, all_curve)
        _run(tmp_path / f"lr{lr:g}", "random", lr, random_curve)
    return sorted(tmp_path.iterdir())


def test_each_rule_gets_the_value_with_the_best_last_round(grid):
    rows = records(grid, "lr")
    assert choose(rows, "lr") == {"all": 3e-3, "random": 1e-3}
    last = {(r["rule"], r["lr"]): r["last"] for r in rows}
    assert last[("all", 3e-3)] == pytest.approx(65.0) and last[("random", 1e-3)] == pytest.approx(60.0)
    means = {(r["rule"], r["lr"]): r["mean-over-rounds"] for r in rows}
    assert means[("random", 3e-3)] == pytest.approx(57.5) and means[("random", 1e-3)] == pytest.approx(42.5)


def test_ties_go_to_the_smaller_value(tmp_path):
    for lr in (1e-3, 3e-4):
        _run(tmp_path / f"lr{lr:g}", "all", lr, (0.5,))
    assert choose(records(sorted(tmp_path.iterdir()), "lr"), "lr") == {"all": 3e-4}


def test_a_run_on_test_questions_is_refused_in_one_line(tmp_path, capsys):
    _run(tmp_path / "val", "all", 1e-3, (0.5,))
    _run(tmp_path / "test", "all", 3e-3, (0.9,), share=0.0)
    assert main([str(tmp_path / "val"), str(tmp_path / "test"), "--key", "lr"]) == 2
    err = capsys.readouterr().err.strip()
    assert "validation-share = 0.0" in err and "\n" not in err


def test_the_command_writes_the_record_and_the_choice(grid, tmp_path, capsys):
    assert main([*map(str, grid), "--key", "lr", "--json", str(tmp_path / "c.json"),
                 "--csv", str(tmp_path / "r.csv")]) == 0
    assert json.loads((tmp_path / "c.json").read_text()) == {"all": 3e-3, "random": 1e-3}
    assert len((tmp_path / "r.csv").read_text().splitlines()) == 7
    assert "| all | 0.003 | 0 | 65.00 | 60.00 | yes |" in capsys.readouterr().out
