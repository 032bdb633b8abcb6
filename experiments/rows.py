"""Every run's raw rows as one committed CSV, so each interval of a results page recomputes from the
repo without the run folders:

    python -m experiments.rows results/<experiment> [...] --csv docs/results/<page>/runs.csv

One row per run, round (0: the start, before training) and client that evaluated: the experiment,
run, rule (`methods.label`), seed, learning rate, rounds planned, the client's id and partition,
its accuracy (fraction), test questions, loss and uplink bytes that round, and the run's provenance:
the commit and the command it ran with (the sweep's ``ledger.jsonl``, `experiments.sweep`) and the
SHA-256 of the stage-1 projector it started from (``config.json``'s ``provenance``). A run missing
from the ledger or not finished is refused in one line, so no table mixes in a run whose code is not
known.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from experiments.report import load_runs
from experiments.sweep import LEDGER_FILE
from methods import label

COLUMNS = ("experiment", "run", "rule", "seed", "lr", "rounds", "round", "client", "partition_id",
           "accuracy", "num_examples", "loss", "bytes_up", "commit", "command", "projector_sha256")


def ledger(experiment: Path) -> dict[str, dict]:
    """Run name -> its last finished ledger line (`experiments.sweep`)."""
    path = experiment / LEDGER_FILE
    lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return {line["run"]: line for line in lines if line["status"] == "done"}


def rows(experiments: Sequence[Path]) -> list[dict]:
    """The raw rows of every finished run (module doc); ValueError naming a run without a ledger
    line or an unfinished one."""
    out = []
    for experiment in experiments:
        runs, incomplete = load_runs(experiment)
        if incomplete:
            raise ValueError(f"{experiment}: runs not finished: {', '.join(incomplete)}")
        done = ledger(experiment)
        for run in runs:
            if run.name not in done:
                raise ValueError(f"{experiment}: run {run.name} has no finished line in {LEDGER_FILE}, "
                                 "so its commit is not known")
            common = {"experiment": experiment.name, "run": run.name,
                      "rule": label(run.strategy, run.config["optimizer"]), "seed": run.seed,
                      "lr": run.config["lr"], "rounds": run.config["num-server-rounds"],
                      "commit": done[run.name]["commit"], "command": done[run.name]["command"],
                      "projector_sha256": run.config.get("provenance", {}).get("stage1-projector-sha256", "")}
            for row in [*run.initial, *run.clients]:
                if not row.get("evaluate"):
                    continue
                ev = row["evaluate"]
                out.append({**common, "round": row["round"], "client": row.get("client") or "",
                            "partition_id": row["partition-id"], "accuracy": ev["accuracy"],
                            "num_examples": ev["num-examples"], "loss": ev.get("loss", ""),
                            "bytes_up": row.get("bytes-up", 0)})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiments", nargs="+", type=Path)
    parser.add_argument("--csv", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        found = rows(args.experiments)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    with open(args.csv, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(found)
    print(f"{len(found)} rows of {len({(r['experiment'], r['run']) for r in found})} runs: {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
